-- oncely-http 0001: Idempotency-Key rows (PostgreSQL)
-- One row per key, inserted and completed in the handler's transaction: a committed row always
-- holds the stored response. expires_at (unix ms) is when the pruner may delete it.
CREATE TABLE IF NOT EXISTS {schema}{prefix}http_keys (
    idem_key    TEXT   NOT NULL PRIMARY KEY,
    fingerprint TEXT   NOT NULL,
    owner       TEXT   NOT NULL,
    status      BIGINT NOT NULL,
    headers     TEXT   NOT NULL,
    body        BYTEA  NOT NULL,
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS {prefix}http_keys_expires ON {schema}{prefix}http_keys (expires_at);
