-- oncely-effects 0002: a lease on journal rows, so that one reconciler at a time works on a row (PostgreSQL)
ALTER TABLE {schema}{prefix}effect_journal ADD COLUMN IF NOT EXISTS lease_until BIGINT;
ALTER TABLE {schema}{prefix}effect_journal ADD COLUMN IF NOT EXISTS leased_by TEXT;
