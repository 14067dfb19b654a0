//! [`MqttProducer`]: publishes [`RawEnvelope`]s with QoS 1 and the id in the `message-id`
//! user property.

use crate::mapping::properties_of;
use crate::source::{Count, MqttOptions5};
use oncely_core::{Error, RawEnvelope, Result};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::Packet;
use rumqttc::v5::{AsyncClient, Event};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Publishes to one topic with QoS 1 and waits for the broker's PUBACKs.
pub struct MqttProducer {
    client: AsyncClient,
    topic: String,
    acked: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    sent: u64,
    driver: tokio::task::JoinHandle<()>,
}

impl MqttProducer {
    /// Connects with a fresh clean session.
    pub async fn connect(options: &MqttOptions5) -> Result<Self> {
        static COUNT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos();
        let id = format!(
            "oncely-producer-{}-{}-{nanos}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::Relaxed)
        );
        let mut o = options.client_options(&id, false);
        o.set_manual_acks(false);
        o.set_outgoing_inflight_upper_limit(20);
        let (client, mut eventloop) = AsyncClient::new(o, 1024);
        let acked = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let (a, f) = (acked.clone(), failed.clone());
        let driver = tokio::spawn(async move {
            loop {
                match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::PubAck(_))) => {
                        a.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(_) => {
                        f.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        });
        Ok(Self {
            client,
            topic: options.topic.clone(),
            acked,
            failed,
            sent: 0,
            driver,
        })
    }

    /// Publishes messages in order and waits until the broker acked all of them. Fails
    /// (before sending anything) if an id or property cannot be carried by MQTT. A message
    /// without a `traceparent` user property gets the current span's
    /// ([`oncely_core::trace::traced`]).
    pub async fn send_all(&mut self, messages: &[RawEnvelope]) -> Result<()> {
        self.send(messages, None).await
    }

    /// Like [`MqttProducer::send_all`], but flow-controlled by a subscriber in this process:
    /// a message is published only while fewer than `window` of this producer's messages
    /// have not yet been acked by it (`acked` is its count, [`crate::MqttSource::acked`]).
    /// So the broker never holds more than `window` of them unacked for the subscriber:
    /// keep it well below the broker's queue limit (Mosquitto `max_queued_messages`,
    /// default 1000, counts in-flight messages too), e.g. [`PACING_WINDOW`].
    pub async fn send_paced(
        &mut self,
        messages: &[RawEnvelope],
        acked: &Count,
        window: u64,
    ) -> Result<()> {
        self.send(messages, Some((acked, acked.get(), window.max(1))))
            .await
    }

    async fn send(
        &mut self,
        messages: &[RawEnvelope],
        pace: Option<(&Count, u64, u64)>,
    ) -> Result<()> {
        let props = messages
            .iter()
            .map(|m| properties_of(&oncely_core::trace::traced(m)))
            .collect::<Result<Vec<_>>>()?;
        let first = self.sent;
        for (m, props) in messages.iter().zip(props) {
            if let Some((acked, base, window)) = pace {
                let (mut seen, mut since) = (acked.get(), std::time::Instant::now());
                while (self.sent - first).saturating_sub(acked.get().saturating_sub(base)) >= window
                {
                    if self.failed.load(Ordering::Relaxed) > 0 {
                        return Err(Error::transient("MQTT: producer connection failed"));
                    }
                    if acked.get() != seen {
                        (seen, since) = (acked.get(), std::time::Instant::now());
                    } else if since.elapsed() > PACING_STALL {
                        return Err(Error::transient(format!(
                            "MQTT: the subscriber acked nothing for {PACING_STALL:?} with {window} messages outstanding"
                        )));
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            self.client
                .publish_with_properties(
                    self.topic.clone(),
                    QoS::AtLeastOnce,
                    false,
                    m.payload.clone(),
                    props,
                )
                .await
                .map_err(|e| Error::transient(format!("MQTT: publish: {e}")))?;
            self.sent += 1;
        }
        for _ in 0..600 {
            if self.acked.load(Ordering::Relaxed) >= self.sent {
                return Ok(());
            }
            if self.failed.load(Ordering::Relaxed) > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(Error::transient(format!(
            "MQTT: {} of {} publishes acked",
            self.acked.load(Ordering::Relaxed),
            self.sent
        )))
    }
}

impl Drop for MqttProducer {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// A pacing window (messages published but not yet acked by the subscriber) well below
/// Mosquitto's default `max_queued_messages` (1000).
pub const PACING_WINDOW: u64 = 500;

/// A paced publish fails when the subscriber received nothing for this long.
const PACING_STALL: Duration = Duration::from_secs(60);

/// Publishes `messages` to the topic the URL names (`?topic=`, default `oncely/messages`),
/// paced by a subscriber in this process: never more than `window` published messages
/// that it has not acked yet (see [`MqttProducer::send_paced`]).
pub async fn publish_paced(
    url: &str,
    messages: &[RawEnvelope],
    acked: &Count,
    window: u64,
) -> Result<()> {
    let options = MqttOptions5::from_url(url, "producer")?;
    let mut producer = MqttProducer::connect(&options).await?;
    producer.send_paced(messages, acked, window).await
}

/// Publishes `messages` to the topic the URL names (`?topic=`, default `oncely/messages`).
///
/// Mind the broker's per-client queue (Mosquitto: `max_queued_messages`, default 1000):
/// messages beyond it for a slow or offline subscriber are dropped by the broker, so large
/// volumes need pacing ([`publish_paced`]) or a larger limit.
pub async fn publish(url: &str, messages: &[RawEnvelope]) -> Result<()> {
    let options = MqttOptions5::from_url(url, "producer")?;
    let mut producer = MqttProducer::connect(&options).await?;
    for chunk in messages.chunks(200) {
        producer.send_all(chunk).await?;
    }
    Ok(())
}
