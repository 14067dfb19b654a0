//! State shared by a [`crate::KafkaSource`], its ackers, its committer and the rebalance
//! callbacks, plus the offset-commit helpers they use.

use crate::context::KafkaContext;
use crate::tracker::{Ticket, Tp, Tracker};
use oncely_core::{Error, RawEnvelope, Result};
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::Notify;
use tracing::{debug, warn};

pub(crate) fn kafka_err(what: &str, e: rdkafka::error::KafkaError) -> Error {
    Error::transient(format!("Kafka: {what}")).with_source(e)
}

/// State shared by the source, its ackers, its committer and the rebalance callbacks.
pub(crate) struct Shared {
    pub(crate) tracker: Mutex<Tracker>,
    /// Given-back records waiting to be handed out again, with their contents (Kafka has
    /// no per-record nack; seeking back would refetch the whole partition). Locked only
    /// while `tracker` is held, so the two always agree.
    pub(crate) parked: Mutex<VecDeque<(Ticket, RawEnvelope)>>,
    /// Woken when a record was parked.
    pub(crate) parked_ready: Notify,
    /// Signalled whenever a delivery is settled (rebalances wait on it).
    pub(crate) settled: Condvar,
    /// Woken when a commit position moved.
    pub(crate) commit_wanted: Notify,
    pub(crate) revoke_wait: Duration,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Tracker> {
        self.tracker.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn parked(&self) -> MutexGuard<'_, VecDeque<(Ticket, RawEnvelope)>> {
        self.parked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next parked record that still needs a delivery, with its attempt number.
    pub(crate) fn unpark(&self) -> Option<(Ticket, RawEnvelope, u32)> {
        let mut tracker = self.lock();
        let mut parked = self.parked();
        while let Some((ticket, raw)) = parked.pop_front() {
            if let Some(attempt) = tracker.redeliver(&ticket) {
                return Some((ticket, raw, attempt));
            }
        }
        None
    }

    /// Waits (up to `revoke_wait`) until no delivery of `tps` is in flight.
    pub(crate) fn wait_settled(&self, tps: &[Tp]) {
        let wait = || {
            let deadline = Instant::now() + self.revoke_wait;
            let mut tracker = self.lock();
            loop {
                let n: u32 = tps.iter().map(|tp| tracker.in_flight(tp)).sum();
                if n == 0 {
                    return;
                }
                let now = Instant::now();
                if now >= deadline {
                    warn!(
                        in_flight = n,
                        "Kafka: revoke_wait elapsed; letting the partitions go (the new owner sees them as duplicates if they commit)"
                    );
                    return;
                }
                tracker = self
                    .settled
                    .wait_timeout(tracker, deadline - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        };
        match Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(RuntimeFlavor::CurrentThread) => {
                let n: u32 = tps.iter().map(|tp| self.lock().in_flight(tp)).sum();
                if n > 0 {
                    warn!(
                        in_flight = n,
                        "Kafka: rebalance on a current-thread runtime cannot wait for in-flight deliveries; they will be redelivered to the new owner"
                    );
                }
            }
            _ => blocking(wait),
        }
    }
}

/// Runs blocking work (a synchronous commit, a wait) without stalling the Tokio worker's
/// other tasks: `block_in_place` on a multi-thread runtime, directly elsewhere.
pub(crate) fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

pub(crate) fn tps_of(tpl: &TopicPartitionList) -> Vec<Tp> {
    tpl.elements()
        .iter()
        .map(|e| (e.topic().to_owned(), e.partition()))
        .collect()
}

pub(crate) fn tpl_of(positions: impl IntoIterator<Item = (Tp, i64)>) -> Result<TopicPartitionList> {
    let mut tpl = TopicPartitionList::new();
    for ((topic, partition), offset) in positions {
        tpl.add_partition_offset(&topic, partition, Offset::Offset(offset))
            .map_err(|e| kafka_err("building the commit list", e))?;
    }
    Ok(tpl)
}

fn tpl_positions(batch: &[(Ticket, i64)]) -> Vec<(i32, i64)> {
    batch.iter().map(|(t, o)| (t.tp.1, *o)).collect()
}

/// Commits every partition's done position that moved since the last commit.
pub(crate) fn commit_dirty<C: Consumer<KafkaContext>>(
    shared: &Shared,
    consumer: &C,
) -> Result<usize> {
    let batch = shared.lock().take_dirty();
    if batch.is_empty() {
        return Ok(0);
    }
    let tpl = tpl_of(batch.iter().map(|(t, o)| (t.tp.clone(), *o)))?;
    match consumer.commit(&tpl, CommitMode::Sync) {
        Ok(()) => {
            debug!(positions = ?tpl_positions(&batch), "Kafka: offsets committed");
            Ok(batch.len())
        }
        Err(e) => {
            shared.lock().commit_failed(&batch);
            Err(kafka_err("offset commit", e))
        }
    }
}
