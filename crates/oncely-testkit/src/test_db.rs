//! A fresh database for one test, on each SQL store (as sqlx's `#[sqlx::test]` makes a
//! database per test and River a schema per test): a SQLite file in a temp dir, a PostgreSQL
//! schema, a MariaDB/MySQL database. Made empty, dropped when the [`TestDb`] is dropped
//! (kept, and named, when the test fails, to look at). A missing server follows the
//! [`services`] rule: a failure under `CI` / `ONCELY_REQUIRE_SERVICES`, else a loud SKIPPED
//! banner and `None`.
//!
//! ```no_run
//! # async fn f() {
//! use oncely_sql::Dialect;
//! use oncely_testkit::test_db::TestDb;
//! let Some(db) = TestDb::new("my_test", Dialect::Postgres).await else {
//!     return; // skipped, loudly
//! };
//! let store = db.store().await; // connected and migrated, in the test's own schema
//! # }
//! ```

use crate::services::{self, unique};
use oncely_core::{Error, Result};
use oncely_sql::{AnyPool, AnyStore, ConnectOptions, Dialect, SqlTx, Tables};
use std::time::Duration;

/// How long making or dropping a test's schema may take before the test fails.
const SETUP_TIMEOUT: Duration = Duration::from_secs(20);

/// One test's own database (see the [module](self)).
pub struct TestDb {
    url: String,
    dialect: Dialect,
    /// oncely's tables; on a server, qualified with the schema (PostgreSQL) or database
    /// (MySQL) made for the test and dropped with it.
    tables: Tables,
    /// A whole database made for the test: `(server URL, name)`, dropped there.
    database: Option<(String, String)>,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    /// A fresh place for `test` on `dialect`'s test server ([`services::pg_url`],
    /// [`services::mysql_url`]) or in a SQLite file; `None` after the skip banner when the
    /// server is missing (a panic under CI).
    pub async fn new(test: &str, dialect: Dialect) -> Option<Self> {
        match dialect {
            Dialect::Sqlite => Some(Self::sqlite()),
            Dialect::Postgres => Self::on_server(test, &services::pg_url(), "PostgreSQL").await,
            Dialect::MySql => Self::on_server(test, &services::mysql_url(), "MariaDB").await,
        }
    }

    /// A SQLite file in a temp dir of its own (no server to miss).
    pub fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("a temp dir");
        Self {
            url: format!("sqlite:{}", dir.path().join("oncely.db").display()),
            dialect: Dialect::Sqlite,
            tables: Tables::default(),
            database: None,
            _dir: Some(dir),
        }
    }

    /// A PostgreSQL schema of its own on the server.
    pub async fn postgres(test: &str) -> Option<Self> {
        Self::new(test, Dialect::Postgres).await
    }

    /// A MariaDB/MySQL database of its own on the server.
    pub async fn mysql(test: &str) -> Option<Self> {
        Self::new(test, Dialect::MySql).await
    }

    /// A PostgreSQL schema of its own, reached through the test PgBouncer (transaction
    /// pooling, [`services::pgbouncer_url`], started by `scripts/pgbouncer.sh`).
    pub async fn pgbouncer(test: &str) -> Option<Self> {
        let what = "PgBouncer (scripts/pgbouncer.sh start)";
        Self::on_server(test, &services::pgbouncer_url(), what).await
    }

    /// A PostgreSQL database of its own, made on the test server and reached through the test
    /// PgBouncer (which maps every database name to that server), oncely's tables unqualified:
    /// for statements that must find their tables without a session `search_path`, which a
    /// transaction pooler cannot keep (the store suite's static `add_effect`).
    pub async fn pgbouncer_database(test: &str) -> Option<Self> {
        let what = "PgBouncer (scripts/pgbouncer.sh start) and PostgreSQL";
        let (bouncer, server) = (services::pgbouncer_url(), services::pg_url());
        for url in [&bouncer, &server] {
            if let Err(why) = services::probe(url).await {
                services::unavailable(test, what, &why);
                return None;
            }
        }
        let name = unique(test);
        if let Err(why) = run_once(&server, &format!("CREATE DATABASE {name}")).await {
            services::unavailable(test, what, &why);
            return None;
        }
        Some(Self {
            url: services::with_database(&bouncer, &name),
            dialect: Dialect::Postgres,
            tables: Tables::default(),
            database: Some((server, name)),
            _dir: None,
        })
    }

    /// A schema (PostgreSQL) or database (MySQL) named [`unique`]`(test)` on the server at
    /// `url`, made now; `what` names the server in the skip banner.
    pub async fn on_server(test: &str, url: &str, what: &str) -> Option<Self> {
        if let Err(why) = services::probe(url).await {
            services::unavailable(test, what, &why);
            return None;
        }
        let dialect = match Dialect::from_url(url) {
            Ok(d) if d.has_schemas() => d,
            _ => panic!("TestDb::on_server: {url} is not a PostgreSQL or MySQL URL"),
        };
        let schema = unique(test);
        let create = dialect
            .create_schema_sql(&schema)
            .expect("a server has schemas");
        if let Err(why) = run_once(url, &create).await {
            services::unavailable(test, what, &why);
            return None;
        }
        Some(Self {
            url: url.to_owned(),
            dialect,
            tables: Tables::default()
                .with_schema(&schema)
                .expect("a valid name"),
            database: None,
            _dir: None,
        })
    }

    /// The URL to connect with.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database kind.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// oncely's table names here: qualified with the test's schema on a server.
    pub fn tables(&self) -> &Tables {
        &self.tables
    }

    /// The test's schema (PostgreSQL) or database (MySQL); `None` on SQLite.
    pub fn schema(&self) -> Option<&str> {
        self.tables.schema()
    }

    /// Connection options naming this database's tables (the rest default).
    pub fn options(&self) -> ConnectOptions {
        ConnectOptions {
            tables: self.tables.clone(),
            ..ConnectOptions::default()
        }
    }

    /// A store on this database with `options` (their tables replaced by this database's),
    /// not migrated.
    pub async fn connect_with(&self, options: ConnectOptions) -> Result<AnyStore> {
        let options = ConnectOptions {
            tables: self.tables.clone(),
            ..options
        };
        AnyStore::connect_with(&self.url, &options).await
    }

    /// A store on this database, connected and migrated (oncely's inbox and dead letters).
    pub async fn store(&self) -> AnyStore {
        let store = self
            .connect_with(ConnectOptions::default())
            .await
            .unwrap_or_else(|e| panic!("connecting to the test database: {e}"));
        store.migrate().await.expect("migrating the test database");
        store
    }
}

/// Runs one statement on a connection of its own (a pool of one, closed after).
async fn run_once(url: &str, sql: &str) -> Result<()> {
    let options = ConnectOptions {
        max_connections: 1,
        ..ConnectOptions::default()
    };
    let work = async {
        let mut pool = AnyPool::connect_with(url, &options).await?;
        let ran = pool.script(sql).await;
        pool.close().await;
        ran
    };
    tokio::time::timeout(SETUP_TIMEOUT, work)
        .await
        .map_err(|_| Error::unavailable(format!("{sql:?} not done in {SETUP_TIMEOUT:?}")))?
}

impl Drop for TestDb {
    /// Drops the test's schema or database on a thread of its own (a test's runtime may be
    /// single-threaded, and busy dropping this); a failed test keeps it, named on stderr.
    fn drop(&mut self) {
        let (url, schema, sql) = match (&self.database, self.tables.schema()) {
            (Some((server, name)), _) => (
                server.clone(),
                name.clone(),
                format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            ),
            (None, Some(schema)) => (
                self.url.clone(),
                schema.to_owned(),
                self.dialect
                    .drop_schema_sql(schema)
                    .expect("a server has schemas"),
            ),
            (None, None) => return,
        };
        if std::thread::panicking() {
            eprintln!("test database kept for a look: {schema} at {url}");
            return;
        }
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime to drop the test database");
            runtime.block_on(run_once(&url, &sql))
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("test database {schema} not dropped: {dropped:?}");
        }
    }
}
