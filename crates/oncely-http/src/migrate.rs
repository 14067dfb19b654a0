//! The `http_keys` table as plain `.sql` files per dialect: the `http` set of oncely-sql's one
//! migration registry.

use oncely_sql::MigrationSet;

/// The `http` migration set: the `{prefix}http_keys` table (version 1), keyed by
/// `(scope, idem_key)` since version 2 (rows from before it get the global scope, `''`).
/// Apply it with the store's one runner, `store.migrate_with(&[&INBOX, &MIGRATIONS])` (under
/// its lock, recorded in `{prefix}migration_ledger`), or print it for your own tool:
///
/// ```
/// use oncely_sql::{Dialect, Tables};
/// let sql = oncely_http::MIGRATIONS.print(Dialect::Postgres, &Tables::default()).unwrap();
/// assert!(sql.contains("CREATE TABLE IF NOT EXISTS oncely_http_keys"));
/// assert!(sql.contains("PRIMARY KEY (scope, idem_key)"));
/// let sql = oncely_http::MIGRATIONS.print(Dialect::MySql, &Tables::default()).unwrap();
/// assert!(sql.contains("VARBINARY(255)"));
/// ```
pub static MIGRATIONS: MigrationSet = oncely_sql::migration_set!("http", [sqlite, postgres, mysql], [
    1, "http_keys", "0001_http_keys.sql";
    2, "http_key_scope", "0002_http_key_scope.sql";
]);
