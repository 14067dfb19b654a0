//! Cells through a real broker (RabbitMQ): the cell's messages are published to a fresh
//! queue first, then consumed, timed from the consumer's start to its last ack:
//!
//! - `amqp_bare`: a bare lapin consumer, consume + ack and nothing else (the broker's and the
//!   client's own ceiling), prefetch = what oncely's defaults ask for;
//! - `amqp`: oncely as a user runs it: a plain URL (`?queue=` only), group commit on
//!   (`max_batch(64)`, nothing else: 4 lanes and the prefetch it sizes are the defaults), the
//!   per-message handler, into the database.

use crate::bed::Ops;
use crate::group::PerMessage;
use crate::runners::retry_policy;
use anyhow::{Context, Result, bail};
use futures::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use oncely_core::{
    CancellationToken, Consumer, ConsumerName, DEFAULT_CONCURRENCY, Delivery, RawEnvelope, Source,
};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

static AMQP_URL: OnceLock<String> = OnceLock::new();

/// Sets the RabbitMQ URL of the broker cells (`oncely bench --amqp`), once.
pub(crate) fn set_amqp_url(url: &str) {
    let _ = AMQP_URL.set(url.to_owned());
}

/// Whether the broker cells run (a URL was set after a successful [`probe`]).
pub(crate) fn amqp_enabled() -> bool {
    AMQP_URL.get().is_some()
}

/// Connects once to `url` (5 s at most).
pub(crate) async fn probe(url: &str) -> Result<()> {
    let connect = lapin::Connection::connect(url, Default::default());
    let conn = tokio::time::timeout(Duration::from_secs(5), connect)
        .await
        .with_context(|| {
            format!(
                "RabbitMQ at {} did not answer in 5 s",
                oncely_sql::redact_url(url)
            )
        })?
        .with_context(|| format!("RabbitMQ at {}", oncely_sql::redact_url(url)))?;
    let _ = conn.close(200, "probe".into()).await;
    Ok(())
}

fn amqp_url() -> Result<&'static str> {
    AMQP_URL
        .get()
        .map(String::as_str)
        .context("no RabbitMQ URL for the broker cells")
}

/// The prefetch oncely's group commit asks for (`Source::read_ahead`), given to the bare consumer
/// too, so both read the same distance ahead.
fn default_read_ahead() -> u16 {
    (2 * DEFAULT_CONCURRENCY * crate::plan::GROUP) as u16
}

/// A fresh quorum queue holding `msgs` (published with oncely's producer, confirmed).
async fn fill_queue(tag: &str, msgs: &[RawEnvelope]) -> Result<String> {
    let queue = format!(
        "oncely-bench-{tag}-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos()
    );
    let producer = oncely_amqp::AmqpProducer::connect(amqp_url()?, &queue, "quorum")
        .await
        .context("RabbitMQ producer (oncely bench --amqp URL, or --no-brokers)")?;
    for chunk in msgs.chunks(256) {
        let sends = chunk.iter().map(|m| producer.send(m));
        for sent in futures::future::join_all(sends).await {
            sent?;
        }
    }
    Ok(queue)
}

/// The bare consumer: consume + ack until every message of `msgs` was received.
pub(crate) async fn bare(msgs: &[RawEnvelope]) -> Result<Duration> {
    let queue = fill_queue("bare", msgs).await?;
    let props = lapin::ConnectionProperties::default();
    let conn = lapin::Connection::connect(amqp_url()?, props).await?;
    let channel = conn.create_channel().await?;
    let started = Instant::now();
    channel
        .basic_qos(default_read_ahead(), BasicQosOptions::default())
        .await?;
    let mut consumer = channel
        .basic_consume(
            queue.as_str().into(),
            "bare".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let mut received = 0;
    while received < msgs.len() {
        let next = tokio::time::timeout(Duration::from_secs(30), consumer.next()).await;
        let Ok(Some(delivery)) = next else {
            bail!("bare consumer: {received} of {} received", msgs.len());
        };
        delivery?.ack(BasicAckOptions::default()).await?;
        received += 1;
    }
    let elapsed = started.elapsed();
    drop_queue(&channel, &queue).await;
    let _ = conn.close(200, "bench done".into()).await;
    Ok(elapsed)
}

/// oncely with group commit over the queue, into `bed`'s store.
pub(crate) async fn oncely<B: Ops>(
    bed: &B,
    name: &ConsumerName,
    msgs: &[RawEnvelope],
) -> Result<Duration> {
    let queue = fill_queue("oncely", msgs).await?;
    let url = format!("{}?queue={queue}", amqp_url()?);
    let source = oncely_amqp::connect_source(&url, name.as_str()).await?;
    let consumer = Consumer::new(name.clone(), bed.store(), PerMessage(bed.handler()))
        .max_batch(crate::plan::GROUP)
        .retry(retry_policy());
    let started = Instant::now();
    let stats = consumer
        .run(Take(source, msgs.len()), CancellationToken::new())
        .await?;
    let elapsed = started.elapsed();
    if stats.nacked + stats.dead_lettered > 0 {
        bail!("oncely gave up on deliveries through RabbitMQ: {stats:?}");
    }
    let conn = lapin::Connection::connect(amqp_url()?, Default::default()).await?;
    drop_queue(&conn.create_channel().await?, &queue).await;
    Ok(elapsed)
}

async fn drop_queue(channel: &lapin::Channel, queue: &str) {
    let _ = channel.queue_delete(queue.into(), Default::default()).await;
}

/// Ends after `n` deliveries (the cell knows how many it published; a redelivery would end
/// it early, and the checker would then find the messages missing).
struct Take<S>(S, usize);

impl<S: Source> Source for Take<S> {
    async fn next(&mut self) -> oncely_core::Result<Option<Delivery>> {
        if self.1 == 0 {
            return Ok(None);
        }
        self.1 -= 1;
        self.0.next().await
    }

    fn read_ahead(&mut self, deliveries: usize) {
        self.0.read_ahead(deliveries);
    }
}
