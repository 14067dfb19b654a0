-- oncely: the one migration ledger (same DDL on SQLite, PostgreSQL and MySQL / MariaDB).
-- One row per applied migration of every set (inbox, effects, queue, partitioned, ...).
CREATE TABLE IF NOT EXISTS {schema}{prefix}migration_ledger (
    set_name   VARCHAR(64)  NOT NULL,
    version    BIGINT       NOT NULL,
    name       VARCHAR(128) NOT NULL,
    applied_at BIGINT       NOT NULL,
    PRIMARY KEY (set_name, version)
);
