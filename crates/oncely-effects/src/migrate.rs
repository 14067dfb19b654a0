//! The effects tables (versions, effect journal, outbox) as plain `.sql` files per dialect: the
//! `effects` set of oncely-sql's one migration registry.

use oncely_sql::MigrationSet;
use oncely_sql::migrate::Adopt;

/// The `effects` migration set: entity versions, effect journal and outbox (one set: the
/// outbox table is created by its first migration). Installations migrated before the shared
/// ledger are adopted from `{prefix}effects_migrations`.
///
/// Apply it with the store's one runner, `store.migrate_with(&[&INBOX, &MIGRATIONS])` (under
/// its lock, recorded in `{prefix}migration_ledger` as set `effects`), or print it for your own
/// tool:
///
/// ```
/// use oncely_sql::{Dialect, INBOX, Tables};
/// use oncely_sql::migrate::print_migration_sets;
/// let sql = print_migration_sets(Dialect::MySql, &Tables::default(), &[&INBOX, &oncely_effects::MIGRATIONS]).unwrap();
/// assert!(sql.contains("CREATE TABLE IF NOT EXISTS oncely_effect_journal"));
/// let sql = oncely_effects::MIGRATIONS.print(Dialect::Postgres, &Tables::default()).unwrap();
/// assert!(sql.contains("CREATE TABLE IF NOT EXISTS oncely_outbox"));
/// ```
pub static MIGRATIONS: MigrationSet =
    oncely_sql::migration_set!("effects", [sqlite, postgres, mysql], [
        1, "effects", "0001_effects.sql";
        2, "journal_lease", "0002_journal_lease.sql";
    ])
    .adopt(&[Adopt::Ledger("effects_migrations")]);
