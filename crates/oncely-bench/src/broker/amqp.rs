//! RabbitMQ: a quorum queue per cell; the bare consumer is lapin, consume + ack.

use anyhow::{Result, bail};
use futures::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use std::time::Duration;

pub(super) async fn probe(url: &str) -> Result<()> {
    let conn = lapin::Connection::connect(url, Default::default()).await?;
    let _ = conn.close(200, "probe".into()).await;
    Ok(())
}

/// oncely's source URL for queue `name`: the queue only (a quorum queue, oncely's default).
pub(super) fn source_url(base: &str, name: &str) -> String {
    format!("{base}?queue={name}")
}

/// Consume + ack until `n` deliveries, with the prefetch oncely's source sets at its defaults.
pub(super) async fn bare(base: &str, queue: &str, n: usize) -> Result<Duration> {
    let conn = lapin::Connection::connect(base, Default::default()).await?;
    let channel = conn.create_channel().await?;
    let elapsed = super::timed(async {
        let prefetch = oncely::amqp::prefetch_for(super::default_read_ahead());
        channel
            .basic_qos(prefetch, BasicQosOptions::default())
            .await?;
        let mut consumer = channel
            .basic_consume(
                queue.into(),
                "bare".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        for received in 0..n {
            let Some(delivery) = consumer.next().await else {
                bail!("bare lapin consumer: stream ended after {received} of {n}");
            };
            delivery?.ack(BasicAckOptions::default()).await?;
        }
        Ok(())
    })
    .await;
    let _ = conn.close(200, "bench done".into()).await;
    elapsed
}

pub(super) async fn remove(base: &str, queue: &str) -> Result<()> {
    let conn = lapin::Connection::connect(base, Default::default()).await?;
    let channel = conn.create_channel().await?;
    channel
        .queue_delete(queue.into(), Default::default())
        .await?;
    let _ = conn.close(200, "bench done".into()).await;
    Ok(())
}
