//! The server the demo kills: one receiver per provider, mounted at `/webhooks/{source}`,
//! crediting the demo's ledger in the claim's transaction; the GitHub source inline or
//! deferred (queued, drained here by a consumer with the same name). `GET /ready` answers
//! once every source is ready.

use super::Mode;
use super::events::{self, PROVIDERS};
use crate::demo::credits::{CreditTables, Credits};
use anyhow::{Context, Result};
use oncely_core::{CancellationToken, Consumer, Envelope, Error, Handled, Handler, RawEnvelope};
use oncely_sql::{AnyStore, AnyTx};
use oncely_sql_queue::{Dequeue, SqlQueue};
use oncely_webhook::{Deferred, Endpoint, Provider};
use rand::Rng;
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

/// Serves until killed.
pub async fn run(addr: &str, store: AnyStore, tables: CreditTables, mode: Mode) -> Result<()> {
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
