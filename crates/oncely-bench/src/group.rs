//! Group commit cells: the user's per-message handler under [`Consumer::group_commit`] (ready
//! deliveries share one transaction), the floor for a duplicate (primary-key lookups), and
//! per-message latency with and without group commit at one consumer.

use crate::bed::{Credits, Ops};
use crate::runners::retry_policy;
use anyhow::{Result, bail};
use futures::future::BoxFuture;
use oncely_core::{
    Acker, Consumer, ConsumerName, Delivery, Envelope, GroupCommitStats, Handled, Handler,
    MemorySource, RawEnvelope, Source, StatsSnapshot,
};
use oncely_sql::AnyTx;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The handler a user writes: `handle` only. Group commit runs it message by message in the
/// group's transaction (the default `handle_batch`), unlike the bench's batch handler.
pub(crate) struct PerMessage(pub Credits);

impl Handler<AnyTx> for PerMessage {
    async fn handle(&self, tx: &mut AnyTx, message: &Envelope) -> oncely_core::Result<Handled> {
        self.0.handle(tx, message).await
    }

    fn lock_key(&self, message: &RawEnvelope) -> Option<String> {
        self.0.lock_key(message)
    }
}

/// oncely with group commit: up to `group` ready deliveries per transaction, `concurrency`
/// groups in flight, no linger.
pub(crate) async fn oncely_group<B: Ops, Src: Source>(
    bed: &B,
    name: &ConsumerName,
    source: Src,
    group: usize,
    concurrency: usize,
) -> Result<(StatsSnapshot, GroupCommitStats)> {
    let consumer = Consumer::new(name.clone(), bed.store(), PerMessage(bed.handler()))
        .group_commit(group)
        .concurrency(concurrency)
        .retry(retry_policy());
    let stats = consumer.run(source, CancellationToken::new()).await?;
    if stats.nacked + stats.dead_lettered > 0 {
        bail!("oncely gave up on deliveries: {stats:?}");
    }
    let groups = consumer.group_commit_stats();
    if groups.fallbacks > 0 {
        // Not an error (each message then went alone, exactly once), but it costs: say so.
        eprintln!(
            "bench: group commit c{concurrency}: {} of {} groups rolled back and went one at a time",
            groups.fallbacks,
            groups.fallbacks + groups.committed
        );
    }
    Ok((stats, groups))
}

/// Times one primary-key `SELECT` per message on one connection; every id must be found.
pub(crate) async fn pk_lookups<B: Ops>(
    bed: &B,
    name: &ConsumerName,
    msgs: &[RawEnvelope],
) -> Result<Duration> {
    let ids: Vec<String> = msgs.iter().filter_map(|m| m.display_id()).collect();
    let started = Instant::now();
    let found = bed.lookups(name.as_str(), &ids).await?;
    let elapsed = started.elapsed();
    if found != ids.len() as u64 {
        bail!("primary-key lookups found {found} of {} ids", ids.len());
    }
    Ok(elapsed)
}

/// Publishes `msgs` one every `gap` while one consumer (group commit up to `group`, 1 = off)
/// processes them; returns the elapsed time and each message's latency from its publish to
/// its ack.
pub(crate) async fn latencies<B: Ops>(
    bed: &B,
    name: &ConsumerName,
    msgs: &[RawEnvelope],
    group: usize,
    gap: Duration,
) -> Result<(Duration, Vec<Duration>)> {
    let source = MemorySource::new();
    let published = Arc::new(Mutex::new(HashMap::new()));
    let acked = Arc::new(Mutex::new(HashMap::new()));
    let publisher = {
        let (source, published, msgs) = (source.clone(), published.clone(), msgs.to_vec());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(gap);
            for m in msgs {
                tick.tick().await;
                let id = m.display_id().unwrap_or_default();
                published.lock().expect("lock").insert(id, Instant::now());
                source.publish(m);
            }
            source.close();
        })
    };
    let started = Instant::now();
    let timed = {
        let acked = acked.clone();
        Timed::new(source, move |id, _| {
            acked
                .lock()
                .expect("lock")
                .insert(id.to_owned(), Instant::now());
        })
    };
    oncely_group(bed, name, timed, group, 1).await?;
    let elapsed = started.elapsed();
    publisher.await?;
    let published = published.lock().expect("lock");
    let acked = acked.lock().expect("lock");
    let mut latencies: Vec<Duration> = published
        .iter()
        .filter_map(|(id, at)| Some(acked.get(id)?.duration_since(*at)))
        .collect();
    if latencies.len() != msgs.len() {
        bail!("{} of {} messages acked", latencies.len(), msgs.len());
    }
    latencies.sort();
    Ok((elapsed, latencies))
}

/// The `q` quantile (0..=1) of sorted `values`, in milliseconds.
pub(crate) fn quantile_ms(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let at = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[at].as_secs_f64() * 1e3
}

/// Called with a message's id and the time from its delivery to the consumer (the source's
/// `next`) to its ack, right after the ack (the consumer acks after its commit).
type OnAck = Arc<dyn Fn(&str, Duration) + Send + Sync>;

/// A source that calls a hook as each delivery is acked (the latency cells, the long-horizon
/// cells and the soak mode time messages with it).
pub(crate) struct Timed {
    inner: MemorySource,
    on_ack: OnAck,
}

impl Timed {
    /// `inner`, calling `on_ack` with each message's id and its time in the consumer once its
    /// delivery is acked.
    pub(crate) fn new(
        inner: MemorySource,
        on_ack: impl Fn(&str, Duration) + Send + Sync + 'static,
    ) -> Self {
        Self {
            inner,
            on_ack: Arc::new(on_ack),
        }
    }
}

impl Source for Timed {
    async fn next(&mut self) -> oncely_core::Result<Option<Delivery>> {
        let Some(delivery) = self.inner.next().await? else {
            return Ok(None);
        };
        let (on_ack, delivered) = (self.on_ack.clone(), Instant::now());
        Ok(Some(delivery.relay(|inner| {
            Box::new(TimedAck {
                inner,
                on_ack,
                delivered,
            })
        })))
    }
}

struct TimedAck {
    inner: Delivery,
    on_ack: OnAck,
    delivered: Instant,
}

impl Acker for TimedAck {
    fn ack(self: Box<Self>) -> BoxFuture<'static, oncely_core::Result<()>> {
        Box::pin(async move {
            let id = self.inner.message().display_id().unwrap_or_default();
            // The consumer's ack carried its proof; the original is acked on its behalf.
            self.inner.discard().await?;
            (self.on_ack)(&id, self.delivered.elapsed());
            Ok(())
        })
    }

    fn nack(self: Box<Self>) -> BoxFuture<'static, oncely_core::Result<()>> {
        Box::pin(self.inner.nack())
    }
}
