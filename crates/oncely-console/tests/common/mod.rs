//! Shared by the console tests: a migrated store in a database of the test's own (SKIPPED
//! loudly when a server is missing, failing under CI), seeded dead letters, the console served on a free port, and a
//! headless Chromium driven over WebDriver (chromedriver started by the test).
#![allow(dead_code)]

pub mod browser;

use oncely_console::Console;
use oncely_core::{Envelope, Handled, Handler, PayloadHash, Store};
use oncely_sql::{AnyStore, AnyTx, Value};
use oncely_testkit::test_db::TestDb;

pub use oncely_sql::Dialect;
use std::net::SocketAddr;

/// A test's store in its own database (the testkit's [`TestDb`], dropped after the test).
pub struct Fixture {
    pub store: AnyStore,
    db: TestDb,
}

/// A migrated store on `dialect`, or `None` (after the SKIPPED banner) when its server is
/// missing.
pub async fn fixture(test: &str, dialect: Dialect) -> Option<Fixture> {
    let db = TestDb::new(test, dialect).await?;
    let store = db.store().await;
    let f = Fixture { store, db };
    f.exec(
        &format!(
            "CREATE TABLE {} (id VARCHAR(200) NOT NULL PRIMARY KEY)",
            f.table("ledger")
        ),
        &[],
    )
    .await;
    Some(f)
}

/// A dead letter to seed.
#[derive(Debug, Clone)]
pub struct Letter {
    pub consumer: String,
    pub message_id: Option<String>,
    pub raw_id: Option<Vec<u8>>,
    pub payload: Vec<u8>,
    pub reason: String,
    pub detail: String,
    pub headers: String,
    pub age_ms: i64,
}

impl Letter {
    pub fn new(consumer: &str, id: &str, reason: &str) -> Self {
        Self {
            consumer: consumer.into(),
            message_id: Some(id.into()),
            raw_id: Some(id.as_bytes().to_vec()),
            payload: format!("{{\"credits\": 5, \"card\": \"4111-{id}\"}}").into_bytes(),
            reason: reason.into(),
            // As the runtime words it: the reason's text, then the error (its class, then more).
            detail: format!("handler failed: {reason} error: for {id}"),
            headers: "{}".into(),
            age_ms: 60_000,
        }
    }
}

impl Fixture {
    /// oncely's table `name` (`inbox`, `dead_letters`, …) or the test's `ledger`, qualified.
    pub fn table(&self, name: &str) -> String {
        self.db.tables().table(name)
    }

    pub async fn exec(&self, sql: &str, args: &[Value]) {
        let mut tx = self.store.begin().await.unwrap();
        tx.execute(sql, args).await.unwrap();
        self.store.commit(tx).await.unwrap();
    }

    pub async fn scalar(&self, sql: &str, args: &[Value]) -> i64 {
        let mut tx = self.store.begin().await.unwrap();
        let n = tx.fetch_i64(sql, args).await.unwrap().unwrap_or(0);
        self.store.commit(tx).await.unwrap();
        n
    }

    /// Inserts `letter`; returns its row id.
    pub async fn letter(&self, l: &Letter) -> i64 {
        let at = oncely_sql::clock::now_ms() - l.age_ms;
        let hash = PayloadHash::of(&l.payload).to_hex();
        let id_hash = format!("{:x}", rand::random::<u64>());
        let sql = format!(
            "INSERT INTO {} (consumer, message_id, raw_id, payload, payload_hash, reason, detail, attempts, \
             headers, dead_lettered_at, id_hash, last_seen, deliveries) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8, $9, $10, $9, 1)",
            self.table("dead_letters")
        );
        let raw: Value = match &l.raw_id {
            Some(b) => b.clone().into(),
            None => Value::NullText,
        };
        self.exec(
            &sql,
            &[
                l.consumer.clone().into(),
                l.message_id.clone().into(),
                raw,
                l.payload.clone().into(),
                hash.into(),
                l.reason.clone().into(),
                l.detail.clone().into(),
                l.headers.clone().into(),
                at.into(),
                id_hash.into(),
            ],
        )
        .await;
        self.scalar(
            &format!("SELECT MAX(id) FROM {}", self.table("dead_letters")),
            &[],
        )
        .await
    }

    /// Claims `id` for `consumer` in the inbox with `payload`'s hash.
    pub async fn claim(&self, consumer: &str, id: &str, payload: &[u8]) {
        let sql = format!(
            "INSERT INTO {} (consumer, message_id, payload_hash, received_at) VALUES ($1, $2, $3, $4)",
            self.table("inbox")
        );
        let args: [Value; 4] = [
            consumer.into(),
            id.into(),
            PayloadHash::of(payload).to_hex().into(),
            oncely_sql::clock::now_ms().into(),
        ];
        self.exec(&sql, &args).await;
    }

    /// Rows of `SELECT COUNT(*) FROM {prefix}{table} WHERE {condition}`.
    pub async fn count(&self, table: &str, condition: &str, args: &[Value]) -> i64 {
        self.scalar(
            &format!(
                "SELECT COUNT(*) FROM {} WHERE {condition}",
                self.table(table)
            ),
            args,
        )
        .await
    }

    pub async fn ledger_rows(&self) -> i64 {
        self.scalar(
            &format!("SELECT COUNT(*) FROM {}", self.table("ledger")),
            &[],
        )
        .await
    }

    pub async fn dead_letter_rows(&self) -> i64 {
        self.scalar(
            &format!("SELECT COUNT(*) FROM {}", self.table("dead_letters")),
            &[],
        )
        .await
    }
}

/// The replay handler of the tests: one ledger row per message id (a second would fail).
#[derive(Clone)]
pub struct Ledger(pub String);

impl Handler<AnyTx> for Ledger {
    async fn handle(&self, tx: &mut AnyTx, msg: &Envelope) -> oncely_core::Result<Handled> {
        tx.execute(
            &format!("INSERT INTO {} (id) VALUES ($1)", self.0),
            &[msg.id().as_str().into()],
        )
        .await?;
        Ok(Handled::Applied)
    }
}

/// The console of `f` (with the ledger handler, `card` redacted) served on a free loopback
/// port; returns its base URL.
pub async fn serve(f: &Fixture, configure: impl FnOnce(Console) -> Console) -> String {
    let console = configure(
        Console::new(f.store.clone())
            .default_handler(Ledger(f.table("ledger")))
            .redact(["card"]),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let app = console.router();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}
