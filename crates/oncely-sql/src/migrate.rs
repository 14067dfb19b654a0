//! Versioned migrations, kept as plain `.sql` files per dialect, applied under a lock.

use crate::dialect::Dialect;
use crate::error::db;
use crate::store::{SqlStore, now_ms};
use crate::tables::Tables;
use oncely_core::{Error, PayloadHash, Result};
use sqlx::{AssertSqlSafe, MySql, Postgres, Sqlite};

/// One migration: a version, a name, and a SQL template with `{schema}` and `{prefix}`.
///
/// SQLite's version 2 has a `-- @backfill id_hash` line: `migrate` computes
/// `dead_letters.id_hash` (SHA-256 of `raw_id`) there, since SQLite has no SHA-256 function.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Version, applied in ascending order.
    pub version: i64,
    /// Short name.
    pub name: &'static str,
    template: &'static str,
}

impl Migration {
    /// The SQL for these tables.
    pub fn sql(&self, tables: &Tables) -> String {
        tables.render(self.template)
    }
}

const SQLITE: &[Migration] = &[
    Migration {
        version: 1,
        name: "inbox",
        template: include_str!("../migrations/sqlite/0001_inbox.sql"),
    },
    Migration {
        version: 2,
        name: "dead_letter_key",
        template: include_str!("../migrations/sqlite/0002_dead_letter_key.sql"),
    },
];
const POSTGRES: &[Migration] = &[
    Migration {
        version: 1,
        name: "inbox",
        template: include_str!("../migrations/postgres/0001_inbox.sql"),
    },
    Migration {
        version: 2,
        name: "dead_letter_key",
        template: include_str!("../migrations/postgres/0002_dead_letter_key.sql"),
    },
];
const MYSQL: &[Migration] = &[
    Migration {
        version: 1,
        name: "inbox",
        template: include_str!("../migrations/mysql/0001_inbox.sql"),
    },
    Migration {
        version: 2,
        name: "dead_letter_key",
        template: include_str!("../migrations/mysql/0002_dead_letter_key.sql"),
    },
];

/// A line in a migration where `migrate` fills `dead_letters.id_hash` (SHA-256 of `raw_id`)
/// from Rust, for a database without a SHA-256 function (SQLite).
const BACKFILL_ID_HASH: &str = "-- @backfill id_hash\n";

/// The SQL before and after the backfill line, if the migration has one.
fn split_backfill(sql: &str) -> (&str, Option<&str>) {
    match sql.split_once(BACKFILL_ID_HASH) {
        Some((before, after)) => (before, Some(after)),
        None => (sql, None),
    }
}

/// Rows per backfill round (raw ids may be large).
const BACKFILL_PAGE: i64 = 500;

/// The migrations of a dialect, oldest first.
pub fn migrations(dialect: Dialect) -> &'static [Migration] {
    match dialect {
        Dialect::Sqlite => SQLITE,
        Dialect::Postgres => POSTGRES,
        Dialect::MySql => MYSQL,
    }
}

/// All migrations of a dialect as one SQL script, for users who run their own migration tool.
pub fn print_migrations(dialect: Dialect, tables: &Tables) -> String {
    migrations(dialect)
        .iter()
        .map(|m| format!("-- version {} ({})\n{}", m.version, m.name, m.sql(tables)))
        .collect::<Vec<_>>()
        .join("\n")
}

fn ledger_ddl(dialect: Dialect, tables: &Tables) -> String {
    let name = match dialect {
        Dialect::MySql => "VARCHAR(128)",
        _ => "TEXT",
    };
    format!(
        "CREATE TABLE IF NOT EXISTS {} (version BIGINT PRIMARY KEY, name {name} NOT NULL, applied_at BIGINT NOT NULL)",
        tables.table("migrations")
    )
}

fn applied_sql(tables: &Tables) -> String {
    format!("SELECT version FROM {}", tables.table("migrations"))
}

fn record_sql(dialect: Dialect, tables: &Tables) -> String {
    format!(
        "INSERT INTO {} (version, name, applied_at) VALUES ({})",
        tables.table("migrations"),
        dialect.params(1, 3)
    )
}

/// Arbitrary constant for PostgreSQL's advisory lock and MySQL's named lock.
const LOCK_KEY: i64 = 0x6f6e_63656c79;

macro_rules! run_pending {
    ($conn:expr, $dialect:expr, $tables:expr) => {{
        sqlx::raw_sql(AssertSqlSafe(ledger_ddl($dialect, $tables)))
            .execute(&mut *$conn)
            .await
            .map_err(|e| db("creating the migrations table", e))?;
        let done: Vec<i64> = sqlx::query_scalar(AssertSqlSafe(applied_sql($tables)))
            .fetch_all(&mut *$conn)
            .await
            .map_err(|e| db("reading applied migrations", e))?;
        let mut applied = 0;
        for m in migrations($dialect) {
            if done.contains(&m.version) {
                continue;
            }
            let doing = format!("migration {} ({})", m.version, m.name);
            let sql = m.sql($tables);
            let (before, after) = split_backfill(&sql);
            sqlx::raw_sql(AssertSqlSafe(before.to_owned()))
                .execute(&mut *$conn)
                .await
                .map_err(|e| db(&doing, e))?;
            if let Some(after) = after {
                let dl = $tables.table("dead_letters");
                let (page, set) = (
                    format!(
                        "SELECT id, raw_id FROM {dl} WHERE raw_id IS NOT NULL AND id > {} ORDER BY id LIMIT {BACKFILL_PAGE}",
                        $dialect.param(1)
                    ),
                    format!(
                        "UPDATE {dl} SET id_hash = {} WHERE id = {}",
                        $dialect.param(1),
                        $dialect.param(2)
                    ),
                );
                let mut last = 0i64;
                loop {
                    let rows: Vec<(i64, Vec<u8>)> = sqlx::query_as(AssertSqlSafe(page.clone()))
                        .bind(last)
                        .fetch_all(&mut *$conn)
                        .await
                        .map_err(|e| db(&doing, e))?;
                    let Some((end, _)) = rows.last() else { break };
                    last = *end;
                    for (id, raw) in &rows {
                        sqlx::query(AssertSqlSafe(set.clone()))
                            .bind(PayloadHash::of(raw).to_hex())
                            .bind(id)
                            .execute(&mut *$conn)
                            .await
                            .map_err(|e| db(&doing, e))?;
                    }
                }
                sqlx::raw_sql(AssertSqlSafe(after.to_owned()))
                    .execute(&mut *$conn)
                    .await
                    .map_err(|e| db(&doing, e))?;
            }
            sqlx::query(AssertSqlSafe(record_sql($dialect, $tables)))
                .bind(m.version)
                .bind(m.name)
                .bind(now_ms())
                .execute(&mut *$conn)
                .await
                .map_err(|e| db("recording a migration", e))?;
            applied += 1;
        }
        applied
    }};
}

impl SqlStore<Sqlite> {
    /// Applies pending migrations (a no-op when up to date). Returns how many ran.
    pub async fn migrate(&self) -> Result<usize> {
        if self.tables().schema().is_some() {
            return Err(Error::config(
                "SQLite has no schemas: use a table prefix instead",
            ));
        }
        let mut tx = self
            .pool()
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(|e| db("locking for migration", e))?;
        let applied = run_pending!(&mut *tx, Dialect::Sqlite, self.tables());
        tx.commit()
            .await
            .map_err(|e| db("committing migrations", e))?;
        Ok(applied)
    }
}

impl SqlStore<Postgres> {
    /// Applies pending migrations under an advisory lock, so that concurrent
    /// migrators serialize. Returns how many ran.
    pub async fn migrate(&self) -> Result<usize> {
        let mut tx = self
            .pool()
            .begin()
            .await
            .map_err(|e| db("begin migration", e))?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(LOCK_KEY)
            .execute(&mut *tx)
            .await
            .map_err(|e| db("taking the migration lock", e))?;
        if let Some(schema) = self.tables().schema() {
            sqlx::raw_sql(AssertSqlSafe(format!(
                "CREATE SCHEMA IF NOT EXISTS {schema}"
            )))
            .execute(&mut *tx)
            .await
            .map_err(|e| db("creating the schema", e))?;
        }
        let applied = run_pending!(&mut *tx, Dialect::Postgres, self.tables());
        tx.commit()
            .await
            .map_err(|e| db("committing migrations", e))?;
        Ok(applied)
    }
}

impl SqlStore<MySql> {
    /// Applies pending migrations under a named lock (`GET_LOCK`), so that concurrent
    /// migrators serialize. MySQL commits DDL implicitly. Returns how many ran.
    pub async fn migrate(&self) -> Result<usize> {
        let mut conn = self
            .pool()
            .acquire()
            .await
            .map_err(|e| db("connecting for migration", e))?;
        let lock = format!("oncely_migrate_{LOCK_KEY}");
        let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 60)")
            .bind(&lock)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| db("taking the migration lock", e))?;
        if got != Some(1) {
            return Err(Error::transient(
                "another process held the migration lock for 60 s",
            ));
        }
        let result = async {
            if let Some(schema) = self.tables().schema() {
                sqlx::raw_sql(AssertSqlSafe(format!(
                    "CREATE DATABASE IF NOT EXISTS {schema}"
                )))
                .execute(&mut *conn)
                .await
                .map_err(|e| db("creating the database", e))?;
            }
            Ok::<_, Error>(run_pending!(&mut *conn, Dialect::MySql, self.tables()))
        }
        .await;
        let _ = sqlx::query("SELECT RELEASE_LOCK(?)")
            .bind(&lock)
            .execute(&mut *conn)
            .await;
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dialect_has_the_same_versions_and_prints_them() {
        for d in [Dialect::Sqlite, Dialect::Postgres, Dialect::MySql] {
            let versions: Vec<i64> = migrations(d).iter().map(|m| m.version).collect();
            assert_eq!(versions, vec![1, 2], "{d:?}");
            let script = print_migrations(d, &Tables::default());
            assert!(script.contains("-- version 2 (dead_letter_key)"), "{d:?}");
            assert!(script.contains("dead_letters_key"), "{d:?}");
            let sql = migrations(d)[1].sql(&Tables::default());
            assert_eq!(
                split_backfill(&sql).1.is_some(),
                d == Dialect::Sqlite,
                "{d:?}"
            );
        }
    }
}
