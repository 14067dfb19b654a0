-- oncely-effects 0002: a lease on journal rows, so that one reconciler at a time works on a row (MySQL / MariaDB)
ALTER TABLE {schema}{prefix}effect_journal ADD COLUMN lease_until BIGINT NULL, ADD COLUMN leased_by VARBINARY(128) NULL;
