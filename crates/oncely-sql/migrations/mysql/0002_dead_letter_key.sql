-- oncely 0002: one dead-letter row per (consumer, id, payload hash, reason) (MySQL / MariaDB)
-- id_hash: lower-case hex SHA-256 of raw_id ('' without an id); dead_lettered_at is the
-- first time a dead letter was written, last_seen the last, deliveries how many times.
-- consumer becomes byte-exact (VARBINARY: 'billing' is not 'Billing'); the columns that
-- rejected large values grow: raw_id LONGBLOB, entity_key TEXT, detail MEDIUMTEXT,
-- headers LONGTEXT. message_id stays a display copy of at most 255 bytes.
ALTER TABLE {schema}{prefix}dead_letters
    MODIFY consumer   VARBINARY(128) NOT NULL,
    MODIFY message_id TEXT CHARACTER SET utf8mb4,
    MODIFY raw_id     LONGBLOB,
    MODIFY detail     MEDIUMTEXT CHARACTER SET utf8mb4 NOT NULL,
    MODIFY entity_key TEXT CHARACTER SET utf8mb4,
    MODIFY headers    LONGTEXT CHARACTER SET utf8mb4 NOT NULL,
    ADD COLUMN id_hash    CHAR(64) CHARACTER SET ascii NOT NULL DEFAULT '',
    ADD COLUMN last_seen  BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN deliveries INT    NOT NULL DEFAULT 1;
UPDATE {schema}{prefix}dead_letters
   SET id_hash = COALESCE(SHA2(raw_id, 256), ''),
       last_seen = dead_lettered_at;
ALTER TABLE {schema}{prefix}dead_letters ALTER COLUMN last_seen DROP DEFAULT;
-- Rows written again before this version: keep the lowest id per key, count the others in
-- it, then delete them.
UPDATE {schema}{prefix}dead_letters AS d
  JOIN (SELECT min(id) AS keep, count(*) AS n, max(dead_lettered_at) AS last
          FROM {schema}{prefix}dead_letters
         GROUP BY consumer, id_hash, payload_hash, reason
        HAVING count(*) > 1) AS g ON d.id = g.keep
   SET d.deliveries = g.n, d.last_seen = g.last;
DELETE d FROM {schema}{prefix}dead_letters AS d
  JOIN (SELECT consumer, id_hash, payload_hash, reason, min(id) AS keep
          FROM {schema}{prefix}dead_letters
         GROUP BY consumer, id_hash, payload_hash, reason
        HAVING count(*) > 1) AS g
    ON d.consumer = g.consumer AND d.id_hash = g.id_hash AND d.payload_hash = g.payload_hash
   AND d.reason = g.reason AND d.id > g.keep;
ALTER TABLE {schema}{prefix}dead_letters
    ADD UNIQUE KEY {prefix}dead_letters_key (consumer, id_hash, payload_hash, reason);
