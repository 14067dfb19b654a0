-- oncely-http 0001: Idempotency-Key rows (MySQL 8 / MariaDB 10.6+)
-- One row per key, inserted and completed in the handler's transaction: a committed row always
-- holds the stored response. expires_at (unix ms) is when the pruner may delete it.
-- The key is VARBINARY: byte-exact, no case folding or trailing-space padding.
CREATE TABLE IF NOT EXISTS {schema}{prefix}http_keys (
    idem_key    VARBINARY(255) NOT NULL PRIMARY KEY,
    fingerprint VARBINARY(64)  NOT NULL,
    owner       VARBINARY(64)  NOT NULL,
    status      BIGINT         NOT NULL,
    headers     BLOB           NOT NULL,
    body        LONGBLOB       NOT NULL,
    created_at  BIGINT         NOT NULL,
    expires_at  BIGINT         NOT NULL,
    KEY {prefix}http_keys_expires (expires_at)
) ENGINE=InnoDB;
