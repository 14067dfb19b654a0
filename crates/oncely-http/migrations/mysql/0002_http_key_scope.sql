-- oncely-http 0002: keys belong to a scope (MySQL 8 / MariaDB 10.6+)
-- The key row is (scope, idem_key): the same Idempotency-Key of two clients is two rows, and a
-- stored response is only replayed to its own scope. scope is '' for the global scope and the
-- hex SHA-256 of the client's identity otherwise (oncely_http::Scope); rows stored before this
-- version get '' (they were global), so they are replayed only by a layer built with
-- Scope::global() and expire with their TTL. One ALTER: the table is rebuilt once.
ALTER TABLE {schema}{prefix}http_keys
    ADD COLUMN scope VARBINARY(255) NOT NULL DEFAULT '' FIRST,
    DROP PRIMARY KEY,
    ADD PRIMARY KEY (scope, idem_key);
ALTER TABLE {schema}{prefix}http_keys ALTER COLUMN scope DROP DEFAULT;
