//! Test support: a database per test (a SQLite temp file or a PostgreSQL schema) with the
//! inbox, the dead letters and a ledger table; the receiver served on loopback; requests
//! signed per provider; counts read straight from the database, never from the receiver.
//! A missing PostgreSQL fails under `CI` / `ONCELY_REQUIRE_SERVICES` and is a loud SKIPPED
//! line otherwise (`oncely_testkit::services`).
#![allow(dead_code)]

pub mod suite;

use oncely_core::{Envelope, Error, Handled, Handler, Store};
use oncely_sql::{AnyStore, AnyTx, ConnectOptions, SqlTx, Tables};
use oncely_testkit::test_db::TestDb;
use oncely_webhook::{Endpoint, Verifier};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};
use tokio::sync::{Notify, Semaphore};

/// A store with the inbox, the dead letters and the ledger (`event_id`, `body`: one row per
/// effect, no unique key, so a double effect shows as a second row), in the test's own
/// database ([`TestDb`], dropped with the last `Db` on it).
pub struct Db {
    pub store: AnyStore,
    pub url: String,
    place: Arc<TestDb>,
}

impl Db {
    async fn open(place: Option<TestDb>) -> Option<Self> {
        Some(Self::on(Arc::new(place?)).await)
    }

    async fn on(place: Arc<TestDb>) -> Self {
        let options = ConnectOptions {
            max_connections: 16,
            ..Default::default()
        };
        let store = tokio::time::timeout(Duration::from_secs(10), place.connect_with(options))
            .await
            .expect("connecting in 10 s")
            .expect("connecting to the test database");
        store.migrate().await.expect("migrate");
        let ddl = format!(
            "CREATE TABLE IF NOT EXISTS {} (event_id VARCHAR(255) NOT NULL, body TEXT NOT NULL)",
            ledger_table(store.tables())
        );
        let mut tx = store.begin().await.expect("begin");
        tx.script(&ddl).await.expect("the ledger table");
        store.commit(tx).await.expect("commit");
        Self {
            store,
            url: place.url().to_owned(),
            place,
        }
    }

    /// Another store on the same database: a restarted process.
    pub async fn reopen(&self) -> Self {
        Self::on(self.place.clone()).await
    }

    /// One `SELECT COUNT(*)`-like statement, counted by the database.
    pub async fn scalar(&self, sql: &str) -> i64 {
        self.store
            .pool()
            .fetch_i64(sql, &[])
            .await
            .unwrap()
            .expect("an aggregate returns a row")
    }

    /// Effects written (ledger rows).
    pub async fn effects(&self) -> i64 {
        self.scalar(&format!(
            "SELECT COUNT(*) FROM {}",
            ledger_table(self.store.tables())
        ))
        .await
    }

    /// Distinct events with an effect.
    pub async fn events(&self) -> i64 {
        let sql = format!(
            "SELECT COUNT(DISTINCT event_id) FROM {}",
            ledger_table(self.store.tables())
        );
        self.scalar(&sql).await
    }

    /// Effects of event `id`.
    pub async fn effects_of(&self, id: &str) -> i64 {
        let sql = format!(
            "SELECT COUNT(*) FROM {} WHERE event_id = '{id}'",
            ledger_table(self.store.tables())
        );
        self.scalar(&sql).await
    }

    /// Inbox rows (claims).
    pub async fn claims(&self) -> i64 {
        self.scalar(&format!(
            "SELECT COUNT(*) FROM {}",
            self.store.tables().inbox()
        ))
        .await
    }

    /// Dead-letter rows, all reasons.
    pub async fn dead_letters(&self) -> i64 {
        let sql = format!(
            "SELECT COUNT(*) FROM {}",
            self.store.tables().dead_letters()
        );
        self.scalar(&sql).await
    }

    /// Dead-letter rows of event `id` with `reason`.
    pub async fn dead_letters_of(&self, id: &str, reason: &str) -> i64 {
        let sql = format!(
            "SELECT COUNT(*) FROM {} WHERE message_id = '{id}' AND reason = '{reason}'",
            self.store.tables().dead_letters()
        );
        self.scalar(&sql).await
    }

    /// Rows in every table the receiver or the handler writes.
    pub async fn rows(&self) -> (i64, i64, i64) {
        (
            self.claims().await,
            self.dead_letters().await,
            self.effects().await,
        )
    }
}

pub fn ledger_table(tables: &Tables) -> String {
    tables.table("webhook_ledger")
}

pub async fn sqlite() -> Db {
    Db::open(Some(TestDb::sqlite())).await.expect("SQLite")
}

pub async fn postgres(test: &str) -> Option<Db> {
    Db::open(TestDb::postgres(test).await).await
}

/// PostgreSQL at `url` (e.g. through a fault proxy) in a fresh schema.
pub async fn postgres_at(test: &str, url: &str) -> Option<Db> {
    Db::open(TestDb::on_server(test, url, "PostgreSQL").await).await
}

/// What the ledger handler does, from the body's `act` field (default `apply`).
///
/// - `apply`: one ledger row (event id, body).
/// - `permanent`: fails permanently.
/// - `transient` / `unavailable`: fails so while [`Ledger::flaky`] is set, then applies.
/// - `gate`: writes its row, says so on [`Ledger::entered`], and waits for a permit on
///   [`Ledger::release`] before returning (the commit comes after).
/// - `panic`: writes its row, then panics.
/// - `slow`: writes its row, then waits 20 ms (the transaction open) before returning.
#[derive(Clone)]
pub struct Ledger {
    table: String,
    pub flaky: Arc<AtomicBool>,
    pub entered: Arc<Notify>,
    pub release: Arc<Semaphore>,
}

impl Ledger {
    pub fn new(db: &Db) -> Self {
        Self {
            table: ledger_table(db.store.tables()),
            flaky: Arc::new(AtomicBool::new(true)),
            entered: Arc::new(Notify::new()),
            release: Arc::new(Semaphore::new(0)),
        }
    }
}

impl Handler<AnyTx> for Ledger {
    async fn handle(&self, tx: &mut AnyTx, event: &Envelope) -> Result<Handled, Error> {
        let body = String::from_utf8_lossy(event.payload()).into_owned();
        let act = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("act").and_then(|a| a.as_str().map(str::to_owned)))
            .unwrap_or_else(|| "apply".to_owned());
        let flaky = self.flaky.load(Ordering::SeqCst);
        match act.as_str() {
            "permanent" => return Err(Error::permanent("refused by the test handler")),
            "transient" if flaky => return Err(Error::transient("the test handler says later")),
            "unavailable" if flaky => {
                return Err(Error::unavailable("the test's dependency is down"));
            }
            _ => {}
        }
        let sql = format!(
            "INSERT INTO {} (event_id, body) VALUES ($1, $2)",
            self.table
        );
        tx.execute(&sql, &[event.id().as_str().into(), body.into()])
            .await?;
        match act.as_str() {
            "gate" => {
                self.entered.notify_one();
                self.release.acquire().await.expect("open").forget();
            }
            "panic" => panic!("the test handler panics after its insert"),
            "slow" => tokio::time::sleep(Duration::from_millis(20)).await,
            _ => {}
        }
        Ok(Handled::Applied)
    }
}

/// The endpoint of `verifier` on `db` with the ledger handler, named `name`.
pub fn endpoint(
    db: &Db,
    name: &str,
    verifier: Verifier,
    ledger: Ledger,
) -> Endpoint<AnyStore, Ledger> {
    Endpoint::new(name, db.store.clone(), ledger, verifier)
}

/// Serves `app` on a fresh loopback port; the server runs until the test ends.
pub async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// `POST url` with `headers` and `body`.
pub async fn post(
    url: &str,
    headers: &http::HeaderMap,
    body: impl Into<Vec<u8>>,
) -> reqwest::Response {
    let mut request = reqwest::Client::new().post(url).body(body.into());
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_bytes());
    }
    request.send().await.expect("request")
}

/// The `outcome` (or `error`) of a response's JSON body.
pub async fn outcome(response: reqwest::Response) -> (u16, String) {
    let status = response.status().as_u16();
    let body: serde_json::Value = response.json().await.expect("a JSON body");
    let field = body
        .get("outcome")
        .or_else(|| body.get("error"))
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_owned();
    (status, field)
}

/// A Stripe-like event body for `id` doing `act`.
pub fn event(id: &str, act: &str) -> String {
    format!(
        r#"{{"id":"{id}","object":"event","created":{},"act":"{act}"}}"#,
        now_secs()
    )
}

pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

pub const STANDARD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
pub const STRIPE_SECRET: &str = "whsec_test_stripe_secret";
pub const GITHUB_SECRET: &str = "It's a Secret to Everybody";
