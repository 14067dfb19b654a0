//! The consumer runtime: receive → begin → claim → handler → commit → ack, for each delivery.

use crate::chaos::Chaos;
use crate::envelope::{Envelope, PayloadHash};
use crate::error::Error;
use crate::handler::Handler;
use crate::health::{Probe, StoreHealth};
use crate::id::{ConsumerName, MessageId};
use crate::outcome::{DeadLetterReason, Handled, Outcome, Step};
use crate::retry::{Backoff, RetryPolicy};
use crate::source::{Delivery, Source};
use crate::stats::{Stats, StatsSnapshot};
use crate::store::{Claim, Committed, DeadLetter, Store};
use futures::FutureExt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info_span, warn};

/// The default inbox retention window, 7 days: the pruner keeps ids at least this long
/// (`oncely_ops::retention`), and a consumer quarantines, by default, a fresh message whose
/// source time (the producer's, or the broker's when the producer set none) is older than it.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// What to do with a message whose source time is older than the retention window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LatePolicy {
    /// Dead-letter it with reason `late` (default): its id may have been pruned already.
    #[default]
    Quarantine,
    /// Apply it anyway (only if the effect is naturally idempotent).
    Apply,
}

/// Settings of a [`Consumer`].
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    concurrency: usize,
    retry: RetryPolicy,
    late_window: Option<Duration>,
    late_policy: LatePolicy,
    unsafe_ack_before_commit: bool,
    check_inbox_first: bool,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            concurrency: 4,
            retry: RetryPolicy::default(),
            late_window: Some(DEFAULT_RETENTION),
            late_policy: LatePolicy::default(),
            unsafe_ack_before_commit: false,
            check_inbox_first: false,
        }
    }
}

enum Attempt {
    Done(Outcome, Committed),
    Conflict(PayloadHash),
    Late(Duration, Duration),
    Failed { error: Error, in_handler: bool },
    Panicked(String),
    Crashed(Step),
}

/// Runs a [`Handler`] over deliveries with the oncely contract.
///
/// ```no_run
/// # use oncely_core::*;
/// # async fn demo<S: Store, H: Handler<S::Tx>>(store: S, handler: H, source: MemorySource) -> Result<(), Error> {
/// let consumer = Consumer::new(ConsumerName::new("billing")?, store, handler).concurrency(8);
/// let shutdown = tokio_util::sync::CancellationToken::new();
/// let stats = consumer.run(source, shutdown).await?;
/// println!("applied {}", stats.applied);
/// # Ok(()) }
/// ```
pub struct Consumer<S: Store, H> {
    name: ConsumerName,
    store: Arc<S>,
    handler: Arc<H>,
    config: ConsumerConfig,
    chaos: Option<Arc<dyn Chaos>>,
    stats: Arc<Stats>,
    health: Arc<StoreHealth>,
}

impl<S: Store, H> Clone for Consumer<S, H> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            store: self.store.clone(),
            handler: self.handler.clone(),
            config: self.config.clone(),
            chaos: self.chaos.clone(),
            stats: self.stats.clone(),
            health: self.health.clone(),
        }
    }
}

impl<S: Store, H: Handler<S::Tx>> Consumer<S, H> {
    /// A consumer named `name` (the inbox key's first half) over `store`, running `handler`.
    pub fn new(name: ConsumerName, store: impl Into<Arc<S>>, handler: H) -> Self {
        Self {
            health: Arc::new(StoreHealth::new(name.clone())),
            name,
            store: store.into(),
            handler: Arc::new(handler),
            config: ConsumerConfig::default(),
            chaos: None,
            stats: Arc::default(),
        }
    }

    /// Deliveries processed at once (default 4).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.config.concurrency = n.max(1);
        self
    }

    /// Reads the inbox before opening a transaction (default off): a delivery whose id is
    /// already claimed with the same payload hash is acked as `Duplicate` without a write
    /// transaction ([`Store::committed_claim`]). Costs one read per fresh message; pays off
    /// where duplicates are common (redelivery after crashes, replays) and on SQLite, where
    /// every claim takes the database's write lock.
    ///
    /// ```
    /// # use oncely_core::{Consumer, ConsumerName};
    /// # fn f<S: oncely_core::Store, H: oncely_core::Handler<S::Tx>>(store: S, handler: H) {
    /// let consumer = Consumer::new(ConsumerName::new("billing").unwrap(), store, handler)
    ///     .check_inbox_first(true);
    /// # }
    /// ```
    pub fn check_inbox_first(mut self, on: bool) -> Self {
        self.config.check_inbox_first = on;
        self
    }

    /// Retry policy for transient failures (default: 5 attempts, 50 ms doubling, jitter).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.config.retry = policy;
        self
    }

    /// Messages whose source time is older than `window` are late duplicate risks,
    /// handled by `policy` (see [`LatePolicy`]). Set it to the inbox retention window; the
    /// default is [`DEFAULT_RETENTION`] with [`LatePolicy::Quarantine`], which agrees with the
    /// pruner's default. `LatePolicy::Apply` turns the check off (naturally idempotent effects).
    pub fn late_after(mut self, window: Duration, policy: LatePolicy) -> Self {
        self.config.late_window = Some(window);
        self.config.late_policy = policy;
        self
    }

    /// Injects crashes between steps (testing).
    pub fn chaos(mut self, chaos: Arc<dyn Chaos>) -> Self {
        self.chaos = Some(chaos);
        self
    }

    /// TESTING ONLY: breaks the contract by acking before the commit, so a crash between
    /// the two loses the message. Exists to prove that checkers can fail.
    #[doc(hidden)]
    pub fn unsafe_ack_before_commit(mut self, enabled: bool) -> Self {
        self.config.unsafe_ack_before_commit = enabled;
        self
    }

    /// The consumer's name.
    pub fn name(&self) -> &ConsumerName {
        &self.name
    }

    /// The store.
    pub fn store(&self) -> &Arc<S> {
        &self.store
    }

    /// Live counters.
    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// The store's health as this consumer sees it (its circuit breaker).
    pub fn health(&self) -> Arc<StoreHealth> {
        self.health.clone()
    }

    /// Pulls deliveries from `source` until it is exhausted or `shutdown` is cancelled,
    /// processing up to `concurrency` at once. On shutdown, in-flight deliveries finish;
    /// nothing uncommitted is acked.
    ///
    /// While the store fails, no new delivery is taken: the ones in flight are held and
    /// retried (one probe at a time, backing off up to 30 s) until the store recovers, and
    /// handed back to the source only on shutdown.
    pub async fn run<Src: Source>(
        &self,
        mut source: Src,
        shutdown: CancellationToken,
    ) -> crate::Result<StatsSnapshot> {
        let permits = Arc::new(Semaphore::new(self.config.concurrency));
        let mut tasks = JoinSet::new();
        self.health.publish();
        loop {
            let permit = tokio::select! {
                _ = shutdown.cancelled() => break,
                p = permits.clone().acquire_owned() => p.expect("semaphore never closed"),
            };
            // Intake pauses while the store fails; with nothing in flight, one delivery goes
            // in as the probe.
            while !self.health.is_healthy() && !tasks.is_empty() {
                tokio::select! {
                    _ = self.health.until_healthy(&shutdown) => break,
                    Some(done) = tasks.join_next() => {
                        if let Err(e) = done {
                            warn!(consumer = %self.name, error = %e, "delivery task failed");
                        }
                    }
                }
            }
            if shutdown.is_cancelled() {
                break;
            }
            let next = tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                next = source.next() => next,
            };
            match next {
                Ok(Some(delivery)) => {
                    let me = self.clone();
                    let stop = shutdown.clone();
                    tasks.spawn(async move {
                        let _permit = permit;
                        me.process_until(delivery, &stop).await
                    });
                }
                Ok(None) => break,
                Err(e) => {
                    warn!(consumer = %self.name, error = %e, "source failed; retrying in 200 ms");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
            while let Some(done) = tasks.try_join_next() {
                if let Err(e) = done {
                    warn!(consumer = %self.name, error = %e, "delivery task failed");
                }
            }
        }
        while let Some(done) = tasks.join_next().await {
            if let Err(e) = done {
                warn!(consumer = %self.name, error = %e, "delivery task failed");
            }
        }
        Ok(self.stats.snapshot())
    }

    /// Processes one delivery through the whole contract and settles it. While the store
    /// fails, the delivery is held until it recovers (see [`Consumer::process_until`]).
    pub async fn process(&self, delivery: Delivery) -> Outcome {
        self.process_until(delivery, &CancellationToken::new())
            .await
    }

    /// [`Consumer::process`], handing the delivery back ([`Outcome::Retry`]) if `stop` is
    /// cancelled while it is held for a failing store or waiting to retry.
    pub async fn process_until(&self, delivery: Delivery, stop: &CancellationToken) -> Outcome {
        let _in_flight = self.health.track(1);
        let span = info_span!(
            "oncely.delivery",
            consumer = %self.name,
            message_id = delivery.message().display_id().unwrap_or_default(),
            attempt = delivery.attempt(),
            outcome = tracing::field::Empty,
        );
        let outcome = self.settle(delivery, stop).instrument(span.clone()).await;
        span.record("outcome", outcome.name());
        self.stats.record(&outcome);
        crate::metrics::outcome(&self.name, &outcome);
        outcome
    }

    fn crash(&self, step: Step, delivery: &Delivery) -> bool {
        self.chaos.as_ref().is_some_and(|c| {
            c.crash_after(step, delivery.message().id.as_deref(), delivery.attempt())
        })
    }

    async fn settle(&self, delivery: Delivery, stop: &CancellationToken) -> Outcome {
        self.stats.received();
        if self.crash(Step::Received, &delivery) {
            return Outcome::Crashed(Step::Received);
        }
        if let Some(why) = delivery.defect() {
            let reason = DeadLetterReason::UndecodableEnvelope(why.to_owned());
            return self.dead_letter(delivery, reason, 1, stop).await;
        }
        let raw = delivery.message();
        let id = match MessageId::parse_optional(raw.id.as_deref()) {
            Ok(id) => id,
            Err(e) => {
                return self
                    .dead_letter(delivery, DeadLetterReason::BadId(e), 1, stop)
                    .await;
            }
        };
        let envelope = Envelope::from_parts(id, raw.payload.clone(), raw.meta.clone());
        let mut delivery = Some(delivery);
        let mut delays = self.config.retry.delays();
        let mut attempt = 1;
        let mut store_backoff = Backoff::store();
        let mut probe: Probe<'_> = None;
        loop {
            let started = Instant::now();
            let result = self.attempt(&envelope, &mut delivery).await;
            drop(probe.take());
            if !matches!(result, Attempt::Crashed(_) | Attempt::Failed { .. }) {
                self.health.succeeded(started);
            }
            let Some(current) = delivery.take() else {
                // Only the unsafe testing mode acks before the commit.
                return match result {
                    Attempt::Done(outcome, _) => outcome,
                    Attempt::Crashed(step) => Outcome::Crashed(step),
                    _ => Outcome::Retry(Error::transient(
                        "unsafe mode: acked, then the commit failed",
                    )),
                };
            };
            let reason = match result {
                Attempt::Done(outcome, proof) => return self.ack(current, proof, outcome).await,
                Attempt::Crashed(step) => return Outcome::Crashed(step),
                Attempt::Conflict(stored) => {
                    let received = envelope.payload_hash();
                    let reason = DeadLetterReason::Conflict { stored, received };
                    return match self.dead_letter(current, reason, attempt, stop).await {
                        Outcome::DeadLettered(_) => Outcome::Conflict { stored, received },
                        other => other,
                    };
                }
                Attempt::Late(age, window) => DeadLetterReason::Late { age, window },
                Attempt::Panicked(msg) => DeadLetterReason::Panicked(msg),
                Attempt::Failed { error, in_handler } if error.is_unavailable() || !in_handler => {
                    // The store failed (or is unavailable to the handler): hold the delivery.
                    match self.hold(&error, &mut store_backoff, stop).await {
                        Some(turn) => {
                            probe = turn;
                            delivery = Some(current);
                            continue;
                        }
                        None => return self.nack(current, error).await,
                    }
                }
                Attempt::Failed { error, .. } => {
                    self.health.succeeded(started);
                    if error.is_transient() {
                        if let Some(delay) = delays.next() {
                            debug!(error = %error, ?delay, attempt, "transient failure; retrying");
                            self.stats.retried();
                            crate::metrics::retry(&self.name);
                            attempt += 1;
                            delivery = Some(current);
                            tokio::select! {
                                _ = tokio::time::sleep(delay) => continue,
                                _ = stop.cancelled() => return self.nack(delivery.take().expect("set above"), error).await,
                            }
                        }
                        DeadLetterReason::AttemptsExhausted {
                            attempts: attempt,
                            last_error: error.to_string(),
                        }
                    } else {
                        DeadLetterReason::Permanent(error.to_string())
                    }
                }
            };
            return self.dead_letter(current, reason, attempt, stop).await;
        }
    }

    /// One pass of begin → claim → handler → commit. Acks nothing (except in unsafe mode).
    async fn attempt(&self, envelope: &Envelope, delivery: &mut Option<Delivery>) -> Attempt {
        let d = delivery.as_ref().expect("delivery present");
        let store_err = |error| Attempt::Failed {
            error,
            in_handler: false,
        };
        let hash = envelope.payload_hash();
        if self.config.check_inbox_first {
            match self
                .store
                .committed_claim(&self.name, envelope.id(), hash)
                .await
            {
                Ok(true) => return Attempt::Done(Outcome::Duplicate, Committed::new()),
                Ok(false) => {}
                Err(e) => return store_err(e),
            }
        }
        let mut tx = match self.store.begin().await {
            Ok(tx) => tx,
            Err(e) => return store_err(e),
        };
        if self.crash(Step::Begun, d) {
            return Attempt::Crashed(Step::Begun);
        }
        let claim = match self
            .store
            .claim(&mut tx, &self.name, envelope.id(), hash)
            .await
        {
            Ok(c) => c,
            Err(e) => return store_err(e),
        };
        if self.crash(Step::Claimed, d) {
            return Attempt::Crashed(Step::Claimed);
        }
        let outcome = match claim {
            Claim::Conflict { stored } => {
                let _ = self.store.rollback(tx).await;
                return Attempt::Conflict(stored);
            }
            Claim::Duplicate => Outcome::Duplicate,
            Claim::Fresh => {
                if let Some(late) = self.late(envelope) {
                    let _ = self.store.rollback(tx).await;
                    return late;
                }
                let started = Instant::now();
                let run = AssertUnwindSafe(self.handler.handle(&mut tx, envelope))
                    .catch_unwind()
                    .await;
                crate::metrics::handler_time(&self.name, started.elapsed());
                match run {
                    Err(panic) => return Attempt::Panicked(panic_message(&*panic)),
                    Ok(Err(error)) => {
                        let _ = self.store.rollback(tx).await;
                        return Attempt::Failed {
                            error,
                            in_handler: true,
                        };
                    }
                    Ok(Ok(Handled::Applied)) => Outcome::Applied,
                    Ok(Ok(Handled::Stale)) => Outcome::Stale,
                }
            }
        };
        if self.config.unsafe_ack_before_commit {
            let early = delivery.take().expect("delivery present");
            let crash = self.crash(Step::Effected, &early);
            // The test-only breach of the contract: acked before the commit, so without a proof.
            let _ = early.discard().await;
            if crash {
                return Attempt::Crashed(Step::Effected);
            }
            return match self.store.commit(tx).await {
                Ok(()) => Attempt::Done(outcome, Committed::new()),
                Err(e) => store_err(e),
            };
        }
        let d = delivery.as_ref().expect("delivery present");
        if self.crash(Step::Effected, d) {
            return Attempt::Crashed(Step::Effected);
        }
        let started = Instant::now();
        let committed = self.store.commit(tx).await;
        crate::metrics::commit_time(&self.name, started.elapsed());
        match committed {
            Ok(()) if self.crash(Step::Committed, d) => Attempt::Crashed(Step::Committed),
            Ok(()) => Attempt::Done(outcome, Committed::new()),
            // A transient commit failure after the handler ran is the handler's attempt
            // failing (e.g. PostgreSQL refusing to commit a transaction the handler let abort):
            // it counts toward the retry policy and ends in a dead letter, never in a hold
            // that retries the same doomed effect forever.
            Err(e) if e.is_transient() && !matches!(outcome, Outcome::Duplicate) => {
                Attempt::Failed {
                    error: e,
                    in_handler: true,
                }
            }
            Err(e) => store_err(e),
        }
    }

    fn late(&self, envelope: &Envelope) -> Option<Attempt> {
        let window = self.config.late_window?;
        let age = age(envelope.meta().source_time?);
        (age > window && self.config.late_policy == LatePolicy::Quarantine)
            .then_some(Attempt::Late(age, window))
    }

    async fn ack(&self, delivery: Delivery, proof: Committed, outcome: Outcome) -> Outcome {
        let crash_after_ack = self.crash(Step::Acked, &delivery);
        if let Err(e) = delivery.ack(proof).await {
            // Committed but not acked: the redelivery will be a Duplicate. Nothing is lost.
            warn!(error = %e, "ack failed after commit; the broker will redeliver a duplicate");
            self.stats.ack_failed();
        }
        if crash_after_ack {
            return Outcome::Crashed(Step::Acked);
        }
        outcome
    }

    /// Holds a delivery after the store failed (see [`StoreHealth`]); `None` on shutdown.
    async fn hold(
        &self,
        error: &Error,
        backoff: &mut Backoff,
        stop: &CancellationToken,
    ) -> Option<Probe<'_>> {
        if error.is_transient() {
            self.stats.retried();
            crate::metrics::retry(&self.name);
        } else {
            self.stats.store_retried();
        }
        self.health.hold(error, backoff, stop).await
    }

    async fn nack(&self, delivery: Delivery, error: Error) -> Outcome {
        warn!(error = %error, "shutting down before the delivery could be settled; handed back to the broker");
        if let Err(e) = delivery.nack().await {
            warn!(error = %e, "nack failed; the broker redelivers after its timeout");
        }
        Outcome::Retry(error)
    }

    /// Stores a dead letter and acks; while the store refuses it, the delivery is held.
    async fn dead_letter(
        &self,
        delivery: Delivery,
        reason: DeadLetterReason,
        attempts: u32,
        stop: &CancellationToken,
    ) -> Outcome {
        let letter = DeadLetter {
            consumer: self.name.clone(),
            message: delivery.message().clone(),
            reason,
            attempts,
        };
        match self.store_dead_letter(&letter, stop).await {
            Ok(proof) => {
                warn!(reason = letter.reason.code(), detail = %letter.reason, "dead-lettered");
                self.ack(delivery, proof, Outcome::DeadLettered(letter.reason))
                    .await
            }
            Err(e) => self.nack(delivery, e).await,
        }
    }

    /// Inserts `letter`, holding and retrying while the store fails; fails only on shutdown.
    /// The proof stands for the stored dead letter.
    pub(crate) async fn store_dead_letter(
        &self,
        letter: &DeadLetter,
        stop: &CancellationToken,
    ) -> crate::Result<Committed> {
        let mut backoff = Backoff::store();
        let mut probe: Probe<'_> = None;
        loop {
            let started = Instant::now();
            let stored = self.store.dead_letter(letter).await;
            drop(probe.take());
            match stored {
                Ok(()) => {
                    self.health.succeeded(started);
                    return Ok(Committed::new());
                }
                Err(e) => match self.hold(&e, &mut backoff, stop).await {
                    Some(turn) => probe = turn,
                    None => return Err(e),
                },
            }
        }
    }
}

/// How far ahead of this host's clock a source time may be before it is logged as skew.
const MAX_CLOCK_SKEW: Duration = Duration::from_secs(300);

/// The age of a message sent at `sent`. A source time in the future (the producer's clock is
/// ahead) counts as "now", so it is never late; beyond [`MAX_CLOCK_SKEW`] it is logged.
pub(crate) fn age(sent: SystemTime) -> Duration {
    match SystemTime::now().duration_since(sent) {
        Ok(age) => age,
        Err(ahead) => {
            let ahead = ahead.duration();
            if ahead > MAX_CLOCK_SKEW {
                warn!(
                    ahead_s = ahead.as_secs(),
                    "source time is {} s in the future (clock skew beyond {} s); treated as now",
                    ahead.as_secs(),
                    MAX_CLOCK_SKEW.as_secs()
                );
            }
            Duration::ZERO
        }
    }
}

pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn future_source_times_count_as_now() {
        let hour = Duration::from_secs(3600);
        assert_eq!(age(SystemTime::now() + hour), Duration::ZERO);
        assert_eq!(
            age(SystemTime::now() + Duration::from_secs(10)),
            Duration::ZERO
        );
        assert!(age(SystemTime::now() - hour) >= hour);
    }
}
