-- oncely 0001: inbox and dead-letter tables (MySQL / MariaDB)
-- Ids are VARBINARY: byte-exact keys, no case folding or trailing-space padding.
CREATE TABLE IF NOT EXISTS {schema}{prefix}inbox (
    consumer     VARBINARY(128) NOT NULL,
    message_id   VARBINARY(255) NOT NULL,
    payload_hash CHAR(64)       NOT NULL,
    received_at  BIGINT         NOT NULL,
    PRIMARY KEY (consumer, message_id),
    KEY {prefix}inbox_received_at (received_at)
) ENGINE=InnoDB;
CREATE TABLE IF NOT EXISTS {schema}{prefix}dead_letters (
    id               BIGINT AUTO_INCREMENT PRIMARY KEY,
    consumer         VARCHAR(128) NOT NULL,
    message_id       TEXT,
    raw_id           BLOB,
    payload          LONGBLOB     NOT NULL,
    payload_hash     CHAR(64)     NOT NULL,
    stored_hash      CHAR(64),
    reason           VARCHAR(32)  NOT NULL,
    detail           TEXT         NOT NULL,
    attempts         INT          NOT NULL,
    entity_key       VARCHAR(255),
    version          BIGINT,
    source_time      BIGINT,
    headers          TEXT         NOT NULL,
    dead_lettered_at BIGINT       NOT NULL,
    KEY {prefix}dead_letters_consumer (consumer)
) ENGINE=InnoDB;
