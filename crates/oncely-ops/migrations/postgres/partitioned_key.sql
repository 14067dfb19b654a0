-- oncely-ops: partitioned inbox 0003 (PostgreSQL). A hash index on every partition over the claim
-- key, the 64-bit key the claims' advisory locks already use (oncely_sql::batch::claim_key_sql,
-- seed CLAIM_LOCK_SEED). oncely-sql's batch claim probes the partitions by it and by no other
-- index: a lookup is one bucket page of a small index (about 28 bytes a row, against 75 for the
-- primary key's), and, being the only index the probe can use, its cached generic plan stays a
-- lookup per id while today's partition fills (no per-group planning). Building it on an
-- existing inbox takes a lock that holds claims back while it runs (about 25 s for 10^7 rows).
CREATE INDEX IF NOT EXISTS {prefix}inbox_claim_key ON {schema}{prefix}inbox
    USING hash (hashtextextended(consumer || E'\x1f' || message_id, 1869504356));
