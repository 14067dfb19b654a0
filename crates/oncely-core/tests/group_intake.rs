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
    .max_batch(16)
    .concurrency(2);
    let stats = consumer
        .run(source, CancellationToken::new())
        .await
        .unwrap();
    let (double, lost) = double_and_lost(&store.ledger(), &ids);
    assert_eq!((double, lost), (0, 0), "{stats:?}");
    assert_eq!(stats.applied, 300, "{stats:?}");
    let groups = consumer.batch_stats();
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
        .max_batch(group);
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
