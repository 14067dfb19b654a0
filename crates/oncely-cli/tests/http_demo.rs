//! `oncely http-demo` killed mid-request (SIGKILL while the handler holds its transaction open)
//! and restarted: the retry with the same key creates exactly one order and one outbox
//! message, and no stale key blocks it. On SQLite, PostgreSQL and MariaDB; a missing server
//! fails under `CI` / `ONCELY_REQUIRE_SERVICES` and is SKIPPED otherwise.

mod admin_support;

use oncely::effects::EffectTables;
use oncely_sql::{AnyStore, ConnectOptions, Dialect, SqlTx, Tables};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const BOOK: &str = r#"{"item":"book","quantity":2}"#;

/// A running `oncely http-demo`, and the lines it logged.
struct Server {
    child: Child,
    base: String,
    lines: mpsc::Receiver<String>,
}

impl Server {
    /// Starts the demo on a free loopback port and waits until it listens.
    fn start(store: &str, schema: &str, delay_ms: u64) -> Self {
        Self::start_with(store, schema, delay_ms, &[])
    }

    /// [`Server::start`] with further flags.
    fn start_with(store: &str, schema: &str, delay_ms: u64, flags: &[&str]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let mut child = Command::new(env!("CARGO_BIN_EXE_oncely"))
            .args([
                "http-demo",
                "--addr",
                &addr,
                "--store",
                store,
                "--schema",
                schema,
            ])
            .args(flags)
            .env("ONCELY_HTTP_DEMO_DELAY_MS", delay_ms.to_string())
            .env("ONCELY_LOG", "oncely_http=info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start oncely http-demo");
        let (tx, lines) = mpsc::channel();
        for pipe in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
        }
        let server = Self {
            child,
            base: format!("http://{addr}"),
            lines,
        };
        server.wait_for("listening on", Duration::from_secs(60));
        server
    }

    /// Waits for a logged line containing `text`.
    fn wait_for(&self, text: &str, within: Duration) -> String {
        let deadline = std::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(text) => return line,
                Ok(_) => {}
                Err(e) => panic!("oncely http-demo never logged {text:?}: {e}"),
            }
        }
    }

    /// SIGKILL: no shutdown, no rollback by the process; the database sees a dead connection.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

async fn post(base: &str, key: &str, body: &str) -> reqwest::Result<reqwest::Response> {
    post_as(base, Some("Bearer alice"), key, body).await
}

/// `POST /orders` with an optional `Authorization` (the demo scopes keys by it).
async fn post_as(
    base: &str,
    auth: Option<&str>,
    key: &str,
    body: &str,
) -> reqwest::Result<reqwest::Response> {
    let mut req = reqwest::Client::new()
        .post(format!("{base}/orders"))
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(body.to_owned());
    if let Some(auth) = auth {
        req = req.header("authorization", auth);
    }
    req.send().await
}

fn replayed(r: &reqwest::Response) -> bool {
    r.headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

/// Orders, outbox messages and key rows, counted by the database.
async fn counts(store: &AnyStore) -> (i64, i64, i64) {
    let t = store.tables();
    let mut out = [0; 3];
    let tables = [t.table("demo_orders"), t.outbox(), t.table("http_keys")];
    for (n, table) in out.iter_mut().zip(tables) {
        let sql = format!("SELECT COUNT(*) FROM {table}");
        *n = store
            .pool()
            .fetch_i64(&sql, &[])
            .await
            .unwrap()
            .expect("COUNT(*) returns a row");
    }
    (out[0], out[1], out[2])
}

async fn killed_mid_request_then_retried(url: &str, schema: &str) {
    let mut tables = Tables::default();
    if Dialect::from_url(url).unwrap().has_schemas() {
        tables = tables.with_schema(schema).unwrap();
    }
    let options = ConnectOptions {
        tables,
        ..Default::default()
    };
    let slow = Server::start(url, schema, 30_000);
    let store = AnyStore::connect_with(url, &options).await.unwrap();
    let base = slow.base.clone();
    let request = tokio::spawn(async move { post(&base, "order-crash", BOOK).await });
    // The handler wrote the order and the outbox message and now holds the transaction open.
    slow.wait_for("holding the transaction open", Duration::from_secs(30));
    slow.kill();
    let answer = request.await.unwrap();
    assert!(answer.is_err(), "the client saw the crash: {answer:?}");
    assert_eq!(
        counts(&store).await,
        (0, 0, 0),
        "no order, no message, no key"
    );

    let server = Server::start(url, schema, 0);
    let retry = post(&server.base, "order-crash", BOOK).await.unwrap();
    assert_eq!(retry.status(), 201);
    assert!(!replayed(&retry), "no stale key: the retry ran");
    let body = retry.text().await.unwrap();
    let again = post(&server.base, "order-crash", BOOK).await.unwrap();
    assert_eq!(again.status(), 201);
    assert!(replayed(&again));
    assert_eq!(again.text().await.unwrap(), body);
    let reused = post(
        &server.base,
        "order-crash",
        r#"{"item":"pen","quantity":1}"#,
    )
    .await
    .unwrap();
    assert_eq!(reused.status(), 422);
    assert_eq!(counts(&store).await, (1, 1, 1), "exactly one order");
    // Keys belong to the Authorization value: bob's same key and body is bob's own order.
    let bob = post_as(&server.base, Some("Bearer bob"), "order-crash", BOOK)
        .await
        .unwrap();
    assert_eq!(bob.status(), 201);
    assert!(!replayed(&bob), "alice's response is not bob's");
    let bob_body = bob.text().await.unwrap();
    assert_ne!(bob_body, body);
    let bob_again = post_as(&server.base, Some("Bearer bob"), "order-crash", BOOK)
        .await
        .unwrap();
    assert!(replayed(&bob_again));
    assert_eq!(bob_again.text().await.unwrap(), bob_body);
    let anonymous = post_as(&server.base, None, "order-crash", BOOK)
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    assert_eq!(
        anonymous.headers()["content-type"],
        "application/problem+json"
    );
    assert_eq!(counts(&store).await, (2, 2, 2), "one order per client");
    server.kill();
    if let Some(sql) = store
        .tables()
        .schema()
        .and_then(|schema| store.dialect().drop_schema_sql(schema))
    {
        let _ = store.pool().script(&sql).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn http_demo_killed_mid_request_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("http-demo.db").display());
    killed_mid_request_then_retried(&url, "unused").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn http_demo_killed_mid_request_postgres() {
    let test = "http_demo_killed_mid_request_postgres";
    let Some(t) = admin_support::Target::postgres(test).await else {
        return;
    };
    killed_mid_request_then_retried(&t.url, t.schema.as_deref().unwrap()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn http_demo_killed_mid_request_mariadb() {
    let test = "http_demo_killed_mid_request_mariadb";
    let Some(t) = admin_support::Target::mysql(test).await else {
        return;
    };
    killed_mid_request_then_retried(&t.url, t.schema.as_deref().unwrap()).await;
}

/// `oncely prune` deletes the keys past their TTL (and keeps the others): one retention tool.
#[tokio::test(flavor = "multi_thread")]
async fn oncely_prune_deletes_expired_http_keys() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("http-prune.db").display());
    let short = Server::start_with(&url, "unused", 0, &["--ttl", "1s"]);
    for key in ["a", "b"] {
        assert_eq!(post(&short.base, key, BOOK).await.unwrap().status(), 201);
    }
    short.kill();
    let long = Server::start(&url, "unused", 0);
    assert_eq!(post(&long.base, "c", BOOK).await.unwrap().status(), 201);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let prune = |_| admin_support::json(&["prune", "--database", &url, "--json"]);
    assert_eq!(prune(())["http_keys_deleted"], 2);
    assert_eq!(prune(())["http_keys_deleted"], 0);
    let store = AnyStore::connect(&url).await.unwrap();
    assert_eq!(
        counts(&store).await,
        (3, 3, 1),
        "orders stay; one key within its TTL"
    );
    let replay = post(&long.base, "c", BOOK).await.unwrap();
    assert!(replayed(&replay));
    long.kill();
}
