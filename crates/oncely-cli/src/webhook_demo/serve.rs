//! The server the demo kills: one receiver per provider, mounted at `/webhooks/{source}`,
//! crediting the demo's ledger in the claim's transaction; the GitHub source inline or
//! deferred (queued, drained here by a consumer with the same name). `GET /ready` answers
//! once every source is ready.

use super::Mode;
use super::events::{self, PROVIDERS};
use anyhow::{Context, Result};
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use oncely_core::{
    CancellationToken, Consumer, Envelope, Error, Handled, Handler, RawEnvelope, Store,
};
use oncely_sql::{AnyStore, AnyTx};
use oncely_sql_queue::{Dequeue, SqlQueue};
use oncely_testkit::credits::{CreditTables, Credits};
use oncely_webhook::{Deferred, Endpoint, Provider, Verifier};
use rand::Rng;
use std::sync::Arc;
use std::time::Duration;

/// The demo's effect ([`Credits`]: a ledger row and the balance), then a pause with the
/// transaction open: the body's `slow_ms`, else 0–3 ms, so a SIGKILL lands mid-transaction.
#[derive(Clone)]
struct SlowCredits(Credits);

impl Handler<AnyTx> for SlowCredits {
    async fn handle(&self, tx: &mut AnyTx, event: &Envelope) -> Result<Handled, Error> {
        let handled = self.0.handle(tx, event).await?;
        let slow_ms = serde_json::from_slice::<serde_json::Value>(event.payload())
            .ok()
            .and_then(|v| v.get("slow_ms").and_then(serde_json::Value::as_u64))
            .filter(|ms| *ms > 0)
            .unwrap_or_else(|| rand::rng().random_range(0..=3));
        tokio::time::sleep(Duration::from_millis(slow_ms)).await;
        Ok(handled)
    }

    fn lock_key(&self, message: &RawEnvelope) -> Option<String> {
        self.0.lock_key(message)
    }
}

/// TESTING ONLY (`--unsafe-without-inbox`): what a receiver without an inbox does — verify,
/// apply in a transaction of its own, answer 200 — so every retry applies again. The demo's
/// checker must catch it. No pause in the transaction: without the inbox a slow event's
/// every retry would hold SQLite's writer as long again.
async fn without_inbox(
    store: AnyStore,
    handler: SlowCredits,
    verifier: Arc<Verifier>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 1 << 20).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let Ok(verified) = verifier.verify(&parts.headers, &body) else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    // In a task of its own, as the receiver does: a sender hanging up does not cut it short.
    let apply = tokio::spawn(async move {
        let event = Envelope::new(verified.id().as_str(), body.to_vec())?;
        let mut tx = store.begin().await?;
        handler.0.handle(&mut tx, &event).await?;
        store.commit(tx).await
    });
    match apply.await {
        Ok(Ok(_)) => StatusCode::OK.into_response(),
        _ => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

/// Serves until killed.
pub async fn run(
    addr: &str,
    store: AnyStore,
    tables: CreditTables,
    mode: Mode,
    unsafe_without_inbox: bool,
) -> Result<()> {
    let handler = SlowCredits(Credits::new(tables));
    let mut app = axum::Router::new().route("/ready", axum::routing::get(|| async { "ready" }));
    for provider in PROVIDERS {
        let name = events::source_name(provider);
        let path = format!("/webhooks/{name}");
        let verifier = events::receiver(provider);
        if provider == Provider::GitHub && mode == Mode::Deferred {
            let AnyStore::Postgres(pg) = &store else {
                anyhow::bail!("the deferred mode runs on PostgreSQL");
            };
            let queue = SqlQueue::of(pg);
            // The consumer that drains the queue: same name, so the same inbox rows.
            let drain = Consumer::new(name, store.clone(), Dequeue::new(&queue, handler.clone()));
            let source = queue.source(Duration::from_secs(5));
            tokio::spawn(async move {
                if let Err(e) = drain.run(source, CancellationToken::new()).await {
                    tracing::error!(error = %e, "the deferred source's consumer stopped");
                }
            });
            app = app.route(&path, Deferred::new(name, queue, verifier).into_route());
        } else if unsafe_without_inbox {
            let (store, handler, verifier) = (store.clone(), handler.clone(), Arc::new(verifier));
            app = app.route(
                &path,
                axum::routing::post(move |request: Request| {
                    without_inbox(store.clone(), handler.clone(), verifier.clone(), request)
                }),
            );
        } else {
            let endpoint = Endpoint::new(name, store.clone(), handler.clone(), verifier);
            endpoint.check_ready().await?;
            app = app.route(&path, endpoint.into_route());
        }
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("listening on {addr}"))?;
    axum::serve(listener, app).await.context("serving")
}
