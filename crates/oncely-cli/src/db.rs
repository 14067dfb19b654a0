//! Opening any supported database from a URL, with credentials kept out of messages.

use anyhow::{Context, Result};
use oncely_sql::{ConnectOptions, Dialect, MySqlStore, PgStore, SqliteStore, Tables, redact_url};

/// A store of whichever dialect the URL names.
#[derive(Clone)]
pub enum AnyStore {
    /// SQLite.
    Sqlite(SqliteStore),
    /// PostgreSQL.
    Postgres(PgStore),
    /// MySQL / MariaDB.
    MySql(MySqlStore),
}

/// Runs `$body` with `$s` bound to the concrete store.
#[macro_export]
macro_rules! with_store {
    ($any:expr, $s:ident => $body:expr) => {
        match $any {
            $crate::db::AnyStore::Sqlite($s) => $body,
            $crate::db::AnyStore::Postgres($s) => $body,
            $crate::db::AnyStore::MySql($s) => $body,
        }
    };
}

impl AnyStore {
    /// Connects (without migrating).
    pub async fn connect(url: &str, options: &ConnectOptions) -> Result<Self> {
        let store = match Dialect::from_url(url)? {
            Dialect::Sqlite => Self::Sqlite(SqliteStore::connect_with(url, options).await?),
            Dialect::Postgres => Self::Postgres(PgStore::connect_with(url, options).await?),
            Dialect::MySql => Self::MySql(MySqlStore::connect_with(url, options).await?),
        };
        Ok(store)
    }

    /// Connects, with the redacted URL in any error.
    pub async fn open(url: &str, options: &ConnectOptions) -> Result<Self> {
        Self::connect(url, options)
            .await
            .with_context(|| format!("opening {}", redact_url(url)))
    }

    /// The dialect.
    pub fn dialect(&self) -> Dialect {
        match self {
            Self::Sqlite(_) => Dialect::Sqlite,
            Self::Postgres(_) => Dialect::Postgres,
            Self::MySql(_) => Dialect::MySql,
        }
    }

    /// Applies pending migrations; returns how many ran.
    pub async fn migrate(&self) -> Result<usize> {
        Ok(with_store!(self, s => s.migrate().await?))
    }

    /// The table naming in use.
    pub fn tables(&self) -> &Tables {
        with_store!(self, s => s.tables())
    }
}
