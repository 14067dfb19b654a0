-- oncely-ops: partitioned inbox 0005 (PostgreSQL). A group claim in one call: oncely-sql's batch
-- claim calls inbox_claim(consumer, ids, hashes, now) once per chunk instead of sending three
-- statements (the advisory locks and planner settings, the insert, the settings restored), and
-- gets back each id it claimed (stored_hash NULL) and each id a partition already held, with the
-- payload hash stored for it (a fourth statement before, when a group had duplicates).
--
-- Each statement below runs with a snapshot of its own (READ COMMITTED, a VOLATILE function): the
-- insert sees what the holders of the locks taken before it committed. The planner settings of
-- the SET clauses hold during the call only: with sequential, index-only and bitmap scans off and
-- only nested loops, the claim-key index looked up once per id is the only path a probe has, so
-- the one generic plan per statement and connection is safe however empty or full the partitions
-- were when it was made (oncely_sql::batch). JIT is off too: the paths switched off carry a huge
-- cost, and the generic plan of a probe of a partition that filled since it was last analyzed is
-- priced in the hundreds of thousands, over jit_above_cost; each call then compiled its
-- expressions (46 ms, measured on a day of 2.5 million rows) to run index lookups that take a
-- millisecond. The sealed days' state is read in the statement that probes their keys (the build
-- it names is the one that statement reads).
--
-- The claim key is oncely_sql::claim_key_sql (seed CLAIM_LOCK_SEED), as in migrations 1 and 3.
CREATE OR REPLACE FUNCTION {schema}{prefix}inbox_claim(
    p_consumer TEXT, p_ids TEXT[], p_hashes TEXT[], p_now BIGINT)
RETURNS TABLE (claimed_id TEXT, stored_hash TEXT)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET enable_indexonlyscan = off SET enable_bitmapscan = off
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_material = off
SET plan_cache_mode = force_generic_plan SET jit = off
AS $claim$
DECLARE
    v_keys   BIGINT[];
    v_fresh  TEXT[];
    v_rest   TEXT[];
    v_held   TEXT[] := '{}';
    v_hashes TEXT[] := '{}';
    v_unheld TEXT[];
    v_late   TEXT[];
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'the partitioned oncely inbox needs READ COMMITTED transactions (got %)',
            current_setting('transaction_isolation') USING ERRCODE = '0A000';
    END IF;
    v_keys := ARRAY(SELECT hashtextextended(p_consumer || E'\x1f' || x, 1869504356)
                    FROM unnest(p_ids) AS x);
    -- In key order (OFFSET 0 keeps the sorted subquery whole): overlapping groups don't deadlock.
    PERFORM count(pg_advisory_xact_lock(k))
        FROM (SELECT DISTINCT k FROM unnest(v_keys) AS k ORDER BY k OFFSET 0) AS sorted;
    -- The guard trigger skips this insert's rows (locked and probed here); the layout's statement
    -- trigger clears the setting after the insert.
    PERFORM set_config('oncely.claim_locked', 'on', true);
    -- The ids held neither by a partition from the sealed bound on (every partition without a
    -- current build) nor among the sealed days' keys.
    WITH fresh AS (
        INSERT INTO {schema}{prefix}inbox AS t (consumer, message_id, payload_hash, received_at)
        SELECT p_consumer, m.id, m.hash, p_now
        FROM unnest(p_ids, p_hashes) WITH ORDINALITY AS m(id, hash, n)
        WHERE m.id NOT IN (
            SELECT held.message_id FROM (
                SELECT i.consumer, i.message_id FROM unnest(v_keys) AS k(key),
                LATERAL (SELECT p.consumer, p.message_id FROM {schema}{prefix}inbox AS p
                         WHERE hashtextextended(p.consumer || E'\x1f' || p.message_id, 1869504356) = k.key
                           AND p.received_at >= coalesce(
                               (SELECT s.below FROM {schema}{prefix}inbox_sealed_state AS s WHERE s.one),
                               '-9223372036854775808'::bigint)
                         OFFSET 0) AS i
                OFFSET 0) AS held
            WHERE held.consumer = p_consumer)
        AND hashtextextended(p_consumer || E'\x1f' || m.id, 1869504356) NOT IN (
            SELECT a.claim_key FROM {schema}{prefix}inbox_sealed_a AS a
            WHERE (SELECT s.active FROM {schema}{prefix}inbox_sealed_state AS s
                   WHERE s.one AND s.below IS NOT NULL) = 'a'
              AND a.claim_key = ANY (v_keys)
            UNION ALL
            SELECT b.claim_key FROM {schema}{prefix}inbox_sealed_b AS b
            WHERE (SELECT s.active FROM {schema}{prefix}inbox_sealed_state AS s
                   WHERE s.one AND s.below IS NOT NULL) = 'b'
              AND b.claim_key = ANY (v_keys))
        ORDER BY m.n
        ON CONFLICT DO NOTHING
        RETURNING t.message_id)
    SELECT coalesce(array_agg(fresh.message_id), '{}') INTO v_fresh FROM fresh;
    IF cardinality(v_fresh) < cardinality(p_ids) THEN
        -- The rest: the payload hash each holds, from whichever partition holds it.
        v_rest := ARRAY(SELECT x FROM unnest(p_ids) AS x WHERE x <> ALL (v_fresh));
        SELECT coalesce(array_agg(held.message_id), '{}'), coalesce(array_agg(held.payload_hash), '{}')
            INTO v_held, v_hashes
            FROM (SELECT i.consumer, i.message_id, i.payload_hash
                  FROM unnest(ARRAY(SELECT hashtextextended(p_consumer || E'\x1f' || x, 1869504356)
                                    FROM unnest(v_rest) AS x)) AS k(key),
                  LATERAL (SELECT p.consumer, p.message_id, p.payload_hash FROM {schema}{prefix}inbox AS p
                           WHERE hashtextextended(p.consumer || E'\x1f' || p.message_id, 1869504356) = k.key
                           OFFSET 0) AS i
                  OFFSET 0) AS held
            WHERE held.consumer = p_consumer AND held.message_id = ANY (v_rest);
        -- A sealed key with no row behind it (deleted or its day dropped since the build, or two
        -- ids sharing a 64-bit key): claimed after a probe of every partition, which alone tells.
        v_unheld := ARRAY(SELECT x FROM unnest(v_rest) AS x WHERE x <> ALL (v_held));
        IF cardinality(v_unheld) > 0 THEN
            PERFORM set_config('oncely.claim_locked', 'on', true);
            WITH late AS (
                INSERT INTO {schema}{prefix}inbox AS t (consumer, message_id, payload_hash, received_at)
                SELECT p_consumer, m.id, m.hash, p_now
                FROM unnest(p_ids, p_hashes) WITH ORDINALITY AS m(id, hash, n)
                WHERE m.id = ANY (v_unheld)
                ORDER BY m.n
                ON CONFLICT DO NOTHING
                RETURNING t.message_id)
            SELECT coalesce(array_agg(late.message_id), '{}') INTO v_late FROM late;
            v_fresh := v_fresh || v_late;
        END IF;
    END IF;
    RETURN QUERY
        SELECT f, NULL::text FROM unnest(v_fresh) AS f
        UNION ALL
        SELECT h.id, h.hash FROM unnest(v_held, v_hashes) AS h(id, hash);
END
$claim$;
