//! Opening stores from URLs, with durable defaults.

use crate::deploy::failover::{FAILOVER_ACQUIRE_TIMEOUT, Failover, labelled};
#[cfg(feature = "postgres")]
use crate::deploy::pooler::PoolerOption;
#[cfg(feature = "postgres")]
use crate::deploy::replication;
use crate::deploy::replication::Replication;
use crate::engine::Engine;
use crate::error::db;
#[cfg(feature = "mysql")]
use crate::store::MySqlStore;
#[cfg(feature = "postgres")]
use crate::store::PgStore;
#[cfg(feature = "sqlite")]
use crate::store::SqliteStore;
use crate::tables::Tables;
use crate::url::split_hosts;
use oncely_core::{LogThrottle, Result};
#[cfg(feature = "mysql")]
use sqlx::mysql::MySqlPoolOptions;
use sqlx::pool::PoolOptions;
#[cfg(feature = "postgres")]
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
#[cfg(feature = "sqlite")]
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, Database, Pool};
use std::str::FromStr;
#[cfg(feature = "postgres")]
use std::sync::Arc;
#[cfg(feature = "postgres")]
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

type Options<DB> = <<DB as Database>::Connection as Connection>::Options;

/// SQLite durability. `Full` (default) syncs the WAL on every commit, so no ack can precede a
/// durable commit. `Normal` is faster but a power loss may undo the last commits after they
/// were acked: those messages are then lost. Choose it only if that is acceptable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous=FULL` (default).
    #[default]
    Full,
    /// `synchronous=NORMAL`: faster, not durable against power loss.
    Normal,
}

/// Options for opening a store.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Table naming.
    pub tables: Tables,
    /// Most connections in the pool.
    pub max_connections: u32,
    /// SQLite only.
    pub durability: Durability,
    /// PostgreSQL only: what a commit waits for on a primary with streaming replicas
    /// ([`Replication`]; the URL option `?replication=replicated` overrides it).
    pub replication: Replication,
    /// Forces portable mode ([`Engine::portable`]). Off by default: the store turns it on by
    /// itself when it finds a distributed engine (or a transaction pooler) at connect.
    pub portable: bool,
    /// PostgreSQL and MySQL: how long a pooled connection may take to answer the ping it
    /// gets before each use and after each release (default [`DEFAULT_PING_TIMEOUT`]). One
    /// that does not answer is closed and another taken: a connection stranded by the network
    /// (no RST, no FIN) costs a statement at most this long, never a pool slot.
    pub ping_timeout: Duration,
    /// PostgreSQL, not behind a transaction pooler: the session's
    /// `idle_in_transaction_session_timeout` when the server has none configured (default
    /// 60 s, as `oncely_core::DEFAULT_ATTEMPT_TIMEOUT`; zero: leave it off); MariaDB: its
    /// `idle_transaction_timeout`, likewise. A transaction
    /// whose client the network stranded holds its claims' row locks until the server ends
    /// it; without this, PostgreSQL waits for its TCP keepalive (2 hours on Linux) and every
    /// retry of those messages waits on the locks. Keep it above the longest pause your
    /// handler makes between two statements of one transaction. Behind PgBouncer, set its
    /// `idle_transaction_timeout` instead.
    pub idle_in_transaction_timeout: Duration,
}

/// The default [`ConnectOptions::ping_timeout`].
const DEFAULT_PING_TIMEOUT: Duration = Duration::from_secs(5);

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            tables: Tables::default(),
            max_connections: 16,
            durability: Durability::Full,
            replication: Replication::AsConfigured,
            portable: false,
            ping_timeout: DEFAULT_PING_TIMEOUT,
            idle_in_transaction_timeout: Duration::from_secs(60),
        }
    }
}

impl ConnectOptions {
    /// The facts of a store's connection on `pool`, `behind` a transaction pooler or not: its
    /// portable mode is forced, implied by the pooler, or found by asking the server which
    /// engine it is (one query, the only time it is asked).
    async fn engine(&self, pool: PoolKind, behind: bool) -> Result<Engine> {
        let engine = Engine::direct(pool.dialect()).behind_pooler(behind);
        let portable =
            engine.portable() || self.portable || distributed_engine(&pool).await?.is_some();
        Ok(engine.with_portable(portable))
    }
}

#[cfg(feature = "sqlite")]
impl SqliteStore {
    /// Opens (creating if missing) a SQLite database in WAL mode with `synchronous=FULL`,
    /// e.g. `sqlite:oncely.db` or `sqlite::memory:`.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, &ConnectOptions::default()).await
    }

    /// Opens a SQLite database with options.
    pub async fn connect_with(url: &str, options: &ConnectOptions) -> Result<Self> {
        options.replication.supported_on("SQLite")?;
        let sync = match options.durability {
            Durability::Full => SqliteSynchronous::Full,
            Durability::Normal => SqliteSynchronous::Normal,
        };
        let connect = SqliteConnectOptions::from_str(url)
            .map_err(|e| db("parsing the SQLite URL", e))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(sync)
            .busy_timeout(Duration::from_secs(30));
        let pool = SqlitePoolOptions::new()
            .max_connections(options.max_connections)
            .connect_with(connect)
            .await
            .map_err(|e| db("opening SQLite", e))?;
        let engine = options
            .engine(PoolKind::Sqlite(pool.clone()), false)
            .await?;
        Ok(Self::with_engine_and_tables(
            pool,
            options.tables.clone(),
            engine,
        ))
    }
}

#[cfg(feature = "postgres")]
impl PgStore {
    /// Connects to PostgreSQL, e.g. `postgres://user@127.0.0.1/app`.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, &ConnectOptions::default()).await
    }

    /// Connects with options. The store writes to the primary only: a multi-host URL is used
    /// from its first host that is not a standby, and connections to standbys are refused
    /// (see [`Replication`] for what is checked at start).
    ///
    /// Behind a transaction pooler (PgBouncer `pool_mode = transaction`) add
    /// `?pooler=transaction` to the URL, or let the store find out at connect (see
    /// [`crate::pooler`]); `?pooler=none` skips the check.
    pub async fn connect_with(url: &str, options: &ConnectOptions) -> Result<Self> {
        // The URL is read once: oncely's own options taken off, then each host parsed.
        let names = [
            crate::deploy::pooler::OPTION_NAMES,
            replication::OPTION_NAMES,
        ]
        .concat();
        let (url, taken) = crate::url::take_options(url, &names);
        let pooler = crate::deploy::pooler::pooler_of(&taken)?;
        let replication = replication::replication_of(&taken, options.replication)?;
        // Not sent: PostgreSQL 12+ already prints floats exactly, and PgBouncer as shipped
        // refuses unknown startup parameters ("unsupported startup parameter").
        let adjust = |o: PgConnectOptions| o.extra_float_digits(None);
        let mut hosts = parse_hosts::<sqlx::Postgres>(&url, "PostgreSQL", adjust)?;
        let primary = replication::check(&hosts, replication).await?;
        hosts.rotate_left(primary);
        // Set once the pooler question is answered: a session setting must not leak through
        // a transaction pooler into other clients' sessions.
        let end_orphans = Arc::new(AtomicBool::new(false));
        let ending = end_orphans.clone();
        let idle_ms = options.idle_in_transaction_timeout.as_millis();
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .after_connect(move |conn, _| {
                let end = ending.load(Ordering::SeqCst);
                Box::pin(async move {
                    replication::refuse_standby(conn).await?;
                    if end {
                        end_orphaned_transactions(conn, idle_ms).await?;
                    }
                    Ok(())
                })
            });
        let (pool, failover) = open(hosts, pool, "PostgreSQL", options.ping_timeout).await?;
        let behind = match pooler {
            PoolerOption::Transaction => true,
            PoolerOption::None => false,
            PoolerOption::Detect => crate::deploy::pooler::detect(&pool.connect_options())
                .await
                .map_err(|e| db("checking for a connection pooler", e))?,
        };
        if behind {
            crate::deploy::pooler::require_transactions(&pool).await?;
            tracing::info!(
                "PostgreSQL behind a transaction pooler: unnamed statements, each inside a transaction; lease locks; a polling outbox relay"
            );
        }
        if !behind && idle_ms > 0 {
            end_orphans.store(true, Ordering::SeqCst);
            // The connection the pool opened before the flag was set (the next ones set it
            // at connect).
            let mut conn = pool
                .acquire()
                .await
                .map_err(|e| db("connecting to PostgreSQL", e))?;
            end_orphaned_transactions(&mut conn, idle_ms)
                .await
                .map_err(|e| db("setting idle_in_transaction_session_timeout", e))?;
        }
        let engine = options
            .engine(PoolKind::Postgres(pool.clone()), behind)
            .await?;
        Ok(
            Self::with_engine_and_tables(pool, options.tables.clone(), engine)
                .with_failover(failover)
                .with_replication(replication),
        )
    }
}

#[cfg(feature = "mysql")]
impl MySqlStore {
    /// Connects to MySQL or MariaDB, e.g. `mysql://root@127.0.0.1/test`.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, &ConnectOptions::default()).await
    }

    /// Connects with options.
    pub async fn connect_with(url: &str, options: &ConnectOptions) -> Result<Self> {
        options.replication.supported_on("MySQL / MariaDB")?;
        let url = url.replacen("mariadb://", "mysql://", 1);
        let hosts = parse_hosts::<sqlx::MySql>(&url, "MySQL", |o| o)?;
        let idle_s = options.idle_in_transaction_timeout.as_secs();
        let pool = MySqlPoolOptions::new()
            .max_connections(options.max_connections)
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    galera_sync_wait(conn).await?;
                    end_orphaned_transactions_mariadb(conn, idle_s).await
                })
            });
        let (pool, failover) = open(hosts, pool, "MySQL", options.ping_timeout).await?;
        let engine = options.engine(PoolKind::MySql(pool.clone()), false).await?;
        Ok(
            Self::with_engine_and_tables(pool, options.tables.clone(), engine)
                .with_failover(failover),
        )
    }
}

/// The hosts of `url` (one, or each of a multi-host URL, in order), each labelled for messages
/// and parsed into its connect options once, then changed by `adjust`.
fn parse_hosts<DB: Database>(
    url: &str,
    server: &str,
    adjust: impl Fn(Options<DB>) -> Options<DB>,
) -> Result<Vec<(String, Options<DB>)>>
where
    Options<DB>: FromStr<Err = sqlx::Error>,
{
    let urls = split_hosts(url)?;
    let single = urls.len() == 1;
    labelled(&urls)
        .into_iter()
        .map(|(label, url)| {
            let doing = if single {
                format!("parsing the {server} URL")
            } else {
                format!("parsing the {server} URL of {label}")
            };
            let options: Options<DB> = url.parse().map_err(|e| db(&doing, e))?;
            Ok((label, adjust(options)))
        })
        .collect()
}

/// Sets the session's `idle_in_transaction_session_timeout` to `ms` unless the server, the
/// role, the database or the URL (`options=-c …`) already set one.
#[cfg(feature = "postgres")]
async fn end_orphaned_transactions(
    conn: &mut sqlx::PgConnection,
    ms: u128,
) -> std::result::Result<(), sqlx::Error> {
    use sqlx::Executor;
    let sql = format!(
        "SELECT set_config('idle_in_transaction_session_timeout', '{ms}', false) WHERE current_setting('idle_in_transaction_session_timeout') = '0'"
    );
    conn.execute(sqlx::AssertSqlSafe(sql)).await.map(|_| ())
}

/// Pings each connection before it is used and after it is released, each within `timeout`
/// (sqlx pings both times anyway, with no bound: a connection the network stranded — a NAT
/// or firewall that dropped its state sends no RST — would hold the acquire, or the slot of
/// a released connection, forever). One that does not answer is closed hard, with one WARN
/// a minute, and the pool takes or opens another.
fn bounded_pings<DB: Database>(pool: PoolOptions<DB>, timeout: Duration) -> PoolOptions<DB> {
    let logged = std::sync::Arc::new(LogThrottle::per_minute());
    let released = logged.clone();
    pool.test_before_acquire(false)
        .before_acquire(move |conn, _| {
            let logged = logged.clone();
            Box::pin(async move { answers(conn, timeout, &logged, "before use").await })
        })
        .after_release(move |conn, _| {
            let logged = released.clone();
            Box::pin(async move { answers(conn, timeout, &logged, "after release").await })
        })
}

/// Whether `conn` answers a ping within `timeout` (an error closes it hard).
async fn answers<C: Connection>(
    conn: &mut C,
    timeout: Duration,
    logged: &LogThrottle,
    when: &str,
) -> std::result::Result<bool, sqlx::Error> {
    match tokio::time::timeout(timeout, conn.ping()).await {
        Ok(answer) => answer.map(|()| true),
        Err(_) => {
            if let Some(held_back) = logged.turn() {
                tracing::warn!(
                    timeout_s = timeout.as_secs_f64(),
                    when,
                    held_back,
                    "a pooled database connection did not answer a ping within {timeout:?}; closed it and took another (the network dropped the connection's state, e.g. a NAT or firewall timeout, without telling either end?) ({held_back} more since the last such line; further ones this minute at DEBUG)"
                );
            } else {
                tracing::debug!(
                    when,
                    "a pooled database connection did not answer a ping; closed it"
                );
            }
            Err(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer to a ping within {timeout:?}"),
            )))
        }
    }
}

/// How long the first connection to a host may take before the store gives up on it.
const FIRST_CONTACT_TIMEOUT: Duration = Duration::from_secs(10);

/// Makes one connection to a host outside the pool and closes it, so that a host that cannot
/// be reached is reported with its cause (refused, unreachable, TLS, authentication) within
/// seconds. A pool retries such errors until its acquire timeout and then reports only
/// `pool timed out while waiting for an open connection`.
async fn first_contact<DB: Database>(options: &Options<DB>, doing: &str) -> Result<()> {
    let connect = <DB::Connection as Connection>::connect_with(options);
    match tokio::time::timeout(FIRST_CONTACT_TIMEOUT, connect).await {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            Ok(())
        }
        Ok(Err(e)) => Err(db(doing, e)),
        Err(_) => Err(oncely_core::Error::transient(format!(
            "{doing} failed: no answer within {} s (a firewall dropping packets, or a wrong host)",
            FIRST_CONTACT_TIMEOUT.as_secs()
        ))),
    }
}

/// Opens a pool on the first of `hosts` that answers, its pings bounded by `ping_timeout`
/// ([`bounded_pings`]); for several hosts, also the [`Failover`] that moves the pool to the
/// next host when the one in use fails.
async fn open<DB: Database>(
    hosts: Vec<(String, Options<DB>)>,
    pool: PoolOptions<DB>,
    server: &str,
    ping_timeout: Duration,
) -> Result<(Pool<DB>, Option<Failover<DB>>)> {
    let pool = bounded_pings(pool, ping_timeout);
    if let [(_, options)] = hosts.as_slice() {
        first_contact::<DB>(options, &format!("connecting to {server}")).await?;
        let pool = pool
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options.clone())
            .await
            .map_err(|e| db(&format!("connecting to {server}"), e))?;
        return Ok((pool, None));
    }
    let pool = pool.acquire_timeout(FAILOVER_ACQUIRE_TIMEOUT);
    let mut last = None;
    for (i, (label, options)) in hosts.iter().enumerate() {
        let doing = format!("connecting to {server} at {label}");
        let reached = match first_contact::<DB>(options, &doing).await {
            Ok(()) => pool.clone().connect_with(options.clone()).await,
            Err(e) => {
                tracing::warn!(host = %label, error = %e, "database host unavailable; trying the next");
                last = Some(e);
                continue;
            }
        };
        match reached {
            Ok(pool) => return Ok((pool, Some(Failover::new(hosts, i)))),
            Err(e) => {
                tracing::warn!(host = %label, error = %e, "database host unavailable; trying the next");
                last = Some(db(&doing, e));
            }
        }
    }
    Err(last.expect("a multi-host URL has hosts"))
}

/// On MariaDB, sets the session's `idle_transaction_timeout` to `secs` unless the server
/// set one (see [`ConnectOptions::idle_in_transaction_timeout`]); MySQL has no such variable
/// and keeps an orphaned transaction until `wait_timeout`.
#[cfg(feature = "mysql")]
async fn end_orphaned_transactions_mariadb(
    conn: &mut sqlx::MySqlConnection,
    secs: u64,
) -> std::result::Result<(), sqlx::Error> {
    if secs == 0 {
        return Ok(());
    }
    let sql = format!(
        "SET SESSION idle_transaction_timeout = IF(@@idle_transaction_timeout = 0, {secs}, @@idle_transaction_timeout)"
    );
    match sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(conn).await {
        Ok(_) | Err(sqlx::Error::Database(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// On MariaDB Galera, makes the session's reads (and the transaction's start) wait until the
/// node has applied every transaction the cluster committed before: a claim retried after a
/// lost certification race on another node then sees the winner's row and ends as a
/// duplicate. Harmless without Galera; MySQL servers without the variable ignore it.
#[cfg(feature = "mysql")]
async fn galera_sync_wait(
    conn: &mut sqlx::MySqlConnection,
) -> std::result::Result<(), sqlx::Error> {
    match sqlx::raw_sql("SET SESSION wsrep_sync_wait = 1")
        .execute(conn)
        .await
    {
        Ok(_) | Err(sqlx::Error::Database(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The sqlx pool inside an [`AnyPool`] (what [`with_pool!`](crate::with_pool) matches on).
#[doc(hidden)]
#[derive(Debug, Clone)]
pub enum PoolKind {
    /// SQLite.
    #[cfg(feature = "sqlite")]
    Sqlite(sqlx::SqlitePool),
    /// PostgreSQL.
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgPool),
    /// MySQL / MariaDB.
    #[cfg(feature = "mysql")]
    MySql(sqlx::MySqlPool),
}

impl PoolKind {
    pub(crate) fn dialect(&self) -> crate::dialect::Dialect {
        match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(_) => crate::dialect::Dialect::Sqlite,
            #[cfg(feature = "postgres")]
            Self::Postgres(_) => crate::dialect::Dialect::Postgres,
            #[cfg(feature = "mysql")]
            Self::MySql(_) => crate::dialect::Dialect::MySql,
        }
    }
}

/// The distributed engine behind `pool`, if any (one query, plus a simpler one if the
/// engine rejects the first, e.g. `@@wsrep_on` on a MySQL without Galera). Run once, when a
/// store connects ([`Engine`]); everything after reads the answer there.
pub(crate) async fn distributed_engine(pool: &PoolKind) -> Result<Option<&'static str>> {
    let engine: Option<&'static str> = match pool {
        #[cfg(feature = "sqlite")]
        PoolKind::Sqlite(_) => None,
        #[cfg(feature = "postgres")]
        PoolKind::Postgres(pool) => crate::engine::postgres_engine(pool).await?,
        #[cfg(feature = "mysql")]
        PoolKind::MySql(pool) => crate::engine::mysql_engine(pool).await?,
    };
    if let Some(engine) = engine {
        tracing::info!(engine, "distributed engine detected: portable mode");
    }
    Ok(engine)
}
