//! PostgreSQL behind a transaction pooler: PgBouncer with `pool_mode = transaction`, and the
//! hosted poolers that behave like it (Supavisor, PgCat, RDS Proxy
//! when it multiplexes).
//!
//! Such a pooler lends a server connection to a client for one transaction and then to
//! another client. Whatever lives in the server *session* outlives the transaction and
//! reaches the next client. What changes, and why (the one table of these facts):
//!
//! | session state | what would go wrong | what oncely does behind a transaction pooler |
//! |---|---|---|
//! | named prepared statements (sqlx caches `sqlx_s_N` per client connection) | another client's `Parse` of the same name fails `already exists`; worse, a cached `Bind sqlx_s_N` lands on a server where another client prepared a *different* `sqlx_s_N`: that client's SQL runs with this client's values | every statement is unnamed ([`query`], [`query_as`], [`query_scalar`], and the erased layer) |
//! | the unnamed statement between `Parse` and `Bind` (sqlx sends them in two round trips) | outside a transaction the pooler may hand the `Bind` to another server, whose unnamed statement another client prepared | every statement runs inside a transaction: the store's own, or a short one of its own ([`Autocommit`], and the erased layer by itself) |
//! | session advisory locks (`pg_advisory_lock`), `LISTEN` | held or listening on a server another client now uses; released or deaf at random | portable mode (see [`SqlStore::portable`](crate::SqlStore::portable())): lease-table locks, a polling outbox relay; the migration lock is transaction-scoped anyway |
//! | `SET` (session settings) | leaks to other clients | oncely sets nothing per session on PostgreSQL; per-transaction settings use `SET LOCAL` |
//!
//! **How oncely knows.** The URL option `pooler=transaction` says so; `pooler=none` says
//! there is none (no check). Without the option oncely checks once at connect, before any
//! prepared statement, over the simple protocol, in two steps:
//!
//! 1. *Something stands between*: the server is asked the port of its side of the
//!    connection (`inet_server_port()`). Connected directly, it is the port the URL dials;
//!    through PgBouncer (6432), Supavisor (6543) or any other proxy it is the server's own
//!    (5432). A different port is taken as a transaction pooler: the safe side, since a plain
//!    TCP proxy, a port mapping or a *session* pooler only costs the statement cache and
//!    portable mode, while a transaction pooler taken for a direct connection lets one
//!    client's cached statement run another client's SQL. Say `?pooler=none` for those.
//! 2. *Two clients, one server session*: two fresh connections each ask
//!    `SELECT pg_backend_pid()`, three times. Directly connected, or through a *session*
//!    pooler, two client connections are always two server sessions; a transaction pooler
//!    hands the server connection the first one just released to the second (PgBouncer
//!    reuses the most recently used one first by default), so the same backend pid answering
//!    both means a transaction pooler.
//!
//! Step 1 is the one that decides in practice: step 2 alone missed PgBouncer while other
//! clients kept it busy (they took the released server connection between the two
//! questions; found by the HTTP layer's PgBouncer tests, whose statements were then named and
//! collided with `prepared statement "sqlx_s_1" already exists`). A pooler on the server's own
//! port number on another host, set up with `server_round_robin = 1`, may still escape both
//! steps: name it in the URL.
//!
//! The answer is a fact of the store's [`Engine`](crate::Engine), decided once at connect and
//! held by the store, its [`AnyPool`](crate::AnyPool) and every transaction they hand out:
//! a PostgreSQL pool behind PgBouncer and a direct one (or a SQLite or MySQL pool) in the same
//! process each keep their own statement caching.
//!
//! Your own queries: [`Engine::query`](crate::Engine::query) and its siblings prepare as the
//! store's engine allows; the free [`query`], [`query_as`] and [`query_scalar`] know no
//! engine and take the safe side on PostgreSQL (unnamed statements).

use crate::engine::Engine;
use crate::query::SqlDatabase;
use oncely_core::{Error, Result};
#[cfg(feature = "postgres")]
use sqlx::postgres::PgConnectOptions;
#[cfg(feature = "postgres")]
use sqlx::{Connection, Row};
use sqlx::{Database, Pool};

/// Checks that the pooler lets a transaction span statements: PgBouncer's
/// `pool_mode = statement` refuses every `BEGIN`, and a claim must share a transaction with
/// its effect. A configuration error that names the setting.
#[cfg(feature = "postgres")]
pub(crate) async fn require_transactions<DB: Database>(pool: &Pool<DB>) -> Result<()> {
    let refused = |e: sqlx::Error| {
        if e.to_string().contains("statement pooling") {
            Error::config(format!(
                "the connection pooler runs in statement mode (PgBouncer pool_mode = statement: {e}); oncely needs a transaction per claim and its effect: set pool_mode = transaction (or session)"
            ))
        } else {
            crate::error::db("beginning a transaction through the pooler", e)
        }
    };
    let tx = pool.begin().await.map_err(refused)?;
    tx.commit().await.map_err(refused)
}

/// What the URL option `pooler=` says.
#[cfg(feature = "postgres")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PoolerOption {
    /// No option: check at connect.
    Detect,
    /// `pooler=transaction`.
    Transaction,
    /// `pooler=none` (or `session`): no transaction pooler; no check.
    None,
}

/// The URL option about the pooler that oncely takes off a PostgreSQL URL.
#[cfg(feature = "postgres")]
pub(crate) const OPTION_NAMES: &[&str] = &["pooler"];

/// Removes the `pooler=` option from a PostgreSQL URL (sqlx would warn about it), returning
/// the URL without it and what it said. An unknown value is a configuration error.
///
/// ```text
/// postgres://u@h:6432/app?pooler=transaction&sslmode=disable → (postgres://u@h:6432/app?sslmode=disable, Transaction)
/// ```
#[cfg(feature = "postgres")]
pub(crate) fn take_pooler_option(url: &str) -> Result<(String, PoolerOption)> {
    let (url, taken) = crate::url::take_options(url, OPTION_NAMES);
    Ok((url, pooler_of(&taken)?))
}

/// What the `pooler=` options `taken` off a URL say (the last one wins).
#[cfg(feature = "postgres")]
pub(crate) fn pooler_of(taken: &[(String, String)]) -> Result<PoolerOption> {
    let mut option = PoolerOption::Detect;
    for (_, value) in taken
        .iter()
        .filter(|(key, _)| OPTION_NAMES.contains(&key.as_str()))
    {
        option = match value.as_str() {
            "transaction" => PoolerOption::Transaction,
            "none" | "session" => PoolerOption::None,
            "statement" => {
                return Err(Error::config(
                    "pooler=statement: a claim and its effect must share one transaction, which statement pooling forbids; use pool_mode = transaction (pooler=transaction) or session",
                ));
            }
            other => {
                return Err(Error::config(format!(
                    "pooler={other} is not a pooler mode: use pooler=transaction (PgBouncer pool_mode = transaction), or pooler=none"
                )));
            }
        }
    }
    Ok(option)
}

/// Whether the PostgreSQL `url` leads to a transaction pooler, by the check the stores run
/// at connect (module docs); the `pooler=` option is ignored here. Two short connections.
///
/// ```no_run
/// # async fn f() -> oncely_core::Result<()> {
/// if oncely_sql::pooler::detect_transaction_pooler("postgres://app@127.0.0.1:6432/app").await? {
///     println!("PgBouncer in transaction mode (or alike)");
/// }
/// # Ok(()) }
/// ```
#[cfg(feature = "postgres")]
pub async fn detect_transaction_pooler(url: &str) -> Result<bool> {
    let (url, _) = take_pooler_option(url)?;
    let options: PgConnectOptions = url
        .parse()
        .map_err(|e| crate::error::db("parsing the PostgreSQL URL", e))?;
    detect(&options.extra_float_digits(None))
        .await
        .map_err(|e| crate::error::db("checking for a connection pooler", e))
}

/// Whether `options` lead to a transaction pooler: the server's port is not the one dialed,
/// or two fresh connections are answered by the same backend (see the module docs).
/// Simple-protocol statements only, which are safe through any pooler.
#[cfg(feature = "postgres")]
pub(crate) async fn detect(options: &PgConnectOptions) -> std::result::Result<bool, sqlx::Error> {
    let mut a = sqlx::PgConnection::connect_with(options).await?;
    if options.get_socket().is_none()
        && let Some(server) = server_port(&mut a).await?
        && server != i32::from(options.get_port())
    {
        tracing::info!(
            dialed = options.get_port(),
            server,
            "PostgreSQL answers on another port than the URL dials: something stands between; \
             taken as a transaction pooler (add ?pooler=none to the URL for a plain TCP proxy, \
             a port mapping or a session pooler)"
        );
        let _ = a.close().await;
        return Ok(true);
    }
    let mut b = sqlx::PgConnection::connect_with(options).await?;
    let mut shared = false;
    for _ in 0..3 {
        let (pa, pb) = (backend_pid(&mut a).await?, backend_pid(&mut b).await?);
        shared |= pa == pb;
    }
    let _ = a.close().await;
    let _ = b.close().await;
    Ok(shared)
}

/// The port of the server's side of the connection; `None` over a Unix socket.
#[cfg(feature = "postgres")]
async fn server_port(
    conn: &mut sqlx::PgConnection,
) -> std::result::Result<Option<i32>, sqlx::Error> {
    sqlx::raw_sql("SELECT inet_server_port()")
        .fetch_one(&mut *conn)
        .await?
        .try_get(0)
}

#[cfg(feature = "postgres")]
async fn backend_pid(conn: &mut sqlx::PgConnection) -> std::result::Result<i32, sqlx::Error> {
    sqlx::raw_sql("SELECT pg_backend_pid()")
        .fetch_one(&mut *conn)
        .await?
        .try_get(0)
}

/// `sqlx::query`, safe behind a transaction pooler without knowing of one: unnamed on
/// PostgreSQL ([`Engine::assumed`]), named and cached on SQLite and MySQL. With the store at
/// hand, [`Engine::query`] names statements wherever its connection allows.
///
/// ```no_run
/// # async fn f(tx: &mut oncely_sql::sqlx::Transaction<'static, oncely_sql::sqlx::Postgres>) -> Result<(), oncely_sql::sqlx::Error> {
/// oncely_sql::pooler::query("UPDATE accounts SET balance = balance + $1 WHERE id = $2")
///     .bind(5_i64)
///     .bind("acct-17")
///     .execute(&mut **tx)
///     .await?;
/// # Ok(()) }
/// ```
pub fn query<'q, DB: SqlDatabase + sqlx::database::HasStatementCache>(
    sql: impl sqlx::SqlSafeStr,
) -> sqlx::query::Query<'q, DB, <DB as Database>::Arguments> {
    Engine::assumed(DB::DIALECT).query(sql)
}

/// `sqlx::query_as`, unnamed on PostgreSQL (see [`query`]).
///
/// ```no_run
/// # async fn f(pool: oncely_sql::sqlx::PgPool) -> Result<(), oncely_sql::sqlx::Error> {
/// let mut tx = pool.begin().await?;
/// let rows: Vec<(String, i64)> = oncely_sql::pooler::query_as("SELECT id, balance FROM accounts")
///     .fetch_all(&mut *tx)
///     .await?;
/// tx.commit().await?;
/// # Ok(()) }
/// ```
pub fn query_as<'q, DB: SqlDatabase + sqlx::database::HasStatementCache, O>(
    sql: impl sqlx::SqlSafeStr,
) -> sqlx::query::QueryAs<'q, DB, O, <DB as Database>::Arguments>
where
    O: for<'r> sqlx::FromRow<'r, DB::Row>,
{
    Engine::assumed(DB::DIALECT).query_as(sql)
}

/// `sqlx::query_scalar`, unnamed on PostgreSQL (see [`query`]).
///
/// ```no_run
/// # async fn f(pool: oncely_sql::sqlx::PgPool) -> Result<(), oncely_sql::sqlx::Error> {
/// let mut conn = oncely_sql::pooler::Autocommit::begin(&pool, oncely_sql::Engine::assumed(oncely_sql::Dialect::Postgres)).await?;
/// let n: i64 = oncely_sql::pooler::query_scalar("SELECT count(*) FROM oncely_inbox")
///     .fetch_one(&mut *conn)
///     .await?;
/// conn.commit().await?;
/// # Ok(()) }
/// ```
pub fn query_scalar<'q, DB: SqlDatabase + sqlx::database::HasStatementCache, O>(
    sql: impl sqlx::SqlSafeStr,
) -> sqlx::query::QueryScalar<'q, DB, O, <DB as Database>::Arguments>
where
    (O,): for<'r> sqlx::FromRow<'r, DB::Row>,
{
    Engine::assumed(DB::DIALECT).query_scalar(sql)
}

/// A connection for statements outside the store's transactions (reads of the inbox, dead
/// letters, operator commands): behind a transaction pooler it is a transaction of its own,
/// so that every statement stays on one server connection; elsewhere a plain pooled
/// connection whose statements commit one by one. Call [`Autocommit::commit`] when done
/// (dropping it rolls back behind a pooler: write nothing you want kept without it).
///
/// ```no_run
/// # async fn f(pool: oncely_sql::sqlx::PgPool) -> Result<(), oncely_sql::sqlx::Error> {
/// # let engine = oncely_sql::Engine::assumed(oncely_sql::Dialect::Postgres);
/// let mut conn = oncely_sql::pooler::Autocommit::begin(&pool, engine).await?;
/// oncely_sql::pooler::query("DELETE FROM oncely_dead_letters WHERE consumer = $1")
///     .bind("billing")
///     .execute(&mut *conn)
///     .await?;
/// conn.commit().await?;
/// # Ok(()) }
/// ```
pub struct Autocommit<DB: Database> {
    inner: Inner<DB>,
}

enum Inner<DB: Database> {
    Plain(sqlx::pool::PoolConnection<DB>),
    Pinned(sqlx::Transaction<'static, DB>),
}

impl<DB: Database> Autocommit<DB> {
    /// Takes a connection of `pool`, whose facts are `engine` (beginning a transaction where
    /// a transaction pooler may stand between).
    pub async fn begin(pool: &Pool<DB>, engine: Engine) -> std::result::Result<Self, sqlx::Error> {
        let inner = if engine.pins_statements() {
            Inner::Pinned(pool.begin().await?)
        } else {
            Inner::Plain(pool.acquire().await?)
        };
        Ok(Self { inner })
    }

    /// Commits (behind a transaction pooler) and returns the connection to the pool.
    pub async fn commit(self) -> std::result::Result<(), sqlx::Error> {
        match self.inner {
            Inner::Plain(_) => Ok(()),
            Inner::Pinned(tx) => tx.commit().await,
        }
    }
}

impl<DB: Database> std::ops::Deref for Autocommit<DB> {
    type Target = DB::Connection;
    fn deref(&self) -> &Self::Target {
        match &self.inner {
            Inner::Plain(c) => c,
            Inner::Pinned(t) => t,
        }
    }
}

impl<DB: Database> std::ops::DerefMut for Autocommit<DB> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        match &mut self.inner {
            Inner::Plain(c) => c,
            Inner::Pinned(t) => t,
        }
    }
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use super::*;

    #[test]
    fn the_pooler_option_is_taken_out_of_the_url() {
        let (url, o) = take_pooler_option("postgres://u@h:6432/app?pooler=transaction").unwrap();
        assert_eq!(
            (url.as_str(), o),
            ("postgres://u@h:6432/app", PoolerOption::Transaction)
        );
        let (url, o) =
            take_pooler_option("postgres://u@h/app?sslmode=disable&pooler=none&x=1").unwrap();
        assert_eq!(
            (url.as_str(), o),
            ("postgres://u@h/app?sslmode=disable&x=1", PoolerOption::None)
        );
        let (url, o) = take_pooler_option("postgres://u@h/app").unwrap();
        assert_eq!(
            (url.as_str(), o),
            ("postgres://u@h/app", PoolerOption::Detect)
        );
        let e = take_pooler_option("postgres://u@h/app?pooler=yes").unwrap_err();
        assert!(e.to_string().contains("pooler=transaction"), "{e}");
        let e = take_pooler_option("postgres://u@h/app?pooler=statement").unwrap_err();
        assert!(e.to_string().contains("one transaction"), "{e}");
    }
}
