-- oncely-http 0002: keys belong to a scope (PostgreSQL)
-- The key row is (scope, idem_key): the same Idempotency-Key of two clients is two rows, and a
-- stored response is only replayed to its own scope. scope is '' for the global scope and the
-- hex SHA-256 of the client's identity otherwise (oncely_http::Scope); rows stored before this
-- version get '' (they were global), so they are replayed only by a layer built with
-- Scope::global() and expire with their TTL.
ALTER TABLE {schema}{prefix}http_keys ADD COLUMN IF NOT EXISTS scope TEXT NOT NULL DEFAULT '';
ALTER TABLE {schema}{prefix}http_keys ALTER COLUMN scope DROP DEFAULT;
ALTER TABLE {schema}{prefix}http_keys DROP CONSTRAINT IF EXISTS {prefix}http_keys_pkey;
ALTER TABLE {schema}{prefix}http_keys ADD CONSTRAINT {prefix}http_keys_pkey PRIMARY KEY (scope, idem_key);
