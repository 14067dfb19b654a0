//! Where the run loop takes deliveries from.
//!
//! One delivery per transaction ([`Consumer::group_commit`] 1): straight from the source.
//!
//! Group commit ([`Consumer::group_commit`] above 1): a reader task keeps the source read ahead and routes each
//! delivery to one of the consumer's lanes by its lock key ([`Handler::lock_key`], by default
//! the message's entity key): the same key always goes to the same lane, a lane settles one
//! group at a time, and a group is sorted by key. So two groups in flight never hold the
//! same key's rows (no convoy, no deadlock between them), a key's messages are settled in
//! the order the source gave them, and "what is ready" is what a lane's buffer holds. A
//! pending `Source::next` is never dropped halfway through a read (which would strand the
//! deliveries it was receiving until the broker's redelivery timeout). Deliveries without a
//! key share lane 0: without a key nothing says which rows they lock, and one lane is the
//! order that cannot convoy.
//!
//! [`Consumer::group_commit`]: super::Consumer::group_commit
//! [`Handler::lock_key`]: crate::Handler::lock_key

use crate::envelope::RawEnvelope;
use crate::id::ConsumerName;
use crate::source::{Delivery, Source};
use futures::FutureExt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::panic::AssertUnwindSafe;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::warn;

const SOURCE_RETRY: Duration = Duration::from_millis(200);

/// A delivery with the lock key it was routed by.
pub(super) struct Keyed {
    pub(super) key: Option<String>,
    pub(super) delivery: Delivery,
}

/// The lane a key goes to: the same key always to the same lane; no key to lane 0.
pub(super) fn lane_of(key: Option<&str>, lanes: usize) -> usize {
    match key {
        Some(key) if lanes > 1 => {
            let mut hasher = DefaultHasher::new();
            key.hash(&mut hasher);
            (hasher.finish() % lanes as u64) as usize
        }
        _ => 0,
    }
}

/// The reader task and the lanes it fills.
pub(super) struct Lanes<Src> {
    lanes: Vec<Lane>,
    /// The reader hands the source back when it stops, so the source (and the broker
    /// connection the deliveries ack through) outlives the lanes' last acks.
    reader: JoinHandle<Src>,
    stop: CancellationToken,
}

/// One lane's buffer: up to `group_commit` deliveries ready for its next group.
pub(super) struct Lane {
    ready: mpsc::Receiver<Keyed>,
}

impl<Src: Source> Lanes<Src> {
    /// Starts the reader over `source`, routing into `lanes` buffers of `group_commit` each by
    /// the key `key_of` gives.
    pub(super) fn start<K>(
        source: Src,
        name: ConsumerName,
        lanes: usize,
        group_commit: usize,
        key_of: K,
        shutdown: &CancellationToken,
    ) -> Self
    where
        K: Fn(&RawEnvelope) -> Option<String> + Send + 'static,
    {
        let (senders, lanes): (Vec<_>, Vec<_>) = (0..lanes.max(1))
            .map(|_| {
                let (tx, ready) = mpsc::channel(group_commit.max(1));
                (tx, Lane { ready })
            })
            .unzip();
        let stop = shutdown.child_token();
        let reader = tokio::spawn(read_ahead(source, name, senders, key_of, stop.clone()));
        Self {
            lanes,
            reader,
            stop,
        }
    }

    /// The lanes, each to be drained by one task.
    pub(super) fn take(&mut self) -> Vec<Lane> {
        std::mem::take(&mut self.lanes)
    }

    /// Stops the reader, then drops the source; deliveries still buffered are dropped
    /// unsettled (the broker redelivers them). Called once the lanes have settled what they
    /// took, so their acks went out over a source that was still open.
    pub(super) async fn close(self) {
        self.stop.cancel();
        drop(self.lanes);
        if let Ok(source) = self.reader.await {
            drop(source);
        }
    }
}

impl Lane {
    /// The next delivery, waiting for it; `None` once the source has ended.
    pub(super) async fn next(&mut self) -> Option<Keyed> {
        self.ready.recv().await
    }

    /// Adds to `group`, up to `max`, the deliveries that are ready, then what arrives before
    /// `linger` has passed (zero: only what is ready).
    pub(super) async fn fill(
        &mut self,
        group: &mut Vec<Keyed>,
        max: usize,
        linger: Duration,
        shutdown: &CancellationToken,
    ) {
        let deadline = Instant::now() + linger;
        while group.len() < max {
            if let Ok(delivery) = self.ready.try_recv() {
                group.push(delivery);
                continue;
            }
            if linger.is_zero() {
                return;
            }
            // `recv` is cancel-safe: a timeout never loses a delivery.
            let next = tokio::select! {
                biased;
                _ = shutdown.cancelled() => return,
                next = tokio::time::timeout_at(deadline, self.ready.recv()) => next,
            };
            match next {
                Ok(Some(delivery)) => group.push(delivery),
                _ => return,
            }
        }
    }
}

/// The next delivery of `source`, `None` once it has ended; errors (and panics) are logged
/// and retried after 200 ms.
pub(super) async fn next_retrying<Src: Source>(
    source: &mut Src,
    name: &ConsumerName,
) -> Option<Delivery> {
    loop {
        match guarded_next(source).await {
            Ok(next) => return next,
            Err(e) => {
                warn!(consumer = %name, error = %e, "source failed; retrying in 200 ms");
                tokio::time::sleep(SOURCE_RETRY).await;
            }
        }
    }
}

/// `Source::next`, with a panic inside it turned into an error (logged and retried like one),
/// so a buggy adapter never takes the consumer down.
async fn guarded_next<Src: Source>(source: &mut Src) -> crate::Result<Option<Delivery>> {
    AssertUnwindSafe(source.next())
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| {
            Err(crate::Error::transient(format!(
                "the source panicked: {}",
                crate::panic_message(&*panic)
            )))
        })
}

/// The reader: routes each delivery to its key's lane, waiting while that lane is full, and
/// returns the source when it ends or is stopped. A panicking key function routes the
/// delivery to lane 0 (the handler sees it as usual).
async fn read_ahead<Src, K>(
    mut source: Src,
    name: ConsumerName,
    lanes: Vec<mpsc::Sender<Keyed>>,
    key_of: K,
    stop: CancellationToken,
) -> Src
where
    Src: Source,
    K: Fn(&RawEnvelope) -> Option<String>,
{
    loop {
        let next = tokio::select! {
            biased;
            _ = stop.cancelled() => return source,
            next = next_retrying(&mut source, &name) => next,
        };
        let Some(delivery) = next else { return source };
        let key = std::panic::catch_unwind(AssertUnwindSafe(|| key_of(delivery.message())))
            .unwrap_or_else(|panic| {
                warn!(consumer = %name, panic = %crate::panic_message(&*panic), "Handler::lock_key panicked; the delivery goes to lane 0");
                None
            });
        let lane = &lanes[lane_of(key.as_deref(), lanes.len())];
        let sent = tokio::select! {
            biased;
            _ = stop.cancelled() => return source,
            sent = lane.send(Keyed { key, delivery }) => sent,
        };
        if sent.is_err() {
            return source;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::lane_of;

    #[test]
    fn a_key_always_goes_to_the_same_lane_and_keys_spread() {
        assert_eq!(lane_of(None, 4), 0);
        assert_eq!(lane_of(Some("acct-1"), 1), 0);
        let lanes: Vec<usize> = (0..400)
            .map(|i| lane_of(Some(&format!("acct-{i}")), 4))
            .collect();
        for (i, lane) in lanes.iter().enumerate() {
            assert_eq!(*lane, lane_of(Some(&format!("acct-{i}")), 4));
        }
        for lane in 0..4 {
            let n = lanes.iter().filter(|l| **l == lane).count();
            assert!((60..140).contains(&n), "lane {lane} got {n} of 400 keys");
        }
    }
}
