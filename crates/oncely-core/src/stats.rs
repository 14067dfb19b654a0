//! Counters the consumer keeps while it runs.

use crate::outcome::Outcome;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Live counters of a consumer; cheap to read while it runs.
#[derive(Debug, Default)]
pub struct Stats {
    received: AtomicU64,
    applied: AtomicU64,
    duplicates: AtomicU64,
    conflicts: AtomicU64,
    stale: AtomicU64,
    retries: AtomicU64,
    store_retries: AtomicU64,
    dead_lettered: AtomicU64,
    abandoned: AtomicU64,
    nacked: AtomicU64,
    ack_failures: AtomicU64,
}

/// A point-in-time copy of [`Stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct StatsSnapshot {
    /// Deliveries received.
    pub received: u64,
    /// Effects applied and committed.
    pub applied: u64,
    /// Duplicates skipped.
    pub duplicates: u64,
    /// Conflicts caught (same id, other payload).
    pub conflicts: u64,
    /// Stale versions skipped.
    pub stale: u64,
    /// Attempts retried after a transient failure.
    pub retries: u64,
    /// Attempts retried after the store was unavailable or failed for no fault of the
    /// message (the delivery was held while the breaker was open, not handed back).
    /// Transient store failures (deadlocks) count in `retries`.
    pub store_retries: u64,
    /// Deliveries dead-lettered (conflicts included).
    pub dead_lettered: u64,
    /// Deliveries abandoned unsettled because processing panicked outside the handler
    /// ([`Outcome::Abandoned`]); the broker redelivers them.
    pub abandoned: u64,
    /// Deliveries handed back to the broker unacked.
    pub nacked: u64,
    /// Acks that failed to reach the broker after a commit (those redeliver as duplicates).
    pub ack_failures: u64,
}

impl Stats {
    pub(crate) fn received(&self) {
        self.received.fetch_add(1, Relaxed);
    }

    pub(crate) fn retried(&self) {
        self.retries.fetch_add(1, Relaxed);
    }

    pub(crate) fn store_retried(&self) {
        self.store_retries.fetch_add(1, Relaxed);
    }

    pub(crate) fn ack_failed(&self) {
        self.ack_failures.fetch_add(1, Relaxed);
    }

    pub(crate) fn record(&self, outcome: &Outcome) {
        let counter = match outcome {
            Outcome::Applied => &self.applied,
            Outcome::Duplicate => &self.duplicates,
            Outcome::Conflict { .. } => {
                self.dead_lettered.fetch_add(1, Relaxed);
                &self.conflicts
            }
            Outcome::Stale => &self.stale,
            Outcome::Retry(_) => &self.nacked,
            Outcome::DeadLettered(_) => &self.dead_lettered,
            Outcome::Abandoned => &self.abandoned,
        };
        counter.fetch_add(1, Relaxed);
    }

    /// Reads all counters.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            received: self.received.load(Relaxed),
            applied: self.applied.load(Relaxed),
            duplicates: self.duplicates.load(Relaxed),
            conflicts: self.conflicts.load(Relaxed),
            stale: self.stale.load(Relaxed),
            retries: self.retries.load(Relaxed),
            store_retries: self.store_retries.load(Relaxed),
            dead_lettered: self.dead_lettered.load(Relaxed),
            abandoned: self.abandoned.load(Relaxed),
            nacked: self.nacked.load(Relaxed),
            ack_failures: self.ack_failures.load(Relaxed),
        }
    }
}
