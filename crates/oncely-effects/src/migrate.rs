//! The effects tables (versions, effect journal, outbox) as plain `.sql` files per dialect: the
//! `effects` set of oncely-sql's one migration registry, applied by [`migrate`] or printed by
//! [`print_migrations`] for your own tool.

use oncely_core::Result;
use oncely_sql::sqlx::Pool;
use oncely_sql::{Adopt, Dialect, MigrateDb, Migration, MigrationSet, Tables, run_migrations};

/// One migration of the effects tables (oncely-sql's [`Migration`]).
pub type EffectsMigration = Migration;

/// The `effects` migration set: entity versions, effect journal and outbox (one set: the
/// outbox table is created by its first migration). Installations migrated before the shared
/// ledger are adopted from `{prefix}effects_migrations`.
///
/// ```
/// use oncely_sql::{Dialect, INBOX, Tables, print_migration_sets};
/// let sql = print_migration_sets(Dialect::MySql, &Tables::default(), &[&INBOX, &oncely_effects::MIGRATIONS]).unwrap();
/// assert!(sql.contains("CREATE TABLE IF NOT EXISTS oncely_effect_journal"));
/// ```
pub static MIGRATIONS: MigrationSet =
    oncely_sql::migration_set!("effects", [sqlite, postgres, mysql], [
        1, "effects", "0001_effects.sql";
        2, "journal_lease", "0002_journal_lease.sql";
    ])
    .adopt(&[Adopt::Ledger("effects_migrations")]);

/// The effects migrations of a dialect, oldest first.
pub fn migrations(dialect: Dialect) -> &'static [Migration] {
    MIGRATIONS.migrations(dialect)
}

/// All effects migrations of a dialect as one SQL script, for users who run their own
/// migration tool.
///
/// ```
/// use oncely_sql::{Dialect, Tables};
/// let sql = oncely_effects::print_migrations(Dialect::Postgres, &Tables::default());
/// assert!(sql.contains("CREATE TABLE IF NOT EXISTS oncely_outbox"));
/// ```
pub fn print_migrations(dialect: Dialect, tables: &Tables) -> String {
    MIGRATIONS.print(dialect, tables).unwrap_or_default()
}

/// Applies the pending effects migrations (a no-op when up to date) and returns how many ran,
/// through oncely-sql's one runner ([`run_migrations`]): under its lock, recorded in
/// `{prefix}migration_ledger` as set `effects`.
pub async fn migrate<DB: MigrateDb>(pool: &Pool<DB>, tables: &Tables) -> Result<usize> {
    run_migrations(pool, tables, &[&MIGRATIONS]).await
}
