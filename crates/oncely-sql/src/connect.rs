//! Opening stores from URLs, with durable defaults.

use crate::error::db;
use crate::store::{MySqlStore, PgStore, SqliteStore};
use crate::tables::Tables;
use oncely_core::Result;
use sqlx::mysql::MySqlPoolOptions;
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use std::str::FromStr;
use std::time::Duration;

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
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            tables: Tables::default(),
            max_connections: 16,
            durability: Durability::Full,
        }
    }
}

impl SqliteStore {
    /// Opens (creating if missing) a SQLite database in WAL mode with `synchronous=FULL`,
    /// e.g. `sqlite:oncely.db` or `sqlite::memory:`.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, &ConnectOptions::default()).await
    }

    /// Opens a SQLite database with options.
    pub async fn connect_with(url: &str, options: &ConnectOptions) -> Result<Self> {
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
        // Portable mode when forced or when the server is a distributed engine.
        let tables = crate::engine::resolve_tables(&pool.clone().into(), &options.tables).await?;
        Ok(Self::with_tables(pool, tables))
    }
}

impl PgStore {
    /// Connects to PostgreSQL, e.g. `postgres://user@127.0.0.1/app`.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, &ConnectOptions::default()).await
    }

    /// Connects with options.
    pub async fn connect_with(url: &str, options: &ConnectOptions) -> Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(Duration::from_secs(30))
            .connect(url)
            .await
            .map_err(|e| db("connecting to PostgreSQL", e))?;
        // Portable mode when forced or when the server is a distributed engine.
        let tables = crate::engine::resolve_tables(&pool.clone().into(), &options.tables).await?;
        Ok(Self::with_tables(pool, tables))
    }
}

impl MySqlStore {
    /// Connects to MySQL or MariaDB, e.g. `mysql://root@127.0.0.1/test`.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, &ConnectOptions::default()).await
    }

    /// Connects with options.
    pub async fn connect_with(url: &str, options: &ConnectOptions) -> Result<Self> {
        let url = url.replacen("mariadb://", "mysql://", 1);
        let pool = MySqlPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(Duration::from_secs(30))
            .connect(&url)
            .await
            .map_err(|e| db("connecting to MySQL", e))?;
        // Portable mode when forced or when the server is a distributed engine.
        let tables = crate::engine::resolve_tables(&pool.clone().into(), &options.tables).await?;
        Ok(Self::with_tables(pool, tables))
    }
}
