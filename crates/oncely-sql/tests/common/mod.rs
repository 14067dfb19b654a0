//! Shared fixtures for the server tests: one schema (PostgreSQL) or database (MariaDB) per
//! test, a ledger table the tests count effects in, and a handler that writes to it.
#![allow(dead_code)]

pub mod batch_suite;
pub mod dead_letter_suite;
mod fx;
pub mod harness;
pub mod ledger;
pub mod suite;

#[allow(unused_imports)]
pub use fx::{Fx, HarnessStore};
pub use ledger::{Gate, Ledger};
use oncely_core::Result;
use oncely_sql::sqlx;
use oncely_sql::{ConnectOptions, Dialect, MySqlStore, PgStore, SqliteStore, Tables};
use oncely_testkit::services;
#[allow(unused_imports)]
pub use oncely_testkit::services::with_database;
use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// PostgreSQL URL for tests ([`services::pg_url`]: `ONCELY_TEST_PG_URL`).
pub fn pg_url() -> String {
    services::pg_url()
}

/// MariaDB / MySQL URL for tests ([`services::mysql_url`]: `ONCELY_TEST_MYSQL_URL`).
pub fn mysql_url() -> String {
    services::mysql_url()
}

/// The testkit's rule ([`services::unavailable`]): fails under CI, else a loud SKIPPED line.
pub fn missing(server: &str, test: &str, error: &oncely_core::Error) {
    services::unavailable(test, server, error);
}

/// Checks within 3 s that something listens at the URL's host and port, so a missing server
/// is reported at once instead of after the pool's 30 s acquire timeout.
pub async fn probe(url: &str) -> Result<()> {
    services::probe(url)
        .await
        .map_err(oncely_core::Error::transient)
}

/// What every SQL store declares of the worst dead letters ([`oncely_testkit::DeadLetterLimits`]):
/// text cut at 64 KiB with the marker (MySQL's `TEXT`), NUL dropped from PostgreSQL's text,
/// and on MySQL a payload above 16 MB cut to fit the default `max_allowed_packet` (16 MiB,
/// less the row's other columns).
pub fn sql_limits(dialect: Dialect) -> oncely_testkit::DeadLetterLimits {
    oncely_testkit::DeadLetterLimits {
        payload_whole_max: (dialect == Dialect::MySql).then_some(16_000_000),
        text_max: Some(64 * 1024),
        text_keeps_nul: dialect != Dialect::Postgres,
        ..Default::default()
    }
}

/// The type to cast to for reading a value as text.
pub fn text(d: Dialect) -> &'static str {
    match d {
        Dialect::MySql => "CHAR",
        _ => "TEXT",
    }
}

/// The SQL reading "now" by the database clock, in ms, as text.
pub fn now_sql(d: Dialect) -> String {
    format!("SELECT CAST({} AS {})", d.now_ms_sql(), text(d))
}

/// Milliseconds since the epoch, read as text, as a time.
pub fn from_ms_text(ms: &str) -> Result<SystemTime> {
    let ms: u64 = ms
        .trim()
        .parse()
        .map_err(|e| oncely_core::Error::permanent(format!("clock {ms:?}: {e}")))?;
    Ok(UNIX_EPOCH + Duration::from_millis(ms))
}

/// "Now" by the store's database clock.
pub async fn db_clock<S: TestStore>(store: &S) -> Result<SystemTime> {
    let rows = store
        .rows(format!(
            "SELECT CAST({} AS {}), 'x', 'y'",
            S::DIALECT.now_ms_sql(),
            text(S::DIALECT)
        ))
        .await?;
    from_ms_text(&rows[0].0)
}

/// What the generic tests need from each store type, beyond opening it
/// ([`HarnessStore`]).
pub trait TestStore: HarnessStore {
    /// Server name for messages.
    const SERVER: &'static str;
    /// Placeholder style: `$1` (PostgreSQL) or `?`.
    const DOLLAR: bool;
    /// The dialect.
    const DIALECT: Dialect;
    /// Opens a store on `url` with `tables`, portable mode forced when `portable`.
    fn open_with(
        url: &str,
        tables: Tables,
        portable: bool,
    ) -> impl Future<Output = Result<Self>> + Send {
        let url = url.to_owned();
        async move { Self::connect(&url, &opts(tables, portable)).await }
    }
    /// Opens a store on `url` with `tables`.
    fn open(url: &str, tables: Tables) -> impl Future<Output = Result<Self>> + Send {
        Self::open_with(url, tables, false)
    }
    /// Sessions waiting for a row lock on a statement mentioning `name`; `None` if the
    /// server can't tell (SQLite).
    fn lock_waiters(&self, name: String) -> impl Future<Output = Option<i64>> + Send;
}

/// How the fixtures connect: at most 8 connections per store, `tables`, portable mode
/// forced when `portable`.
pub fn opts(tables: Tables, portable: bool) -> ConnectOptions {
    ConnectOptions {
        tables,
        portable,
        max_connections: 8,
        ..ConnectOptions::default()
    }
}

impl TestStore for PgStore {
    const SERVER: &'static str = "PostgreSQL";
    const DOLLAR: bool = true;
    const DIALECT: Dialect = Dialect::Postgres;
    async fn lock_waiters(&self, name: String) -> Option<i64> {
        sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND position($1 in query) > 0",
        )
        .bind(name)
        .fetch_one(self.pool())
        .await
        .ok()
    }
}

impl TestStore for MySqlStore {
    const SERVER: &'static str = "MariaDB";
    const DOLLAR: bool = false;
    const DIALECT: Dialect = Dialect::MySql;
    async fn lock_waiters(&self, name: String) -> Option<i64> {
        sqlx::query_scalar(
            // INNODB_TRX lags behind on MariaDB; the process list shows the claim statement
            // executing (it cannot finish while the other transaction holds the row).
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND IN ('Query', 'Execute') AND INFO LIKE 'INSERT IGNORE%' AND INSTR(INFO, ?) > 0",
        )
        .bind(name)
        .fetch_one(self.pool())
        .await
        .ok()
    }
}

impl TestStore for SqliteStore {
    const SERVER: &'static str = "SQLite";
    const DOLLAR: bool = false;
    const DIALECT: Dialect = Dialect::Sqlite;
    async fn lock_waiters(&self, _name: String) -> Option<i64> {
        None
    }
}

/// Sets up PostgreSQL for `test`, or `None` after a SKIPPED line.
pub async fn pg(test: &str) -> Option<Fx<PgStore>> {
    Fx::on(test, Dialect::Postgres, false).await
}

/// Sets up MariaDB for `test`, or `None` after a SKIPPED line.
pub async fn mysql(test: &str) -> Option<Fx<MySqlStore>> {
    Fx::on(test, Dialect::MySql, false).await
}

/// Sets up a SQLite file for `test`.
pub async fn sqlite(test: &str) -> Option<Fx<SqliteStore>> {
    Fx::on(test, Dialect::Sqlite, false).await
}

/// Sets up PostgreSQL for `test` with portable mode forced ([`ConnectOptions::portable`]).
pub async fn pg_portable(test: &str) -> Option<Fx<PgStore>> {
    Fx::on(test, Dialect::Postgres, true).await
}

/// Sets up MariaDB for `test` with portable mode forced ([`ConnectOptions::portable`]).
pub async fn mysql_portable(test: &str) -> Option<Fx<MySqlStore>> {
    Fx::on(test, Dialect::MySql, true).await
}

impl<S: TestStore> Fx<S> {
    /// Waits until some session is blocked on a lock in a statement naming this test's
    /// tables. Returns false if the server can't tell (SQLite), after a short pause.
    pub async fn until_lock_wait(&self) -> bool {
        self.until_lock_waiters(1).await
    }

    /// Like [`Fx::until_lock_wait`], for `count` blocked sessions.
    pub async fn until_lock_waiters(&self, count: i64) -> bool {
        for _ in 0..12_000 {
            match self.store.lock_waiters(self.name().to_owned()).await {
                None => {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    return false;
                }
                Some(n) if n >= count => return true,
                Some(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
        panic!("no session waited for a lock within 120 s");
    }
}
