//! A named lock across every process that shares the database: one pruner at a time per
//! inbox (`oncely-ops`), the migration lock in portable mode, and any other "only one of
//! us" job.
//!
//! - PostgreSQL: a session advisory lock (`pg_try_advisory_lock(int4, int4)`) held on a
//!   connection taken out of the pool; if the process dies, the session ends and the lock goes.
//! - MySQL / MariaDB: a named lock (`GET_LOCK`) held the same way.
//! - SQLite, and every database in portable mode ([`SqlStore::portable`](crate::SqlStore::portable()): CockroachDB,
//!   YugabyteDB, TiDB, Citus, MariaDB Galera, where advisory and named locks do not exclude
//!   sessions on other nodes): a lease row in `{prefix}ops_leases` with an expiry, renewed
//!   after every batch; a crashed holder's lease expires after [`LEASE_TTL`].

use crate::any::AnyPool;
use crate::clock::now_ms;
use crate::connect::PoolKind;
use crate::engine::Engine;
use crate::error::{db, error_kind};
use crate::query::{Column, Done, SqlDatabase, Value};
use crate::tables::Tables;
use oncely_core::{Error, ErrorKind, Result};
#[cfg(any(feature = "postgres", feature = "mysql"))]
use sqlx::Connection;
#[cfg(feature = "mysql")]
use sqlx::MySqlConnection;
#[cfg(feature = "postgres")]
use sqlx::PgConnection;
use sqlx::Pool;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a lease lasts without renewal (SQLite, portable mode).
pub(crate) const LEASE_TTL: Duration = Duration::from_secs(60);

/// Pause between two attempts to take a lease someone else holds.
const LEASE_RETRY: Duration = Duration::from_millis(200);

/// First half of the PostgreSQL advisory key: ASCII `once`.
const PG_CLASS: i32 = 0x6f6e_6365;

/// A held lock. Release it with [`DbLock::release`]; dropping it also releases it (the
/// connection closes), except for a lease (SQLite, portable mode), which then expires after
/// [`LEASE_TTL`].
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
    #[cfg(feature = "postgres")]
    Postgres(PgConnection),
    #[cfg(feature = "mysql")]
    MySql(MySqlConnection),
    Lease {
        pool: AnyPool,
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

/// Runs one statement of the lease on a connection of `pool`.
async fn exec(pool: &AnyPool, sql: &str, args: &[Value]) -> std::result::Result<Done, sqlx::Error> {
    async fn on<DB: SqlDatabase>(
        pool: &Pool<DB>,
        engine: Engine,
        sql: &str,
        args: &[Value],
    ) -> std::result::Result<Done, sqlx::Error> {
        let mut conn = pool.acquire().await?;
        DB::execute(&mut conn, engine, sql, args).await
    }
    crate::with_pool!(pool, p => on(p, pool.engine(), sql, args).await)
}

/// The holder of lease `name`, if any.
async fn holder_of(pool: &AnyPool, table: &str, name: &str) -> Result<Option<String>> {
    async fn on<DB: SqlDatabase>(
        pool: &Pool<DB>,
        engine: Engine,
        sql: &str,
        name: &str,
    ) -> std::result::Result<Vec<Vec<Value>>, sqlx::Error> {
        let mut conn = pool.acquire().await?;
        DB::fetch(&mut conn, engine, sql, &[name.into()], &[Column::Text]).await
    }
    let sql = format!("SELECT holder FROM {table} WHERE name = $1");
    let rows = crate::with_pool!(pool, p => on(p, pool.engine(), &sql, name).await)
        .map_err(|e| db("reading the lease", e))?;
    Ok(rows.first().map(|r| r[0].text()))
}

/// Creates the lease table of `tables` if missing (and, with `schema`, its schema first).
/// Retried a few times: on PostgreSQL two concurrent `CREATE … IF NOT EXISTS` of one object
/// can fail on the catalog's unique index; the retry then finds it.
pub(crate) async fn create_lease_table(
    pool: &AnyPool,
    tables: &Tables,
    schema: bool,
) -> Result<()> {
    let d = pool.dialect();
    let mut sql = Vec::new();
    if let Some(create) = tables
        .schema()
        .filter(|_| schema)
        .and_then(|s| d.create_schema_sql(s))
    {
        sql.push(create);
    }
    sql.push(d.lease_table_sql(&tables.ops_leases()));
    let mut attempt = 0;
    for statement in &sql {
        loop {
            match exec(pool, statement, &[]).await {
                Ok(_) => break,
                Err(e) if attempt < 5 => {
                    attempt += 1;
                    tracing::debug!(error = %e, "creating the lease table raced; retrying");
                    tokio::time::sleep(Duration::from_millis(50 * attempt)).await;
                }
                Err(e) => return Err(db("creating the lease table", e)),
            }
        }
    }
    Ok(())
}

impl DbLock {
    /// Takes the lock called `purpose` for the installation whose tables are `tables`
    /// (e.g. `"prune"`). Returns `None` when another holder has it and `wait` is false; with
    /// `wait`, waits.
    ///
    /// A lease is used where the pool's [`Engine`] says so ([`Engine::leases_locks`]: SQLite,
    /// portable mode).
    pub async fn acquire(
        pool: &AnyPool,
        tables: &Tables,
        purpose: &str,
        wait: bool,
    ) -> Result<Option<Self>> {
        if pool.engine().leases_locks() {
            let patience = if wait { Duration::MAX } else { Duration::ZERO };
            return Self::lease(pool, tables, purpose, patience).await;
        }
        let name = format!("oncely_{purpose}:{}", tables.inbox());
        let hash = fnv1a(&name);
        let engine = pool.engine();
        let inner = match pool.__kind() {
            #[cfg(feature = "postgres")]
            PoolKind::Postgres(pool) => {
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
                let got: bool = engine
                    .query_scalar(sql)
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
            #[cfg(feature = "mysql")]
            PoolKind::MySql(pool) => {
                let mut conn = pool
                    .acquire()
                    .await
                    .map_err(|e| db("connecting", e))?
                    .detach();
                let key = format!("oncely_{purpose}_{hash:016x}");
                loop {
                    let got: Option<i64> = engine
                        .query_scalar("SELECT GET_LOCK(?, ?)")
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
            #[cfg(feature = "sqlite")]
            PoolKind::Sqlite(_) => return Self::lease(pool, tables, purpose, Duration::ZERO).await,
        };
        Ok(Some(Self { inner, name }))
    }

    /// Takes the lease `purpose` in the lease table of `tables` (created if missing), trying
    /// again every 200 ms for up to `patience` (`Duration::ZERO`: one try). `None` when
    /// someone else held it all along.
    pub(crate) async fn lease(
        pool: &AnyPool,
        tables: &Tables,
        purpose: &str,
        patience: Duration,
    ) -> Result<Option<Self>> {
        let name = format!("oncely_{purpose}:{}", tables.inbox());
        let table = tables.ops_leases();
        create_lease_table(pool, tables, false).await?;
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let holder = format!(
            "{}-{}-{}",
            std::process::id(),
            now_ms(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let take = pool.dialect().take_lease_sql(&table);
        let started = Instant::now();
        loop {
            let now = now_ms();
            let args = [
                Value::from(name.as_str()),
                Value::from(holder.as_str()),
                Value::I64(now + LEASE_TTL.as_millis() as i64),
                Value::I64(now),
            ];
            match exec(pool, &take, &args).await {
                Ok(_) => {
                    if holder_of(pool, &table, &name).await?.as_deref() == Some(holder.as_str()) {
                        break;
                    }
                }
                // Another session took it at the same moment: a certification conflict on
                // Galera (1213), a serialization failure (40001) on CockroachDB and the like.
                Err(e) if error_kind(&e) == ErrorKind::Transient => {
                    tracing::debug!(lease = %name, error = %e, "lease taken concurrently");
                }
                Err(e) => return Err(db("taking the lease", e)),
            }
            if started.elapsed() >= patience {
                return Ok(None);
            }
            tokio::time::sleep(LEASE_RETRY).await;
        }
        let inner = Held::Lease {
            pool: pool.clone(),
            table,
            holder,
        };
        Ok(Some(Self { inner, name }))
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Confirms the lock is still held (and extends a lease by [`LEASE_TTL`]). Call between
    /// batches. A lease that expired and was taken by another holder is a transient error.
    pub async fn renew(&mut self) -> Result<()> {
        match &mut self.inner {
            #[cfg(feature = "postgres")]
            Held::Postgres(conn) => conn
                .ping()
                .await
                .map_err(|e| db("checking the lock session", e)),
            #[cfg(feature = "mysql")]
            Held::MySql(conn) => conn
                .ping()
                .await
                .map_err(|e| db("checking the lock session", e)),
            Held::Lease {
                pool,
                table,
                holder,
            } => {
                let sql =
                    format!("UPDATE {table} SET expires_at = $1 WHERE name = $2 AND holder = $3");
                let args = [
                    Value::I64(now_ms() + LEASE_TTL.as_millis() as i64),
                    Value::from(self.name.as_str()),
                    Value::from(holder.as_str()),
                ];
                let renewed = exec(pool, &sql, &args)
                    .await
                    .map_err(|e| db("renewing the lease", e))?
                    .rows;
                if renewed == 1 {
                    Ok(())
                } else {
                    Err(Error::transient(format!(
                        "the lease {} expired and was taken by another holder; stopping",
                        self.name
                    )))
                }
            }
        }
    }

    /// Releases the lock.
    pub async fn release(self) -> Result<()> {
        match self.inner {
            #[cfg(feature = "postgres")]
            Held::Postgres(conn) => conn.close().await.map_err(|e| db("releasing the lock", e)),
            #[cfg(feature = "mysql")]
            Held::MySql(conn) => conn.close().await.map_err(|e| db("releasing the lock", e)),
            Held::Lease {
                pool,
                table,
                holder,
            } => {
                let sql = format!("DELETE FROM {table} WHERE name = $1 AND holder = $2");
                let args = [Value::from(self.name.as_str()), Value::from(holder)];
                // A concurrent take of the same row can fail the delete with a certification
                // conflict (Galera 1213) or a serialization failure (40001), as it can the
                // take itself: try again, a few times.
                let mut attempt = 0;
                loop {
                    match exec(&pool, &sql, &args).await {
                        Ok(_) => return Ok(()),
                        Err(e) if error_kind(&e) == ErrorKind::Transient && attempt < 5 => {
                            attempt += 1;
                            tracing::debug!(lease = %self.name, error = %e, "releasing the lease raced; retrying");
                            tokio::time::sleep(LEASE_RETRY * attempt).await;
                        }
                        Err(e) => return Err(db("releasing the lease", e)),
                    }
                }
            }
        }
    }
}
