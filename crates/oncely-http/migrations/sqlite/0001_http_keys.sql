-- oncely-http 0001: Idempotency-Key rows (SQLite)
-- One row per key, inserted and completed in the handler's transaction: a committed row always
-- holds the stored response. expires_at (unix ms) is when the pruner may delete it.
CREATE TABLE IF NOT EXISTS {prefix}http_keys (
    idem_key    TEXT    NOT NULL PRIMARY KEY,
    fingerprint TEXT    NOT NULL,
    owner       TEXT    NOT NULL,
    status      INTEGER NOT NULL,
    headers     TEXT    NOT NULL,
    body        BLOB    NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS {prefix}http_keys_expires ON {prefix}http_keys (expires_at);
