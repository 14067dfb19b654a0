//! NATS JetStream: a stream per cell; the bare consumer is an async-nats durable pull
//! consumer, consume + ack.

use anyhow::{Context, Result, bail};
use async_nats::jetstream::{self, consumer::PullConsumer, consumer::pull};
use futures::StreamExt;
use std::time::Duration;

pub(super) async fn probe(url: &str) -> Result<()> {
    async_nats::connect(url).await?.flush().await?;
    Ok(())
}

fn stream_name(name: &str) -> String {
    name.to_uppercase()
}

/// oncely's source URL for stream `name`: the stream and subject only.
pub(super) fn source_url(base: &str, name: &str) -> String {
    format!("{base}?stream={}&subject={name}", stream_name(name))
}

/// A durable pull consumer reading `max_messages_per_batch` = oncely's default read-ahead;
/// each message acked (the plain ack, not confirmed) until `n`.
pub(super) async fn bare(base: &str, name: &str, n: usize) -> Result<Duration> {
    let js = jetstream::new(async_nats::connect(base).await?);
    let stream = js.get_stream(stream_name(name)).await?;
    let consumer: PullConsumer = stream
        .get_or_create_consumer(
            "bare",
            pull::Config {
                durable_name: Some("bare".into()),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ..Default::default()
            },
        )
        .await?;
    super::timed(async {
        let mut messages = consumer
            .stream()
            .max_messages_per_batch(super::default_read_ahead())
            .messages()
            .await?;
        for received in 0..n {
            let Some(message) = messages.next().await else {
                bail!("bare NATS consumer: stream ended after {received} of {n}");
            };
            message
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .ack()
                .await
                .map_err(|e| anyhow::anyhow!("ack: {e}"))?;
        }
        Ok(())
    })
    .await
}

pub(super) async fn remove(base: &str, name: &str) -> Result<()> {
    let js = jetstream::new(async_nats::connect(base).await?);
    js.delete_stream(stream_name(name))
        .await
        .context("deleting the stream")?;
    Ok(())
}
