-- oncely-sql-queue 0001: the queue table (PostgreSQL). Producers INSERT; consumers lease rows
-- with FOR UPDATE SKIP LOCKED and delete them in the transaction of the claim and the effect.
-- message_id: the producer-set id as text (NULL: dead-lettered as bad_id); headers: a JSON
-- object; enqueued_at, leased_until: unix ms; deliveries: the delivery count.
CREATE TABLE IF NOT EXISTS {schema}{prefix}queue (
    id           BIGSERIAL PRIMARY KEY,
    message_id   TEXT,
    payload      BYTEA   NOT NULL,
    headers      TEXT    NOT NULL DEFAULT '{}',
    enqueued_at  BIGINT  NOT NULL,
    leased_until BIGINT,
    deliveries   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS {prefix}queue_lease ON {schema}{prefix}queue (leased_until, id);
