//! Group commit reads the source ahead in its own task, so no `Source::next` is dropped
//! halfway: a source that loses the delivery it was receiving when its `next` is dropped
//! (as a broker read whose answer is discarded does) still loses nothing, and groups form
//! from what is ready.

mod support;

use oncely_core::{
    Acker, CancellationToken, Consumer, ConsumerName, Delivery, RawEnvelope, Result, Source,
};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{Ledger, MemStore, double_and_lost};

/// Takes a message off its queue, then waits a moment before handing it over: dropping
/// `next` during that wait loses the message for good.
struct DropLoses {
    queue: Arc<Mutex<VecDeque<RawEnvelope>>>,
}

struct Acked;

impl Acker for Acked {
    fn ack(self: Box<Self>) -> futures::future::BoxFuture<'static, Result<()>> {
        Box::pin(async { Ok(()) })
    }
    fn nack(self: Box<Self>) -> futures::future::BoxFuture<'static, Result<()>> {
        Box::pin(async { Ok(()) })
    }
}

impl Source for DropLoses {
    async fn next(&mut self) -> Result<Option<Delivery>> {
        let Some(message) = self.queue.lock().unwrap().pop_front() else {
            return Ok(None);
        };
        tokio::time::sleep(Duration::from_micros(200)).await;
        Ok(Some(Delivery::new(message, 1, Box::new(Acked))))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_never_drops_a_pending_read() {
    let ids: Vec<String> = (0..300).map(|i| format!("m-{i}")).collect();
    let queue = ids
        .iter()
        .map(|id| RawEnvelope::new(id.as_str(), "1"))
        .collect();
    let source = DropLoses {
        queue: Arc::new(Mutex::new(queue)),
    };
    let store = MemStore::default();
    let consumer = Consumer::new(
        ConsumerName::new("group").unwrap(),
        store.clone(),
        Ledger::default(),
    )
    .group_commit(16)
    .concurrency(2);
    let stats = consumer
        .run(source, CancellationToken::new())
        .await
        .unwrap();
    let (double, lost) = double_and_lost(&store.ledger(), &ids);
    assert_eq!((double, lost), (0, 0), "{stats:?}");
    assert_eq!(stats.applied, 300, "{stats:?}");
    let groups = consumer.group_commit_stats();
    assert!(
        groups.committed > 0,
        "no group of two or more formed: {groups:?}"
    );
}

/// Panics on its third call, then hands out the rest.
struct PanicsOnce {
    queue: VecDeque<RawEnvelope>,
    calls: u32,
}

impl Source for PanicsOnce {
    async fn next(&mut self) -> Result<Option<Delivery>> {
        self.calls += 1;
        if self.calls == 3 {
            panic!("adapter bug");
        }
        Ok(self
            .queue
            .pop_front()
            .map(|m| Delivery::new(m, 1, Box::new(Acked))))
    }
}

/// A source whose `next` panics is a failing source (logged, retried), not a dead consumer:
/// per message and with group commit, every message still applies once.
#[tokio::test]
async fn a_panicking_source_does_not_stop_the_consumer() {
    for group in [1, 8] {
        let ids: Vec<String> = (0..20).map(|i| format!("m-{i}")).collect();
        let source = PanicsOnce {
            queue: ids
                .iter()
                .map(|id| RawEnvelope::new(id.as_str(), "1"))
                .collect(),
            calls: 0,
        };
        let store = MemStore::default();
        let consumer = Consumer::new(
            ConsumerName::new("p").unwrap(),
            store.clone(),
            Ledger::default(),
        )
        .group_commit(group);
        let stats = consumer
            .run(source, CancellationToken::new())
            .await
            .unwrap();
        let (double, lost) = double_and_lost(&store.ledger(), &ids);
        assert_eq!(
            (double, lost, stats.applied),
            (0, 0, 20),
            "group {group}: {stats:?}"
        );
    }
}

/// Row locks as a handler would take them: a key is held from the first effect on it until
/// its transaction ends. Records a key taken while another transaction holds it, each key's
/// order of application, and how many transactions held keys at once.
#[derive(Clone, Default)]
struct KeyLocks {
    holders: Arc<Mutex<std::collections::HashMap<String, usize>>>,
    order: Arc<Mutex<std::collections::HashMap<String, Vec<u32>>>>,
    clashes: Arc<std::sync::atomic::AtomicUsize>,
    most_at_once: Arc<std::sync::atomic::AtomicUsize>,
}

struct Release(KeyLocks, String);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.holders.lock().unwrap().remove(&self.1);
    }
}

impl oncely_core::Handler<support::MemTx> for KeyLocks {
    async fn handle(
        &self,
        tx: &mut support::MemTx,
        message: &oncely_core::Envelope,
    ) -> Result<oncely_core::Handled> {
        use std::sync::atomic::Ordering::Relaxed;
        let text = std::str::from_utf8(message.payload()).unwrap();
        let (key, seq) = text.split_once(':').unwrap();
        let me = tx as *const _ as usize;
        {
            let mut holders = self.holders.lock().unwrap();
            match holders.get(key) {
                Some(holder) if *holder != me => {
                    self.clashes.fetch_add(1, Relaxed);
                }
                Some(_) => {}
                None => {
                    holders.insert(key.to_owned(), me);
                    tx.hold(Release(self.clone(), key.to_owned()));
                }
            }
            let at_once: std::collections::HashSet<usize> = holders.values().copied().collect();
            self.most_at_once.fetch_max(at_once.len(), Relaxed);
        }
        self.order
            .lock()
            .unwrap()
            .entry(key.to_owned())
            .or_default()
            .push(seq.parse().unwrap());
        tokio::time::sleep(Duration::from_micros(300)).await;
        tx.effect(message.id().as_str());
        Ok(oncely_core::Handled::Applied)
    }
}

/// Group commit's lanes: messages with the same entity key go to one lane, so two groups in
/// flight never hold the same key, a key's messages apply in the order they were published,
/// and the lanes do run at once; every message applies once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lanes_never_share_a_key_and_keep_its_order() {
    let source = oncely_core::MemorySource::new();
    let mut ids = Vec::new();
    for seq in 0..100u32 {
        for account in 0..20 {
            let id = format!("m-{account}-{seq}");
            let mut message = RawEnvelope::new(id.as_str(), format!("acct-{account}:{seq}"));
            message.meta.entity_key = Some(format!("acct-{account}"));
            source.publish(message);
            ids.push(id);
        }
    }
    source.close();
    let store = MemStore::default();
    let handler = KeyLocks::default();
    let consumer = Consumer::new(
        ConsumerName::new("lanes").unwrap(),
        store.clone(),
        handler.clone(),
    )
    .group_commit(16)
    .concurrency(4);
    let stats = consumer
        .run(source, CancellationToken::new())
        .await
        .unwrap();
    let (double, lost) = double_and_lost(&store.ledger(), &ids);
    assert_eq!((double, lost, stats.applied), (0, 0, 2000), "{stats:?}");
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(
        handler.clashes.load(Relaxed),
        0,
        "a key held by two groups at once"
    );
    for (key, seqs) in handler.order.lock().unwrap().iter() {
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "{key} out of order: {seqs:?}"
        );
        assert_eq!(seqs.len(), 100, "{key}");
    }
    let at_once = handler.most_at_once.load(Relaxed);
    assert!(
        at_once >= 2,
        "lanes never overlapped (most at once: {at_once})"
    );
}

/// A finite source whose acks go through a connection it owns: once the source is dropped,
/// every ack fails (as an AMQP ack does on a closed channel).
struct OwnsConnection {
    queue: VecDeque<RawEnvelope>,
    open: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for OwnsConnection {
    fn drop(&mut self) {
        self.open.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

struct ThroughConnection {
    open: Arc<std::sync::atomic::AtomicBool>,
    failed: Arc<std::sync::atomic::AtomicUsize>,
}

impl Acker for ThroughConnection {
    fn ack(self: Box<Self>) -> futures::future::BoxFuture<'static, Result<()>> {
        Box::pin(async move {
            // An ack takes a moment on the wire, so the lanes are still acking when the
            // source has handed out its last delivery.
            tokio::time::sleep(Duration::from_millis(2)).await;
            if self.open.load(std::sync::atomic::Ordering::SeqCst) {
                Ok(())
            } else {
                self.failed
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Err(oncely_core::Error::transient("channel closed"))
            }
        })
    }
    fn nack(self: Box<Self>) -> futures::future::BoxFuture<'static, Result<()>> {
        Box::pin(async { Ok(()) })
    }
}

struct Connected {
    source: OwnsConnection,
    failed: Arc<std::sync::atomic::AtomicUsize>,
}

impl Source for Connected {
    async fn next(&mut self) -> Result<Option<Delivery>> {
        let Some(message) = self.source.queue.pop_front() else {
            return Ok(None);
        };
        let acker = ThroughConnection {
            open: self.source.open.clone(),
            failed: self.failed.clone(),
        };
        Ok(Some(Delivery::new(message, 1, Box::new(acker))))
    }
}

/// When a finite source ends under group commit, the source (and the connection its acks
/// use) stays open until the lanes have acked their last groups: no ack fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_outlives_the_last_acks_of_the_lanes() {
    let ids: Vec<String> = (0..400).map(|i| format!("m-{i}")).collect();
    let failed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let source = Connected {
        source: OwnsConnection {
            queue: ids
                .iter()
                .map(|id| RawEnvelope::new(id.as_str(), "1"))
                .collect(),
            open: Arc::new(std::sync::atomic::AtomicBool::new(true)),
        },
        failed: failed.clone(),
    };
    let store = MemStore::default();
    let consumer = Consumer::new(
        ConsumerName::new("outlives").unwrap(),
        store.clone(),
        Ledger::default(),
    )
    .group_commit(32)
    .concurrency(4);
    let stats = consumer
        .run(source, CancellationToken::new())
        .await
        .unwrap();
    let (double, lost) = double_and_lost(&store.ledger(), &ids);
    assert_eq!((double, lost, stats.applied), (0, 0, 400), "{stats:?}");
    assert_eq!(
        failed.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "acks failed after the source was dropped"
    );
}

/// An ack that takes a while (a broker round trip), checks that its message's effect is
/// committed, and counts itself in flight while it runs.
struct SlowAck {
    id: String,
    store: MemStore,
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
    acked: Arc<std::sync::atomic::AtomicUsize>,
    before_commit: Arc<std::sync::atomic::AtomicUsize>,
}

impl Acker for SlowAck {
    fn ack(self: Box<Self>) -> futures::future::BoxFuture<'static, Result<()>> {
        use std::sync::atomic::Ordering::SeqCst;
        Box::pin(async move {
            if !self.store.ledger().contains(&self.id) {
                self.before_commit.fetch_add(1, SeqCst);
            }
            self.in_flight.fetch_add(1, SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            self.in_flight.fetch_sub(1, SeqCst);
            self.acked.fetch_add(1, SeqCst);
            Ok(())
        })
    }
    fn nack(self: Box<Self>) -> futures::future::BoxFuture<'static, Result<()>> {
        Box::pin(async { Ok(()) })
    }
}

struct SlowAcks {
    queue: VecDeque<RawEnvelope>,
    store: MemStore,
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
    acked: Arc<std::sync::atomic::AtomicUsize>,
    before_commit: Arc<std::sync::atomic::AtomicUsize>,
}

impl Source for SlowAcks {
    async fn next(&mut self) -> Result<Option<Delivery>> {
        let Some(message) = self.queue.pop_front() else {
            return Ok(None);
        };
        let acker = SlowAck {
            id: message.display_id().unwrap_or_default(),
            store: self.store.clone(),
            in_flight: self.in_flight.clone(),
            acked: self.acked.clone(),
            before_commit: self.before_commit.clone(),
        };
        Ok(Some(Delivery::new(message, 1, Box::new(acker))))
    }
}

/// The ledger handler, counting the messages it handles while acks are in flight.
struct Overlaps {
    inner: Ledger,
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
    overlapped: Arc<std::sync::atomic::AtomicUsize>,
}

impl oncely_core::Handler<support::MemTx> for Overlaps {
    async fn handle(
        &self,
        tx: &mut support::MemTx,
        message: &oncely_core::Envelope,
    ) -> Result<oncely_core::Handled> {
        use std::sync::atomic::Ordering::SeqCst;
        if self.in_flight.load(SeqCst) > 0 {
            self.overlapped.fetch_add(1, SeqCst);
        }
        self.inner.handle(tx, message).await
    }
}

/// With one lane, the next group is handled while the previous group's acks are still on
/// their way (the lane does not wait a broker round trip per group); every ack still comes
/// after its commit, and all of them are answered before `run` returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lane_takes_its_next_group_while_the_last_acks_are_on_their_way() {
    use std::sync::atomic::Ordering::SeqCst;
    let ids: Vec<String> = (0..200).map(|i| format!("m-{i}")).collect();
    let store = MemStore::default();
    let in_flight = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let acked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let before_commit = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let overlapped = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let source = SlowAcks {
        queue: ids
            .iter()
            .map(|id| RawEnvelope::new(id.as_str(), "1"))
            .collect(),
        store: store.clone(),
        in_flight: in_flight.clone(),
        acked: acked.clone(),
        before_commit: before_commit.clone(),
    };
    let handler = Overlaps {
        inner: Ledger::default(),
        in_flight,
        overlapped: overlapped.clone(),
    };
    let consumer = Consumer::new(
        ConsumerName::new("slow-acks").unwrap(),
        store.clone(),
        handler,
    )
    .group_commit(16)
    .concurrency(1);
    let stats = consumer
        .run(source, CancellationToken::new())
        .await
        .unwrap();
    let (double, lost) = double_and_lost(&store.ledger(), &ids);
    assert_eq!((double, lost, stats.applied), (0, 0, 200), "{stats:?}");
    assert_eq!(acked.load(SeqCst), 200, "acks still out when run returned");
    assert_eq!(
        before_commit.load(SeqCst),
        0,
        "an ack came before its commit"
    );
    assert!(
        overlapped.load(SeqCst) > 0,
        "the lane waited for its group's acks before handling the next group"
    );
}
