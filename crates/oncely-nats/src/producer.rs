//! [`NatsProducer`]: publishes [`RawEnvelope`]s to JetStream with the id in `Nats-Msg-Id`.

use crate::mapping::headers_of;
use crate::source::{NatsOptions, connect_client, ensure_stream, nats_err};
use async_nats::jetstream::{self, Context};
use oncely_core::{RawEnvelope, Result};

/// Publishes to one subject of a stream (created if missing) and waits for JetStream's
/// publish acks, so a successful send means the message is stored.
pub struct NatsProducer {
    js: Context,
    subject: String,
    duplicates: u64,
}

impl NatsProducer {
    /// Connects and creates the stream named in `options` if missing.
    pub async fn connect(url: &str, options: &NatsOptions) -> Result<Self> {
        let client = connect_client(url, "oncely:producer").await?;
        let js = jetstream::new(client);
        ensure_stream(&js, options).await?;
        Ok(Self {
            js,
            subject: options.subject.clone(),
            duplicates: 0,
        })
    }

    /// Publishes messages in order, then waits for all publish acks. Fails (before sending
    /// anything) if a message's id or headers cannot be carried in NATS headers. A message
    /// without a `traceparent` header gets the current span's ([`oncely_core::trace::traced`]).
    pub async fn send_all(&mut self, messages: &[RawEnvelope]) -> Result<()> {
        let headers = messages
            .iter()
            .map(|m| headers_of(&oncely_core::trace::traced(m)))
            .collect::<Result<Vec<_>>>()?;
        let mut acks = Vec::with_capacity(messages.len());
        for (m, headers) in messages.iter().zip(headers) {
            let ack = self
                .js
                .publish_with_headers(self.subject.clone(), headers, m.payload.clone().into())
                .await
                .map_err(|e| nats_err("publish", e))?;
            acks.push(ack);
        }
        for ack in acks {
            let ack = ack.await.map_err(|e| nats_err("publish ack", e))?;
            if ack.duplicate {
                self.duplicates += 1;
            }
        }
        Ok(())
    }

    /// Messages the server reported as duplicates of an id seen within its duplicate
    /// window (stored once, not delivered again).
    pub fn broker_duplicates(&self) -> u64 {
        self.duplicates
    }
}

/// Publishes `messages` to the subject/stream the URL names (`?stream=`, `?subject=`,
/// `?dup_window_ms=`; defaults `ONCELY` / `oncely.messages`). Returns how many the server
/// dropped as duplicates within its dedup window.
pub async fn publish(url: &str, messages: &[RawEnvelope]) -> Result<u64> {
    let (url, options) = NatsOptions::from_url(url, "producer")?;
    let mut producer = NatsProducer::connect(&url, &options).await?;
    for chunk in messages.chunks(500) {
        producer.send_all(chunk).await?;
    }
    Ok(producer.broker_duplicates())
}
