//! Shared fixtures for the server tests: one schema (PostgreSQL) or database (MariaDB) per
//! test, a ledger table the tests count effects in, and a handler that writes to it.
#![allow(dead_code)]

pub mod batch_suite;
pub mod dead_letter_suite;
pub mod harness;
pub mod ledger;
pub mod suite;

pub use ledger::{Gate, Ledger};
use oncely_core::Result;
use oncely_sql::sqlx;
use oncely_sql::{AnyStore, ConnectOptions, Dialect, MySqlStore, PgStore, SqliteStore, Tables};
use oncely_testkit::services;
use oncely_testkit::test_db::TestDb;
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

/// What the generic tests need from each store type.
pub trait TestStore:
    oncely_core::Inspect + oncely_core::Store + Clone + Sized + Into<AnyStore>
{
    /// Server name for messages.
    const SERVER: &'static str;
    /// Opens a store on `url` with `tables`, portable mode forced when `portable`.
    fn open_with(
        url: &str,
        tables: Tables,
        portable: bool,
    ) -> impl Future<Output = Result<Self>> + Send;
    /// Opens a store on `url` with `tables`.
    fn open(url: &str, tables: Tables) -> impl Future<Output = Result<Self>> + Send {
        Self::open_with(url, tables, false)
    }
    /// Applies migrations.
    fn migrate_now(&self) -> impl Future<Output = Result<usize>> + Send {
        let any: AnyStore = self.clone().into();
        async move { any.migrate().await }
    }
    /// Runs statements outside any transaction, through the seam (the store's engine).
    fn exec(&self, sql: String) -> impl Future<Output = Result<()>> + Send {
        let mut pool = Into::<AnyStore>::into(self.clone()).pool();
        async move { oncely_sql::SqlTx::script(&mut pool, &sql).await }
    }
    /// Fetches `(message_id, payload, instance)` rows.
    fn rows(
        &self,
        sql: String,
    ) -> impl Future<Output = Result<Vec<(String, String, String)>>> + Send {
        let pool = Into::<AnyStore>::into(self.clone()).pool();
        async move { three_texts(pool, &sql).await }
    }
    /// Sessions waiting for a row lock on a statement mentioning `name`; `None` if the
    /// server can't tell (SQLite).
    fn lock_waiters(&self, name: String) -> impl Future<Output = Option<i64>> + Send;
    /// Placeholder style: `$1` (PostgreSQL) or `?`.
    const DOLLAR: bool;
    /// The dialect.
    const DIALECT: Dialect;
}

fn opts(tables: Tables, portable: bool) -> ConnectOptions {
    ConnectOptions {
        tables,
        portable,
        max_connections: 4,
        ..ConnectOptions::default()
    }
}

/// Rows of three text columns, through the seam (the store's engine: unnamed statements behind
/// a transaction pooler, where a prepared `sqlx::query` on the pool fails).
async fn three_texts(
    mut pool: oncely_sql::AnyPool,
    sql: &str,
) -> Result<Vec<(String, String, String)>> {
    use oncely_sql::{Column, SqlTx};
    let rows = pool
        .fetch(sql, &[], &[Column::Text, Column::Text, Column::Text])
        .await?;
    Ok(rows
        .iter()
        .map(|r| (r[0].text(), r[1].text(), r[2].text()))
        .collect())
}

impl TestStore for PgStore {
    const SERVER: &'static str = "PostgreSQL";
    const DOLLAR: bool = true;
    const DIALECT: Dialect = Dialect::Postgres;
    async fn open_with(url: &str, tables: Tables, portable: bool) -> Result<Self> {
        PgStore::connect_with(url, &opts(tables, portable)).await
    }
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
    async fn open_with(url: &str, tables: Tables, portable: bool) -> Result<Self> {
        MySqlStore::connect_with(url, &opts(tables, portable)).await
    }
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
    async fn open_with(url: &str, tables: Tables, portable: bool) -> Result<Self> {
        SqliteStore::connect_with(url, &opts(tables, portable)).await
    }
    async fn lock_waiters(&self, _name: String) -> Option<i64> {
        None
    }
}

/// One test's database objects: two stores with separate pools on the same tables
/// (two live "consumer processes"), and a ledger table counting effects independently, in the
/// test's own database ([`TestDb`], dropped with the fixture).
pub struct Fx<S> {
    /// The first store (consumer 1).
    pub store: S,
    /// A second store with its own pool (consumer 2).
    pub other: S,
    /// Schema (PostgreSQL) or database (MariaDB); `sqlite` on SQLite.
    pub name: String,
    /// Qualified ledger table.
    pub ledger_table: String,
    /// Portable mode forced on both stores.
    portable: bool,
    place: TestDb,
}

/// Sets up PostgreSQL for `test`, or `None` after a SKIPPED line.
pub async fn pg(test: &str) -> Option<Fx<PgStore>> {
    fx_on(test, Dialect::Postgres, false).await
}

/// Sets up MariaDB for `test`, or `None` after a SKIPPED line.
pub async fn mysql(test: &str) -> Option<Fx<MySqlStore>> {
    fx_on(test, Dialect::MySql, false).await
}

/// Sets up a SQLite file for `test`.
pub async fn sqlite(test: &str) -> Option<Fx<SqliteStore>> {
    fx_on(test, Dialect::Sqlite, false).await
}

/// Sets up PostgreSQL for `test` with portable mode forced ([`ConnectOptions::portable`]).
pub async fn pg_portable(test: &str) -> Option<Fx<PgStore>> {
    fx_on(test, Dialect::Postgres, true).await
}

/// Sets up MariaDB for `test` with portable mode forced ([`ConnectOptions::portable`]).
pub async fn mysql_portable(test: &str) -> Option<Fx<MySqlStore>> {
    fx_on(test, Dialect::MySql, true).await
}

async fn fx_on<S: TestStore>(test: &str, dialect: Dialect, portable: bool) -> Option<Fx<S>> {
    let place = TestDb::new(test, dialect).await?;
    match build(place, portable).await {
        Ok(fx) => Some(fx),
        Err(e) => {
            missing(S::SERVER, test, &e);
            None
        }
    }
}

async fn build<S: TestStore>(place: TestDb, portable: bool) -> Result<Fx<S>> {
    let tables = place.tables().clone();
    let store = S::open_with(place.url(), tables.clone(), portable).await?;
    store.migrate_now().await?;
    let other = S::open_with(place.url(), tables.clone(), portable).await?;
    let ledger_table = tables.table("ledger");
    store
        .exec(format!(
            "CREATE TABLE {ledger_table} (message_id VARCHAR(255) NOT NULL, payload VARCHAR(255) NOT NULL, instance VARCHAR(32) NOT NULL)"
        ))
        .await?;
    Ok(Fx {
        store,
        other,
        name: place.schema().unwrap_or("sqlite").to_owned(),
        ledger_table,
        portable,
        place,
    })
}

impl<S: TestStore> Fx<S> {
    /// A ledger handler writing as `instance`.
    pub fn ledger(&self, instance: &'static str) -> Ledger {
        Ledger::new(&self.ledger_table, instance)
    }

    /// The store as an [`AnyStore`], for consumers running the ledger handler (`AnyTx`).
    pub fn any(&self) -> AnyStore {
        self.store.clone().into()
    }

    /// [`Fx::other`] as an [`AnyStore`].
    pub fn any_other(&self) -> AnyStore {
        self.other.clone().into()
    }

    /// All ledger rows `(message_id, payload, instance)`, ordered by id.
    pub async fn effects(&self) -> Vec<(String, String, String)> {
        self.store
            .rows(format!(
                "SELECT message_id, payload, instance FROM {} ORDER BY message_id, instance",
                self.ledger_table
            ))
            .await
            .expect("read ledger")
    }

    /// Another store on the same tables with its own pool.
    pub async fn open_another(&self) -> S {
        S::open_with(self.place.url(), self.place.tables().clone(), self.portable)
            .await
            .expect("open")
    }

    /// The server URL.
    pub fn url(&self) -> &str {
        self.place.url()
    }

    /// The table naming of this test's stores.
    pub fn tables(&self) -> &Tables {
        self.place.tables()
    }

    /// Waits until some session is blocked on a lock in a statement naming this test's
    /// tables. Returns false if the server can't tell (SQLite), after a short pause.
    pub async fn until_lock_wait(&self) -> bool {
        self.until_lock_waiters(1).await
    }

    /// Like [`Fx::until_lock_wait`], for `count` blocked sessions.
    pub async fn until_lock_waiters(&self, count: i64) -> bool {
        for _ in 0..12_000 {
            match self.store.lock_waiters(self.name.clone()).await {
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
