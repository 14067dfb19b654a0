//! Redis Streams: a stream per cell; the bare consumer is redis-rs, `XREADGROUP` + `XACK`.

use anyhow::{Result, bail};
use redis::AsyncCommands;
use redis::streams::{StreamReadOptions, StreamReadReply};
use std::time::Duration;

async fn connection(base: &str) -> Result<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(base)?;
    Ok(client.get_multiplexed_async_connection().await?)
}

pub(super) async fn probe(url: &str) -> Result<()> {
    let mut conn = connection(url).await?;
    let _: String = redis::cmd("PING").query_async(&mut conn).await?;
    Ok(())
}

/// oncely's source URL for stream `name`: the stream only.
pub(super) fn source_url(base: &str, name: &str) -> String {
    format!("{base}?stream={name}")
}

/// A consumer group member reading `COUNT` = oncely's default read-ahead per `XREADGROUP`,
/// acking each read's entries with one `XACK`, until `n`.
pub(super) async fn bare(base: &str, stream: &str, n: usize) -> Result<Duration> {
    let mut conn = connection(base).await?;
    let _: () = conn.xgroup_create(stream, "bare", "0").await?;
    super::timed(async {
        let options = StreamReadOptions::default()
            .group("bare", "bare-1")
            .count(super::default_read_ahead())
            .block(1000);
        let mut received = 0;
        while received < n {
            let reply: Option<StreamReadReply> =
                conn.xread_options(&[stream], &[">"], &options).await?;
            let ids: Vec<String> = reply
                .into_iter()
                .flat_map(|r| r.keys)
                .flat_map(|k| k.ids)
                .map(|e| e.id)
                .collect();
            if ids.is_empty() {
                bail!("bare Redis consumer: nothing new after {received} of {n}");
            }
            let _: u64 = conn.xack(stream, "bare", &ids).await?;
            received += ids.len();
        }
        Ok(())
    })
    .await
}

pub(super) async fn remove(base: &str, stream: &str) -> Result<()> {
    let mut conn = connection(base).await?;
    let _: u64 = conn.del(stream).await?;
    Ok(())
}
