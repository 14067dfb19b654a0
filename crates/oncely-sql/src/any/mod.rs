//! [`AnyStore`] and [`AnyPool`]: a store or pool of whichever database a URL names, the way
//! sqlx's `Any` works, so that tools (the CLI, operations, tests) are written once.
//!
//! The work itself stays typed: [`with_store!`](crate::with_store) and
//! [`with_pool!`](crate::with_pool) bind the concrete store or pool and compile their body
//! once per database. Only this module matches on which database it is.

pub(crate) mod seam;
mod store;
pub(crate) mod tx;
use crate::connect::{ConnectOptions, PoolKind};
use crate::dialect::Dialect;
use crate::engine::Engine;
#[cfg(feature = "mysql")]
use crate::store::MySqlStore;
#[cfg(feature = "postgres")]
use crate::store::PgStore;
#[cfg(feature = "sqlite")]
use crate::store::SqliteStore;
use crate::tables::Tables;
use crate::url::redact_url;
use oncely_core::{Error, Result};
#[cfg(feature = "mysql")]
use sqlx::MySqlPool;
#[cfg(feature = "postgres")]
use sqlx::PgPool;
#[cfg(feature = "sqlite")]
use sqlx::SqlitePool;

/// A store of any of the three databases.
///
/// ```no_run
/// # async fn f() -> oncely_core::Result<()> {
/// use oncely_core::Inspect;
/// use oncely_sql::AnyStore;
/// let store = AnyStore::connect("sqlite:oncely.db").await?;
/// store.migrate().await?;
/// let letters = oncely_sql::with_store!(&store, s => s.dead_letters(None).await?);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub enum AnyStore {
    /// SQLite.
    #[cfg(feature = "sqlite")]
    Sqlite(SqliteStore),
    /// PostgreSQL.
    #[cfg(feature = "postgres")]
    Postgres(PgStore),
    /// MySQL / MariaDB.
    #[cfg(feature = "mysql")]
    MySql(MySqlStore),
}

/// A sqlx pool of any of the three databases.
///
/// ```no_run
/// # async fn f() -> oncely_core::Result<()> {
/// use oncely_sql::{AnyPool, sqlx};
/// let pool = AnyPool::connect("postgres://app@db/app").await?;
/// let one: i64 = oncely_sql::with_pool!(&pool, p => sqlx::query_scalar("SELECT 1")
///     .fetch_one(p)
///     .await
///     .map_err(|e| oncely_sql::error::db("selecting", e))?);
/// # Ok(()) }
/// ```
///
/// A pool from a store ([`AnyStore::pool`], [`AnyPool::connect`]) holds the store's [`Engine`];
/// one converted from a sqlx pool (`AnyPool::from(pg_pool)`) holds [`Engine::assumed`].
#[derive(Debug, Clone)]
pub struct AnyPool {
    engine: Engine,
    pool: PoolKind,
}

/// Runs `$body` with `$s` bound to the concrete store inside an [`AnyStore`] (or a reference
/// to one): `&SqliteStore`, `&PgStore` or `&MySqlStore`. The body is compiled once per
/// database, so it can use the store's typed API and transactions.
///
/// ```no_run
/// # async fn f(store: oncely_sql::AnyStore) -> oncely_core::Result<()> {
/// let ran = oncely_sql::with_store!(&store, s => s.migrate().await?);
/// # Ok(()) }
/// ```
#[macro_export]
macro_rules! with_store {
    ($any:expr, $s:ident => $body:expr) => {
        $crate::__any_arms_sqlite!(($any) AnyStore $s ($body) {})
    };
}

/// Runs `$body` with `$p` bound to the concrete sqlx pool inside an [`AnyPool`] (or a
/// reference to one). The body is compiled once per database.
///
/// ```no_run
/// # async fn f(pool: &oncely_sql::AnyPool) -> oncely_core::Result<()> {
/// use oncely_sql::sqlx;
/// oncely_sql::with_pool!(pool, p => sqlx::query("DELETE FROM t")
///     .execute(p)
///     .await
///     .map_err(|e| oncely_sql::error::db("clearing t", e))?
///     .rows_affected());
/// # Ok(()) }
/// ```
#[macro_export]
macro_rules! with_pool {
    ($any:expr, $p:ident => $body:expr) => {
        $crate::__any_arms_sqlite!(($crate::AnyPool::__kind(&$any)) PoolKind $p ($body) {})
    };
}

// How `with_store!` and `with_pool!` get one arm per database *this crate* was built with: a
// `#[cfg]` inside an exported macro would be evaluated in the calling crate (with its
// features), so each step below is defined per feature here and adds its arm or not; the last
// one emits the `match`.

#[cfg(feature = "sqlite")]
#[doc(hidden)]
#[macro_export]
macro_rules! __any_arms_sqlite {
    (($any:expr) $ty:ident $v:ident ($body:expr) {$($arms:tt)*}) => {
        $crate::__any_arms_postgres!(($any) $ty $v ($body) {$($arms)* $crate::$ty::Sqlite($v) => $body,})
    };
}
#[cfg(not(feature = "sqlite"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __any_arms_sqlite {
    (($any:expr) $ty:ident $v:ident ($body:expr) {$($arms:tt)*}) => {
        $crate::__any_arms_postgres!(($any) $ty $v ($body) {$($arms)*})
    };
}
#[cfg(feature = "postgres")]
#[doc(hidden)]
#[macro_export]
macro_rules! __any_arms_postgres {
    (($any:expr) $ty:ident $v:ident ($body:expr) {$($arms:tt)*}) => {
        $crate::__any_arms_mysql!(($any) $ty $v ($body) {$($arms)* $crate::$ty::Postgres($v) => $body,})
    };
}
#[cfg(not(feature = "postgres"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __any_arms_postgres {
    (($any:expr) $ty:ident $v:ident ($body:expr) {$($arms:tt)*}) => {
        $crate::__any_arms_mysql!(($any) $ty $v ($body) {$($arms)*})
    };
}
#[cfg(feature = "mysql")]
#[doc(hidden)]
#[macro_export]
macro_rules! __any_arms_mysql {
    (($any:expr) $ty:ident $v:ident ($body:expr) {$($arms:tt)*}) => {
        match $any { $($arms)* $crate::$ty::MySql($v) => $body, }
    };
}
#[cfg(not(feature = "mysql"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __any_arms_mysql {
    (($any:expr) $ty:ident $v:ident ($body:expr) {$($arms:tt)*}) => {
        match $any { $($arms)* }
    };
}

/// The error for a URL of a database this build of oncely-sql left out (its feature is off).
#[allow(dead_code)] // with every database built, nothing is left out
pub(crate) fn not_built(dialect: Dialect) -> Error {
    Error::config(format!(
        "{} support is not built in: enable the `{}` feature of oncely-sql (or of the oncely facade)",
        dialect.name(),
        dialect.name()
    ))
}

impl AnyStore {
    /// Connects to the database `url` names (`sqlite:`, `postgres://`, `mysql://`,
    /// `mariadb://`) with the default [`ConnectOptions`], without migrating. Errors keep the
    /// error's kind and name the URL with its password redacted.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, &ConnectOptions::default()).await
    }

    /// [`AnyStore::connect`] with options (table prefix, pool size, durability, replication).
    pub async fn connect_with(url: &str, options: &ConnectOptions) -> Result<Self> {
        let store = match Dialect::from_url(url) {
            #[cfg(feature = "sqlite")]
            Ok(Dialect::Sqlite) => SqliteStore::connect_with(url, options)
                .await
                .map(Self::from),
            #[cfg(feature = "postgres")]
            Ok(Dialect::Postgres) => PgStore::connect_with(url, options).await.map(Self::from),
            #[cfg(feature = "mysql")]
            #[cfg(feature = "mysql")]
            Ok(Dialect::MySql) => MySqlStore::connect_with(url, options).await.map(Self::from),
            #[allow(unreachable_patterns)]
            Ok(dialect) => Err(not_built(dialect)),
            Err(e) => Err(e),
        };
        store.map_err(|e| e.context(format!("opening {}", redact_url(url))))
    }

    /// The store over `pool` for the tables `tables`, with the pool's [`Engine`]: for tools
    /// that hold a pool and a table naming (operations) and need the store's own work, e.g.
    /// [`AnyStore::migrate_with`], without a typed pool.
    ///
    /// ```no_run
    /// # async fn f(pool: oncely_sql::AnyPool) -> oncely_core::Result<()> {
    /// use oncely_sql::{AnyStore, INBOX, Tables};
    /// let store = AnyStore::with_tables(pool, Tables::default().with_prefix("app_")?);
    /// store.migrate_with(&[&INBOX]).await?;
    /// # Ok(()) }
    /// ```
    pub fn with_tables(pool: AnyPool, tables: Tables) -> Self {
        let engine = pool.engine();
        match pool.pool {
            #[cfg(feature = "sqlite")]
            PoolKind::Sqlite(p) => {
                Self::Sqlite(SqliteStore::with_engine_and_tables(p, tables, engine))
            }
            #[cfg(feature = "postgres")]
            PoolKind::Postgres(p) => {
                Self::Postgres(PgStore::with_engine_and_tables(p, tables, engine))
            }
            #[cfg(feature = "mysql")]
            PoolKind::MySql(p) => {
                Self::MySql(MySqlStore::with_engine_and_tables(p, tables, engine))
            }
        }
    }

    /// The database (its [`Engine`]'s dialect).
    pub fn dialect(&self) -> Dialect {
        self.engine().dialect()
    }

    /// Applies the pending inbox and dead-letter migrations ([`INBOX`](crate::INBOX)); returns
    /// how many ran. The same as `migrate_with(&[&INBOX])`.
    pub async fn migrate(&self) -> Result<usize> {
        with_store!(self, s => s.migrate().await)
    }

    /// Applies the pending migrations of `sets`, in the given order, on this store's pool and
    /// tables ([`SqlStore::migrate_with`](crate::SqlStore::migrate_with)): the one way to
    /// create any crate's tables. Returns how many ran (0 when up to date).
    ///
    /// ```no_run
    /// # async fn f(store: oncely_sql::AnyStore) -> oncely_core::Result<()> {
    /// use oncely_sql::INBOX;
    /// // with oncely-effects: store.migrate_with(&[&INBOX, &oncely_effects::MIGRATIONS])
    /// store.migrate_with(&[&INBOX]).await?;
    /// # Ok(()) }
    /// ```
    pub async fn migrate_with(&self, sets: &[&crate::MigrationSet]) -> Result<usize> {
        with_store!(self, s => s.migrate_with(sets).await)
    }

    /// The table naming in use.
    pub fn tables(&self) -> &Tables {
        with_store!(self, s => s.tables())
    }

    /// The facts of the store's connection, decided when it connected ([`Engine`]).
    pub fn engine(&self) -> Engine {
        with_store!(self, s => s.engine())
    }

    /// Whether the store runs in portable mode ([`Engine::portable`]).
    pub fn portable(&self) -> bool {
        self.engine().portable()
    }

    /// The store's pool (a cheap clone sharing the connections).
    pub fn pool(&self) -> AnyPool {
        let pool = match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => PoolKind::Sqlite(s.pool().clone()),
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => PoolKind::Postgres(s.pool().clone()),
            #[cfg(feature = "mysql")]
            Self::MySql(s) => PoolKind::MySql(s.pool().clone()),
        };
        AnyPool {
            engine: self.engine(),
            pool,
        }
    }
}

#[cfg(feature = "sqlite")]
impl From<SqliteStore> for AnyStore {
    fn from(s: SqliteStore) -> Self {
        #[cfg(feature = "sqlite")]
        Self::Sqlite(s)
    }
}

#[cfg(feature = "postgres")]
impl From<PgStore> for AnyStore {
    fn from(s: PgStore) -> Self {
        #[cfg(feature = "postgres")]
        Self::Postgres(s)
    }
}

#[cfg(feature = "mysql")]
impl From<MySqlStore> for AnyStore {
    fn from(s: MySqlStore) -> Self {
        #[cfg(feature = "mysql")]
        Self::MySql(s)
    }
}

impl AnyPool {
    /// Connects to the database `url` names, with the same pool settings (SQLite WAL and
    /// durability, pool size, timeouts) as [`AnyStore::connect`].
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, &ConnectOptions::default()).await
    }

    /// [`AnyPool::connect`] with options.
    pub async fn connect_with(url: &str, options: &ConnectOptions) -> Result<Self> {
        Ok(AnyStore::connect_with(url, options).await?.pool())
    }

    /// The database.
    pub fn dialect(&self) -> Dialect {
        self.engine.dialect()
    }

    /// The facts of the pool's connection ([`Engine`]): the store's, for a pool from a store.
    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// The same pool, its connection's facts being `engine`.
    pub(crate) fn with_engine(mut self, engine: Engine) -> Self {
        self.engine = engine;
        self
    }

    #[doc(hidden)]
    pub fn __kind(&self) -> &PoolKind {
        &self.pool
    }

    /// Begins a transaction on a connection of the pool (`BEGIN IMMEDIATE` on SQLite, as the
    /// stores do): the [`AnyTx`](crate::AnyTx) tools run their statements in, through the
    /// same [`SqlTx`](crate::SqlTx) seam a handler's transaction offers. Safe behind a
    /// transaction pooler (every statement is inside the transaction).
    ///
    /// ```no_run
    /// # async fn f(pool: oncely_sql::AnyPool) -> oncely_core::Result<()> {
    /// let mut tx = pool.begin().await?;
    /// let n = tx.fetch_i64("SELECT COUNT(*) FROM oncely_inbox", &[]).await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn begin(&self) -> Result<crate::AnyTx> {
        use crate::query::SqlDatabase;
        fn begin_sql<DB: SqlDatabase>(_: &sqlx::Pool<DB>) -> &'static str {
            DB::BEGIN
        }
        let tx = with_pool!(self, p => p.begin_with(begin_sql(p)).await.map(crate::AnyTx::from));
        tx.map(|tx| tx.with_engine(self.engine))
            .map_err(|e| crate::error::db("beginning a transaction", e))
    }

    /// The PostgreSQL pool, for features that exist on PostgreSQL only (the partitioned
    /// inbox, the SQL queue); `None` on the other databases.
    #[cfg(feature = "postgres")]
    pub fn as_postgres(&self) -> Option<&PgPool> {
        match &self.pool {
            #[cfg(feature = "postgres")]
            PoolKind::Postgres(pool) => Some(pool),
            _ => None,
        }
    }

    /// Closes the pool: waits for connections in use to be returned, then closes them all.
    pub async fn close(&self) {
        with_pool!(self, p => p.close().await)
    }
}

impl<DB: crate::SqlDatabase> crate::SqlStore<DB> {
    /// The store's pool as an [`AnyPool`], holding the store's [`Engine`]: what tools
    /// (operations, locks, the effect journal) take. (Written here, beside the erased layer
    /// it converts to, so the typed store does not import it.)
    pub fn any_pool(&self) -> AnyPool
    where
        AnyPool: From<sqlx::Pool<DB>>,
    {
        AnyPool::from(self.pool().clone()).with_engine(self.engine())
    }
}

#[cfg(feature = "sqlite")]
impl From<SqlitePool> for AnyPool {
    /// A pool oncely did not open: its facts are [`Engine::assumed`].
    fn from(p: SqlitePool) -> Self {
        Self {
            engine: Engine::assumed(Dialect::Sqlite),
            pool: PoolKind::Sqlite(p),
        }
    }
}

#[cfg(feature = "postgres")]
impl From<PgPool> for AnyPool {
    /// A pool oncely did not open: its facts are [`Engine::assumed`].
    fn from(p: PgPool) -> Self {
        Self {
            engine: Engine::assumed(Dialect::Postgres),
            pool: PoolKind::Postgres(p),
        }
    }
}

#[cfg(feature = "mysql")]
impl From<MySqlPool> for AnyPool {
    /// A pool oncely did not open: its facts are [`Engine::assumed`].
    fn from(p: MySqlPool) -> Self {
        Self {
            engine: Engine::assumed(Dialect::MySql),
            pool: PoolKind::MySql(p),
        }
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sqlite_store_and_pool() {
        let store = AnyStore::connect("sqlite::memory:").await.unwrap();
        assert_eq!(store.dialect(), Dialect::Sqlite);
        assert!(store.migrate().await.unwrap() > 0);
        let pool = store.pool();
        assert_eq!(pool.dialect(), Dialect::Sqlite);
        let n: i64 =
            with_pool!(&pool, p => sqlx::query_scalar("SELECT 1").fetch_one(p).await.unwrap());
        assert_eq!(n, 1);
        pool.close().await;
    }

    #[tokio::test]
    async fn errors_name_the_redacted_url() {
        let options = ConnectOptions::default();
        let e = AnyStore::connect_with("postgres://app:s3cret@h:port/x", &options)
            .await
            .err()
            .unwrap();
        let text = e.to_string();
        assert!(
            text.starts_with("opening postgres://app:***@h:port/x"),
            "{text}"
        );
        assert!(!text.contains("s3cret"), "{text}");
        assert_eq!(e.kind(), oncely_core::ErrorKind::Config, "{e:?}");
        let e = AnyPool::connect_with("oracle://x", &options)
            .await
            .err()
            .unwrap();
        assert_eq!(e.kind(), oncely_core::ErrorKind::Config);
        assert!(e.to_string().starts_with("opening oracle://x: "), "{e}");
    }
}
