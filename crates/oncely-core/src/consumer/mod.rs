//! The consumer runtime: receive → begin → claim → handler → commit → ack.
//!
//! One runtime for both modes: the run loop takes a delivery (and, with
//! [`Consumer::group_commit`] above 1, what else arrives within the linger), and each group is
//! settled by [`Consumer::process_batch`]: a group of one in its own transaction
//! (`single.rs`), a larger one in one shared transaction that falls back to one at a time
//! (`batch.rs`); acks, dead letters and hand-backs happen in one place (`settle.rs`).

mod batch;
mod intake;
mod settle;
mod single;

pub use batch::GroupCommitStats;
pub(crate) use settle::panic_message;

use crate::error::{Error, ErrorKind};
use crate::handler::Handler;
use crate::health::MIGRATE_HINT;
use crate::health::StoreHealth;
use crate::id::{ConsumerName, IntoConsumerName};
use crate::outcome::Outcome;
use crate::retry::RetryPolicy;
use crate::source::{Delivery, Source};
use crate::stats::{Stats, StatsSnapshot};
use crate::store::Store;
use futures::FutureExt;
use intake::{Lane, Lanes};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

/// The default inbox retention window, 7 days: the pruner keeps ids at least this long
/// (`oncely_ops::retention`), and a consumer quarantines, by default, a fresh message whose
/// source time (the producer's, or the broker's when the producer set none) is older than it.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// The default [`Consumer::concurrency`]: 4 deliveries at once, or with group commit 4 lanes
/// of groups. Measured in docs/perf/history.md: on PostgreSQL 4 groups in flight beat 1 and 2,
/// since one group's commit overlaps the others' work, and lock-key lanes keep them off
/// each other's rows.
pub const DEFAULT_CONCURRENCY: usize = 4;

/// The default [`Consumer::group_commit`]: group commit on, up to 64 ready deliveries per
/// transaction. A group is what is ready, so at low load it is one message (no added
/// latency); under a backlog it grows to this cap. 64 is where the commit's cost is spread
/// thin and a rolled-back group (one bad message) is still cheap to redo one by one
/// (docs/perf/history.md).
pub const DEFAULT_GROUP_COMMIT: usize = 64;

/// The default [`Consumer::attempt_timeout`]: one transaction attempt (claim, handler,
/// commit) may take 60 s. Past it the attempt is rolled back and retried as a store failure:
/// a statement waiting on a connection the network stranded (a NAT or firewall that dropped
/// its state sends no RST, so the client would wait forever) then ends instead of holding
/// its lane, and the delivery goes through again on another connection.
pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(60);

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
struct ConsumerConfig {
    /// Set by [`Consumer::concurrency`]: deliveries, or lanes with group commit.
    concurrency: usize,
    retry: RetryPolicy,
    late_window: Option<Duration>,
    late_policy: LatePolicy,
    check_inbox_first: bool,
    group_commit: usize,
    linger: Duration,
    attempt_timeout: Duration,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            concurrency: DEFAULT_CONCURRENCY,
            retry: RetryPolicy::default(),
            late_window: Some(DEFAULT_RETENTION),
            late_policy: LatePolicy::default(),
            check_inbox_first: false,
            group_commit: DEFAULT_GROUP_COMMIT,
            linger: Duration::ZERO,
            attempt_timeout: DEFAULT_ATTEMPT_TIMEOUT,
        }
    }
}

/// Runs a [`Handler`] over deliveries with the oncely contract.
///
/// ```no_run
/// # use oncely_core::*;
/// # async fn demo<S: Store, H: Handler<S::Tx>>(store: S, handler: H, source: MemorySource) -> Result<(), Error> {
/// let consumer = Consumer::new("billing", store, handler).concurrency(8);
/// let stats = consumer.run_until_signal(source).await?; // until the source ends or Ctrl-C
/// println!("applied {}", stats.applied);
/// # Ok(()) }
/// ```
///
/// With a shutdown of your own (e.g. shared with an HTTP server), [`Consumer::run`] takes
/// a [`CancellationToken`]:
///
/// ```no_run
/// # use oncely_core::*;
/// # async fn demo<S: Store, H: Handler<S::Tx>>(store: S, handler: H, source: MemorySource) -> Result<(), Error> {
/// let consumer = Consumer::new(ConsumerName::new("billing")?, store, handler);
/// let shutdown = CancellationToken::new(); // cancel it to stop after in-flight deliveries
/// let stats = consumer.run(source, shutdown.clone()).await?;
/// println!("applied {}", stats.applied);
/// # Ok(()) }
/// ```
pub struct Consumer<S: Store, H> {
    name: ConsumerName,
    store: Arc<S>,
    handler: Arc<H>,
    config: ConsumerConfig,
    stats: Arc<Stats>,
    health: Arc<StoreHealth>,
    batches: Arc<batch::BatchCounts>,
    /// Set on the lanes of a group-commit run: where a lane leaves its committed group's acks
    /// to finish while it takes its next group (see [`PendingAcks`]).
    pending_acks: Option<PendingAcks>,
    /// Acks past [`Consumer::attempt_timeout`] are logged at WARN once a minute (see
    /// `settle.rs`), not once per delivery of a stranded connection.
    ack_timeouts_logged: Arc<crate::LogThrottle>,
}

/// The acks of committed groups still on their way to the broker. A lane hands its group's
/// acks off here and takes its next group instead of waiting a broker round trip (a confirmed
/// NATS ack, an `XACK`, lapin's write) per group: the acks still go out only after their
/// commit, and the run waits for every one before it closes the source. How many are
/// outstanding is bounded by the source's read-ahead (the broker stops sending while its
/// window is full of unacked deliveries).
#[derive(Clone, Default)]
struct PendingAcks(Arc<std::sync::Mutex<JoinSet<()>>>);

impl PendingAcks {
    fn set(&self) -> std::sync::MutexGuard<'_, JoinSet<()>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends `acks` on their way (reaping those already done).
    fn hand_off(&self, acks: impl Future<Output = ()> + Send + 'static) {
        let mut set = self.set();
        while set.try_join_next().is_some() {}
        set.spawn(acks);
    }

    /// Waits until every ack handed off was answered.
    async fn drain(&self) {
        let mut set = std::mem::take(&mut *self.set());
        while set.join_next().await.is_some() {}
    }
}

impl<S: Store, H> Clone for Consumer<S, H> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            store: self.store.clone(),
            handler: self.handler.clone(),
            config: self.config.clone(),
            stats: self.stats.clone(),
            health: self.health.clone(),
            batches: self.batches.clone(),
            pending_acks: self.pending_acks.clone(),
            ack_timeouts_logged: self.ack_timeouts_logged.clone(),
        }
    }
}

impl<S: Store, H: Handler<S::Tx>> Consumer<S, H> {
    /// A consumer named `name` (the inbox key's first half) over `store`, running `handler`.
    ///
    /// `name` is a [`ConsumerName`] or text (`"billing"`); see [`IntoConsumerName`].
    ///
    /// # Panics
    ///
    /// If `name` is text that is not a valid consumer name; validate names read at run time
    /// with [`ConsumerName::new`], which returns the error.
    pub fn new(name: impl IntoConsumerName, store: impl Into<Arc<S>>, handler: H) -> Self {
        let name = name.into_consumer_name();
        Self {
            health: Arc::new(StoreHealth::new(name.clone())),
            name,
            store: store.into(),
            handler: Arc::new(handler),
            config: ConsumerConfig::default(),
            stats: Arc::default(),
            batches: Arc::default(),
            pending_acks: None,
            ack_timeouts_logged: Arc::new(crate::LogThrottle::per_minute()),
        }
    }

    /// Deliveries processed at once (default [`DEFAULT_CONCURRENCY`], 4), or with group
    /// commit ([`Consumer::group_commit`] above 1) groups in flight.
    ///
    /// With group commit each group in flight is a *lane*: a delivery goes to the lane of its
    /// lock key ([`Handler::lock_key`], by default the entity key the producer set), so two
    /// groups in flight never hold the same key's rows and a key's messages keep their order.
    /// Deliveries without a key share one lane: nothing says which rows they lock, and
    /// concurrent groups updating the same rows would queue behind each other's commits (and
    /// deadlock now and then; PostgreSQL notices only after `deadlock_timeout`, 1 s).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.config.concurrency = n.max(1);
        self
    }

    fn in_flight(&self) -> usize {
        self.config.concurrency
    }

    /// Group commit: up to `n` deliveries share one transaction and one claim statement, and
    /// are acked after its commit (default [`DEFAULT_GROUP_COMMIT`], 64; 1 turns group commit
    /// off: every delivery in its own transaction). A group is what is ready when its first
    /// delivery arrives (plus what arrives within
    /// [`Consumer::linger`], default zero), so an idle consumer adds no latency: a lone
    /// delivery is a group of one. The handler's [`Handler::handle_batch`] runs the group's
    /// fresh messages (by default one [`Handler::handle`] each). While duplicates are about
    /// (a recent group had some, or the broker marks a delivery as redelivered), one read
    /// before claiming ([`Store::committed_claims`]) finds them, and they are acked without a
    /// transaction. When a handler or the store fails mid-group, the group is rolled back
    /// and its messages are processed one at a time (see [`Consumer::group_commit_stats`]); with a
    /// failing store it is held whole.
    ///
    /// ```
    /// # use oncely_core::{Consumer, ConsumerName};
    /// # use std::time::Duration;
    /// # fn f<S: oncely_core::Store, H: oncely_core::Handler<S::Tx>>(store: S, handler: H) {
    /// let consumer = Consumer::new(ConsumerName::new("billing").unwrap(), store, handler)
    ///     .group_commit(256)                     // larger groups (default 64, 4 lanes)
    ///     .linger(Duration::from_millis(5));  // optional: fuller groups under light load
    /// // Group commit off: one delivery per transaction.
    /// # let store: S = todo!(); let handler: H = todo!();
    /// let per_message = Consumer::new(ConsumerName::new("billing").unwrap(), store, handler)
    ///     .group_commit(1);
    /// # }
    /// ```
    pub fn group_commit(mut self, n: usize) -> Self {
        self.config.group_commit = n.max(1);
        self
    }

    /// How long a group waits for more deliveries after its first (default zero: only what
    /// is ready; unused with [`Consumer::group_commit`] 1). A linger fills larger groups under
    /// light load at the cost of that much latency.
    pub fn linger(mut self, linger: Duration) -> Self {
        self.config.linger = linger;
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

    /// How long one transaction attempt (claim, handler, commit) may take (default
    /// [`DEFAULT_ATTEMPT_TIMEOUT`], 60 s). Past it the attempt is dropped, which rolls it back,
    /// logged at WARN, and retried like a store failure (the store's backoff and health
    /// apply): a connection the network stranded mid-statement cannot hold a lane forever.
    /// The same bound holds every other call the runtime makes to the store (the start
    /// check, the inbox reads before a claim and after a lost commit answer) and to the
    /// broker (an ack or a hand-back; one not taken in time is given up, and the broker
    /// redelivers the message, a `Duplicate` once committed). A retry after a commit that
    /// did land finds the claim and is a `Duplicate`. Set it above your handler's longest
    /// legitimate run.
    ///
    /// ```
    /// # use oncely_core::{Consumer, ConsumerName};
    /// # use std::time::Duration;
    /// # fn f<S: oncely_core::Store, H: oncely_core::Handler<S::Tx>>(store: S, handler: H) {
    /// let consumer = Consumer::new(ConsumerName::new("billing").unwrap(), store, handler)
    ///     .attempt_timeout(Duration::from_secs(10));
    /// # }
    /// ```
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.config.attempt_timeout = timeout;
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

    /// Batches committed whole vs. processed one at a time after a failure (batch mode).
    pub fn group_commit_stats(&self) -> GroupCommitStats {
        self.batches.snapshot()
    }

    /// Pulls deliveries from `source` until it is exhausted or `shutdown` is cancelled,
    /// processing up to [`Consumer::concurrency`] deliveries (or groups) at once. On shutdown, in-flight
    /// deliveries finish (a batch being collected is still processed); nothing uncommitted is
    /// acked.
    ///
    /// While the store fails, no new delivery is taken: the ones in flight are held and
    /// retried (one probe at a time, backing off up to 30 s) until the store recovers, and
    /// handed back to the source only on shutdown.
    pub async fn run<Src: Source>(
        &self,
        mut source: Src,
        shutdown: CancellationToken,
    ) -> crate::Result<StatsSnapshot> {
        self.check_ready().await?;
        self.health.publish();
        if self.config.group_commit > 1 {
            // The broker's read-ahead covers the groups in flight and the next ones ready.
            source.read_ahead(2 * self.in_flight() * self.config.group_commit);
            self.run_lanes(source, &shutdown).await;
        } else {
            self.run_single(source, &shutdown).await;
        }
        let stats = self.stats.snapshot();
        debug!(consumer = %self.name, ?stats, "consumer stopped");
        Ok(stats)
    }

    /// [`Consumer::run`] until the source ends or the process gets Ctrl-C (SIGINT) or, on
    /// Unix, SIGTERM: the signal stops intake, in-flight deliveries finish and are acked
    /// after their commit, nothing uncommitted is acked.
    pub async fn run_until_signal<Src: Source>(&self, source: Src) -> crate::Result<StatsSnapshot> {
        let shutdown = CancellationToken::new();
        let on_signal = shutdown.clone();
        let name = self.name.clone();
        let watcher = tokio::spawn(async move {
            crate::signal::shutdown_signal().await;
            info!(consumer = %name, "shutdown signal: stopping after in-flight deliveries");
            on_signal.cancel();
        });
        let result = self.run(source, shutdown).await;
        watcher.abort();
        result
    }

    /// One delivery per transaction, up to [`Consumer::concurrency`] at once.
    async fn run_single<Src: Source>(&self, mut source: Src, shutdown: &CancellationToken) {
        let permits = Arc::new(Semaphore::new(self.in_flight()));
        let mut tasks = JoinSet::new();
        loop {
            let permit = tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                p = permits.clone().acquire_owned() => p.expect("semaphore never closed"),
            };
            // Intake pauses while the store fails; with nothing in flight, one delivery goes
            // in as the probe.
            while !self.health.is_healthy() && !tasks.is_empty() {
                tokio::select! {
                    biased;
                    _ = self.health.until_healthy(shutdown) => break,
                    Some(done) = tasks.join_next() => self.joined(done),
                }
            }
            if shutdown.is_cancelled() {
                break;
            }
            let next = tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                next = intake::next_retrying(&mut source, &self.name) => next,
            };
            let Some(delivery) = next else { break };
            let me = self.clone();
            let stop = shutdown.clone();
            tasks.spawn(async move {
                let _permit = permit;
                me.process_batch_until(vec![delivery], &stop).await;
            });
            while let Some(done) = tasks.try_join_next() {
                self.joined(done);
            }
        }
        while let Some(done) = tasks.join_next().await {
            self.joined(done);
        }
    }

    /// Group commit: [`Consumer::concurrency`] lanes, each settling one group at a time
    /// (see `intake.rs` for how deliveries are routed to lanes).
    async fn run_lanes<Src: Source>(&self, source: Src, shutdown: &CancellationToken) {
        let handler = self.handler.clone();
        let mut lanes = Lanes::start(
            source,
            self.name.clone(),
            self.in_flight(),
            self.config.group_commit,
            move |message| handler.lock_key(message),
            shutdown,
        );
        let pending_acks = PendingAcks::default();
        let mut tasks = JoinSet::new();
        for lane in lanes.take() {
            let mut me = self.clone();
            me.pending_acks = Some(pending_acks.clone());
            let stop = shutdown.clone();
            tasks.spawn(async move { me.drain_lane(lane, &stop).await });
        }
        while let Some(done) = tasks.join_next().await {
            self.joined(done);
        }
        // Every ack out before the source (and the connection they go through) is closed.
        pending_acks.drain().await;
        lanes.close().await;
    }

    /// Settles one lane's groups until the source ends or `shutdown`: a group is what the
    /// lane holds when its first delivery is there (plus the linger), sorted by lock key.
    async fn drain_lane(&self, mut lane: Lane, shutdown: &CancellationToken) {
        let max = self.config.group_commit;
        loop {
            // Intake pauses while the store fails; with nothing in flight, one lane's group
            // goes in as the probe.
            while !self.health.is_healthy() && self.health.in_flight() > 0 {
                tokio::select! {
                    biased;
                    _ = self.health.until_healthy(shutdown) => break,
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
            }
            let first = tokio::select! {
                biased;
                _ = shutdown.cancelled() => return,
                next = lane.next() => next,
            };
            let Some(first) = first else { return };
            let mut group = vec![first];
            lane.fill(&mut group, max, self.config.linger, shutdown)
                .await;
            // A stable sort: rows are locked in key order, and a key keeps its order.
            group.sort_by(|a, b| a.key.cmp(&b.key));
            let deliveries = group.into_iter().map(|k| k.delivery).collect();
            self.process_batch_until(deliveries, shutdown).await;
        }
    }

    /// The start check ([`Store::check_ready`]): an error that is not an outage (missing
    /// tables, permission denied) is logged at ERROR and refuses the start; an outage is
    /// logged and left to the runtime, which holds deliveries until the store answers.
    async fn check_ready(&self) -> crate::Result<()> {
        match self.store_call(self.store.check_ready()).await {
            Ok(()) => {
                debug!(
                    consumer = %self.name,
                    in_flight = self.in_flight(),
                    group_commit = self.config.group_commit,
                    "store ready; consumer starting"
                );
                Ok(())
            }
            Err(e) if e.is_unavailable() || e.is_transient() => {
                warn!(consumer = %self.name, error = %e, "store not answering at start: {e}; starting anyway, deliveries are held until it does");
                Ok(())
            }
            Err(e) => {
                let hint = match e.kind() {
                    ErrorKind::Config => format!("; {MIGRATE_HINT}"),
                    _ => String::new(),
                };
                let refused = Error::new(
                    e.kind(),
                    format!("consumer {} not started: {e}{hint}", self.name),
                );
                error!(consumer = %self.name, error = %e, "{refused}");
                Err(refused)
            }
        }
    }

    fn joined(&self, done: Result<(), tokio::task::JoinError>) {
        if let Err(e) = done {
            warn!(consumer = %self.name, error = %e, "delivery task failed");
        }
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
        let mut outcomes = self.process_batch_until(vec![delivery], stop).await;
        outcomes.pop().expect("one outcome per delivery")
    }

    /// Processes deliveries as one batch (one transaction, see [`Consumer::group_commit`]) and
    /// settles each; returns the outcomes in delivery order. A batch of one is a delivery
    /// processed on its own.
    pub async fn process_batch(&self, deliveries: Vec<Delivery>) -> Vec<Outcome> {
        self.process_batch_until(deliveries, &CancellationToken::new())
            .await
    }

    /// Every path ends here: counts the deliveries in, settles them, counts the outcomes.
    /// A panic outside the handler (a store or source bug) abandons the group unsettled, as
    /// a crashed process would: the transaction rolls back, the deliveries are neither acked
    /// nor nacked, so the broker redelivers them, and the consumer keeps running.
    async fn process_batch_until(
        &self,
        deliveries: Vec<Delivery>,
        stop: &CancellationToken,
    ) -> Vec<Outcome> {
        let n = deliveries.len();
        let _in_flight = self.health.track(n);
        for _ in 0..n {
            self.stats.received();
        }
        let settled = match n {
            0 => Ok(Vec::new()),
            1 => {
                let delivery = deliveries.into_iter().next().expect("one");
                AssertUnwindSafe(self.settle_one(delivery, stop))
                    .catch_unwind()
                    .await
                    .map(|o| vec![o])
            }
            _ => {
                AssertUnwindSafe(self.settle_many(deliveries, stop))
                    .catch_unwind()
                    .await
            }
        };
        let outcomes = settled.unwrap_or_else(|panic| {
            warn!(
                consumer = %self.name,
                panic = %panic_message(&*panic),
                deliveries = n,
                "processing panicked outside the handler; deliveries abandoned for redelivery"
            );
            (0..n).map(|_| Outcome::Abandoned).collect()
        });
        for outcome in &outcomes {
            self.stats.record(outcome);
            crate::metrics::outcome(&self.name, outcome);
        }
        outcomes
    }
}
