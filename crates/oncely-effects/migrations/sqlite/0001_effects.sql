-- oncely-effects 0001: entity versions, effect journal, outbox (SQLite)
-- Highest version applied per entity; apply_if_newer writes it in the handler's transaction.
CREATE TABLE IF NOT EXISTS {prefix}versions (
    entity     TEXT    NOT NULL,
    entity_key TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (entity, entity_key)
) WITHOUT ROWID;
-- One row per outside effect, committed as 'pending' before the call; 'done' or 'failed' after.
CREATE TABLE IF NOT EXISTS {prefix}effect_journal (
    effect_key   TEXT    NOT NULL PRIMARY KEY,
    kind         TEXT    NOT NULL,
    state        TEXT    NOT NULL,
    request      BLOB    NOT NULL,
    provider_ref TEXT,
    detail       TEXT,
    calls        INTEGER NOT NULL,
    recorded_at  INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS {prefix}effect_journal_state ON {prefix}effect_journal (state, updated_at);
-- Outgoing messages written in the handler's transaction, dispatched after commit by a relay.
CREATE TABLE IF NOT EXISTS {prefix}outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id      TEXT    NOT NULL UNIQUE,
    entity_key      TEXT    NOT NULL,
    destination     TEXT    NOT NULL,
    payload         BLOB    NOT NULL,
    headers         TEXT    NOT NULL,
    version         INTEGER,
    created_at      INTEGER NOT NULL,
    attempts        INTEGER NOT NULL,
    next_attempt_at INTEGER NOT NULL,
    dispatched_at   INTEGER,
    last_error      TEXT
);
CREATE INDEX IF NOT EXISTS {prefix}outbox_pending ON {prefix}outbox (entity_key, id) WHERE dispatched_at IS NULL;
