//! The deferred mode: [`Deferred`] verifies a request, stores it in a durable queue (one
//! committed insert) and answers 202 at once; a consumer drains the queue into the handler
//! later, through the same inbox. For senders with short timeouts (GitHub waits 10 s) and
//! handlers that take longer.

use crate::intake::Intake;
use crate::response;
use crate::verify::Verifier;
use axum::extract::Request;
use axum::response::Response;
use axum::routing::MethodRouter;
use oncely_core::{IntoConsumerName, RawEnvelope};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Where a [`Deferred`] endpoint stores each verified delivery. `Ok` means committed: the
/// sender is told 202 only then. With the feature `sql-queue`, oncely-sql-queue's
/// PostgreSQL `SqlQueue` is one.
pub trait Enqueue: Send + Sync + 'static {
    /// Stores `message` durably (its id, body, source time and headers).
    fn enqueue(
        &self,
        message: &RawEnvelope,
    ) -> impl Future<Output = oncely_core::Result<()>> + Send;
}

#[cfg(feature = "sql-queue")]
impl Enqueue for oncely_sql_queue::SqlQueue {
    async fn enqueue(&self, message: &RawEnvelope) -> oncely_core::Result<()> {
        oncely_sql_queue::SqlQueue::enqueue(self, std::slice::from_ref(message)).await
    }
}

/// One webhook source in deferred mode: verify, enqueue, 202. Every request that passes
/// verification is stored, retries included; the consumer draining the queue (with this
/// source's name, so the same inbox) applies each event once and dead-letters conflicts and
/// permanent failures, as the inline [`Endpoint`](crate::Endpoint) does in the request.
///
/// | request | answer | written |
/// |---|---|---|
/// | verified | 202 after the insert committed | one queue row |
/// | the queue's store fails | 503 + `Retry-After` | nothing |
/// | refused (signature, timestamp, id, body) | 400 / 401 / 413 | nothing |
///
/// ```no_run
/// # #[cfg(feature = "sql-queue")]
/// # async fn f<H: oncely_core::Handler<oncely_sql::AnyTx>>(handler: H) -> oncely_core::Result<()> {
/// use oncely_sql_queue::{Dequeue, SqlQueue};
/// use oncely_webhook::{Deferred, Verifier};
///
/// let store = oncely_sql::PgStore::connect("postgres://localhost/app").await?;
/// store.migrate_with(&[&oncely_sql::INBOX, &oncely_sql_queue::MIGRATIONS]).await?;
/// let queue = SqlQueue::of(&store);
/// let github = Deferred::new("github", queue.clone(), Verifier::github(["s3cret"]).unwrap());
/// let app: axum::Router = axum::Router::new().route("/hooks/github", github.into_route());
/// // Elsewhere (or in the same process): drain the queue with the same name.
/// let consumer = oncely_core::Consumer::new(
///     "github",
///     oncely_sql::AnyStore::from(store),
///     Dequeue::new(&queue, handler),
/// );
/// consumer.run_until_signal(queue.source(std::time::Duration::from_secs(30))).await?;
/// # let _ = app; Ok(()) }
/// ```
pub struct Deferred<Q> {
    intake: Intake,
    queue: Arc<Q>,
    retry_after: Duration,
}

impl<Q> Clone for Deferred<Q> {
    fn clone(&self) -> Self {
        Self {
            intake: self.intake.clone(),
            queue: self.queue.clone(),
            retry_after: self.retry_after,
        }
    }
}

impl<Q: Enqueue> Deferred<Q> {
    /// The source `name` (the name of the consumer that drains `queue`, for metrics and
    /// logs), storing verified requests in `queue`.
    ///
    /// # Panics
    ///
    /// If `name` is text that is not a valid consumer name (see [`IntoConsumerName`]).
    pub fn new(name: impl IntoConsumerName, queue: Q, verifier: Verifier) -> Self {
        Self {
            intake: Intake::new(name.into_consumer_name(), verifier),
            queue: Arc::new(queue),
            retry_after: crate::DEFAULT_RETRY_AFTER,
        }
    }

    /// The largest body accepted (default [`DEFAULT_BODY_LIMIT`](crate::DEFAULT_BODY_LIMIT)).
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.intake.body_limit = bytes;
        self
    }

    /// The `Retry-After` of a 503 (default [`DEFAULT_RETRY_AFTER`](crate::DEFAULT_RETRY_AFTER)).
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.retry_after = after;
        self
    }

    /// An axum route answering `POST` with [`Deferred::receive`].
    pub fn into_route<St: Clone + Send + Sync + 'static>(self) -> MethodRouter<St> {
        let endpoint = Arc::new(self);
        axum::routing::post(move |request: Request| async move { endpoint.receive(request).await })
    }

    /// Answers one request: reads, verifies, enqueues; 202 once the row is committed.
    pub async fn receive(&self, request: Request) -> Response {
        let envelope = match self.intake.accept(request).await {
            Ok(envelope) => envelope,
            Err(refused) => return refused,
        };
        match self.queue.enqueue(&envelope).await {
            Ok(()) => response::queued(),
            Err(e) => {
                tracing::debug!(error = %e, "webhook not enqueued");
                self.intake.refusals.unavailable();
                response::unavailable(self.retry_after)
            }
        }
    }
}
