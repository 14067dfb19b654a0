//! The one runner: a lock per dialect, the ledger, adoption of older installations, and the
//! SQLite backfill hook.

use super::{Adopt, MigrateDb, MigrationSet};
use crate::any::AnyPool;
use crate::clock::now_ms;
use crate::dialect::Dialect;
use crate::engine::Engine;
use crate::error::db;
use crate::lock::{DbLock, LEASE_TTL, create_lease_table};
use crate::tables::Tables;
use oncely_core::{Error, PayloadHash, Result};
#[cfg(feature = "mysql")]
use sqlx::MySql;
#[cfg(feature = "postgres")]
use sqlx::Postgres;
#[cfg(feature = "sqlite")]
use sqlx::Sqlite;
use sqlx::{AssertSqlSafe, Pool};
use std::time::Duration;

/// A line in a migration where the runner fills `dead_letters.id_hash` (SHA-256 of `raw_id`)
/// from Rust, for a database without a SHA-256 function (SQLite).
const BACKFILL_ID_HASH: &str = "-- @backfill id_hash\n";

/// The SQL before and after the backfill line, if the migration has one.
pub(super) fn split_backfill(sql: &str) -> (&str, Option<&str>) {
    match sql.split_once(BACKFILL_ID_HASH) {
        Some((before, after)) => (before, Some(after)),
        None => (sql, None),
    }
}

/// Rows per backfill round (raw ids may be large).
const BACKFILL_PAGE: i64 = 500;

/// Arbitrary constant for PostgreSQL's advisory lock and MySQL's named lock (the inbox
/// migrator's key before the shared ledger, so that an older migrator serializes with this one).
const LOCK_KEY: i64 = 0x6f6e_63656c79;

/// How long a portable migrator waits for another one's lease: two lease lifetimes, so a
/// crashed migrator's lease expires meanwhile.
const MIGRATION_PATIENCE: Duration = Duration::from_secs(2 * LEASE_TTL.as_secs());

/// Runs `work` holding the migration lease of `tables` (portable mode, where advisory and
/// named locks do not exclude sessions on other nodes): creates the schema and the lease
/// table if missing, waits up to [`MIGRATION_PATIENCE`] for the lease, renews it while
/// `work` runs, and releases it after.
async fn under_lease<T>(
    pool: AnyPool,
    tables: &Tables,
    work: impl Future<Output = Result<T>>,
) -> Result<T> {
    create_lease_table(&pool, tables, true).await?;
    let Some(mut lease) = DbLock::lease(&pool, tables, "migrate", MIGRATION_PATIENCE).await? else {
        return Err(Error::transient(format!(
            "another process held the migration lease for {} s",
            MIGRATION_PATIENCE.as_secs()
        )));
    };
    let result = async {
        tokio::pin!(work);
        loop {
            tokio::select! {
                done = &mut work => return done,
                _ = tokio::time::sleep(LEASE_TTL / 3) => lease.renew().await?,
            }
        }
    }
    .await;
    let released = lease.release().await;
    let out = result?;
    released?;
    Ok(out)
}

/// The ledger's statements for one dialect and table naming.
struct Ledger {
    ddl: String,
    table: String,
    record: String,
    /// Counts tables named `$2` in schema `$1` (the connection's own when `NULL`).
    exists: &'static str,
}

impl Ledger {
    fn new(d: Dialect, tables: &Tables) -> Self {
        let table = tables.migration_ledger();
        Self {
            ddl: tables.render(include_str!("../../migrations/ledger.sql")),
            record: format!(
                "INSERT INTO {table} (set_name, version, name, applied_at) VALUES ({})",
                d.params(1, 4)
            ),
            table,
            exists: match d {
                Dialect::Sqlite => {
                    "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?2 COLLATE NOCASE AND ?1 IS NULL"
                }
                Dialect::Postgres => {
                    "SELECT COUNT(*) FROM pg_catalog.pg_tables WHERE schemaname = COALESCE($1, current_schema()) AND tablename = $2"
                }
                Dialect::MySql => {
                    "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?"
                }
            },
        }
    }

    /// `SELECT` of the versions of `set` (a checked identifier, so inlined).
    fn applied(&self, set: &MigrationSet) -> String {
        format!(
            "SELECT version FROM {} WHERE set_name = '{}'",
            self.table, set.name
        )
    }

    /// The bind values of [`Ledger::exists`] for table `name` (PostgreSQL folds to lower case).
    fn exists_binds(d: Dialect, tables: &Tables, name: &str) -> (Option<String>, String) {
        let name = format!("{}{name}", tables.prefix());
        let schema = tables.schema().map(str::to_owned);
        match d {
            Dialect::Postgres => (
                schema.map(|s| s.to_ascii_lowercase()),
                name.to_ascii_lowercase(),
            ),
            _ => (schema, name),
        }
    }
}

/// Applies the pending migrations of `$sets` on `$conn` (a connection already holding the
/// migration lock); evaluates to `Result<usize>`.
macro_rules! run_sets {
    ($conn:expr, $dialect:expr, $tables:expr, $sets:expr) => {
        async {
            let (d, tables): (Dialect, &Tables) = ($dialect, $tables);
            let ledger = Ledger::new(d, tables);
            sqlx::raw_sql(AssertSqlSafe(ledger.ddl.clone()))
                .execute(&mut *$conn)
                .await
                .map_err(|e| db("creating the migration ledger", e))?;
            let mut applied = 0;
            for set in $sets {
                let migrations = set.for_dialect(d)?;
                let mut done: Vec<i64> =
                    crate::deploy::pooler::query_scalar(AssertSqlSafe(ledger.applied(set)))
                        .fetch_all(&mut *$conn)
                        .await
                        .map_err(|e| db("reading the migration ledger", e))?;
                // Adoption: a set with no ledger row may have been applied by older code.
                let mut adopted: Vec<(i64, &str, i64)> = Vec::new();
                let adopts: &[Adopt] = if done.is_empty() { set.adopt } else { &[] };
                for adopt in adopts {
                    match *adopt {
                        Adopt::Ledger(old) => {
                            let (schema, name) = Ledger::exists_binds(d, tables, old);
                            let n: i64 = crate::deploy::pooler::query_scalar(ledger.exists)
                                .bind(schema)
                                .bind(name)
                                .fetch_one(&mut *$conn)
                                .await
                                .map_err(|e| db("looking for an older migration ledger", e))?;
                            if n == 0 {
                                continue;
                            }
                            let rows: Vec<(i64, String, i64)> =
                                crate::deploy::pooler::query_as(AssertSqlSafe(format!(
                                    "SELECT version, name, applied_at FROM {}",
                                    tables.table(old)
                                )))
                                .fetch_all(&mut *$conn)
                                .await
                                .map_err(|e| db("reading an older migration ledger", e))?;
                            for (version, name, at) in rows {
                                if let Some(m) = migrations
                                    .iter()
                                    .find(|m| m.version == version && m.name == name)
                                {
                                    adopted.push((version, m.name, at));
                                }
                            }
                        }
                        Adopt::Probe {
                            dialect,
                            sql,
                            through,
                        } if dialect == d => {
                            let n: i64 = crate::deploy::pooler::query_scalar(AssertSqlSafe(
                                tables.render(sql),
                            ))
                            .fetch_one(&mut *$conn)
                            .await
                            .map_err(|e| db("probing for existing tables", e))?;
                            if n > 0 {
                                adopted.extend(
                                    migrations
                                        .iter()
                                        .filter(|m| m.version <= through)
                                        .map(|m| (m.version, m.name, now_ms())),
                                );
                            }
                        }
                        Adopt::Probe { .. } => {}
                    }
                }
                for (version, name, at) in adopted {
                    if done.contains(&version) {
                        continue;
                    }
                    crate::deploy::pooler::query(AssertSqlSafe(ledger.record.clone()))
                        .bind(set.name)
                        .bind(version)
                        .bind(name)
                        .bind(at)
                        .execute(&mut *$conn)
                        .await
                        .map_err(|e| db("adopting an applied migration", e))?;
                    tracing::info!(set = set.name, version, name, "migration adopted");
                    done.push(version);
                }
                for m in migrations {
                    if done.contains(&m.version) {
                        continue;
                    }
                    let doing = format!("migration {} ({}) of set {}", m.version, m.name, set.name);
                    let sql = m.sql(tables);
                    let (before, after) = split_backfill(&sql);
                    sqlx::raw_sql(AssertSqlSafe(before.to_owned()))
                        .execute(&mut *$conn)
                        .await
                        .map_err(|e| db(&doing, e))?;
                    if let Some(after) = after {
                        backfill_id_hash!(&mut *$conn, d, tables, &doing);
                        sqlx::raw_sql(AssertSqlSafe(after.to_owned()))
                            .execute(&mut *$conn)
                            .await
                            .map_err(|e| db(&doing, e))?;
                    }
                    crate::deploy::pooler::query(AssertSqlSafe(ledger.record.clone()))
                        .bind(set.name)
                        .bind(m.version)
                        .bind(m.name)
                        .bind(now_ms())
                        .execute(&mut *$conn)
                        .await
                        .map_err(|e| db("recording a migration", e))?;
                    applied += 1;
                }
            }
            Ok::<usize, Error>(applied)
        }
    };
}

/// Fills `dead_letters.id_hash` with the SHA-256 of `raw_id`, page by page.
macro_rules! backfill_id_hash {
    ($conn:expr, $d:expr, $tables:expr, $doing:expr) => {{
        let dl = $tables.dead_letters();
        let page = format!(
            "SELECT id, raw_id FROM {dl} WHERE raw_id IS NOT NULL AND id > {} ORDER BY id LIMIT {BACKFILL_PAGE}",
            $d.param(1)
        );
        let set = format!(
            "UPDATE {dl} SET id_hash = {} WHERE id = {}",
            $d.param(1),
            $d.param(2)
        );
        let mut last = 0i64;
        loop {
            let rows: Vec<(i64, Vec<u8>)> = crate::deploy::pooler::query_as(AssertSqlSafe(page.clone()))
                .bind(last)
                .fetch_all(&mut *$conn)
                .await
                .map_err(|e| db($doing, e))?;
            let Some((end, _)) = rows.last() else { break };
            last = *end;
            for (id, raw) in &rows {
                crate::deploy::pooler::query(AssertSqlSafe(set.clone()))
                    .bind(PayloadHash::of(raw).to_hex())
                    .bind(id)
                    .execute(&mut *$conn)
                    .await
                    .map_err(|e| db($doing, e))?;
            }
        }
    }};
}
#[cfg(feature = "sqlite")]
impl MigrateDb for Sqlite {
    async fn run_sets(
        pool: &Pool<Self>,
        tables: &Tables,
        _engine: Engine,
        sets: &[&MigrationSet],
    ) -> Result<usize> {
        if tables.schema().is_some() {
            return Err(Error::config(
                "SQLite has no schemas: use a table prefix instead",
            ));
        }
        let mut tx = pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(|e| db("locking for migration", e))?;
        let applied = run_sets!(&mut *tx, Dialect::Sqlite, tables, sets).await?;
        tx.commit()
            .await
            .map_err(|e| db("committing migrations", e))?;
        Ok(applied)
    }
}

#[cfg(feature = "postgres")]
impl MigrateDb for Postgres {
    /// The lock is `pg_advisory_xact_lock`, or in portable mode a lease (see [`under_lease`]).
    async fn run_sets(
        pool: &Pool<Self>,
        tables: &Tables,
        engine: Engine,
        sets: &[&MigrationSet],
    ) -> Result<usize> {
        if engine.portable() {
            return under_lease(
                AnyPool::from(pool.clone()).with_engine(engine),
                tables,
                pg_run_sets(pool, tables, sets, false),
            )
            .await;
        }
        pg_run_sets(pool, tables, sets, true).await
    }
}

/// The PostgreSQL migration transaction, taking the advisory lock first when `advisory`.
#[cfg(feature = "postgres")]
async fn pg_run_sets(
    pool: &Pool<Postgres>,
    tables: &Tables,
    sets: &[&MigrationSet],
    advisory: bool,
) -> Result<usize> {
    let mut tx = pool.begin().await.map_err(|e| db("begin migration", e))?;
    if advisory {
        crate::deploy::pooler::query("SELECT pg_advisory_xact_lock($1)")
            .bind(LOCK_KEY)
            .execute(&mut *tx)
            .await
            .map_err(|e| db("taking the migration lock", e))?;
    }
    if let Some(schema) = tables.schema() {
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE SCHEMA IF NOT EXISTS {schema}"
        )))
        .execute(&mut *tx)
        .await
        .map_err(|e| db("creating the schema", e))?;
    }
    let applied = run_sets!(&mut *tx, Dialect::Postgres, tables, sets).await?;
    tx.commit()
        .await
        .map_err(|e| db("committing migrations", e))?;
    Ok(applied)
}

#[cfg(feature = "mysql")]
impl MigrateDb for MySql {
    /// MySQL commits DDL implicitly: the lock is a named lock (`GET_LOCK`) on one connection,
    /// or in portable mode a lease (see [`under_lease`]; Galera's and TiDB's named locks do not
    /// exclude sessions on other nodes).
    async fn run_sets(
        pool: &Pool<Self>,
        tables: &Tables,
        engine: Engine,
        sets: &[&MigrationSet],
    ) -> Result<usize> {
        if engine.portable() {
            let work = async {
                let mut conn = pool
                    .acquire()
                    .await
                    .map_err(|e| db("connecting for migration", e))?;
                run_sets!(&mut *conn, Dialect::MySql, tables, sets).await
            };
            return under_lease(
                AnyPool::from(pool.clone()).with_engine(engine),
                tables,
                work,
            )
            .await;
        }
        let mut conn = pool
            .acquire()
            .await
            .map_err(|e| db("connecting for migration", e))?;
        let lock = format!("oncely_migrate_{LOCK_KEY}");
        let got: Option<i64> = crate::deploy::pooler::query_scalar("SELECT GET_LOCK(?, 60)")
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
            if let Some(schema) = tables.schema() {
                sqlx::raw_sql(AssertSqlSafe(format!(
                    "CREATE DATABASE IF NOT EXISTS {schema}"
                )))
                .execute(&mut *conn)
                .await
                .map_err(|e| db("creating the database", e))?;
            }
            run_sets!(&mut *conn, Dialect::MySql, tables, sets).await
        }
        .await;
        let _ = crate::deploy::pooler::query("SELECT RELEASE_LOCK(?)")
            .bind(&lock)
            .execute(&mut *conn)
            .await;
        result
    }
}
