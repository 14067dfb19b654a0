//! [`RedisProducer`]: `XADD`s [`RawEnvelope`]s with the id in the `message_id` field.

use crate::mapping::fields_of;
use crate::source::{RedisOptions, redis_err};
use oncely_core::{Error, RawEnvelope, Result};
use redis::aio::MultiplexedConnection;

/// Appends messages to one stream.
pub struct RedisProducer {
    conn: MultiplexedConnection,
    stream: String,
}

impl RedisProducer {
    /// Connects to Redis for stream `stream`.
    pub async fn connect(url: &str, stream: &str) -> Result<Self> {
        let client =
            redis::Client::open(url).map_err(|e| Error::config(format!("Redis URL: {e}")))?;
        let conn = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| redis_err("connect", e))?;
        Ok(Self {
            conn,
            stream: stream.to_owned(),
        })
    }

    /// Appends messages in order (one pipelined round trip). Returns the entry ids. A message
    /// without a `traceparent` field gets the current span's ([`oncely_core::trace::traced`]).
    pub async fn send_all(&mut self, messages: &[RawEnvelope]) -> Result<Vec<String>> {
        let mut pipe = redis::pipe();
        for m in messages {
            let cmd = pipe.cmd("XADD").arg(&self.stream).arg("*");
            for (k, v) in fields_of(&oncely_core::trace::traced(m)) {
                cmd.arg(k).arg(v);
            }
        }
        pipe.query_async(&mut self.conn)
            .await
            .map_err(|e| redis_err("XADD", e))
    }

    /// Appends one message.
    pub async fn send(&mut self, message: &RawEnvelope) -> Result<String> {
        let mut ids = self.send_all(std::slice::from_ref(message)).await?;
        Ok(ids.pop().unwrap_or_default())
    }
}

/// Publishes `messages` to the stream named by the URL's `?stream=` (default `oncely`).
pub async fn publish(url: &str, messages: &[RawEnvelope]) -> Result<()> {
    let (url, options) = RedisOptions::from_url(url, "producer")?;
    let stream = options.stream.as_str();
    let mut producer = RedisProducer::connect(&url, stream).await?;
    for chunk in messages.chunks(1000) {
        producer.send_all(chunk).await?;
    }
    Ok(())
}
