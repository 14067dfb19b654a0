//! Test support: a database per test (SQLite temp file, a PostgreSQL schema, a MariaDB
//! database) with the demo's tables, a real server on loopback, counts read straight from the
//! database. A missing server fails under `CI` / `ONCELY_REQUIRE_SERVICES` and is a loud
//! SKIPPED line otherwise (`oncely_testkit::services`).
#![allow(dead_code)]

pub mod suite;

/// The orders app of `oncely http-demo` (feature `orders-app`); the layer is tested through it.
pub use oncely_http::orders_app as app;

use oncely_effects::EffectTables;
use oncely_sql::{AnyStore, ConnectOptions, SqlTx};
use oncely_testkit::test_db::TestDb;
use std::net::SocketAddr;
use std::time::Duration;

/// A store with the demo's tables in the test's own database ([`TestDb`], dropped with it).
pub struct Db {
    pub store: AnyStore,
    /// The URL the store was opened with.
    pub url: String,
    place: TestDb,
}

impl Db {
    async fn open(place: Option<TestDb>) -> Option<Self> {
        let place = place?;
        let options = ConnectOptions {
            max_connections: 16,
            ..Default::default()
        };
        let store = tokio::time::timeout(Duration::from_secs(10), place.connect_with(options))
            .await
            .expect("connecting in 10 s")
            .expect("connecting to the test database");
        app::setup(&store).await.expect("setup");
        Some(Self {
            store,
            url: place.url().to_owned(),
            place,
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

    /// The test's own database.
    pub fn place(&self) -> &TestDb {
        &self.place
    }
}

pub async fn sqlite() -> Db {
    Db::open(Some(TestDb::sqlite())).await.expect("SQLite")
}

pub async fn postgres(test: &str) -> Option<Db> {
    Db::open(TestDb::postgres(test).await).await
}

/// PostgreSQL through the test PgBouncer (transaction pooling, `scripts/pgbouncer.sh`), with
/// the plain URL.
pub async fn pgbouncer(test: &str) -> Option<Db> {
    Db::open(TestDb::pgbouncer(test).await).await
}

pub async fn mysql(test: &str) -> Option<Db> {
    Db::open(TestDb::mysql(test).await).await
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
