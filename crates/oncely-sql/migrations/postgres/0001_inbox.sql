-- oncely 0001: inbox and dead-letter tables (PostgreSQL)
CREATE TABLE IF NOT EXISTS {schema}{prefix}inbox (
    consumer     TEXT   NOT NULL,
    message_id   TEXT   NOT NULL,
    payload_hash TEXT   NOT NULL,
    received_at  BIGINT NOT NULL,
    PRIMARY KEY (consumer, message_id)
);
CREATE INDEX IF NOT EXISTS {prefix}inbox_received_at ON {schema}{prefix}inbox (received_at);
CREATE TABLE IF NOT EXISTS {schema}{prefix}dead_letters (
    id               BIGSERIAL PRIMARY KEY,
    consumer         TEXT    NOT NULL,
    message_id       TEXT,
    raw_id           BYTEA,
    payload          BYTEA   NOT NULL,
    payload_hash     TEXT    NOT NULL,
    stored_hash      TEXT,
    reason           TEXT    NOT NULL,
    detail           TEXT    NOT NULL,
    attempts         INTEGER NOT NULL,
    entity_key       TEXT,
    version          BIGINT,
    source_time      BIGINT,
    headers          TEXT    NOT NULL,
    dead_lettered_at BIGINT  NOT NULL
);
CREATE INDEX IF NOT EXISTS {prefix}dead_letters_consumer ON {schema}{prefix}dead_letters (consumer, message_id);
