-- oncely-effects 0002: a lease on journal rows, so that one reconciler at a time works on a row (SQLite)
ALTER TABLE {prefix}effect_journal ADD COLUMN lease_until INTEGER;
ALTER TABLE {prefix}effect_journal ADD COLUMN leased_by TEXT;
