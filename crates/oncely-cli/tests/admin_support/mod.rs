//! Shared helpers of the admin_* and demo_brokers tests: run the built binary, find the
//! servers, seed data.
#![allow(dead_code)]

use oncely_testkit::test_db::TestDb;

use serde_json::Value;
use std::process::{Command, Output};

/// Runs `oncely ARGS` and returns (exit code, stdout, stderr).
pub fn oncely(args: &[&str]) -> (i32, String, String) {
    let out: Output = Command::new(env!("CARGO_BIN_EXE_oncely"))
        .args(args)
        .env_remove("ONCELY_DATABASE_URL")
        .output()
        .expect("run oncely");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `oncely ARGS`, expects success and one JSON document on stdout.
pub fn json(args: &[&str]) -> Value {
    let (code, stdout, stderr) = oncely(args);
    assert_eq!(code, 0, "oncely {args:?} failed: {stdout}\n{stderr}");
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("oncely {args:?}: no JSON ({e}): {stdout}\n{stderr}"))
}

/// A database to run admin commands against (the test's own [`TestDb`], dropped after it):
/// URL plus the `--schema` flag (none for SQLite).
pub struct Target {
    pub url: String,
    pub schema: Option<String>,
    _db: TestDb,
}

impl Target {
    fn of(db: TestDb) -> Self {
        Self {
            url: db.url().to_owned(),
            schema: db.schema().map(str::to_owned),
            _db: db,
        }
    }

    pub fn sqlite() -> Self {
        Self::of(TestDb::sqlite())
    }

    /// A PostgreSQL schema of the test's own, or None (after the loud SKIPPED banner of
    /// [`oncely_testkit::services::unavailable`]; a failure under CI) when the server is missing.
    pub async fn postgres(test: &str) -> Option<Self> {
        TestDb::postgres(test).await.map(Self::of)
    }

    /// A PostgreSQL schema of the test's own through the test PgBouncer (transaction pooling,
    /// `scripts/pgbouncer.sh`), or None.
    pub async fn pgbouncer(test: &str) -> Option<Self> {
        TestDb::pgbouncer(test).await.map(Self::of)
    }

    /// A MariaDB/MySQL database of the test's own, or None.
    pub async fn mysql(test: &str) -> Option<Self> {
        TestDb::mysql(test).await.map(Self::of)
    }

    /// `--database URL [--schema S]`.
    pub fn db_args(&self) -> Vec<String> {
        let mut v = vec!["--database".to_owned(), self.url.clone()];
        if let Some(s) = &self.schema {
            v.push("--schema".to_owned());
            v.push(s.clone());
        }
        v
    }

    /// Runs `oncely CMD… --database … --json` and parses the output.
    pub fn json(&self, cmd: &[&str]) -> Value {
        let mut args: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
        args.extend(self.db_args());
        args.push("--json".to_owned());
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        json(&refs)
    }

    /// Runs the demo on this database (it creates the tables, inbox rows and dead letters)
    /// and returns its report.
    pub fn seed_with_demo(&self, messages: usize) -> Value {
        let messages = messages.to_string();
        let mut args = vec![
            "demo",
            "--json",
            "--messages",
            &messages,
            "--seed",
            "11",
            "--store",
            &self.url,
        ];
        if let Some(s) = &self.schema {
            args.extend(["--schema", s]);
        }
        let report = json(&args);
        assert!(report["ok"].as_bool().unwrap(), "demo failed: {report}");
        report
    }

    /// The oncely-sql tables of this target.
    pub fn tables(&self) -> oncely_sql::Tables {
        let t = oncely_sql::Tables::default();
        match &self.schema {
            Some(s) => t.with_schema(s).unwrap(),
            None => t,
        }
    }

    /// A qualified table name (`inbox`, `dead_letters`, `demo_ledger`, …). Demo tables have no prefix.
    pub fn table(&self, name: &str) -> String {
        let bare = if name.starts_with("demo_") {
            name.to_owned()
        } else {
            format!("oncely_{name}")
        };
        match &self.schema {
            Some(s) => format!("{s}.{bare}"),
            None => bare,
        }
    }

    /// The target's pool.
    async fn pool(&self) -> oncely_sql::AnyPool {
        let options = oncely_sql::ConnectOptions {
            max_connections: 2,
            ..Default::default()
        };
        oncely_sql::AnyPool::connect_with(&self.url, &options)
            .await
            .unwrap()
    }

    /// Runs one scalar SQL query (an i64) against the target.
    pub async fn scalar(&self, sql: &str) -> i64 {
        use oncely_sql::SqlTx;
        let mut pool = self.pool().await;
        // An unnamed statement in a transaction of its own behind a pooler.
        let n = pool.fetch_i64(sql, &[]).await.unwrap();
        pool.close().await;
        n.unwrap_or(0)
    }

    /// Runs one statement against the target.
    pub async fn exec(&self, sql: &str) {
        use oncely_sql::SqlTx;
        let mut pool = self.pool().await;
        pool.script(sql).await.unwrap();
        pool.close().await;
    }
}

/// The tests `$sqlite`, `$postgres` and `$mariadb`, each running `$scenario(&Target)` on a
/// database of its own (a server's test is SKIPPED loudly, or fails under CI, without it):
///
/// ```ignore
/// on_each_database!(dlq_round_trip: dlq_on_sqlite, dlq_on_postgres, dlq_on_mariadb);
/// ```
#[allow(unused_macros)] // not every test file of the crate uses it
macro_rules! on_each_database {
    ($scenario:ident: $sqlite:ident, $postgres:ident, $mariadb:ident) => {
        #[tokio::test]
        async fn $sqlite() {
            $scenario(&$crate::admin_support::Target::sqlite()).await;
        }

        #[tokio::test]
        async fn $postgres() {
            if let Some(t) = $crate::admin_support::Target::postgres(stringify!($postgres)).await {
                $scenario(&t).await;
            }
        }

        #[tokio::test]
        async fn $mariadb() {
            if let Some(t) = $crate::admin_support::Target::mysql(stringify!($mariadb)).await {
                $scenario(&t).await;
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use on_each_database;

/// Number from a JSON value.
pub fn n(v: &Value) -> i64 {
    v.as_i64().unwrap_or_else(|| panic!("not a number: {v}"))
}
