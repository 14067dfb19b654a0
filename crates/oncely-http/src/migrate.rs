//! The `http_keys` table as plain `.sql` files per dialect: the `http` set of oncely-sql's one
//! migration registry.

use oncely_core::Result;
use oncely_sql::{AnyStore, Dialect, MigrationSet, Tables, with_store};

/// The `http` migration set: the `{prefix}http_keys` table (version 1), keyed by
/// `(scope, idem_key)` since version 2 (rows from before it get the global scope, `''`).
///
/// ```
/// use oncely_sql::{Dialect, Tables};
/// let sql = oncely_http::MIGRATIONS.print(Dialect::Postgres, &Tables::default()).unwrap();
/// assert!(sql.contains("CREATE TABLE IF NOT EXISTS oncely_http_keys"));
/// assert!(sql.contains("PRIMARY KEY (scope, idem_key)"));
/// ```
pub static MIGRATIONS: MigrationSet = oncely_sql::migration_set!("http", [sqlite, postgres, mysql], [
    1, "http_keys", "0001_http_keys.sql";
    2, "http_key_scope", "0002_http_key_scope.sql";
]);

/// Applies the pending `http` migrations on `store` (under oncely-sql's migration lock,
/// recorded in `{prefix}migration_ledger`) and returns how many ran.
///
/// ```no_run
/// # async fn f(store: oncely_sql::AnyStore) -> oncely_core::Result<()> {
/// oncely_http::migrate(&store).await?;
/// # Ok(()) }
/// ```
pub async fn migrate(store: &AnyStore) -> Result<usize> {
    with_store!(store, s => s.migrate_with(&[&MIGRATIONS]).await)
}

/// The `http` migrations of `dialect` as one SQL script, for your own migration tool.
///
/// ```
/// use oncely_sql::{Dialect, Tables};
/// let sql = oncely_http::print_migrations(Dialect::MySql, &Tables::default());
/// assert!(sql.contains("VARBINARY(255)"));
/// ```
pub fn print_migrations(dialect: Dialect, tables: &Tables) -> String {
    MIGRATIONS.print(dialect, tables).unwrap_or_default()
}
