//! Events per second through the receiver on PostgreSQL, beside a bare receiver (the same
//! verification and ledger insert in a transaction, no inbox) in one run; and the deferred
//! mode (queued per second, then drained per second). Client and server share the machine.
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
                let mut request = client.post(&url).body(body);
                for (name, value) in &headers {
                    request = request.header(name.as_str(), value.as_bytes());
                }
                let status = request.send().await.expect("request").status();
                assert!(status.is_success(), "{status}");
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
        .migrate_with(&[&oncely_sql::INBOX, &oncely_sql_queue::MIGRATIONS])
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
    let app = axum::Router::new()
        .route("/inline", inline.into_route())
        .route("/deferred", deferred.into_route())
        .route("/bare", bare_route);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });

    println!("{events} events, {concurrency} clients, PostgreSQL {url}");
    // Warm-up (connections, statements), then the cells, bare and inline alternating.
    send_all(&format!("{base}/bare"), 200, concurrency, "warm_bare").await;
    send_all(&format!("{base}/inline"), 200, concurrency, "warm_inline").await;
    let mut ok = true;
    for round in 0..2 {
        let bare_rate = send_all(
            &format!("{base}/bare"),
            events,
            concurrency,
            &format!("bare{round}"),
        )
        .await;
        let inline_rate = send_all(
            &format!("{base}/inline"),
            events,
            concurrency,
            &format!("inline{round}"),
        )
        .await;
        let (b, i) = (
            rows(&store, &table, &format!("bare{round}")).await,
            rows(&store, &table, &format!("inline{round}")).await,
        );
        ok &= b == (events as i64, events as i64) && i == (events as i64, events as i64);
        println!(
            "round {round}: bare {bare_rate:.0} events/s, inline {inline_rate:.0} events/s ({:.2} of bare); rows {b:?} {i:?}",
            inline_rate / bare_rate
        );
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
    println!(
        "deferred: queued {queued_rate:.0} events/s (202), drained {drained_rate:.0} events/s; rows {d:?}"
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
