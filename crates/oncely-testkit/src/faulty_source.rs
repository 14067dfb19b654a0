//! [`FaultySource`]: the broker faults a consumer must survive (duplicates, reordering, lost
//! acks), injected around the plain [`MemorySource`] by a seeded RNG.
//!
//! The wrapper keeps the ready messages it has taken from the memory broker in a buffer of
//! its own, in queue order (the broker's queue is the buffer followed by what the broker
//! still holds), so it can put a copy anywhere in the queue and hand out any of the first
//! `reorder_window` messages. A message in the buffer is in flight for the broker: its
//! [`MemorySource::unacked`] still counts it, and it is redelivered if the wrapper is dropped.

use futures::FutureExt;
use futures::future::BoxFuture;
use oncely_core::{Acker, Delivery, MemorySource, MemoryStats, RawEnvelope, Result, Source};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;

/// Faults a [`FaultySource`] injects, decided by a seeded RNG.
#[derive(Debug, Clone, Default)]
pub struct SourceFaults {
    /// Seed of the RNG: the same seed gives the same faults.
    pub seed: u64,
    /// Probability that a published message is delivered twice (the copy lands at a random
    /// place in the queue).
    pub duplicate_rate: f64,
    /// Each delivery is taken at random among the first `reorder_window` ready messages
    /// (0 or 1: strict FIFO).
    pub reorder_window: usize,
    /// Probability that an ack is lost, so the message is redelivered although it was processed.
    pub lost_ack_rate: f64,
}

/// What a [`FaultySource`] injected so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Messages published through [`FaultySource::publish`] (copies not counted).
    pub published: u64,
    /// Extra copies injected as duplicates.
    pub duplicates_injected: u64,
    /// Acks dropped on purpose (the message was given back instead).
    pub lost_acks: u64,
}

struct State {
    rng: ChaCha8Rng,
    /// The front of the broker's ready queue, taken out of the broker (in flight there).
    ready: VecDeque<Delivery>,
    stats: FaultStats,
}

struct Shared {
    broker: MemorySource,
    faults: SourceFaults,
    state: Mutex<State>,
    /// Messages were added to `ready`.
    changed: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves every message the broker has ready to the back of `ready`, so that `ready` is
    /// the whole queue. Wakes the other readers when it moved some: they were woken by the
    /// broker for these messages and would otherwise find its queue empty and wait again.
    fn take_ready(&self, state: &mut State) {
        let mut broker = self.broker.clone();
        let before = state.ready.len();
        while let Some(Ok(Some(delivery))) = broker.next().now_or_never() {
            state.ready.push_back(delivery);
        }
        if state.ready.len() > before {
            self.changed.notify_waiters();
        }
    }

    /// Publishes `message` to the broker and takes it back at once (the broker holds nothing
    /// ready after [`Shared::take_ready`], so it is the one handed out).
    fn publish_taken(&self, message: RawEnvelope) -> Delivery {
        self.broker.publish(message);
        let mut broker = self.broker.clone();
        match broker.next().now_or_never() {
            Some(Ok(Some(delivery))) => delivery,
            _ => unreachable!("a message just published to the memory broker is ready"),
        }
    }
}

/// A [`Source`] over a [`MemorySource`] that delivers duplicates, reorders and loses acks, as
/// real brokers do, deterministically per [`SourceFaults::seed`]. Clones share one queue.
///
/// ```
/// use oncely_core::{RawEnvelope, Source};
/// use oncely_testkit::{FaultySource, SourceFaults};
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let mut source = FaultySource::new(SourceFaults {
///     seed: 7,
///     duplicate_rate: 1.0,
///     ..SourceFaults::default()
/// });
/// source.publish(RawEnvelope::new("m-1", "hello"));
/// source.close();
/// let mut seen = 0;
/// while let Some(delivery) = source.next().await.unwrap() {
///     delivery.discard().await.unwrap();
///     seen += 1;
/// }
/// assert_eq!(seen, 2);
/// assert_eq!(source.fault_stats().duplicates_injected, 1);
/// # });
/// ```
#[derive(Clone)]
pub struct FaultySource {
    shared: Arc<Shared>,
}

impl FaultySource {
    /// A new, empty memory broker with `faults`.
    pub fn new(faults: SourceFaults) -> Self {
        Self::wrap(MemorySource::new(), faults)
    }

    /// `broker` with `faults`. Publish through the wrapper only: a message published to
    /// `broker` directly joins the back of the queue without the duplicate draw.
    pub fn wrap(broker: MemorySource, faults: SourceFaults) -> Self {
        let state = State {
            rng: ChaCha8Rng::seed_from_u64(faults.seed),
            ready: VecDeque::new(),
            stats: FaultStats::default(),
        };
        Self {
            shared: Arc::new(Shared {
                broker,
                faults,
                state: Mutex::new(state),
                changed: Notify::new(),
            }),
        }
    }

    /// Publishes a message (perhaps twice, per the duplicate rate; the copy at a random place
    /// in the queue).
    pub fn publish(&self, message: RawEnvelope) {
        let shared = &self.shared;
        let mut state = shared.lock();
        shared.take_ready(&mut state);
        state.stats.published += 1;
        let rate = shared.faults.duplicate_rate.clamp(0.0, 1.0);
        if state.rng.random_bool(rate) {
            state.stats.duplicates_injected += 1;
            let len = state.ready.len();
            let at = state.rng.random_range(0..=len);
            let copy = shared.publish_taken(message.clone());
            state.ready.insert(at, copy);
        }
        let delivery = shared.publish_taken(message);
        state.ready.push_back(delivery);
        drop(state);
        shared.changed.notify_waiters();
    }

    /// No more messages will be published: [`Source::next`] returns `None` once all are acked.
    pub fn close(&self) {
        self.shared.broker.close();
    }

    /// Messages not yet acked (ready or in flight).
    pub fn unacked(&self) -> usize {
        self.shared.broker.unacked()
    }

    /// The memory broker's counters (its `published` counts the injected copies too).
    pub fn stats(&self) -> MemoryStats {
        self.shared.broker.stats()
    }

    /// What was injected so far.
    pub fn fault_stats(&self) -> FaultStats {
        self.shared.lock().stats
    }

    /// The memory broker underneath.
    pub fn broker(&self) -> &MemorySource {
        &self.shared.broker
    }

    /// A delivery that draws, at its ack, whether the ack is lost.
    fn hand_out(&self, delivery: Delivery) -> Delivery {
        let shared = self.shared.clone();
        delivery.relay(|original| Box::new(MaybeLostAck { original, shared }))
    }
}

impl Source for FaultySource {
    async fn next(&mut self) -> Result<Option<Delivery>> {
        loop {
            let changed = self.shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let shared = &self.shared;
                let mut state = shared.lock();
                shared.take_ready(&mut state);
                let window = shared.faults.reorder_window.max(1).min(state.ready.len());
                if window > 0 {
                    let at = if window > 1 {
                        state.rng.random_range(0..window)
                    } else {
                        0
                    };
                    let delivery = state.ready.remove(at).expect("index within window");
                    drop(state);
                    return Ok(Some(self.hand_out(delivery)));
                }
            }
            // Nothing ready: wait for the broker (a redelivery, or the end) or a publish.
            let mut broker = self.shared.broker.clone();
            tokio::select! {
                biased;
                next = broker.next() => match next? {
                    // The broker ends only when nothing is in flight, so `ready` is empty.
                    None => return Ok(None),
                    Some(delivery) => self.shared.lock().ready.push_back(delivery),
                },
                _ = &mut changed => {}
            }
        }
    }
}

/// Acks the broker's delivery, or, per the lost-ack rate, gives it back instead.
struct MaybeLostAck {
    original: Delivery,
    shared: Arc<Shared>,
}

impl Acker for MaybeLostAck {
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        let mut state = self.shared.lock();
        let rate = self.shared.faults.lost_ack_rate.clamp(0.0, 1.0);
        let lost = state.rng.random_bool(rate);
        if lost {
            state.stats.lost_acks += 1;
        }
        drop(state);
        // The broker's settling happens when the future is first polled, at once by
        // `Delivery::ack`; the caller sees the ack succeed either way.
        if lost {
            Box::pin(self.original.nack())
        } else {
            Box::pin(self.original.discard())
        }
    }

    fn nack(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        Box::pin(self.original.nack())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn drain(source: &mut FaultySource) -> Vec<String> {
        let mut ids = Vec::new();
        while let Some(d) = source.next().await.unwrap() {
            ids.push(d.message().display_id().unwrap());
            d.discard().await.unwrap();
        }
        ids
    }

    fn faulty(seed: u64) -> FaultySource {
        let s = FaultySource::new(SourceFaults {
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

    /// Readers waiting on the broker are all served when deliveries come back at once,
    /// although the first to run takes every one of them into the wrapper's buffer.
    #[tokio::test]
    async fn every_waiting_reader_is_served_after_a_requeue() {
        let mut s = FaultySource::new(SourceFaults::default());
        for i in 0..3 {
            s.publish(RawEnvelope::new(format!("m-{i}"), "x"));
        }
        let mut held = vec![];
        for _ in 0..3 {
            held.push(s.next().await.unwrap().unwrap());
        }
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let mut s = s.clone();
                tokio::spawn(async move {
                    let d = s.next().await.unwrap().unwrap();
                    d.discard().await.unwrap();
                })
            })
            .collect();
        for _ in 0..5 {
            tokio::task::yield_now().await; // both readers wait
        }
        drop(held); // all three come back at once
        for reader in readers {
            tokio::time::timeout(std::time::Duration::from_secs(5), reader)
                .await
                .expect("a waiting reader was left waiting")
                .unwrap();
        }
        assert_eq!(s.unacked(), 1);
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
        let (faults, broker) = (a.fault_stats(), a.stats());
        assert!(
            faults.duplicates_injected > 10 && faults.lost_acks > 0,
            "{faults:?}"
        );
        assert_eq!(
            broker.deliveries,
            100 + faults.duplicates_injected + faults.lost_acks
        );
        assert_eq!(da.len() as u64, broker.deliveries);
        assert_eq!(broker.published, 100 + faults.duplicates_injected);
        assert_eq!(
            (broker.acked, a.unacked()),
            (100 + faults.duplicates_injected, 0)
        );
    }
}
