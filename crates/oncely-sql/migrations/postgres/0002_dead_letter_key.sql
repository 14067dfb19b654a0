-- oncely 0002: one dead-letter row per (consumer, id, payload hash, reason) (PostgreSQL)
-- id_hash: lower-case hex SHA-256 of raw_id ('' without an id); dead_lettered_at is the
-- first time a dead letter was written, last_seen the last, deliveries how many times.
ALTER TABLE {schema}{prefix}dead_letters
    ADD COLUMN IF NOT EXISTS id_hash    TEXT    NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS last_seen  BIGINT,
    ADD COLUMN IF NOT EXISTS deliveries INTEGER NOT NULL DEFAULT 1;
UPDATE {schema}{prefix}dead_letters
   SET id_hash = COALESCE(encode(sha256(raw_id), 'hex'), ''),
       last_seen = dead_lettered_at;
ALTER TABLE {schema}{prefix}dead_letters ALTER COLUMN last_seen SET NOT NULL;
-- Rows written again before this version: keep the lowest id per key, count the others in
-- it, then delete them.
UPDATE {schema}{prefix}dead_letters AS d
   SET deliveries = g.n, last_seen = g.last
  FROM (SELECT min(id) AS keep, count(*) AS n, max(dead_lettered_at) AS last
          FROM {schema}{prefix}dead_letters
         GROUP BY consumer, id_hash, payload_hash, reason
        HAVING count(*) > 1) AS g
 WHERE d.id = g.keep;
DELETE FROM {schema}{prefix}dead_letters AS d
 USING (SELECT consumer, id_hash, payload_hash, reason, min(id) AS keep
          FROM {schema}{prefix}dead_letters
         GROUP BY consumer, id_hash, payload_hash, reason
        HAVING count(*) > 1) AS g
 WHERE d.consumer = g.consumer AND d.id_hash = g.id_hash AND d.payload_hash = g.payload_hash
   AND d.reason = g.reason AND d.id > g.keep;
CREATE UNIQUE INDEX IF NOT EXISTS {prefix}dead_letters_key
    ON {schema}{prefix}dead_letters (consumer, id_hash, payload_hash, reason);
