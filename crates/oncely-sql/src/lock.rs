//! A named lock across every process that shares the database: one pruner at a time per
//! inbox (`oncely-ops`), and any other "only one of us" job.
//!
//! - PostgreSQL: a session advisory lock (`pg_try_advisory_lock(int4, int4)`) held on a
//!   connection taken out of the pool; if the process dies, the session ends and the lock goes.
//! - MySQL / MariaDB: a named lock (`GET_LOCK`) held the same way.
//! - SQLite: a lease row in `{prefix}ops_leases` with an expiry, renewed after every batch;
//!   a crashed holder's lease expires after [`LEASE_TTL`].

use crate::any::AnyPool;
use crate::clock::now_ms;
use crate::error::db;
use crate::tables::Tables;
use oncely_core::{Error, Result};
use sqlx::{AssertSqlSafe, Connection, MySqlConnection, PgConnection, SqlitePool};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long a SQLite lease lasts without renewal.
pub const LEASE_TTL: Duration = Duration::from_secs(60);

/// First half of the PostgreSQL advisory key: ASCII `once`.
const PG_CLASS: i32 = 0x6f6e_6365;

/// A held lock. Release it with [`DbLock::release`]; dropping it also releases it (the
/// connection closes), except for a SQLite lease, which then expires after [`LEASE_TTL`].
///
/// ```no_run
/// # async fn f(pool: oncely_sql::AnyPool) -> oncely_core::Result<()> {
/// use oncely_sql::{DbLock, Tables};
/// if let Some(lock) = DbLock::acquire(&pool, &Tables::default(), "prune", false).await? {
///     // … the work only one process may do at a time …
///     lock.release().await?;
/// }
/// # Ok(()) }
/// ```
pub struct DbLock {
    inner: Held,
    name: String,
}

enum Held {
    Postgres(PgConnection),
    MySql(MySqlConnection),
    Sqlite {
        pool: SqlitePool,
        table: String,
        holder: String,
    },
}

impl std::fmt::Debug for DbLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbLock").field("name", &self.name).finish()
    }
}

fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl DbLock {
    /// Takes the lock called `purpose` for the installation whose tables are `tables`
    /// (e.g. `"prune"`). Returns `None` when another holder has it and `wait` is false; with
    /// `wait`, waits.
    pub async fn acquire(
        pool: &AnyPool,
        tables: &Tables,
        purpose: &str,
        wait: bool,
    ) -> Result<Option<Self>> {
        let name = format!("oncely_{purpose}:{}", tables.inbox());
        let hash = fnv1a(&name);
        let inner = match pool {
            AnyPool::Postgres(pool) => {
                let mut conn = pool
                    .acquire()
                    .await
                    .map_err(|e| db("connecting", e))?
                    .detach();
                let sql = if wait {
                    "SELECT pg_advisory_lock($1, $2) IS NOT NULL"
                } else {
                    "SELECT pg_try_advisory_lock($1, $2)"
                };
                let got: bool = sqlx::query_scalar(sql)
                    .bind(PG_CLASS)
                    .bind(hash as u32 as i32)
                    .fetch_one(&mut conn)
                    .await
                    .map_err(|e| db("taking the advisory lock", e))?;
                if !got {
                    let _ = conn.close().await;
                    return Ok(None);
                }
                Held::Postgres(conn)
            }
            AnyPool::MySql(pool) => {
                let mut conn = pool
                    .acquire()
                    .await
                    .map_err(|e| db("connecting", e))?
                    .detach();
                let key = format!("oncely_{purpose}_{hash:016x}");
                loop {
                    let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, ?)")
                        .bind(&key)
                        .bind(if wait { 10 } else { 0 })
                        .fetch_one(&mut conn)
                        .await
                        .map_err(|e| db("taking the named lock", e))?;
                    match got {
                        Some(1) => break,
                        _ if wait => continue,
                        _ => {
                            let _ = conn.close().await;
                            return Ok(None);
                        }
                    }
                }
                Held::MySql(conn)
            }
            AnyPool::Sqlite(pool) => {
                let table = tables.ops_leases();
                sqlx::raw_sql(AssertSqlSafe(format!(
                    "CREATE TABLE IF NOT EXISTS {table} (name TEXT PRIMARY KEY, holder TEXT NOT NULL, expires_at INTEGER NOT NULL)"
                )))
                .execute(pool)
                .await
                .map_err(|e| db("creating the lease table", e))?;
                static SEQ: AtomicU64 = AtomicU64::new(0);
                let holder = format!(
                    "{}-{}-{}",
                    std::process::id(),
                    now_ms(),
                    SEQ.fetch_add(1, Ordering::Relaxed)
                );
                let sql = format!(
                    "INSERT INTO {table} (name, holder, expires_at) VALUES (?1, ?2, ?3) \
                     ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at \
                     WHERE {table}.expires_at < ?4"
                );
                loop {
                    let now = now_ms();
                    let took = sqlx::query(AssertSqlSafe(sql.clone()))
                        .bind(&name)
                        .bind(&holder)
                        .bind(now + LEASE_TTL.as_millis() as i64)
                        .bind(now)
                        .execute(pool)
                        .await
                        .map_err(|e| db("taking the lease", e))?
                        .rows_affected();
                    if took == 1 {
                        break;
                    }
                    if !wait {
                        return Ok(None);
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Held::Sqlite {
                    pool: pool.clone(),
                    table,
                    holder,
                }
            }
        };
        Ok(Some(Self { inner, name }))
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Confirms the lock is still held (and extends a SQLite lease). Call between batches.
    pub async fn renew(&mut self) -> Result<()> {
        match &mut self.inner {
            Held::Postgres(conn) => conn
                .ping()
                .await
                .map_err(|e| db("checking the lock session", e)),
            Held::MySql(conn) => conn
                .ping()
                .await
                .map_err(|e| db("checking the lock session", e)),
            Held::Sqlite {
                pool,
                table,
                holder,
            } => {
                let renewed = sqlx::query(AssertSqlSafe(format!(
                    "UPDATE {table} SET expires_at = ?1 WHERE name = ?2 AND holder = ?3"
                )))
                .bind(now_ms() + LEASE_TTL.as_millis() as i64)
                .bind(&self.name)
                .bind(&*holder)
                .execute(&*pool)
                .await
                .map_err(|e| db("renewing the lease", e))?
                .rows_affected();
                if renewed == 1 {
                    Ok(())
                } else {
                    Err(Error::transient(
                        "the prune lease expired and was taken by another pruner; stopping",
                    ))
                }
            }
        }
    }

    /// Releases the lock.
    pub async fn release(self) -> Result<()> {
        match self.inner {
            Held::Postgres(conn) => conn.close().await.map_err(|e| db("releasing the lock", e)),
            Held::MySql(conn) => conn.close().await.map_err(|e| db("releasing the lock", e)),
            Held::Sqlite {
                pool,
                table,
                holder,
            } => sqlx::query(AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE name = ?1 AND holder = ?2"
            )))
            .bind(&self.name)
            .bind(holder)
            .execute(&pool)
            .await
            .map(|_| ())
            .map_err(|e| db("releasing the lease", e)),
        }
    }
}
