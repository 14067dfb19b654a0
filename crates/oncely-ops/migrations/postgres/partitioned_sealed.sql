-- oncely-ops: partitioned inbox 0004 (PostgreSQL). The claim keys of the sealed days in one
-- index, so a batch claim probes it and the partitions from today on instead of every daily
-- partition (oncely_ops::partition::seal builds it; oncely_sql::batch probes it).
--
-- A day's partition is sealed once the day is over: a trigger refuses every later insert into
-- it with SQLSTATE 40001 (a claim retries and lands in today's partition). Creating that
-- trigger waits for every transaction that inserted into the partition, so after it the
-- partition's rows are final. The keys of the rows before the sealed bound go into the
-- inactive one of two UNLOGGED tables, which then becomes the active one with the bound
-- (`below`) in the state row. Unlogged: no WAL for a daily rebuild of 10^7 keys; a crash or a
-- failover empties them, and without a state row claims probe every partition, as before.
-- While a build runs, `sealing` holds its bound and the default partition refuses rows below
-- it (rows land there only for days without a partition).
CREATE UNLOGGED TABLE IF NOT EXISTS {schema}{prefix}inbox_sealed_state (
    one     BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),
    active  "char"  NOT NULL DEFAULT 'a',
    sealing BIGINT,
    below   BIGINT
);
CREATE UNLOGGED TABLE IF NOT EXISTS {schema}{prefix}inbox_sealed_a (claim_key BIGINT NOT NULL);
CREATE UNLOGGED TABLE IF NOT EXISTS {schema}{prefix}inbox_sealed_b (claim_key BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS {prefix}inbox_sealed_a_key ON {schema}{prefix}inbox_sealed_a (claim_key);
CREATE INDEX IF NOT EXISTS {prefix}inbox_sealed_b_key ON {schema}{prefix}inbox_sealed_b (claim_key);
CREATE OR REPLACE FUNCTION {schema}{prefix}inbox_sealed_refuse() RETURNS trigger
LANGUAGE plpgsql AS $refuse$
BEGIN
    RAISE EXCEPTION 'inbox partition % is sealed (its day is over); retry the claim', TG_TABLE_NAME
        USING ERRCODE = '40001';
END
$refuse$;
CREATE OR REPLACE FUNCTION {schema}{prefix}inbox_default_guard() RETURNS trigger
LANGUAGE plpgsql AS $guard$
BEGIN
    IF NEW.received_at < (SELECT sealing FROM {schema}{prefix}inbox_sealed_state WHERE one) THEN
        RAISE EXCEPTION 'received_at % is below the sealed bound of the inbox; retry the claim',
            NEW.received_at USING ERRCODE = '40001';
    END IF;
    RETURN NEW;
END
$guard$;
CREATE TRIGGER {prefix}inbox_default_guard BEFORE INSERT ON {schema}{prefix}inbox_default
    FOR EACH ROW EXECUTE FUNCTION {schema}{prefix}inbox_default_guard();
