-- oncely 0002: one dead-letter row per (consumer, id, payload hash, reason) (SQLite)
-- id_hash: lower-case hex SHA-256 of raw_id ('' without an id); dead_lettered_at is the
-- first time a dead letter was written, last_seen the last, deliveries how many times.
ALTER TABLE {prefix}dead_letters ADD COLUMN id_hash    TEXT    NOT NULL DEFAULT '';
ALTER TABLE {prefix}dead_letters ADD COLUMN last_seen  INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {prefix}dead_letters ADD COLUMN deliveries INTEGER NOT NULL DEFAULT 1;
UPDATE {prefix}dead_letters SET last_seen = dead_lettered_at;
-- @backfill id_hash
-- SQLite has no SHA-256 function: `oncely migrate` sets id_hash = lower(hex(sha256(raw_id)))
-- here for every row with a raw_id. Running this script by hand, do the same; without it
-- the unique index below fails (the repeats are grouped by raw_id, so no row is lost).
-- Rows written again before this version: keep the lowest id per key, count the others in
-- it, then delete them.
UPDATE {prefix}dead_letters
   SET deliveries = g.n, last_seen = g.last
  FROM (SELECT min(id) AS keep, count(*) AS n, max(dead_lettered_at) AS last
          FROM {prefix}dead_letters
         GROUP BY consumer, id_hash, raw_id, payload_hash, reason
        HAVING count(*) > 1) AS g
 WHERE {prefix}dead_letters.id = g.keep;
DELETE FROM {prefix}dead_letters
 WHERE id NOT IN (SELECT min(id) FROM {prefix}dead_letters
                   GROUP BY consumer, id_hash, raw_id, payload_hash, reason);
CREATE UNIQUE INDEX IF NOT EXISTS {prefix}dead_letters_key
    ON {prefix}dead_letters (consumer, id_hash, payload_hash, reason);
