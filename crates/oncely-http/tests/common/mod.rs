//! Test support: a database per test (SQLite temp file, a PostgreSQL schema, a MariaDB
//! database) with the demo's tables, a real server on loopback, counts read straight from the
//! database. A missing server fails under `CI` / `ONCELY_REQUIRE_SERVICES` and is a loud
//! SKIPPED line otherwise (`oncely_testkit::services`).
#![allow(dead_code)]

pub mod suite;

/// The orders app of `oncely http-demo` (feature `orders-app`); the layer is tested through it.
pub use oncely_http::orders_app as app;

use oncely_effects::EffectTables;
use oncely_sql::{AnyStore, ConnectOptions, SqlTx, Tables};
use std::net::SocketAddr;
use std::time::Duration;

pub use oncely_testkit::services::{mysql_url, pg_url};

fn missing<T>(what: &str, test: &str, error: &dyn std::fmt::Display) -> Option<T> {
    oncely_testkit::services::unavailable(test, what, error);
    None
}

/// A unique lower-case suffix for schema / database names.
pub fn unique(test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let short: String = test.chars().take(24).collect();
    format!("t_{short}_{}_{:06x}", std::process::id(), nanos & 0xff_ffff)
}

/// A store with the demo's tables, and what to clean up afterwards.
pub struct Db {
    pub store: AnyStore,
    /// The URL the store was opened with.
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

impl Db {
    async fn open(
        url: &str,
        tables: Tables,
        dir: Option<tempfile::TempDir>,
    ) -> Result<Self, oncely_core::Error> {
        let options = ConnectOptions {
            tables,
            max_connections: 16,
            ..Default::default()
        };
        let store = tokio::time::timeout(
            Duration::from_secs(10),
            AnyStore::connect_with(url, &options),
        )
        .await
        .map_err(|e| oncely_core::Error::unavailable(e.to_string()))??;
        app::setup(&store).await.expect("setup");
        Ok(Self {
            store,
            url: url.to_owned(),
            _dir: dir,
        })
    }

    /// Rows of the table `name` (qualified), counted by the database.
    pub async fn count(&self, table: &str) -> i64 {
        let sql = format!("SELECT COUNT(*) FROM {table}");
        // Through the seam on the store's pool: a statement of its own, safe behind a pooler.
        self.store
            .pool()
            .fetch_i64(&sql, &[])
            .await
            .unwrap()
            .expect("COUNT(*) returns a row")
    }

    pub async fn orders(&self) -> i64 {
        self.count(&app::orders_table(self.store.tables())).await
    }

    pub async fn outbox(&self) -> i64 {
        self.count(&self.store.tables().outbox()).await
    }

    pub async fn keys(&self) -> i64 {
        self.count(&self.store.tables().table("http_keys")).await
    }

    /// Drops the test's schema / database (best effort).
    pub async fn drop(self) {
        let Some(schema) = self.store.tables().schema().map(str::to_owned) else {
            return;
        };
        if let Some(sql) = self.store.dialect().drop_schema_sql(&schema) {
            let _ = self.store.pool().script(&sql).await;
        }
    }
}

pub async fn sqlite() -> Db {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("http.db").display());
    Db::open(&url, Tables::default(), Some(dir)).await.unwrap()
}

pub async fn postgres(test: &str) -> Option<Db> {
    let tables = Tables::default().with_schema(&unique(test)).unwrap();
    match Db::open(&pg_url(), tables, None).await {
        Ok(db) => Some(db),
        Err(e) => missing("PostgreSQL", test, &e),
    }
}

/// PostgreSQL through the test PgBouncer (transaction pooling, `scripts/pgbouncer.sh`), with
/// the plain URL.
pub async fn pgbouncer(test: &str) -> Option<Db> {
    let tables = Tables::default().with_schema(&unique(test)).unwrap();
    match Db::open(&oncely_testkit::services::pgbouncer_url(), tables, None).await {
        Ok(db) => Some(db),
        Err(e) => missing("PgBouncer (scripts/pgbouncer.sh start)", test, &e),
    }
}

pub async fn mysql(test: &str) -> Option<Db> {
    let tables = Tables::default().with_schema(&unique(test)).unwrap();
    match Db::open(&mysql_url(), tables, None).await {
        Ok(db) => Some(db),
        Err(e) => missing("MariaDB/MySQL", test, &e),
    }
}

/// Serves `app` on a fresh loopback port; the server runs until the test ends.
pub async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// `POST {base}/orders` as alice (`Authorization: Bearer alice`) with an optional key and a
/// JSON body.
pub async fn post(base: &str, key: Option<&str>, body: &str) -> reqwest::Response {
    post_as(base, Some("Bearer alice"), key, body).await
}

/// `POST {base}/orders` with an optional `Authorization`, an optional key and a JSON body.
pub async fn post_as(
    base: &str,
    auth: Option<&str>,
    key: Option<&str>,
    body: &str,
) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .post(format!("{base}/orders"))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(auth) = auth {
        req = req.header("authorization", auth);
    }
    if let Some(key) = key {
        req = req.header("idempotency-key", format!("\"{key}\""));
    }
    req.send().await.expect("request")
}

/// Whether the response is marked as a replay.
pub fn replayed(r: &reqwest::Response) -> bool {
    r.headers().get("idempotent-replayed").map(|v| v.as_bytes()) == Some(b"true")
}
