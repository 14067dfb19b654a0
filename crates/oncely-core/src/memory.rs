//! An in-process, at-least-once broker: a FIFO queue that redelivers what is not acked.
//! Faults (duplicates, reordering, lost acks) are wrappers in `oncely-testkit`.

use crate::envelope::RawEnvelope;
use crate::error::Result;
use crate::source::{Acker, Delivery, Source};
use futures::future::BoxFuture;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;

/// Counters of a [`MemorySource`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryStats {
    /// Messages published.
    pub published: u64,
    /// Deliveries handed out (first deliveries and redeliveries).
    pub deliveries: u64,
    /// Deliveries of a copy that had been delivered before.
    pub redeliveries: u64,
    /// Acks received.
    pub acked: u64,
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
    stats: MemoryStats,
}

struct Shared {
    state: Mutex<State>,
    changed: Notify,
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
/// crashed consumer) is redelivered at the back of the queue; otherwise first in, first out.
/// Clones share one queue. For duplicates, reordering and lost acks wrap it in
/// `oncely_testkit::FaultySource`.
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
    /// An empty, open source.
    pub fn new() -> Self {
        let state = State {
            ready: VecDeque::new(),
            in_flight: 0,
            closed: false,
            stats: MemoryStats::default(),
        };
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                changed: Notify::new(),
            }),
        }
    }

    /// Publishes a message at the back of the queue.
    pub fn publish(&self, message: RawEnvelope) {
        let mut state = self.shared.lock();
        state.stats.published += 1;
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
                if let Some(mut entry) = state.ready.pop_front() {
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
        self.entry.take().expect("settled once");
        let mut state = self.shared.lock();
        state.stats.acked += 1;
        state.in_flight -= 1;
        // An ack changes what `next` answers only when it settles the last delivery of a
        // closed source (`None`). Waking the waiters on every ack would wake the consumer's
        // reader for nothing after each commit, on the path to the next ack.
        let ended = state.closed && state.in_flight == 0;
        drop(state);
        if ended {
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

    #[tokio::test]
    async fn first_in_first_out_and_redelivered_at_the_back() {
        let mut s = MemorySource::new();
        for i in 0..3 {
            s.publish(RawEnvelope::new(format!("m-{i}"), "x"));
        }
        s.close();
        let first = s.next().await.unwrap().unwrap();
        assert_eq!(first.message().display_id().as_deref(), Some("m-0"));
        first.nack().await.unwrap();
        assert_eq!(drain(&mut s).await, ["m-1", "m-2", "m-0"]);
        let stats = s.stats();
        assert_eq!(
            (stats.published, stats.deliveries, stats.redeliveries),
            (3, 4, 1)
        );
        assert_eq!((stats.acked, stats.requeued, s.unacked()), (3, 1, 0));
    }

    /// Wakes counted: whether a pending `next` was woken.
    #[derive(Default)]
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl futures::task::ArcWake for Wakes {
        fn wake_by_ref(this: &Arc<Self>) {
            this.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn an_ack_wakes_a_waiting_next_only_when_it_ends_the_source() {
        use std::future::Future;
        use std::sync::atomic::Ordering::SeqCst;
        use std::task::{Context, Poll};
        let mut s = MemorySource::new();
        s.publish(RawEnvelope::new("m-1", "x"));
        s.publish(RawEnvelope::new("m-2", "x"));
        let first = s.next().await.unwrap().unwrap();
        let second = s.next().await.unwrap().unwrap();
        let wakes = Arc::new(Wakes::default());
        let waker = futures::task::waker(wakes.clone());
        let mut waiter = s.clone();
        let mut next = Box::pin(waiter.next());
        assert!(
            next.as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        // Open source: an ack changes nothing `next` answers.
        first.discard().await.unwrap();
        assert_eq!(wakes.0.load(SeqCst), 0, "an ack woke a waiting next");
        // Closed with one in flight: still nothing to hand out or end.
        s.close();
        let woken = wakes.0.load(SeqCst);
        assert!(
            next.as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        // The last ack of a closed source ends it: the waiter must hear of it.
        second.discard().await.unwrap();
        assert!(
            wakes.0.load(SeqCst) > woken,
            "the last ack did not wake next"
        );
        match next.as_mut().poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(Ok(None)) => {}
            other => panic!(
                "expected the end, got {:?}",
                other.map(|r| r.map(|d| d.is_some()))
            ),
        }
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
