//! One [`StoreHarness`] for every SQL store type (`PgStore`, `MySqlStore`, `SqliteStore`,
//! `AnyStore`), so the testkit's store suite (`oncely_testkit::exercise`) runs on each with
//! the same fixture: a SQLite file, a PostgreSQL schema or a MariaDB database per case, the
//! inbox and a `ledger` table there, effects written in the store's own transaction through
//! the [`SqlTx`] seam and counted by reading the ledger back.

use super::{from_ms_text, missing, mysql_url, now_sql, pg_url, probe, sql_limits};
use oncely_core::{Inspect, Result, Store};
use oncely_sql::{
    AnyStore, Column, ConnectOptions, Dialect, MySqlStore, PgStore, SqlTx, SqliteStore, Tables,
};
use oncely_testkit::test_db::TestDb;
use oncely_testkit::{DeadLetterLimits, ExerciseOptions, StoreHarness};
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Mutex;
use std::time::SystemTime;

/// A store type the harness can open on a URL.
pub trait HarnessStore:
    Store<Tx: SqlTx> + Inspect + Clone + Into<AnyStore> + Send + Sync + 'static
{
    /// Connects without migrating.
    fn open(url: &str, options: &ConnectOptions) -> impl Future<Output = Result<Self>> + Send;
}

macro_rules! harness_store {
    ($($store:ty),*) => {$(
        impl HarnessStore for $store {
            async fn open(url: &str, options: &ConnectOptions) -> Result<Self> {
                <$store>::connect_with(url, options).await
            }
        }
    )*};
}

harness_store!(PgStore, MySqlStore, SqliteStore, AnyStore);

/// `url` with `param` added to its query string.
pub fn with_param(url: &str, param: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{param}")
}

/// `mysql://user@host:port/db` with another database.
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let path = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let out = format!("{}/{db}", &base[..path]);
    query.map_or(out.clone(), |q| format!("{out}?{q}"))
}

/// The store suite's fixture for store type `S` on one database.
pub struct SqlHarness<S> {
    dialect: Dialect,
    /// Portable mode forced on (`ConnectOptions::portable`).
    portable: bool,
    /// The cases' databases (the testkit's [`TestDb`]), dropped with the harness.
    made: Mutex<Vec<TestDb>>,
    store: PhantomData<fn() -> S>,
}

impl<S: HarnessStore> SqlHarness<S> {
    /// A harness for `dialect`, portable mode forced when `portable`.
    pub fn new(dialect: Dialect, portable: bool) -> Self {
        Self {
            dialect,
            portable,
            made: Mutex::new(vec![]),
            store: PhantomData,
        }
    }

    fn admin_url(&self) -> String {
        match self.dialect {
            Dialect::Postgres => pg_url(),
            _ => mysql_url(),
        }
    }

    /// The URL of a fresh, empty place for one case, and the tables there. PostgreSQL: a
    /// schema first on the search path (the ledger is found there), oncely's tables qualified
    /// with it; MariaDB: a database, the connection's default one; SQLite: a file.
    async fn place(&self) -> Result<(String, Tables)> {
        let db = TestDb::new("conf", self.dialect)
            .await
            .ok_or_else(|| oncely_core::Error::unavailable("the test server is missing"))?;
        let place = match (self.dialect, db.schema()) {
            (Dialect::Postgres, Some(name)) => (
                with_param(db.url(), &format!("options=-csearch_path%3D{name}")),
                db.tables().clone(),
            ),
            (_, Some(name)) => (with_database(db.url(), name), Tables::default()),
            (_, None) => (db.url().to_owned(), Tables::default()),
        };
        self.made.lock().unwrap().push(db);
        Ok(place)
    }

    /// Runs the store suite (a SKIPPED line, or a failure under CI, if the server is missing),
    /// then drops what the cases made (with the harness).
    pub async fn exercise(self, test: &str, options: ExerciseOptions) {
        if self.dialect != Dialect::Sqlite
            && let Err(e) = probe(&self.admin_url()).await
        {
            missing(self.dialect.name(), test, &e);
            return;
        }
        oncely_testkit::exercise_with(&self, options).await;
    }
}

impl<S: HarnessStore> StoreHarness for SqlHarness<S> {
    type Store = S;

    async fn fresh(&self) -> Result<S> {
        let (url, tables) = self.place().await?;
        let options = ConnectOptions {
            max_connections: 8,
            portable: self.portable,
            tables,
            ..ConnectOptions::default()
        };
        let store = S::open(&url, &options).await?;
        let any: AnyStore = store.clone().into();
        assert_eq!(any.dialect(), self.dialect);
        // Forced, or detected (the suite also runs on a Galera node: ONCELY_TEST_MYSQL_URL).
        assert!(any.portable() || !self.portable);
        any.migrate().await?;
        let d = self.dialect;
        let mut pool = any.pool();
        if self.portable {
            // The portable migration took its lock in the lease table (and released it).
            let sql = format!("SELECT COUNT(*) FROM {}", any.tables().ops_leases());
            let leases = pool.fetch_i64(&sql, &[]).await?;
            assert_eq!(leases, Some(0), "the migration lease was released");
        }
        pool.script(&format!(
            "CREATE TABLE ledger (seq {}, message_id {} NOT NULL, amount BIGINT NOT NULL){}",
            d.serial_key(),
            d.key_text(255),
            d.table_options()
        ))
        .await?;
        Ok(store)
    }

    async fn add_effect(tx: &mut S::Tx, message_id: &str, amount: i64) -> Result<()> {
        SqlTx::execute(
            tx,
            "INSERT INTO ledger (message_id, amount) VALUES ($1, $2)",
            &[message_id.into(), amount.into()],
        )
        .await?;
        Ok(())
    }

    async fn effects(store: &S) -> Result<Vec<(String, i64)>> {
        let any: AnyStore = store.clone().into();
        let rows = any
            .pool()
            .fetch(
                "SELECT message_id, amount FROM ledger ORDER BY seq",
                &[],
                &[Column::Text, Column::I64],
            )
            .await?;
        Ok(rows.iter().map(|r| (r[0].text(), r[1].i64())).collect())
    }

    async fn clock(store: &S) -> Result<SystemTime> {
        let any: AnyStore = store.clone().into();
        let sql = now_sql(any.dialect());
        let rows = any.pool().fetch(&sql, &[], &[Column::Text]).await?;
        from_ms_text(&rows[0][0].text())
    }

    fn dead_letter_limits(&self) -> DeadLetterLimits {
        sql_limits(self.dialect)
    }
}
