//! [`Endpoint`]: one webhook source mounted on a path. A request is read (up to the body
//! limit), verified, and only then made a [`Delivery`] for oncely's runtime
//! ([`Consumer::process_until`]): the claim `(source's consumer, event id)`, the handler's
//! effect, the commit, the dead letters, the store's circuit breaker are the runtime's, as
//! for a broker delivery. The answer comes from how the runtime settled it (`response.rs`).

use crate::ack::Settlement;
use crate::intake::Intake;
use crate::response;
use crate::verify::Verifier;
use axum::extract::Request;
use axum::response::Response;
use axum::routing::MethodRouter;
use oncely_core::{
    CancellationToken, Consumer, Delivery, Handler, IntoConsumerName, LatePolicy, Outcome,
    RetryPolicy, Store,
};
use std::sync::Arc;
use std::time::Duration;
use tracing::warn;

/// The default time a request may spend retrying a transient failure or waiting out a store
/// outage before it is answered 503: 8 s, under GitHub's 10 s timeout.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(8);

/// The default `Retry-After` of a 5xx: 10 s.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(10);

/// One webhook source: its consumer name (the inbox key's first half), the store, the
/// handler that writes the effect in the claim's transaction, and the [`Verifier`].
///
/// | request | answer | written |
/// |---|---|---|
/// | fresh event | 200 after the commit | claim + effect, one transaction |
/// | same id, same body (a retry) | 200 | nothing |
/// | same id, another body | 200 | dead letter `conflict` |
/// | handler fails permanently (or panics, or `Json` cannot decode) | 200 | dead letter with the reason |
/// | handler fails transiently, or the store is down, until the deadline | 503 + `Retry-After` | nothing |
/// | bad signature, stale/future timestamp, no id, body over the limit or unreadable | 400 / 401 / 413 | nothing |
///
/// ```no_run
/// use oncely_core::{Envelope, Error, Handled, Handler};
/// use oncely_sql::{AnyStore, AnyTx};
/// use oncely_webhook::{Endpoint, Verifier};
///
/// struct Paid;
/// impl Handler<AnyTx> for Paid {
///     async fn handle(&self, tx: &mut AnyTx, event: &Envelope) -> Result<Handled, Error> {
///         let sql = "INSERT INTO payments (event_id) VALUES ($1)";
///         tx.execute(sql, &[event.id().as_str().into()]).await?;
///         Ok(Handled::Applied)
///     }
/// }
///
/// # async fn f() -> oncely_core::Result<()> {
/// let store = AnyStore::connect("sqlite:app.db").await?;
/// store.migrate().await?;
/// let verifier = Verifier::stripe([std::env::var("STRIPE_WEBHOOK_SECRET").unwrap()]).unwrap();
/// let stripe = Endpoint::new("stripe", store, Paid, verifier);
/// stripe.check_ready().await?;
/// let app: axum::Router = axum::Router::new().route("/hooks/stripe", stripe.into_route());
/// # let _ = app; Ok(()) }
/// ```
pub struct Endpoint<S: Store, H> {
    consumer: Consumer<S, H>,
    intake: Intake,
    deadline: Duration,
    retry_after: Duration,
}

impl<S: Store, H> Clone for Endpoint<S, H> {
    fn clone(&self) -> Self {
        Self {
            consumer: self.consumer.clone(),
            intake: self.intake.clone(),
            deadline: self.deadline,
            retry_after: self.retry_after,
        }
    }
}

impl<S: Store, H: Handler<S::Tx>> Endpoint<S, H> {
    /// The source `name` over `store`, running `handler`, checking requests with `verifier`.
    ///
    /// Transient failures are retried within the request (50 ms doubling up to 1 s) until
    /// the [deadline](Self::deadline); then the sender is told 503 and retries on its own
    /// schedule. Nothing is dead-lettered for a transient failure: the sender's retries are
    /// the redeliveries.
    ///
    /// # Panics
    ///
    /// If `name` is text that is not a valid consumer name (see [`IntoConsumerName`]).
    pub fn new(
        name: impl IntoConsumerName,
        store: impl Into<Arc<S>>,
        handler: H,
        verifier: Verifier,
    ) -> Self {
        let consumer = Consumer::new(name, store, handler).group_commit(1).retry(
            RetryPolicy::default()
                .max_attempts(u32::MAX)
                .max_delay(Duration::from_secs(1)),
        );
        Self {
            intake: Intake::new(consumer.name().clone(), verifier),
            consumer,
            deadline: DEFAULT_DEADLINE,
            retry_after: DEFAULT_RETRY_AFTER,
        }
    }

    /// The largest body accepted (default [`DEFAULT_BODY_LIMIT`](crate::DEFAULT_BODY_LIMIT),
    /// 1 MiB); a larger one is answered 413 without being read to its end.
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.intake.body_limit = bytes;
        self
    }

    /// How long a request may retry a transient failure or wait for a failing store before
    /// it is answered 503 (default [`DEFAULT_DEADLINE`], 8 s). Keep it under the sender's
    /// timeout (GitHub 10 s, Standard Webhooks senders about 15 s, Stripe about 20 s).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The `Retry-After` of a 5xx answer (default [`DEFAULT_RETRY_AFTER`]). Senders with a
    /// schedule of their own may ignore it.
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.retry_after = after;
        self
    }

    /// The inbox's prune window as configured for this source (`oncely prune --older-than`;
    /// [`DEFAULT_RETENTION`](oncely_core::DEFAULT_RETENTION), 7 days, when not called). A window shorter than the sender's
    /// retry horizon (3 days) lets a late retry find its id pruned and apply again: that is
    /// logged at WARN here, once, at start. An event whose source time (Stripe's `created`)
    /// is older than the window is quarantined as `late` instead of applied.
    pub fn prune_window(mut self, window: Duration) -> Self {
        let horizon = self.intake.verifier.provider().retry_horizon();
        if window < horizon {
            warn!(
                consumer = %self.consumer.name(),
                provider = self.intake.verifier.provider().name(),
                window_s = window.as_secs(),
                horizon_s = horizon.as_secs(),
                "the inbox prune window ({} s) is shorter than the sender's retry horizon ({} s): a retry after the window applies the event again; prune webhook sources no sooner than {} days",
                window.as_secs(),
                horizon.as_secs(),
                horizon.as_secs() / 86_400
            );
        }
        self.consumer = self.consumer.late_after(window, LatePolicy::Quarantine);
        self
    }

    /// The runtime this source's deliveries go through (its stats and store health).
    pub fn consumer(&self) -> &Consumer<S, H> {
        &self.consumer
    }

    /// The source's verifier.
    pub fn verifier(&self) -> &Verifier {
        &self.intake.verifier
    }

    /// The store's start check ([`Store::check_ready`]): missing tables or permissions are
    /// an error to fix before serving.
    pub async fn check_ready(&self) -> oncely_core::Result<()> {
        self.consumer.store().check_ready().await
    }

    /// An axum route answering `POST` with [`Endpoint::receive`]:
    /// `Router::new().route("/hooks/stripe", endpoint.into_route())`.
    pub fn into_route<St: Clone + Send + Sync + 'static>(self) -> MethodRouter<St> {
        let endpoint = Arc::new(self);
        axum::routing::post(move |request: Request| async move { endpoint.receive(request).await })
    }

    /// Answers one request: reads the body (up to the limit), verifies it, runs the delivery
    /// through the runtime, and answers from how it was settled.
    pub async fn receive(&self, request: Request) -> Response {
        let envelope = match self.intake.accept(request).await {
            Ok(envelope) => envelope,
            Err(refused) => return refused,
        };
        // As the runtime's intake: while the store fails, one delivery probes it and the
        // others are not taken (the sender keeps them and retries).
        let health = self.consumer.health();
        if !health.is_healthy() && health.in_flight() > 0 {
            self.intake.refusals.unavailable();
            return response::unavailable(self.retry_after);
        }
        let settlement = Settlement::default();
        let delivery = Delivery::new(envelope, 0, settlement.acker());
        let outcome = self.settle(delivery).await;
        response::settled(&outcome, settlement.get(), self.retry_after)
    }

    /// Runs the delivery in a task of its own, so a sender that hangs up mid-request does
    /// not cut the transaction or the dead letter short; the deadline hands it back.
    async fn settle(&self, delivery: Delivery) -> Outcome {
        let stop = CancellationToken::new();
        let consumer = self.consumer.clone();
        let deadline = self.deadline;
        let timer = {
            let stop = stop.clone();
            tokio::spawn(async move {
                tokio::time::sleep(deadline).await;
                stop.cancel();
            })
        };
        let run = tokio::spawn(async move { consumer.process_until(delivery, &stop).await });
        let outcome = run.await.unwrap_or(Outcome::Abandoned);
        timer.abort();
        outcome
    }
}
