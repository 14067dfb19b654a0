//! Events per second through the receiver on PostgreSQL, beside a bare receiver (the same
//! verification and ledger insert in a transaction, no inbox) and beside oncely-http's
//! `Idempotency-Key` layer (the same insert, the key reserved in its transaction) in one
//! run; and the deferred mode (queued per second, then drained per second). Client and
//! server share the machine.
//!
//! ```sh
//! cargo run --release -p oncely-webhook --example webhook_bench -- [events] [concurrency] [postgres-url]
//! ```
//!
//! Each cell sends `events` distinct Standard Webhooks events (signed before the clock
//! starts) from `concurrency` clients, then counts the ledger rows: a cell whose rows are
//! not exactly one per event fails the run.

use axum::extract::Request;
use axum::response::IntoResponse;
use oncely_core::{CancellationToken, Consumer, Envelope, Error, Handled, Handler};
use oncely_sql::{AnyStore, AnyTx, ConnectOptions, SqlTx, Tables};
use oncely_sql_queue::{Dequeue, SqlQueue};
use oncely_webhook::{Deferred, Endpoint, Verifier};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

#[derive(Clone)]
struct Ledger(String);

impl Handler<AnyTx> for Ledger {
    async fn handle(&self, tx: &mut AnyTx, event: &Envelope) -> Result<Handled, Error> {
        let sql = format!("INSERT INTO {} (event_id, body) VALUES ($1, $2)", self.0);
        let body = String::from_utf8_lossy(event.payload()).into_owned();
        tx.execute(&sql, &[event.id().as_str().into(), body.into()])
            .await?;
        Ok(Handled::Applied)
    }
}

/// The baseline: verify, then the ledger insert in a transaction of its own; no claim.
async fn bare(
    store: AnyStore,
    ledger: Ledger,
    verifier: Arc<Verifier>,
    request: Request,
) -> axum::response::Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20).await.unwrap();
    let Ok(verified) = verifier.verify(&parts.headers, &body) else {
        return http::StatusCode::UNAUTHORIZED.into_response();
    };
    let envelope = Envelope::new(verified.id().as_str(), body.to_vec()).unwrap();
    let mut tx = oncely_core::Store::begin(&store).await.unwrap();
    ledger.handle(&mut tx, &envelope).await.unwrap();
    oncely_core::Store::commit(&store, tx).await.unwrap();
    http::StatusCode::OK.into_response()
}

/// The Idempotency-Key cell's handler: the same ledger insert, in the key's transaction.
async fn keyed(
    ledger: Ledger,
    tx: oncely_http::IdempotentTx,
    headers: http::HeaderMap,
    body: String,
) -> Result<&'static str, oncely_http::TxError> {
    let id = headers["webhook-id"]
        .to_str()
        .unwrap_or_default()
        .to_owned();
    let mut tx = tx.lock().await?;
    let sql = format!("INSERT INTO {} (event_id, body) VALUES ($1, $2)", ledger.0);
    tx.execute(&sql, &[id.into(), body.into()]).await?;
    Ok("ok")
}

async fn send_all(url: &str, events: usize, concurrency: usize, prefix: &str) -> f64 {
    let verifier = Verifier::standard_webhooks([SECRET]).unwrap();
    let requests: Vec<_> = (0..events)
        .map(|n| {
            let id = format!("{prefix}_{n}");
            let body = format!(r#"{{"type":"invoice.paid","id":"{id}","amount":{n}}}"#);
            (verifier.sign(&id, body.as_bytes(), SystemTime::now()), body)
        })
        .collect();
    let requests = Arc::new(std::sync::Mutex::new(requests));
    let client = reqwest::Client::new();
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (requests, client, url) = (requests.clone(), client.clone(), url.to_owned());
        workers.spawn(async move {
            loop {
                let Some((headers, body)) = requests.lock().unwrap().pop() else {
                    break;
                };
                let key = format!("\"{}\"", headers["webhook-id"].to_str().unwrap());
                let mut request = client.post(&url).header("idempotency-key", key).body(body);
                for (name, value) in &headers {
                    request = request.header(name.as_str(), value.as_bytes());
                }
                let response = request.send().await.expect("request");
                let status = response.status();
                if !status.is_success() {
                    panic!("{status}: {}", response.text().await.unwrap_or_default());
                }
            }
        });
    }
    while workers.join_next().await.is_some() {}
    events as f64 / started.elapsed().as_secs_f64()
}

/// (ledger rows, distinct events) of the events named `prefix_…`.
async fn rows(store: &AnyStore, table: &str, prefix: &str) -> (i64, i64) {
    let mut counts = [0; 2];
    for (n, what) in ["COUNT(*)", "COUNT(DISTINCT event_id)"].iter().enumerate() {
        let sql = format!("SELECT {what} FROM {table} WHERE event_id LIKE '{prefix}_%'");
        counts[n] = store.pool().fetch_i64(&sql, &[]).await.unwrap().unwrap();
    }
    (counts[0], counts[1])
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let events: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let concurrency: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(16);
    let url = args
        .get(2)
        .cloned()
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".into());
    let schema = format!("webhook_bench_{}", std::process::id());
    let options = ConnectOptions {
        tables: Tables::default().with_schema(&schema)?,
        max_connections: 16,
        ..Default::default()
    };
    let store = AnyStore::connect_with(&url, &options).await?;
    store
        .migrate_with(&[
            &oncely_sql::INBOX,
            &oncely_sql_queue::MIGRATIONS,
            &oncely_http::MIGRATIONS,
        ])
        .await?;
    let table = store.tables().table("webhook_ledger");
    store
        .pool()
        .script(&format!(
            "CREATE TABLE {table} (event_id TEXT NOT NULL, body TEXT NOT NULL)"
        ))
        .await?;
    let ledger = Ledger(table.clone());
    let AnyStore::Postgres(pg) = &store else {
        return Err("a postgres:// URL, please".into());
    };
    let queue = SqlQueue::of(pg);
    let verifier = Arc::new(Verifier::standard_webhooks([SECRET])?);

    let inline = Endpoint::new("inline", store.clone(), ledger.clone(), (*verifier).clone());
    let deferred = Deferred::new("deferred", queue.clone(), (*verifier).clone());
    let bare_route = {
        let (store, ledger, verifier) = (store.clone(), ledger.clone(), verifier.clone());
        axum::routing::post(move |request: Request| bare(store, ledger, verifier, request))
    };
    let keyed_route = {
        let ledger = ledger.clone();
        let layer = oncely_http::IdempotencyLayer::new(store.clone(), oncely_http::Scope::global())
            .require_key(true);
        axum::routing::post(move |tx, headers, body| keyed(ledger, tx, headers, body)).layer(layer)
    };
    let app = axum::Router::new()
        .route("/inline", inline.into_route())
        .route("/idempotency-key", keyed_route)
        .route("/deferred", deferred.into_route())
        .route("/bare", bare_route);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });

    println!("{events} events, {concurrency} clients, PostgreSQL {url}");
    // Warm-up (connections, statements), then the cells, bare and inline alternating.
    send_all(&format!("{base}/bare"), 200, concurrency, "warm_bare").await;
    send_all(&format!("{base}/inline"), 200, concurrency, "warm_inline").await;
    send_all(
        &format!("{base}/idempotency-key"),
        200,
        concurrency,
        "warm_key",
    )
    .await;
    let mut ok = true;
    for round in 0..2 {
        let mut line = format!("round {round}:");
        let mut bare_rate = 0.0;
        for cell in ["bare", "inline", "idempotency-key"] {
            let prefix = format!("{cell}{round}");
            let rate = send_all(&format!("{base}/{cell}"), events, concurrency, &prefix).await;
            let counted = rows(&store, &table, &prefix).await;
            ok &= counted == (events as i64, events as i64);
            if cell == "bare" {
                bare_rate = rate;
            }
            line += &format!(
                " {cell} {rate:.0}/s ({:.2} of bare, rows {counted:?});",
                rate / bare_rate
            );
        }
        println!("{line}");
    }
    let queued_rate = send_all(&format!("{base}/deferred"), events, concurrency, "deferred").await;
    let consumer = Consumer::new(
        "deferred",
        store.clone(),
        Dequeue::new(&queue, ledger.clone()),
    );
    let started = Instant::now();
    consumer
        .run(
            queue.source(Duration::from_secs(30)).stop_when_empty(),
            CancellationToken::new(),
        )
        .await?;
    let drained_rate = events as f64 / started.elapsed().as_secs_f64();
    let d = rows(&store, &table, "deferred").await;
    ok &= d == (events as i64, events as i64);
    let groups = consumer.group_commit_stats();
    println!(
        "deferred: queued {queued_rate:.0} events/s (202), drained {drained_rate:.0} events/s ({} groups, {} fallbacks); rows {d:?}",
        groups.committed, groups.fallbacks
    );
    let _ = store
        .pool()
        .script(&format!("DROP SCHEMA {schema} CASCADE"))
        .await;
    if !ok {
        return Err("a cell's ledger is not one row per event".into());
    }
    Ok(())
}
