//! The one runner: a lock per dialect, the ledger, adoption of older installations, and the
//! SQLite backfill hook.

use super::{Adopt, MigrateDb, Migration, MigrationSet};
use crate::SqlTx;
use crate::any::AnyPool;
use crate::clock::now_ms;
use crate::dialect::Dialect;
use crate::engine::Engine;
use crate::error::db;
use crate::lock::{DbLock, LEASE_TTL, create_lease_table};
use crate::query::{Column, Value};
use crate::tables::Tables;
use oncely_core::{Error, PayloadHash, Result};
#[cfg(feature = "mysql")]
use sqlx::MySql;
use sqlx::Pool;
#[cfg(feature = "postgres")]
use sqlx::Postgres;
#[cfg(feature = "sqlite")]
use sqlx::Sqlite;
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

/// The ledger's statements for one dialect and table naming (placeholders `$n`, rewritten by
/// the [`SqlTx`] seam where the database needs it).
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
                "INSERT INTO {table} (set_name, version, name, applied_at) VALUES ($1, $2, $3, $4)"
            ),
            table,
            exists: match d {
                Dialect::Sqlite => {
                    "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = $2 COLLATE NOCASE AND $1 IS NULL"
                }
                Dialect::Postgres => {
                    "SELECT COUNT(*) FROM pg_catalog.pg_tables WHERE schemaname = COALESCE($1, current_schema()) AND tablename = $2"
                }
                Dialect::MySql => {
                    "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = COALESCE($1, DATABASE()) AND table_name = $2"
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

    /// The arguments of [`Ledger::exists`] for table `name` (PostgreSQL folds to lower case).
    fn exists_args(d: Dialect, tables: &Tables, name: &str) -> [Value; 2] {
        let name = format!("{}{name}", tables.prefix());
        let schema = tables.schema().map(str::to_owned);
        match d {
            Dialect::Postgres => [
                schema.map(|s| s.to_ascii_lowercase()).into(),
                name.to_ascii_lowercase().into(),
            ],
            _ => [schema.into(), name.into()],
        }
    }

    /// Records that `version` (`name`) of `set` was applied at `at` (ms since the epoch).
    async fn record(
        &self,
        conn: &mut impl SqlTx,
        set: &MigrationSet,
        (version, name, at): (i64, &str, i64),
        doing: &str,
    ) -> Result<()> {
        let args = [set.name.into(), version.into(), name.into(), at.into()];
        conn.execute(&self.record, &args)
            .await
            .map_err(failed(doing))?;
        Ok(())
    }
}

/// Wraps an error of a step of the runner with what the step was doing.
fn failed(doing: &str) -> impl FnOnce(Error) -> Error + '_ {
    move |e| e.context(format!("{doing} failed"))
}

/// The one migration transaction (SQLite and PostgreSQL, whose DDL is transactional): begun as
/// the store begins its writes (`BEGIN IMMEDIATE` on SQLite takes the database's write lock),
/// on PostgreSQL the advisory lock when `lock` (not in portable mode, where a lease holds it)
/// and the schema, then the pending migrations, then commit.
pub(super) async fn in_transaction(
    pool: AnyPool,
    tables: &Tables,
    sets: &[&MigrationSet],
    lock: bool,
) -> Result<usize> {
    let mut tx = pool.begin().await?;
    if tx.dialect() == Dialect::Postgres {
        if lock {
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[LOCK_KEY.into()])
                .await
                .map_err(failed("taking the migration lock"))?;
        }
        if let Some(schema) = tables.schema() {
            tx.script(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
                .await
                .map_err(failed("creating the schema"))?;
        }
    }
    let applied = run_sets(&mut tx, tables, sets).await?;
    tx.commit().await.map_err(failed("committing migrations"))?;
    Ok(applied)
}

/// Applies the pending migrations of `sets` on `conn` (a transaction or connection already
/// holding the migration lock).
async fn run_sets(conn: &mut impl SqlTx, tables: &Tables, sets: &[&MigrationSet]) -> Result<usize> {
    let d = conn.dialect();
    let ledger = Ledger::new(d, tables);
    conn.script(&ledger.ddl)
        .await
        .map_err(failed("creating the migration ledger"))?;
    let mut applied = 0;
    for set in sets {
        let migrations = set.for_dialect(d)?;
        let mut done: Vec<i64> = conn
            .fetch(&ledger.applied(set), &[], &[Column::I64])
            .await
            .map_err(failed("reading the migration ledger"))?
            .iter()
            .map(|row| row[0].i64())
            .collect();
        // Adoption: a set with no ledger row may have been applied by older code.
        let adopts: &[Adopt] = if done.is_empty() { set.adopt } else { &[] };
        let mut adopted = Vec::new();
        for adopt in adopts {
            adopted.extend(adoptions(conn, &ledger, tables, migrations, adopt).await?);
        }
        for (version, name, at) in adopted {
            if done.contains(&version) {
                continue;
            }
            let doing = "adopting an applied migration";
            ledger.record(conn, set, (version, name, at), doing).await?;
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
            conn.script(before).await.map_err(failed(&doing))?;
            if let Some(after) = after {
                backfill_id_hash(conn, tables)
                    .await
                    .map_err(failed(&doing))?;
                conn.script(after).await.map_err(failed(&doing))?;
            }
            let recorded = (m.version, m.name, now_ms());
            ledger
                .record(conn, set, recorded, "recording a migration")
                .await?;
            applied += 1;
        }
    }
    Ok(applied)
}

/// The migrations of a set with no ledger rows that `adopt` finds applied by older code, as
/// `(version, name, applied_at)`.
async fn adoptions(
    conn: &mut impl SqlTx,
    ledger: &Ledger,
    tables: &Tables,
    migrations: &'static [Migration],
    adopt: &Adopt,
) -> Result<Vec<(i64, &'static str, i64)>> {
    let d = conn.dialect();
    match *adopt {
        Adopt::Ledger(old) => {
            let args = Ledger::exists_args(d, tables, old);
            let found = conn
                .fetch_i64(ledger.exists, &args)
                .await
                .map_err(failed("looking for an older migration ledger"))?;
            if found.unwrap_or(0) == 0 {
                return Ok(Vec::new());
            }
            let sql = format!(
                "SELECT version, name, applied_at FROM {}",
                tables.table(old)
            );
            let rows = conn
                .fetch(&sql, &[], &[Column::I64, Column::Text, Column::I64])
                .await
                .map_err(failed("reading an older migration ledger"))?;
            Ok(rows
                .iter()
                .filter_map(|row| {
                    let (version, name) = (row[0].i64(), row[1].text());
                    migrations
                        .iter()
                        .find(|m| m.version == version && m.name == name)
                        .map(|m| (version, m.name, row[2].i64()))
                })
                .collect())
        }
        Adopt::Probe {
            dialect,
            sql,
            through,
        } if dialect == d => {
            let found = conn
                .fetch_i64(&tables.render(sql), &[])
                .await
                .map_err(failed("probing for existing tables"))?;
            if found.unwrap_or(0) == 0 {
                return Ok(Vec::new());
            }
            Ok(migrations
                .iter()
                .filter(|m| m.version <= through)
                .map(|m| (m.version, m.name, now_ms()))
                .collect())
        }
        Adopt::Probe { .. } => Ok(Vec::new()),
    }
}

/// Fills `dead_letters.id_hash` with the SHA-256 of `raw_id`, page by page.
async fn backfill_id_hash(conn: &mut impl SqlTx, tables: &Tables) -> Result<()> {
    let dl = tables.dead_letters();
    let page = format!(
        "SELECT id, raw_id FROM {dl} WHERE raw_id IS NOT NULL AND id > $1 ORDER BY id LIMIT {BACKFILL_PAGE}"
    );
    let set = format!("UPDATE {dl} SET id_hash = $1 WHERE id = $2");
    let mut last = 0i64;
    loop {
        let rows = conn
            .fetch(&page, &[last.into()], &[Column::I64, Column::Bytes])
            .await?;
        let Some(end) = rows.last() else { break };
        last = end[0].i64();
        for row in &rows {
            let hash = PayloadHash::of(&row[1].bytes()).to_hex();
            conn.execute(&set, &[hash.into(), row[0].clone()]).await?;
        }
    }
    Ok(())
}

#[cfg(feature = "sqlite")]
impl MigrateDb for Sqlite {
    async fn run_sets(
        pool: &Pool<Self>,
        tables: &Tables,
        engine: Engine,
        sets: &[&MigrationSet],
    ) -> Result<usize> {
        if tables.schema().is_some() {
            return Err(Error::config(
                "SQLite has no schemas: use a table prefix instead",
            ));
        }
        let pool = AnyPool::from(pool.clone()).with_engine(engine);
        in_transaction(pool, tables, sets, false).await
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
        let pool = AnyPool::from(pool.clone()).with_engine(engine);
        if engine.portable() {
            let work = in_transaction(pool.clone(), tables, sets, false);
            return under_lease(pool, tables, work).await;
        }
        in_transaction(pool, tables, sets, true).await
    }
}

#[cfg(feature = "mysql")]
impl MigrateDb for MySql {
    /// MySQL commits DDL implicitly, so the migrations run on one connection, not in a
    /// transaction: the lock is a named lock (`GET_LOCK`) on that connection, or in portable
    /// mode a lease (see [`under_lease`]; Galera's and TiDB's named locks do not exclude
    /// sessions on other nodes).
    async fn run_sets(
        pool: &Pool<Self>,
        tables: &Tables,
        engine: Engine,
        sets: &[&MigrationSet],
    ) -> Result<usize> {
        let connect = || async {
            pool.acquire()
                .await
                .map_err(|e| db("connecting for migration", e))
        };
        if engine.portable() {
            let any = AnyPool::from(pool.clone()).with_engine(engine);
            let work = async { run_sets(&mut connect().await?, tables, sets).await };
            return under_lease(any, tables, work).await;
        }
        let mut conn = connect().await?;
        let lock = format!("oncely_migrate_{LOCK_KEY}");
        let got = conn
            .fetch_i64("SELECT GET_LOCK($1, 60)", &[lock.as_str().into()])
            .await
            .map_err(failed("taking the migration lock"))?;
        if got != Some(1) {
            return Err(Error::transient(
                "another process held the migration lock for 60 s",
            ));
        }
        let result = async {
            if let Some(schema) = tables.schema() {
                conn.script(&format!("CREATE DATABASE IF NOT EXISTS {schema}"))
                    .await
                    .map_err(failed("creating the database"))?;
            }
            run_sets(&mut conn, tables, sets).await
        }
        .await;
        let _ = conn
            .execute("SELECT RELEASE_LOCK($1)", &[lock.as_str().into()])
            .await;
        result
    }
}
