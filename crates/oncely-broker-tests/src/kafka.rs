//! Shared by the Kafka tests: the broker address, source URLs, a consumer loop with timings.

use crate::ledger::Db;
use oncely_core::{Consumer, ConsumerName, Delivery, Result, RetryPolicy, Source, StatsSnapshot};
use oncely_kafka::KafkaSource;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The broker address: env `ONCELY_KAFKA_BROKERS`, default `127.0.0.1:9092`
/// (where `scripts/kafka-broker.sh start` puts tansu).
pub fn brokers() -> String {
    std::env::var("ONCELY_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".to_owned())
}

/// A source URL for `topic` with test-friendly group timings: short sessions so that a
/// killed member is noticed quickly, and an idle exit so the run ends by itself.
///
/// `batch.num.messages=1` makes the producer write one record per batch: tansu 0.6.0
/// (memory storage) answers a fetch that starts inside a batch with the *next* batch,
/// skipping the rest of the one asked for (docs/kafka.md), so a consumer resuming from
/// a committed offset in the middle of a batch would never see those records.
pub fn url(topic: &str, partitions: i32, idle_exit_ms: u64) -> String {
    format!(
        "kafka://{}/{topic}?partitions={partitions}&idle_exit_ms={idle_exit_ms}\
         &session.timeout.ms=6000&heartbeat.interval.ms=500&batch.num.messages=1",
        brokers()
    )
}

/// First and last delivery instants and the count, to compute messages/s independently
/// of the group-join time.
#[derive(Debug, Default, Clone, Copy)]
pub struct Timing {
    /// When the first delivery arrived.
    pub first: Option<Instant>,
    /// When the last delivery arrived.
    pub last: Option<Instant>,
    /// Deliveries seen.
    pub deliveries: u64,
}

impl Timing {
    /// Deliveries per second between the first and the last delivery.
    pub fn rate(&self) -> f64 {
        match (self.first, self.last) {
            (Some(a), Some(b)) => self.deliveries as f64 / (b - a).as_secs_f64().max(1e-3),
            _ => 0.0,
        }
    }

    /// From the first to the last delivery.
    pub fn busy(&self) -> Duration {
        match (self.first, self.last) {
            (Some(a), Some(b)) => b - a,
            _ => Duration::ZERO,
        }
    }
}

/// Wraps a source, recording [`Timing`].
pub struct Timed<S> {
    /// The source wrapped.
    pub inner: S,
    /// What it recorded so far.
    pub timing: Arc<Mutex<Timing>>,
}

impl<S: Source> Source for Timed<S> {
    async fn next(&mut self) -> Result<Option<Delivery>> {
        let next = self.inner.next().await;
        if let Ok(Some(_)) = &next {
            let now = Instant::now();
            let mut t = self.timing.lock().unwrap();
            t.first.get_or_insert(now);
            t.last = Some(now);
            t.deliveries += 1;
        }
        next
    }
}

/// Consumes `url` as consumer `consumer` into the ledger of `db` until the source goes
/// idle (or `stop` is cancelled).
pub async fn consume(
    db: &Db,
    url: &str,
    consumer: &str,
    concurrency: usize,
    stop: CancellationToken,
) -> Result<(StatsSnapshot, Timing)> {
    let source = oncely_kafka::connect_source(url, consumer).await?;
    consume_from(db, source, consumer, concurrency, stop).await
}

/// As [`consume`], from a source made by the caller.
pub async fn consume_from(
    db: &Db,
    source: KafkaSource,
    consumer: &str,
    concurrency: usize,
    stop: CancellationToken,
) -> Result<(StatsSnapshot, Timing)> {
    let timing = Arc::new(Mutex::new(Timing::default()));
    let source = Timed {
        inner: source,
        timing: timing.clone(),
    };
    let name = ConsumerName::new(consumer).map_err(oncely_core::Error::config)?;
    let stats = Consumer::new(name, db.store().clone(), db.handler())
        .concurrency(concurrency)
        .retry(RetryPolicy::default().max_attempts(10))
        .run(source, stop)
        .await?;
    let timing = *timing.lock().unwrap();
    Ok((stats, timing))
}
