-- oncely-effects 0001: entity versions, effect journal, outbox (MySQL 8 / MariaDB 10.6+)
-- Keys are VARBINARY: byte-exact, no case folding or trailing-space padding.
-- Highest version applied per entity; apply_if_newer writes it in the handler's transaction.
CREATE TABLE IF NOT EXISTS {schema}{prefix}versions (
    entity     VARBINARY(128) NOT NULL,
    entity_key VARBINARY(255) NOT NULL,
    version    BIGINT         NOT NULL,
    updated_at BIGINT         NOT NULL,
    PRIMARY KEY (entity, entity_key)
) ENGINE=InnoDB;
-- One row per outside effect, committed as 'pending' before the call; 'done' or 'failed' after.
CREATE TABLE IF NOT EXISTS {schema}{prefix}effect_journal (
    effect_key   VARBINARY(255) NOT NULL PRIMARY KEY,
    kind         VARBINARY(64)  NOT NULL,
    state        VARBINARY(16)  NOT NULL,
    request      LONGBLOB       NOT NULL,
    provider_ref VARBINARY(512),
    detail       BLOB,
    calls        BIGINT         NOT NULL,
    recorded_at  BIGINT         NOT NULL,
    updated_at   BIGINT         NOT NULL,
    KEY {prefix}effect_journal_state (state, updated_at)
) ENGINE=InnoDB;
-- Outgoing messages written in the handler's transaction, dispatched after commit by a relay.
CREATE TABLE IF NOT EXISTS {schema}{prefix}outbox (
    id              BIGINT AUTO_INCREMENT PRIMARY KEY,
    message_id      VARBINARY(255) NOT NULL,
    entity_key      VARBINARY(255) NOT NULL,
    destination     VARBINARY(255) NOT NULL,
    payload         LONGBLOB       NOT NULL,
    headers         BLOB           NOT NULL,
    version         BIGINT,
    created_at      BIGINT         NOT NULL,
    attempts        BIGINT         NOT NULL,
    next_attempt_at BIGINT         NOT NULL,
    dispatched_at   BIGINT,
    last_error      BLOB,
    UNIQUE KEY {prefix}outbox_message_id (message_id),
    KEY {prefix}outbox_pending (dispatched_at, entity_key, id)
) ENGINE=InnoDB;
