//! Batch mode: many deliveries, one transaction, one claim statement.
//!
//! [`BatchConsumer`] pulls up to `max_batch` deliveries (or what arrived within `linger` after
//! the first), claims all their ids with [`Store::claim_batch`], passes the fresh ones to
//! [`Handler::handle_batch`] in the same transaction (by default one [`Handler::handle`] each;
//! a handler can override it with multi-row statements), commits once and only then acks every
//! delivery of the batch.
//! When a handler fails (or the store fails mid-batch), the batch is rolled back and its
//! deliveries are processed one at a time by the per-message [`Consumer`], so the failing
//! message is isolated (retried or dead-lettered per its error kind) and the others apply once.
//! When the store is unavailable, the batch is held and retried whole, sharing the consumer's
//! [`StoreHealth`](crate::StoreHealth) breaker (no new batch is taken meanwhile).

use crate::consumer::{Consumer, DEFAULT_RETENTION, LatePolicy};
use crate::envelope::{Envelope, PayloadHash};
use crate::error::{Error, Result};
use crate::handler::Handler;
use crate::health::StoreHealth;
use crate::id::{ConsumerName, MessageId};
use crate::outcome::{DeadLetterReason, Handled, Outcome};
use crate::retry::{Backoff, RetryPolicy};
use crate::source::{Delivery, Source};
use crate::stats::{Stats, StatsSnapshot};
use crate::store::{Claim, Committed, DeadLetter, Store};
use futures::FutureExt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// Lets the batch runtime and its per-message fallback share one handler.
struct Shared<H>(Arc<H>);

impl<Tx, H: Handler<Tx>> Handler<Tx> for Shared<H> {
    fn handle(
        &self,
        tx: &mut Tx,
        message: &Envelope,
    ) -> impl Future<Output = Result<Handled>> + Send {
        self.0.handle(tx, message)
    }
}

/// What one message of a batch came to.
enum Settled {
    Done(Outcome),
    Conflict(PayloadHash),
}

/// What one message of a committed batch came to: settled messages carry their proof.
enum Committable {
    Done(Outcome, Committed),
    Conflict(PayloadHash),
}

/// Runs a [`Handler`] over batches of deliveries: one transaction and one claim statement per
/// batch, acks after the batch commits.
///
/// ```no_run
/// # use oncely_core::*;
/// # use std::time::Duration;
/// # async fn demo<S: Store, H: Handler<S::Tx>>(store: S, handler: H, source: MemorySource) -> Result<(), Error> {
/// let consumer = BatchConsumer::new(ConsumerName::new("billing")?, store, handler)
///     .max_batch(200)
///     .linger(Duration::from_millis(5));
/// let stats = consumer.run(source, tokio_util::sync::CancellationToken::new()).await?;
/// println!("applied {}", stats.applied);
/// # Ok(()) }
/// ```
pub struct BatchConsumer<S: Store, H> {
    single: Consumer<S, Shared<H>>,
    handler: Arc<H>,
    max_batch: usize,
    linger: Duration,
    late_window: Option<Duration>,
    counts: Arc<BatchCounts>,
}

#[derive(Debug, Default)]
struct BatchCounts {
    committed: AtomicU64,
    fallbacks: AtomicU64,
}

/// How batches went so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Batches committed in one transaction.
    pub committed: u64,
    /// Batches rolled back and processed one message at a time (a handler or the store failed).
    pub fallbacks: u64,
}

impl<S: Store, H: Handler<S::Tx>> BatchConsumer<S, H> {
    /// A batch consumer named `name` over `store`, running `handler`
    /// (defaults: batches of up to 100, 10 ms linger).
    pub fn new(name: ConsumerName, store: impl Into<Arc<S>>, handler: H) -> Self {
        let handler = Arc::new(handler);
        Self {
            single: Consumer::new(name, store, Shared(handler.clone())),
            handler,
            max_batch: 100,
            linger: Duration::from_millis(10),
            late_window: Some(DEFAULT_RETENTION),
            counts: Arc::default(),
        }
    }

    /// Most deliveries in one batch (at least 1; default 100).
    pub fn max_batch(mut self, n: usize) -> Self {
        self.max_batch = n.max(1);
        self
    }

    /// How long to wait for more deliveries after the first of a batch (default 10 ms).
    pub fn linger(mut self, linger: Duration) -> Self {
        self.linger = linger;
        self
    }

    /// Retry policy of the one-at-a-time fallback (see [`Consumer::retry`]).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.single = self.single.retry(policy);
        self
    }

    /// Late duplicate risks, as [`Consumer::late_after`]: with [`LatePolicy::Quarantine`],
    /// messages whose source time is older than `window` leave the batch and go through the
    /// per-message path, which dead-letters them (reason `late`) if their id is not claimed.
    pub fn late_after(mut self, window: Duration, policy: LatePolicy) -> Self {
        self.single = self.single.late_after(window, policy);
        self.late_window = (policy == LatePolicy::Quarantine).then_some(window);
        self
    }

    fn is_late(&self, message: &Envelope) -> bool {
        let (Some(window), Some(sent)) = (self.late_window, message.meta().source_time) else {
            return false;
        };
        crate::consumer::age(sent) > window
    }

    /// The consumer's name.
    pub fn name(&self) -> &ConsumerName {
        self.single.name()
    }

    /// The store.
    pub fn store(&self) -> &Arc<S> {
        self.single.store()
    }

    /// Live counters (batch and fallback together).
    pub fn stats(&self) -> Arc<Stats> {
        self.single.stats()
    }

    /// The store's health as this consumer sees it (shared with the per-message fallback).
    pub fn health(&self) -> Arc<StoreHealth> {
        self.single.health()
    }

    /// Batches committed whole vs. processed one at a time after a failure.
    pub fn batch_stats(&self) -> BatchStats {
        BatchStats {
            committed: self.counts.committed.load(Relaxed),
            fallbacks: self.counts.fallbacks.load(Relaxed),
        }
    }

    /// Pulls batches from `source` until it is exhausted or `shutdown` is cancelled. On
    /// shutdown the batch being collected is still processed; nothing uncommitted is acked.
    /// While the store is unavailable the batch in hand is held and retried (no new batch is
    /// taken) and handed back only on shutdown.
    pub async fn run<Src: Source>(
        &self,
        mut source: Src,
        shutdown: CancellationToken,
    ) -> Result<StatsSnapshot> {
        let mut exhausted = false;
        self.health().publish();
        while !exhausted && !shutdown.is_cancelled() {
            let first = tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                next = source.next() => next,
            };
            let mut batch = match first {
                Ok(Some(delivery)) => vec![delivery],
                Ok(None) => break,
                Err(e) => {
                    warn!(consumer = %self.name(), error = %e, "source failed; retrying in 200 ms");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            let deadline = Instant::now() + self.linger;
            while batch.len() < self.max_batch {
                let next = tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => break,
                    next = tokio::time::timeout_at(deadline, source.next()) => next,
                };
                match next {
                    Err(_lingered) => break,
                    Ok(Ok(Some(delivery))) => batch.push(delivery),
                    Ok(Ok(None)) => {
                        exhausted = true;
                        break;
                    }
                    Ok(Err(e)) => {
                        warn!(consumer = %self.name(), error = %e, "source failed mid-batch");
                        break;
                    }
                }
            }
            self.process_batch_until(batch, &shutdown).await;
        }
        Ok(self.stats().snapshot())
    }

    /// Processes one batch through the contract and settles every delivery; returns the
    /// outcomes in delivery order.
    pub async fn process_batch(&self, deliveries: Vec<Delivery>) -> Vec<Outcome> {
        self.process_batch_until(deliveries, &CancellationToken::new())
            .await
    }

    /// [`BatchConsumer::process_batch`], handing held deliveries back if `stop` is cancelled
    /// while the store fails.
    async fn process_batch_until(
        &self,
        deliveries: Vec<Delivery>,
        stop: &CancellationToken,
    ) -> Vec<Outcome> {
        let mut outcomes: Vec<Option<Outcome>> = Vec::with_capacity(deliveries.len());
        let mut valid = Vec::with_capacity(deliveries.len());
        let mut pending = Vec::with_capacity(deliveries.len());
        for (at, delivery) in deliveries.into_iter().enumerate() {
            outcomes.push(None);
            let raw = delivery.message();
            let message = MessageId::parse_optional(raw.id.as_deref())
                .map(|id| Envelope::from_parts(id, raw.payload.clone(), raw.meta.clone()));
            match message {
                Ok(message) if !self.is_late(&message) && delivery.defect().is_none() => {
                    valid.push(message);
                    pending.push((at, delivery));
                }
                // Bad ids, undecodable envelopes and late messages: the per-message path
                // dead-letters them.
                _ => outcomes[at] = Some(self.single.process_until(delivery, stop).await),
            }
        }
        if !valid.is_empty() {
            match self.attempt_held(&valid, pending.len(), stop).await {
                Ok(settled) => {
                    self.counts.committed.fetch_add(1, Relaxed);
                    let stats = self.stats();
                    let rows = pending.into_iter().zip(&valid).zip(settled);
                    for (((at, delivery), message), settled) in rows {
                        stats.received();
                        let outcome = match settled {
                            Committable::Done(outcome, proof) => {
                                self.ack(delivery, proof, outcome).await
                            }
                            Committable::Conflict(stored) => {
                                self.conflict(delivery, stored, message.payload_hash(), stop)
                                    .await
                            }
                        };
                        stats.record(&outcome);
                        crate::metrics::outcome(self.name(), &outcome);
                        outcomes[at] = Some(outcome);
                    }
                }
                Err(e) if stop.is_cancelled() && e.is_unavailable() => {
                    for (at, delivery) in pending {
                        outcomes[at] = Some(self.hand_back(delivery, &e).await);
                    }
                }
                Err(e) => {
                    self.counts.fallbacks.fetch_add(1, Relaxed);
                    debug!(consumer = %self.name(), error = %e, "batch rolled back; processing its messages one at a time");
                    for (at, delivery) in pending {
                        outcomes[at] = Some(self.single.process_until(delivery, stop).await);
                    }
                }
            }
        }
        outcomes
            .into_iter()
            .map(|o| o.expect("every delivery settled"))
            .collect()
    }

    /// [`Self::attempt`], held and retried while the store is unavailable (one probe at a
    /// time, backing off). Returns the unavailable error only if `stop` came first.
    async fn attempt_held(
        &self,
        batch: &[Envelope],
        deliveries: usize,
        stop: &CancellationToken,
    ) -> Result<Vec<Committable>> {
        let health = self.health();
        let _held = health.track(deliveries);
        let mut backoff = Backoff::store();
        let mut probe = None;
        loop {
            let started = std::time::Instant::now();
            let result = self.attempt(batch).await;
            drop(probe.take());
            match result {
                Err(e) if e.is_unavailable() => {
                    self.stats().store_retried();
                    match health.hold(&e, &mut backoff, stop).await {
                        // The next attempt runs as the only probe (or after recovery).
                        Some(turn) => probe = turn,
                        None => return Err(e),
                    }
                }
                other => {
                    if other.is_ok() {
                        health.succeeded(started);
                    }
                    return other;
                }
            }
        }
    }

    /// begin → claim_batch → handler for each fresh message → commit. Any failure rolls the
    /// whole batch back and is returned.
    async fn attempt(&self, batch: &[Envelope]) -> Result<Vec<Committable>> {
        let store = self.store();
        let mut tx = store.begin().await?;
        let items: Vec<(MessageId, PayloadHash)> = batch
            .iter()
            .map(|m| (m.id().clone(), m.payload_hash()))
            .collect();
        let claims = match store.claim_batch(&mut tx, self.name(), &items).await {
            Ok(claims) if claims.len() == items.len() => claims,
            Ok(claims) => {
                let _ = store.rollback(tx).await;
                return Err(Error::permanent(format!(
                    "claim_batch returned {} claims for {} messages",
                    claims.len(),
                    items.len()
                )));
            }
            Err(e) => {
                let _ = store.rollback(tx).await;
                return Err(e);
            }
        };
        let mut settled: Vec<Option<Settled>> = Vec::with_capacity(batch.len());
        let mut fresh = Vec::new();
        for (at, claim) in claims.into_iter().enumerate() {
            settled.push(match claim {
                Claim::Duplicate => Some(Settled::Done(Outcome::Duplicate)),
                Claim::Conflict { stored } => Some(Settled::Conflict(stored)),
                Claim::Fresh => {
                    fresh.push(at);
                    None
                }
            });
        }
        if !fresh.is_empty() {
            let messages: Vec<Envelope> = fresh.iter().map(|&at| batch[at].clone()).collect();
            let run = AssertUnwindSafe(self.handler.handle_batch(&mut tx, &messages))
                .catch_unwind()
                .await;
            let handled = match run {
                Ok(Ok(handled)) if handled.len() == messages.len() => handled,
                Ok(Ok(handled)) => {
                    let _ = store.rollback(tx).await;
                    return Err(Error::permanent(format!(
                        "handle_batch returned {} results for {} messages",
                        handled.len(),
                        messages.len()
                    )));
                }
                Ok(Err(e)) => {
                    let _ = store.rollback(tx).await;
                    return Err(e);
                }
                Err(_panic) => {
                    drop(tx); // rolls back
                    return Err(Error::permanent("a handler panicked in the batch"));
                }
            };
            for (at, handled) in fresh.into_iter().zip(handled) {
                settled[at] = Some(Settled::Done(match handled {
                    Handled::Applied => Outcome::Applied,
                    Handled::Stale => Outcome::Stale,
                }));
            }
        }
        store.commit(tx).await?;
        // One commit covers every delivery of the batch: each gets its own proof of it.
        Ok(settled
            .into_iter()
            .map(|s| match s.expect("every message settled") {
                Settled::Done(outcome) => Committable::Done(outcome, Committed::new()),
                Settled::Conflict(stored) => Committable::Conflict(stored),
            })
            .collect())
    }

    async fn ack(&self, delivery: Delivery, proof: Committed, outcome: Outcome) -> Outcome {
        if let Err(e) = delivery.ack(proof).await {
            // Committed but not acked: the redelivery will be a Duplicate. Nothing is lost.
            warn!(error = %e, "ack failed after commit; the broker will redeliver a duplicate");
            self.stats().ack_failed();
        }
        outcome
    }

    async fn hand_back(&self, delivery: Delivery, error: &Error) -> Outcome {
        warn!(error = %error, "shutting down while the store fails; delivery handed back to the broker");
        if let Err(e) = delivery.nack().await {
            warn!(error = %e, "nack failed; the broker redelivers after its timeout");
        }
        let outcome = Outcome::Retry(Error::new(error.kind(), error.to_string()));
        self.stats().received();
        self.stats().record(&outcome);
        crate::metrics::outcome(self.name(), &outcome);
        outcome
    }

    async fn conflict(
        &self,
        delivery: Delivery,
        stored: PayloadHash,
        received: PayloadHash,
        stop: &CancellationToken,
    ) -> Outcome {
        let letter = DeadLetter {
            consumer: self.name().clone(),
            message: delivery.message().clone(),
            reason: DeadLetterReason::Conflict { stored, received },
            attempts: 1,
        };
        match self.single.store_dead_letter(&letter, stop).await {
            Ok(proof) => {
                warn!(reason = "conflict", detail = %letter.reason, "dead-lettered");
                self.ack(delivery, proof, Outcome::Conflict { stored, received })
                    .await
            }
            Err(e) => {
                warn!(error = %e, "shutting down while storing a conflict; message handed back to the broker");
                if let Err(e) = delivery.nack().await {
                    warn!(error = %e, "nack failed; the broker redelivers after its timeout");
                }
                Outcome::Retry(e)
            }
        }
    }
}
