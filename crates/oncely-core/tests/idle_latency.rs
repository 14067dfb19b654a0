//! An idle consumer adds no wait: a lone delivery goes through claim, handler, commit and
//! ack without any timer (linger, poll interval, backoff) in its way, with group commit on
//! (the default) and off. On a paused clock, time moves only when every task waits on a
//! timer, so any timer on the path would show as latency here.

mod support;

use futures::future::BoxFuture;
use oncely_core::{
    Acker, CancellationToken, Consumer, ConsumerName, Delivery, Envelope, Handled, Handler,
    MemorySource, RawEnvelope, Result, Source,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{MemStore, MemTx, double_and_lost};
use tokio::time::Instant;

type Times = Arc<Mutex<HashMap<String, Instant>>>;

/// Notes when the handler sees each message, and writes its effect.
#[derive(Clone, Default)]
struct Seen(Times);

impl Handler<MemTx> for Seen {
    async fn handle(&self, tx: &mut MemTx, message: &Envelope) -> Result<Handled> {
        let id = message.id().as_str().to_owned();
        self.0.lock().unwrap().insert(id.clone(), Instant::now());
        tx.effect(&id);
        Ok(Handled::Applied)
    }
}

/// A [`MemorySource`] that notes when each delivery is acked.
struct AckTimes {
    inner: MemorySource,
    acked: Times,
}

struct TimedAck {
    inner: Delivery,
    acked: Times,
}

impl Acker for TimedAck {
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        Box::pin(async move {
            let id = self.inner.message().display_id().unwrap_or_default();
            self.inner.discard().await?;
            self.acked.lock().unwrap().insert(id, Instant::now());
            Ok(())
        })
    }

    fn nack(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        Box::pin(self.inner.nack())
    }
}

impl Source for AckTimes {
    async fn next(&mut self) -> Result<Option<Delivery>> {
        let Some(delivery) = self.inner.next().await? else {
            return Ok(None);
        };
        let acked = self.acked.clone();
        Ok(Some(
            delivery.relay(|inner| Box::new(TimedAck { inner, acked })),
        ))
    }
}

/// Publishes a message every 20 ms to one consumer with `group_commit`; asserts each was
/// handled and acked at the instant it was published, and applied exactly once.
async fn lone_deliveries_wait_for_nothing(group_commit: usize) {
    let source = MemorySource::new();
    let (handled, acked) = (Times::default(), Times::default());
    let store = MemStore::default();
    let consumer = Consumer::new(
        ConsumerName::new("idle").unwrap(),
        store.clone(),
        Seen(handled.clone()),
    )
    .group_commit(group_commit)
    .concurrency(1);
    let ids: Vec<String> = (0..20).map(|i| format!("m-{i}")).collect();
    let publisher = {
        let (source, ids) = (source.clone(), ids.clone());
        tokio::spawn(async move {
            let mut published = HashMap::new();
            for id in ids {
                tokio::time::sleep(Duration::from_millis(20)).await;
                published.insert(id.clone(), Instant::now());
                source.publish(RawEnvelope::new(id.as_str(), "1"));
            }
            source.close();
            published
        })
    };
    let timed = AckTimes {
        inner: source,
        acked: acked.clone(),
    };
    let stats = consumer.run(timed, CancellationToken::new()).await.unwrap();
    let published = publisher.await.unwrap();
    assert_eq!(double_and_lost(&store.ledger(), &ids), (0, 0), "{stats:?}");
    let (handled, acked) = (handled.lock().unwrap(), acked.lock().unwrap());
    for id in &ids {
        let at = published[id];
        assert_eq!(handled[id] - at, Duration::ZERO, "{id}: handler waited");
        assert_eq!(acked[id] - at, Duration::ZERO, "{id}: ack waited");
    }
}

#[tokio::test(start_paused = true)]
async fn with_group_commit_a_lone_delivery_waits_for_no_timer() {
    lone_deliveries_wait_for_nothing(oncely_core::DEFAULT_GROUP_COMMIT).await;
}

#[tokio::test(start_paused = true)]
async fn without_group_commit_a_lone_delivery_waits_for_no_timer() {
    lone_deliveries_wait_for_nothing(1).await;
}
