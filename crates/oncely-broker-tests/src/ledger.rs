//! The test database: oncely's tables plus the credits workload's ledger (without a unique
//! key, so a double effect shows as a second row) and balances, written by the testkit's
//! [`Credits`] handler.

use oncely_core::{Error, Result};
use oncely_sql::{AnyStore, ConnectOptions, Dialect, SqlTx, Tables};
use oncely_testkit::credits::{CreditTables, Credits};
use oncely_testkit::test_db::TestDb;

/// A store for tests: SQLite file, PostgreSQL schema or MySQL/MariaDB database, migrated,
/// with the credits tables `ledger` and `accounts`.
#[derive(Clone)]
pub struct Db {
    store: AnyStore,
    credits: CreditTables,
}

impl Db {
    /// Opens `url` (sqlite:, postgres:, mysql: or mariadb:), applies oncely's migrations and
    /// creates the credits tables. `schema` (PostgreSQL) holds the tables; None: the default.
    pub async fn open(url: &str, schema: Option<&str>) -> Result<Self> {
        Self::open_with(url, schema, ConnectOptions::default()).await
    }

    /// [`Db::open`] with `options` (their tables and pool size set as `open` sets them).
    pub async fn open_with(
        url: &str,
        schema: Option<&str>,
        options: ConnectOptions,
    ) -> Result<Self> {
        let dialect = Dialect::from_url(url)?;
        let mut tables = Tables::default();
        if let Some(s) = schema {
            tables = tables.with_schema(s)?;
        }
        let opts = ConnectOptions {
            tables,
            max_connections: if dialect.has_schemas() { 8 } else { 4 },
            ..options
        };
        let store = AnyStore::connect_with(url, &opts).await?;
        store.migrate().await?;
        let credits = CreditTables::new(dialect, schema, "");
        credits.create(&store).await?;
        Ok(Self { store, credits })
    }

    /// The store.
    pub fn store(&self) -> &AnyStore {
        &self.store
    }

    /// The ledger's qualified table name.
    pub fn ledger(&self) -> String {
        self.credits.ledger.clone()
    }

    /// The dead-letter table's qualified name.
    pub fn dead_letters(&self) -> String {
        self.store.tables().dead_letters()
    }

    /// The handler writing to this database's ledger and balances.
    pub fn handler(&self) -> Credits {
        Credits::new(self.credits.clone())
    }

    /// The sum of every account's balance.
    pub async fn balance_total(&self) -> Result<i64> {
        self.credits
            .balance_total(&self.store)
            .await
            .map_err(db_err)
    }

    /// Drops the schema (PostgreSQL) or database (MySQL) this was opened in, where no
    /// [`TestDb`] made it: a cluster's multi-host URL, which the test servers' probe does not
    /// take. A no-op on SQLite.
    pub async fn drop_schema(&self) -> Result<()> {
        let Some(schema) = self.store.tables().schema() else {
            return Ok(());
        };
        let dialect = self.store.dialect();
        let sql = dialect
            .drop_schema_sql(schema)
            .expect("a server has schemas");
        self.store.pool().script(&sql).await
    }

    /// Ledger rows and dead letters so far: `(ledger rows, dead-letter rows)`.
    pub async fn counts(&self) -> Result<(i64, i64)> {
        let q1 = format!("SELECT COUNT(*) FROM {}", self.ledger());
        let q2 = format!("SELECT COUNT(*) FROM {}", self.dead_letters());
        let mut pool = self.store.pool();
        let ledger = pool.fetch_i64(&q1, &[]).await.map_err(db_err)?;
        let dead = pool.fetch_i64(&q2, &[]).await.map_err(db_err)?;
        Ok((ledger.unwrap_or(0), dead.unwrap_or(0)))
    }
}

pub(crate) fn db_err(e: Error) -> Error {
    Error::transient("test database").with_source(e)
}

/// A PostgreSQL schema of the test's own (the testkit's [`TestDb`], dropped with it) with the
/// credits tables; None after the SKIPPED banner (a failure under CI) without PostgreSQL.
pub async fn postgres_db(test: &str) -> Option<(Db, TestDb)> {
    let place = TestDb::postgres(test).await?;
    let db = Db::open(place.url(), place.schema())
        .await
        .expect("postgres");
    Some((db, place))
}

/// A fresh SQLite database in a temp dir (kept alive by the returned guard).
pub async fn sqlite_db() -> (Db, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite:{}", dir.path().join("oncely.db").display());
    (Db::open(&url, None).await.expect("sqlite store"), dir)
}
