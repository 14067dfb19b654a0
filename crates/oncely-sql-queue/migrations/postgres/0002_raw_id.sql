-- oncely-sql-queue 0002: message ids kept byte-exact (PostgreSQL). message_id stays for people
-- reading the table (invalid UTF-8 shown lossily) and is only read for rows enqueued before.
ALTER TABLE {schema}{prefix}queue ADD COLUMN IF NOT EXISTS raw_id BYTEA;
