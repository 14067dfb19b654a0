-- oncely-http 0002: keys belong to a scope (SQLite)
-- The key row is (scope, idem_key): the same Idempotency-Key of two clients is two rows, and a
-- stored response is only replayed to its own scope. scope is '' for the global scope and the
-- hex SHA-256 of the client's identity otherwise (oncely_http::Scope); rows stored before this
-- version get '' (they were global), so they are replayed only by a layer built with
-- Scope::global() and expire with their TTL.
-- SQLite cannot change a primary key in place: the table is copied into a new one.
CREATE TABLE {prefix}http_keys_v2 (
    scope       TEXT    NOT NULL,
    idem_key    TEXT    NOT NULL,
    fingerprint TEXT    NOT NULL,
    owner       TEXT    NOT NULL,
    status      INTEGER NOT NULL,
    headers     TEXT    NOT NULL,
    body        BLOB    NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (scope, idem_key)
) WITHOUT ROWID;
INSERT INTO {prefix}http_keys_v2
       (scope, idem_key, fingerprint, owner, status, headers, body, created_at, expires_at)
SELECT '', idem_key, fingerprint, owner, status, headers, body, created_at, expires_at
  FROM {prefix}http_keys;
DROP TABLE {prefix}http_keys;
ALTER TABLE {prefix}http_keys_v2 RENAME TO {prefix}http_keys;
CREATE INDEX IF NOT EXISTS {prefix}http_keys_expires ON {prefix}http_keys (expires_at);
