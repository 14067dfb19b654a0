-- oncely-ops: partitioned inbox 0002 (PostgreSQL). oncely-sql claims a group in two statements:
-- one takes the advisory lock of every id (the key the guard trigger uses), reads the isolation
-- level and sets the transaction-local `oncely.claim_locked` (oncely_sql::batch::CLAIM_LOCKED);
-- the next inserts only the ids no partition holds. The guard trigger does not fire for that
-- insert (its WHEN condition, evaluated without a function call), and a statement trigger
-- clears the setting after every insert, so any other insert (a single claim, another tool) is
-- guarded row by row as before.
DROP TRIGGER {prefix}inbox_claim_guard ON {schema}{prefix}inbox;
CREATE TRIGGER {prefix}inbox_claim_guard BEFORE INSERT ON {schema}{prefix}inbox
    FOR EACH ROW WHEN (current_setting('oncely.claim_locked', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {schema}{prefix}inbox_claim_guard();
CREATE OR REPLACE FUNCTION {schema}{prefix}inbox_claim_unlock() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $unlock$
BEGIN
    PERFORM set_config('oncely.claim_locked', '', true);
    RETURN NULL;
END
$unlock$;
CREATE TRIGGER {prefix}inbox_claim_unlock AFTER INSERT ON {schema}{prefix}inbox
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}{prefix}inbox_claim_unlock();
