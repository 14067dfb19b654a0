-- oncely-effects 0001: entity versions, effect journal, outbox (PostgreSQL)
-- Highest version applied per entity; apply_if_newer writes it in the handler's transaction.
CREATE TABLE IF NOT EXISTS {schema}{prefix}versions (
    entity     TEXT   NOT NULL,
    entity_key TEXT   NOT NULL,
    version    BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (entity, entity_key)
);
-- One row per outside effect, committed as 'pending' before the call; 'done' or 'failed' after.
CREATE TABLE IF NOT EXISTS {schema}{prefix}effect_journal (
    effect_key   TEXT    NOT NULL PRIMARY KEY,
    kind         TEXT    NOT NULL,
    state        TEXT    NOT NULL,
    request      BYTEA   NOT NULL,
    provider_ref TEXT,
    detail       TEXT,
    calls        BIGINT  NOT NULL,
    recorded_at  BIGINT  NOT NULL,
    updated_at   BIGINT  NOT NULL
);
CREATE INDEX IF NOT EXISTS {prefix}effect_journal_state ON {schema}{prefix}effect_journal (state, updated_at);
-- Outgoing messages written in the handler's transaction, dispatched after commit by a relay.
CREATE TABLE IF NOT EXISTS {schema}{prefix}outbox (
    id              BIGSERIAL PRIMARY KEY,
    message_id      TEXT   NOT NULL UNIQUE,
    entity_key      TEXT   NOT NULL,
    destination     TEXT   NOT NULL,
    payload         BYTEA  NOT NULL,
    headers         TEXT   NOT NULL,
    version         BIGINT,
    created_at      BIGINT NOT NULL,
    attempts        BIGINT NOT NULL,
    next_attempt_at BIGINT NOT NULL,
    dispatched_at   BIGINT,
    last_error      TEXT
);
CREATE INDEX IF NOT EXISTS {prefix}outbox_pending ON {schema}{prefix}outbox (entity_key, id) WHERE dispatched_at IS NULL;
