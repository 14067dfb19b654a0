//! An in-process, at-least-once source with fault injection, for tests and the demo.

use crate::envelope::RawEnvelope;
use crate::error::Result;
use crate::source::{Acker, Delivery, Source};
use futures::future::BoxFuture;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;

/// Faults the [`MemorySource`] injects, decided by a seeded RNG.
#[derive(Debug, Clone, Default)]
pub struct SourceFaults {
    /// Seed of the RNG: the same seed gives the same faults.
    pub seed: u64,
    /// Probability that a published message is delivered twice.
    pub duplicate_rate: f64,
    /// Each delivery is taken at random among the first `reorder_window` ready messages
    /// (0 or 1: strict FIFO).
    pub reorder_window: usize,
    /// Probability that an ack is lost, so the message is redelivered although it was processed.
    pub lost_ack_rate: f64,
}

/// Counters of a [`MemorySource`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryStats {
    /// Messages published.
    pub published: u64,
    /// Extra copies injected as duplicates.
    pub duplicates_injected: u64,
    /// Deliveries handed out (first deliveries and redeliveries).
    pub deliveries: u64,
    /// Deliveries of a copy that had been delivered before.
    pub redeliveries: u64,
    /// Acks received.
    pub acked: u64,
    /// Acks dropped on purpose.
    pub lost_acks: u64,
    /// Deliveries given back (nack or dropped unsettled).
    pub requeued: u64,
}

struct Entry {
    message: RawEnvelope,
    deliveries: u32,
}

struct State {
    ready: VecDeque<Entry>,
    in_flight: usize,
    closed: bool,
    rng: ChaCha8Rng,
    stats: MemoryStats,
}

struct Shared {
    state: Mutex<State>,
    changed: Notify,
    faults: SourceFaults,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn requeue(&self, entry: Entry) {
        let mut state = self.lock();
        state.in_flight -= 1;
        state.stats.requeued += 1;
        state.ready.push_back(entry);
        drop(state);
        self.changed.notify_waiters();
    }
}

/// An in-process broker: at-least-once, so an unacked delivery (nacked, or dropped as by a
/// crashed consumer) is redelivered. Clones share one queue.
///
/// ```
/// use oncely_core::{MemorySource, RawEnvelope, Source};
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let mut source = MemorySource::new();
/// source.publish(RawEnvelope::new("m-1", "hello"));
/// source.close();
/// let delivery = source.next().await.unwrap().unwrap();
/// drop(delivery); // not acked: it comes back
/// assert!(source.next().await.unwrap().is_some());
/// # });
/// ```
#[derive(Clone)]
pub struct MemorySource {
    shared: Arc<Shared>,
}

impl Default for MemorySource {
    fn default() -> Self {
        Self::new()
    }
}

impl MemorySource {
    /// A source without faults.
    pub fn new() -> Self {
        Self::with_faults(SourceFaults::default())
    }

    /// A source that injects `faults`.
    pub fn with_faults(faults: SourceFaults) -> Self {
        let state = State {
            ready: VecDeque::new(),
            in_flight: 0,
            closed: false,
            rng: ChaCha8Rng::seed_from_u64(faults.seed),
            stats: MemoryStats::default(),
        };
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                changed: Notify::new(),
                faults,
            }),
        }
    }

    /// Publishes a message (perhaps twice, per the duplicate rate).
    pub fn publish(&self, message: RawEnvelope) {
        let mut state = self.shared.lock();
        state.stats.published += 1;
        if state
            .rng
            .random_bool(self.shared.faults.duplicate_rate.clamp(0.0, 1.0))
        {
            state.stats.duplicates_injected += 1;
            let len = state.ready.len();
            let at = state.rng.random_range(0..=len);
            let copy = Entry {
                message: message.clone(),
                deliveries: 0,
            };
            state.ready.insert(at, copy);
        }
        state.ready.push_back(Entry {
            message,
            deliveries: 0,
        });
        drop(state);
        self.shared.changed.notify_waiters();
    }

    /// No more messages will be published: [`Source::next`] returns `None` once all are acked.
    pub fn close(&self) {
        self.shared.lock().closed = true;
        self.shared.changed.notify_waiters();
    }

    /// Messages not yet acked (ready or in flight).
    pub fn unacked(&self) -> usize {
        let state = self.shared.lock();
        state.ready.len() + state.in_flight
    }

    /// Counters so far.
    pub fn stats(&self) -> MemoryStats {
        self.shared.lock().stats
    }
}

impl Source for MemorySource {
    async fn next(&mut self) -> Result<Option<Delivery>> {
        loop {
            let changed = self.shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut state = self.shared.lock();
                let window = self
                    .shared
                    .faults
                    .reorder_window
                    .max(1)
                    .min(state.ready.len());
                if window > 0 {
                    let at = if window > 1 {
                        state.rng.random_range(0..window)
                    } else {
                        0
                    };
                    let mut entry = state.ready.remove(at).expect("index within window");
                    entry.deliveries += 1;
                    state.in_flight += 1;
                    state.stats.deliveries += 1;
                    if entry.deliveries > 1 {
                        state.stats.redeliveries += 1;
                    }
                    let attempt = entry.deliveries;
                    let message = entry.message.clone();
                    let acker = MemoryAcker {
                        shared: self.shared.clone(),
                        entry: Some(entry),
                    };
                    return Ok(Some(Delivery::new(message, attempt, Box::new(acker))));
                }
                if state.closed && state.in_flight == 0 {
                    return Ok(None);
                }
            }
            changed.await;
        }
    }
}

struct MemoryAcker {
    shared: Arc<Shared>,
    entry: Option<Entry>,
}

impl Acker for MemoryAcker {
    fn ack(mut self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        let entry = self.entry.take().expect("settled once");
        let mut state = self.shared.lock();
        let lost = state
            .rng
            .random_bool(self.shared.faults.lost_ack_rate.clamp(0.0, 1.0));
        if lost {
            state.stats.lost_acks += 1;
            drop(state);
            self.shared.requeue(entry);
        } else {
            state.stats.acked += 1;
            state.in_flight -= 1;
            drop(state);
            self.shared.changed.notify_waiters();
        }
        Box::pin(async { Ok(()) })
    }

    fn nack(mut self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        if let Some(entry) = self.entry.take() {
            self.shared.requeue(entry);
        }
        Box::pin(async { Ok(()) })
    }
}

impl Drop for MemoryAcker {
    fn drop(&mut self) {
        if let Some(entry) = self.entry.take() {
            self.shared.requeue(entry);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn drain(source: &mut MemorySource) -> Vec<String> {
        let mut ids = Vec::new();
        while let Some(d) = source.next().await.unwrap() {
            ids.push(d.message().display_id().unwrap());
            d.discard().await.unwrap();
        }
        ids
    }

    fn faulty(seed: u64) -> MemorySource {
        let s = MemorySource::with_faults(SourceFaults {
            seed,
            duplicate_rate: 0.3,
            reorder_window: 5,
            lost_ack_rate: 0.1,
        });
        for i in 0..100 {
            s.publish(RawEnvelope::new(format!("m-{i}"), "x"));
        }
        s.close();
        s
    }

    #[tokio::test]
    async fn faults_are_deterministic_per_seed() {
        let (mut a, mut b, mut c) = (faulty(1), faulty(1), faulty(2));
        let (da, db, dc) = (
            drain(&mut a).await,
            drain(&mut b).await,
            drain(&mut c).await,
        );
        assert_eq!(da, db);
        assert_ne!(da, dc);
        let stats = a.stats();
        assert!(
            stats.duplicates_injected > 10 && stats.lost_acks > 0,
            "{stats:?}"
        );
        assert_eq!(
            stats.deliveries,
            100 + stats.duplicates_injected + stats.lost_acks
        );
    }

    #[tokio::test]
    async fn unsettled_and_nacked_deliveries_come_back() {
        let mut s = MemorySource::new();
        s.publish(RawEnvelope::new("m-1", "x"));
        s.close();
        drop(s.next().await.unwrap().unwrap());
        let d = s.next().await.unwrap().unwrap();
        assert_eq!(d.attempt(), 2);
        d.nack().await.unwrap();
        let d = s.next().await.unwrap().unwrap();
        assert_eq!(d.attempt(), 3);
        d.discard().await.unwrap();
        assert!(s.next().await.unwrap().is_none());
        assert_eq!(s.stats().requeued, 2);
    }
}
