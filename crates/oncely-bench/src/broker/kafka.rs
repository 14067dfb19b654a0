//! Kafka: a topic per cell (one partition, as oncely's producer creates it); the bare
//! consumer is rdkafka, consume + commit.
//!
//! Joining a consumer group takes seconds (the group coordinator waits for more members), and
//! both consumers pay it alike before their first record, so both cells are timed from their
//! first record to their last ack. Each consumer
//! joins a group of its own (named after the topic), so no member of an earlier cell is
//! waited for.

use anyhow::{Context, Result, bail};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use std::time::{Duration, Instant};

pub(super) async fn probe(addr: &str) -> Result<()> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", addr)
        .create()?;
    tokio::task::spawn_blocking(move || consumer.fetch_metadata(None, Duration::from_secs(4)))
        .await?
        .context("no metadata")?;
    Ok(())
}

/// oncely's source URL for topic `name`: the topic and the cell's group.
pub(super) fn source_url(addr: &str, name: &str) -> String {
    format!("kafka://{addr}/{name}?group={name}-oncely")
}

/// Consumes until `n` records, committing the last record's offset asynchronously every 50 ms
/// (oncely's default commit interval) and once more, synchronously, at the end; timed from the
/// first record.
pub(super) async fn bare(addr: &str, topic: &str, n: usize) -> Result<Duration> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", addr)
        .set("group.id", format!("{topic}-bare"))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false")
        .create()?;
    consumer.subscribe(&[topic])?;
    let consume = async {
        let mut first = None;
        let mut last_commit = Instant::now();
        for received in 0..n {
            let message = consumer
                .recv()
                .await
                .with_context(|| format!("bare Kafka consumer after {received} of {n}"))?;
            first.get_or_insert_with(Instant::now);
            let last = received + 1 == n;
            if last || last_commit.elapsed() >= Duration::from_millis(50) {
                let mode = if last {
                    CommitMode::Sync
                } else {
                    CommitMode::Async
                };
                consumer.commit_message(&message, mode)?;
                last_commit = Instant::now();
            }
        }
        match first {
            Some(first) => Ok(first.elapsed()),
            None => bail!("bare Kafka consumer: no record"),
        }
    };
    tokio::time::timeout(Duration::from_secs(90), consume)
        .await
        .context("bare Kafka consumer: not done after 90 s")?
}

pub(super) async fn remove(addr: &str, topic: &str) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", addr)
        .create()?;
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    for result in admin.delete_topics(&[topic], &options).await? {
        result.map_err(|(name, code)| anyhow::anyhow!("deleting topic {name}: {code}"))?;
    }
    Ok(())
}
