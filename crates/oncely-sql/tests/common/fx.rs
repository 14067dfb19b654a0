//! [`Fx`]: one test's own database (the testkit's [`TestDb`]) with oncely's tables migrated,
//! two stores on them and a `ledger` table that counts effects independently. The store
//! suite's harness ([`super::harness::SqlHarness`]) makes one per case; the server tests take
//! theirs from `common::{pg, mysql, sqlite, pg_portable, mysql_portable}`.

use super::{Ledger, missing, opts};
use oncely_core::{Inspect, Result, Store};
use oncely_sql::{
    AnyStore, Column, ConnectOptions, Dialect, MySqlStore, PgStore, SqlTx, SqliteStore, Tables,
};
use oncely_testkit::services::with_database;
use oncely_testkit::test_db::TestDb;
use std::future::Future;

/// A store type the fixtures can open on a URL.
pub trait HarnessStore:
    Store<Tx: SqlTx> + Inspect + Clone + Into<AnyStore> + Send + Sync + 'static
{
    /// Connects without migrating.
    fn connect(url: &str, options: &ConnectOptions) -> impl Future<Output = Result<Self>> + Send;

    /// Applies migrations.
    fn migrate_now(&self) -> impl Future<Output = Result<usize>> + Send {
        let any: AnyStore = self.clone().into();
        async move { any.migrate().await }
    }

    /// Runs statements outside any transaction, through the seam (the store's engine).
    fn exec(&self, sql: String) -> impl Future<Output = Result<()>> + Send {
        let mut pool = Into::<AnyStore>::into(self.clone()).pool();
        async move { pool.script(&sql).await }
    }

    /// Fetches rows of three text columns, through the seam (the store's engine: unnamed
    /// statements behind a transaction pooler, where a prepared `sqlx::query` fails).
    fn rows(
        &self,
        sql: String,
    ) -> impl Future<Output = Result<Vec<(String, String, String)>>> + Send {
        let mut pool = Into::<AnyStore>::into(self.clone()).pool();
        async move {
            let rows = pool
                .fetch(&sql, &[], &[Column::Text, Column::Text, Column::Text])
                .await?;
            Ok(rows
                .iter()
                .map(|r| (r[0].text(), r[1].text(), r[2].text()))
                .collect())
        }
    }
}

macro_rules! harness_store {
    ($($store:ty),*) => {$(
        impl HarnessStore for $store {
            async fn connect(url: &str, options: &ConnectOptions) -> Result<Self> {
                <$store>::connect_with(url, options).await
            }
        }
    )*};
}

harness_store!(PgStore, MySqlStore, SqliteStore, AnyStore);

/// One test's database objects: two stores with separate pools on the same tables (two live
/// "consumer processes") and a `ledger` table, in the test's own database (dropped with the
/// fixture).
pub struct Fx<S> {
    /// The first store (consumer 1).
    pub store: S,
    /// A second store with its own pool (consumer 2).
    pub other: S,
    /// The qualified ledger table: `(seq, message_id, payload, instance, amount)`.
    pub ledger_table: String,
    /// The stores' URL: the test's schema first on PostgreSQL's search path, the test's
    /// database MariaDB's default one, so the unqualified `ledger` is the test's own.
    url: String,
    /// Portable mode forced on both stores.
    portable: bool,
    place: TestDb,
}

impl<S: HarnessStore> Fx<S> {
    /// The fixture for `test` on `dialect`, or `None` after a SKIPPED line (a failure under
    /// CI) when the server is missing.
    pub async fn on(test: &str, dialect: Dialect, portable: bool) -> Option<Self> {
        let place = TestDb::new(test, dialect).await?;
        match Self::build(place, portable).await {
            Ok(fx) => Some(fx),
            Err(e) => {
                missing(dialect.name(), test, &e);
                None
            }
        }
    }

    /// The fixture for `test` on `dialect`; an error when the server is missing.
    pub async fn new(test: &str, dialect: Dialect, portable: bool) -> Result<Self> {
        let place = TestDb::new(test, dialect).await.ok_or_else(|| {
            oncely_core::Error::unavailable(format!("no {} server", dialect.name()))
        })?;
        Self::build(place, portable).await
    }

    /// The fixture in `place`, portable mode forced when `portable`.
    pub async fn build(place: TestDb, portable: bool) -> Result<Self> {
        let url = match (place.dialect(), place.schema()) {
            (Dialect::Postgres, Some(name)) => {
                with_param(place.url(), &format!("options=-csearch_path%3D{name}"))
            }
            (_, Some(name)) => with_database(place.url(), name),
            (_, None) => place.url().to_owned(),
        };
        let tables = place.tables().clone();
        let store = S::connect(&url, &opts(tables.clone(), portable)).await?;
        let any: AnyStore = store.clone().into();
        assert_eq!(any.dialect(), place.dialect());
        // Forced, or detected (the suites also run on a Galera node: ONCELY_TEST_MYSQL_URL).
        assert!(any.portable() || !portable);
        store.migrate_now().await?;
        if any.portable() {
            // The portable migration took its lock in the lease table (and released it).
            let sql = format!("SELECT COUNT(*) FROM {}", tables.ops_leases());
            let leases = any.pool().fetch_i64(&sql, &[]).await?;
            assert_eq!(leases, Some(0), "the migration lease was released");
        }
        let other = S::connect(&url, &opts(tables.clone(), portable)).await?;
        let d = place.dialect();
        // `ledger` in the test's schema or database, without oncely's table prefix: the store
        // suite's `add_effect` names it unqualified (found through the URL's search path).
        let ledger_table = match tables.schema() {
            Some(schema) => format!("{schema}.ledger"),
            None => "ledger".to_owned(),
        };
        store
            .exec(format!(
                "CREATE TABLE {ledger_table} (seq {}, message_id {} NOT NULL, \
                 payload VARCHAR(255) NOT NULL DEFAULT '', instance VARCHAR(32) NOT NULL DEFAULT '', \
                 amount BIGINT NOT NULL DEFAULT 0){}",
                d.serial_key(),
                d.key_text(255),
                d.table_options()
            ))
            .await?;
        Ok(Fx {
            store,
            other,
            ledger_table,
            url,
            portable,
            place,
        })
    }

    /// The test's own database, for the store suite's harness to keep until it ends (the
    /// stores are the cases').
    pub fn into_place(self) -> TestDb {
        self.place
    }

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
        let options = opts(self.place.tables().clone(), self.portable);
        S::connect(&self.url, &options).await.expect("open")
    }

    /// The stores' URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The table naming of this test's stores.
    pub fn tables(&self) -> &Tables {
        self.place.tables()
    }

    /// The test's schema (PostgreSQL) or database (MariaDB); `sqlite` on SQLite.
    pub fn name(&self) -> &str {
        self.place.schema().unwrap_or("sqlite")
    }
}

/// `url` with `param` added to its query string.
pub fn with_param(url: &str, param: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{param}")
}
