-- oncely-ops: time-partitioned inbox (PostgreSQL 13+). Apply INSTEAD of oncely-sql's inbox table,
-- before `migrate()` (whose CREATE TABLE IF NOT EXISTS then leaves this table alone).
-- Daily partitions on received_at (unix ms) are created ahead by oncely-ops; pruning drops them.
-- PostgreSQL has no unique index across partitions, and the key (consumer, message_id) does not
-- contain the partition key, so uniqueness is enforced by the guard trigger below: it serializes
-- claims of one key with a transaction-scoped advisory lock, then skips the insert (as ON CONFLICT
-- DO NOTHING would) when any partition already holds the key. This needs READ COMMITTED, where
-- each statement of the trigger sees rows committed while it waited for the lock.
CREATE TABLE {schema}{prefix}inbox (
    consumer     TEXT   NOT NULL,
    message_id   TEXT   NOT NULL,
    payload_hash TEXT   NOT NULL,
    received_at  BIGINT NOT NULL,
    PRIMARY KEY (consumer, message_id, received_at)
) PARTITION BY RANGE (received_at);
CREATE INDEX IF NOT EXISTS {prefix}inbox_received_at ON {schema}{prefix}inbox (received_at);
-- Catches rows outside the created partitions (the pruner was stopped for days); the pruner
-- moves them into a partition when it creates one and deletes old ones in batches.
CREATE TABLE {schema}{prefix}inbox_default PARTITION OF {schema}{prefix}inbox DEFAULT;
CREATE OR REPLACE FUNCTION {schema}{prefix}inbox_claim_guard() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $guard$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'the partitioned oncely inbox needs READ COMMITTED transactions (got %)',
            current_setting('transaction_isolation') USING ERRCODE = '0A000';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended(NEW.consumer || E'\x1f' || NEW.message_id, 1869504356));
    IF EXISTS (SELECT 1 FROM {schema}{prefix}inbox
               WHERE consumer = NEW.consumer AND message_id = NEW.message_id) THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END
$guard$;
CREATE TRIGGER {prefix}inbox_claim_guard BEFORE INSERT ON {schema}{prefix}inbox
    FOR EACH ROW EXECUTE FUNCTION {schema}{prefix}inbox_claim_guard();
