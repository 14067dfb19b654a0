-- oncely-ops: partitioned inbox 0006 (PostgreSQL). The primary key leads with received_at:
-- (received_at, consumer, message_id) instead of (consumer, message_id, received_at), and it
-- replaces the received_at index it makes redundant. A claim's row then lands at the right edge
-- of today's key, and the claim-key hash index (migration 3) is the one index a random id writes
-- at a random page, as the plain inbox's primary key is the one for it: before, every claim
-- wrote two random pages (the key's leaf and the hash bucket), and after a checkpoint each of
-- them whole to the WAL. The claim key is oncely_sql::claim_key_sql, as in migrations 1, 3 and 5.
--
-- Nothing looks a row up by the old key's columns any more: the batch claim (migration 5) and
-- the guard trigger below probe by the claim key, oncely-sql's payload-hash read names it too,
-- and the pruner's walk of the default partition, `oncely stats` and the sealed days' bound
-- range over received_at, the new key's first column.
--
-- Rebuilding the key of an existing inbox holds claims back while it runs (5 s for 10^7 rows on
-- a 2-core VM; docs/retention.md).
--
-- The key takes the name of the index it replaces, {prefix}inbox_received_at: the inbox set's
-- migration 0001, which runs after this set on a new installation, creates that index IF NOT
-- EXISTS, and so finds it and leaves it. A new installation and an upgraded one end the same:
-- the key and the claim-key index, nothing else.
ALTER TABLE {schema}{prefix}inbox DROP CONSTRAINT {prefix}inbox_pkey;
DROP INDEX IF EXISTS {schema}{prefix}inbox_received_at;
ALTER TABLE {schema}{prefix}inbox ADD CONSTRAINT {prefix}inbox_received_at
    PRIMARY KEY (received_at, consumer, message_id);
-- The guard of a claim the batch claim did not lock itself (a single claim, another tool):
-- the lock and the probe by the same claim key.
CREATE OR REPLACE FUNCTION {schema}{prefix}inbox_claim_guard() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $guard$
DECLARE
    v_key BIGINT := hashtextextended(NEW.consumer || E'\x1f' || NEW.message_id, 1869504356);
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'the partitioned oncely inbox needs READ COMMITTED transactions (got %)',
            current_setting('transaction_isolation') USING ERRCODE = '0A000';
    END IF;
    PERFORM pg_advisory_xact_lock(v_key);
    IF EXISTS (SELECT 1 FROM {schema}{prefix}inbox
               WHERE hashtextextended(consumer || E'\x1f' || message_id, 1869504356) = v_key
                 AND consumer = NEW.consumer AND message_id = NEW.message_id) THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END
$guard$;
