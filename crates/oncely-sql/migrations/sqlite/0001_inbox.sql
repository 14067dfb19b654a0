-- oncely 0001: inbox and dead-letter tables (SQLite)
CREATE TABLE IF NOT EXISTS {prefix}inbox (
    consumer     TEXT    NOT NULL,
    message_id   TEXT    NOT NULL,
    payload_hash TEXT    NOT NULL,
    received_at  INTEGER NOT NULL,
    PRIMARY KEY (consumer, message_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS {prefix}inbox_received_at ON {prefix}inbox (received_at);
CREATE TABLE IF NOT EXISTS {prefix}dead_letters (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    consumer         TEXT    NOT NULL,
    message_id       TEXT,
    raw_id           BLOB,
    payload          BLOB    NOT NULL,
    payload_hash     TEXT    NOT NULL,
    stored_hash      TEXT,
    reason           TEXT    NOT NULL,
    detail           TEXT    NOT NULL,
    attempts         INTEGER NOT NULL,
    entity_key       TEXT,
    version          INTEGER,
    source_time      INTEGER,
    headers          TEXT    NOT NULL,
    dead_lettered_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS {prefix}dead_letters_consumer ON {prefix}dead_letters (consumer, message_id);
