//! Store health: one circuit breaker per consumer, shared by all its tasks.
//!
//! When the store fails (or anything reports [`ErrorKind::Unavailable`](crate::ErrorKind)),
//! the breaker opens: the run loop stops taking deliveries, the deliveries already taken are
//! held (not handed back), and only one task at a time probes the store, after a capped,
//! jittered exponential delay. The first success closes the breaker and every held delivery
//! goes on. One WARN when it opens (an ERROR saying what to do when the error is not an
//! outage: a missing table, permission denied), one INFO when it closes; gauge
//! `oncely_store_healthy`.

use crate::error::{Error, ErrorKind};
use crate::id::ConsumerName;
use crate::retry::Backoff;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

/// What to do about a store error of kind [`ErrorKind::Config`] (a missing table or column,
/// permission denied), said wherever the runtime reports one.
pub(crate) const MIGRATE_HINT: &str = "this is not an outage: create or upgrade the tables with `oncely migrate` (or `store.migrate()` in code), or grant the database user access to them";

/// The health of a consumer's store as the runtime sees it, with counters for tests and
/// dashboards. Shared by all tasks of a [`Consumer`](crate::Consumer);
/// read it with `consumer.health()`.
#[derive(Debug)]
pub struct StoreHealth {
    consumer: ConsumerName,
    /// Closed breaker. Changes wake every task in `changed` (a `Notify`, not a `watch`
    /// channel: watch spreads its waiters over shards picked at random, so the order in which
    /// held deliveries resume would differ from run to run; see crates/oncely-sim).
    healthy: AtomicBool,
    changed: Notify,
    probe: tokio::sync::Mutex<()>,
    outage: Mutex<Outage>,
    in_flight: AtomicUsize,
    outages: AtomicU64,
    recoveries: AtomicU64,
    failures: AtomicU64,
    probes: AtomicU64,
    /// Stamps store calls and outages in the order they happen (see [`StoreHealth::stamp`]).
    calls: AtomicU64,
}

#[derive(Debug)]
struct Outage {
    since: Option<Instant>,
    /// The stamp taken when the outage began: only a call stamped later proves recovery.
    since_call: u64,
    backoff: Backoff,
}

/// The probe turn a held delivery may own while the store is unhealthy: while it holds the
/// guard, its next attempt is the only probe.
pub(crate) type Probe<'a> = Option<tokio::sync::MutexGuard<'a, ()>>;

/// Counts a delivery as in flight while alive.
pub(crate) struct InFlight<'a>(&'a StoreHealth, usize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(self.1, Relaxed);
    }
}

impl StoreHealth {
    pub(crate) fn new(consumer: ConsumerName) -> Self {
        Self {
            consumer,
            healthy: AtomicBool::new(true),
            changed: Notify::new(),
            probe: tokio::sync::Mutex::new(()),
            outage: Mutex::new(Outage {
                since: None,
                since_call: 0,
                backoff: Backoff::store(),
            }),
            in_flight: AtomicUsize::new(0),
            outages: AtomicU64::new(0),
            recoveries: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            probes: AtomicU64::new(0),
            calls: AtomicU64::new(0),
        }
    }

    /// True unless the store is failing.
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Times the store went unhealthy (one WARN each).
    pub fn outages(&self) -> u64 {
        self.outages.load(Relaxed)
    }

    /// Times the store recovered (one INFO each).
    pub fn recoveries(&self) -> u64 {
        self.recoveries.load(Relaxed)
    }

    /// Store failures seen (every failed store call or unavailable error).
    pub fn failures(&self) -> u64 {
        self.failures.load(Relaxed)
    }

    /// Attempts made as the single probe while the store was unhealthy.
    pub fn probes(&self) -> u64 {
        self.probes.load(Relaxed)
    }

    /// Deliveries being processed or held right now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Relaxed)
    }

    fn outage(&self) -> MutexGuard<'_, Outage> {
        self.outage.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn track(&self, deliveries: usize) -> InFlight<'_> {
        self.in_flight.fetch_add(deliveries, Relaxed);
        InFlight(self, deliveries)
    }

    /// Publishes the gauge (at start, so it reads 1 before any outage).
    pub(crate) fn publish(&self) {
        crate::metrics::store_healthy(&self.consumer, self.is_healthy());
    }

    /// The store failed with `error`: opens the breaker (one WARN on the transition).
    fn failed(&self, error: &Error) {
        self.failures.fetch_add(1, Relaxed);
        crate::metrics::store_failure(&self.consumer);
        let mut outage = self.outage();
        if outage.since.is_some() {
            return;
        }
        outage.since = Some(Instant::now());
        outage.since_call = self.stamp();
        outage.backoff = Backoff::store();
        self.outages.fetch_add(1, Relaxed);
        self.set_healthy(false);
        drop(outage);
        crate::metrics::store_healthy(&self.consumer, false);
        if error.kind() == ErrorKind::Config {
            // Not an outage: waiting alone will not fix it, someone has to act.
            error!(
                consumer = %self.consumer,
                error = %error,
                "store refused the consumer: {error}; {MIGRATE_HINT}; holding {} deliveries, pausing intake until then",
                self.in_flight()
            );
            return;
        }
        warn!(
            consumer = %self.consumer,
            error = %error,
            "store unavailable: {error}; holding {} deliveries, pausing intake",
            self.in_flight()
        );
    }

    /// A stamp for a store call about to begin, to pass to [`StoreHealth::succeeded`]:
    /// stamps follow the order of events exactly (a clock's reading may tie, and two
    /// readings in a row may be equal), so "begun after the outage began" is never a guess.
    pub(crate) fn stamp(&self) -> u64 {
        self.calls.fetch_add(1, Relaxed) + 1
    }

    /// A store call stamped `started` succeeded: closes the breaker (one INFO on the
    /// transition). A call begun before the outage proves nothing and is ignored.
    pub(crate) fn succeeded(&self, started: u64) {
        if self.is_healthy() {
            return;
        }
        let mut outage = self.outage();
        let since_call = outage.since_call;
        let Some(since) = outage.since.filter(|_| started > since_call) else {
            return;
        };
        outage.since = None;
        drop(outage);
        self.recoveries.fetch_add(1, Relaxed);
        self.set_healthy(true);
        crate::metrics::store_healthy(&self.consumer, true);
        info!(
            consumer = %self.consumer,
            "store recovered after {:.1} s",
            since.elapsed().as_secs_f64()
        );
    }

    fn set_healthy(&self, healthy: bool) {
        self.healthy
            .store(healthy, std::sync::atomic::Ordering::Release);
        self.changed.notify_waiters();
    }

    /// Returns once the breaker is closed (at once if it is).
    async fn healthy_again(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.is_healthy() {
                return;
            }
            changed.await;
        }
    }

    /// Waits until the store is healthy (true) or `stop` is cancelled (false).
    pub(crate) async fn until_healthy(&self, stop: &CancellationToken) -> bool {
        tokio::select! {
            biased;
            _ = stop.cancelled() => false,
            _ = self.healthy_again() => true,
        }
    }

    /// Holds a delivery after the store failed with `error`. A transient failure (deadlock,
    /// serialization) backs only this delivery off: the store works, the breaker stays
    /// closed. Anything else opens the breaker and waits until another task's probe
    /// succeeded or it is this task's turn to probe. `None` when `stop` came first.
    pub(crate) async fn hold(
        &self,
        error: &Error,
        backoff: &mut Backoff,
        stop: &CancellationToken,
    ) -> Option<Probe<'_>> {
        if error.is_transient() {
            self.failures.fetch_add(1, Relaxed);
            crate::metrics::store_failure(&self.consumer);
            let delay = backoff.next_delay();
            debug!(consumer = %self.consumer, error = %error, ?delay, "transient store failure; retrying");
            return tokio::select! {
                biased;
                _ = stop.cancelled() => None,
                _ = tokio::time::sleep(delay) => Some(None),
            };
        }
        self.failed(error);
        self.turn(stop).await
    }

    /// Waits until the store is healthy again or it is this task's turn to probe, after the
    /// outage's backoff delay.
    async fn turn(&self, stop: &CancellationToken) -> Option<Probe<'_>> {
        let guard = tokio::select! {
            biased;
            _ = stop.cancelled() => return None,
            _ = self.healthy_again() => return Some(None),
            guard = self.probe.lock() => guard,
        };
        let delay = self.outage().backoff.next_delay();
        tokio::select! {
            biased;
            _ = stop.cancelled() => None,
            _ = self.healthy_again() => Some(None),
            _ = tokio::time::sleep(delay) => {
                self.probes.fetch_add(1, Relaxed);
                Some(Some(guard))
            }
        }
    }
}
