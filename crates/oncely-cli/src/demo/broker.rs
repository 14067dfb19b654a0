//! The demo over a real broker: the broker does not inject faults, so the demo publishes
//! the duplicates and the local reordering itself.

use super::DemoArgs;
use anyhow::{Context, Result};
use oncely::brokers::{AnySource, publish};
use oncely_core::{RawEnvelope, Source};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Duration;

/// The copies to publish: each message once, some twice (seeded), shuffled within windows.
pub fn with_duplicates(messages: &[RawEnvelope], args: &DemoArgs) -> Vec<RawEnvelope> {
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed ^ 0xd0b1e);
    let mut copies = Vec::with_capacity(messages.len() * 5 / 4);
    for m in messages {
        copies.push(m.clone());
        if rng.random_bool(args.duplicate_rate.clamp(0.0, 1.0)) {
            copies.push(m.clone());
        }
    }
    for chunk in copies.chunks_mut(args.reorder_window.max(1)) {
        chunk.shuffle(&mut rng);
    }
    copies
}

/// True for a `kafka://` URL.
pub fn is_kafka(url: &str) -> bool {
    oncely::brokers::scheme(url) == "kafka"
}

/// Whether the broker of `url` itself drops a re-publish of a message id it stored recently:
/// NATS JetStream does, for `Nats-Msg-Id` within the stream's duplicate window
/// (docs/wire-format.md). Copies published close together then never reach the consumer, so
/// oncely sees neither that duplicate nor that conflict; the checker counts those as resolved
/// by the broker.
pub fn drops_republished_ids(url: &str) -> bool {
    oncely::brokers::scheme(url) == "nats"
}

/// The URL to consume from: a `kafka://` URL gets `idle_exit_ms` (from `--idle-exit`)
/// unless it names one, so that the source itself can tell "assigned and drained" from
/// "still joining the group".
pub fn consume_url(url: &str, args: &DemoArgs) -> String {
    if !is_kafka(url) || url.contains("idle_exit_ms=") {
        return url.to_owned();
    }
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}idle_exit_ms={}", args.idle_exit * 1000)
}

/// Acks and discards whatever an earlier run left in the queue, so that the checker compares
/// this run's messages only. Returns how many were discarded.
///
/// Waits up to 1 s per message; for Kafka the first wait also covers the group join (up
/// to 30 s), and the source ends the drain itself once its partitions are assigned and idle.
pub async fn drain<S: Source>(source: &mut S, url: &str) -> Result<u64> {
    let mut discarded = 0;
    let mut wait = if is_kafka(url) {
        Duration::from_secs(30)
    } else {
        Duration::from_secs(1)
    };
    while let Ok(next) = tokio::time::timeout(wait, source.next()).await {
        wait = Duration::from_secs(1);
        let Some(delivery) = next? else { break };
        // Deliberately dropped without processing: not part of this run.
        delivery.discard().await?;
        discarded += 1;
    }
    Ok(discarded)
}

/// The demo's publisher over a real broker.
pub struct Publishing {
    task: Option<tokio::task::JoinHandle<oncely_core::Result<()>>>,
    /// MQTT: a reading of the source's count of publishes from the broker, and its value at
    /// the start.
    received: Option<(Received, u64)>,
    copies: u64,
}

type Received = Box<dyn Fn() -> u64 + Send + Sync>;

/// Publishes `copies` to `url`. Over MQTT the publisher runs alongside the consumer and
/// keeps at most `oncely::mqtt::PACING_WINDOW` messages that the source has not acked yet:
/// the broker drops QoS 1 messages held unacked beyond its limit (Mosquitto
/// `max_queued_messages`, default 1000). Other brokers keep any backlog, so everything is
/// published first.
pub async fn start_publishing(
    url: &str,
    source: &AnySource,
    copies: &[RawEnvelope],
) -> Result<Publishing> {
    let copies = &carriable(url, copies);
    #[cfg(feature = "mqtt")]
    if let AnySource::Mqtt(s) = source {
        let (received, acked) = (s.received(), s.acked());
        let base = received.get();
        let task = {
            let (url, copies) = (url.to_owned(), copies.to_vec());
            tokio::spawn(async move {
                oncely::mqtt::publish_paced(&url, &copies, &acked, oncely::mqtt::PACING_WINDOW)
                    .await
            })
        };
        return Ok(Publishing {
            task: Some(task),
            received: Some((Box::new(move || received.get()), base)),
            copies: copies.len() as u64,
        });
    }
    let _ = source;
    publish(url, copies).await?;
    Ok(Publishing {
        task: None,
        received: None,
        copies: copies.len() as u64,
    })
}

impl Publishing {
    /// Waits for the publisher to finish. Over MQTT, warns when the broker delivered
    /// fewer messages than were published: it dropped some (queue limit).
    pub async fn finish(self) -> Result<()> {
        if let Some(task) = self.task {
            task.await.context("the publisher task failed")??;
        }
        if let Some((received, base)) = self.received {
            let got = received() - base;
            if let Some(message) = broker_dropped(self.copies, got) {
                tracing::warn!("{message}");
                eprintln!("warning: {message}");
            }
        }
        Ok(())
    }
}

/// The copies with every id the broker's producer cannot carry (MQTT user properties and
/// NATS headers take no control characters, e.g. the demo's bad id `credit-7\n`) published
/// without an id instead: still a message without a usable id, dead-lettered as `bad_id`.
fn carriable(url: &str, copies: &[RawEnvelope]) -> Vec<RawEnvelope> {
    let scheme = oncely::brokers::scheme(url);
    let refused = |m: &RawEnvelope| match scheme {
        #[cfg(feature = "mqtt")]
        "mqtt" | "tcp" => oncely::mqtt::properties_of(m).is_err(),
        #[cfg(feature = "nats")]
        "nats" => oncely::nats::headers_of(m).is_err(),
        _ => {
            let _ = m;
            false
        }
    };
    copies
        .iter()
        .map(|m| {
            let mut m = m.clone();
            if refused(&m) {
                m.id = None;
            }
            m
        })
        .collect()
}

/// The warning when an MQTT broker delivered `received` of `published` messages.
fn broker_dropped(published: u64, received: u64) -> Option<String> {
    (received < published).then(|| {
        format!(
            "the MQTT broker delivered {received} of {published} published messages: it dropped {} \
             (Mosquitto drops QoS 1 messages queued for a client beyond max_queued_messages, \
             default 1000; raise it or publish paced, see docs/wire-format.md)",
            published - received
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(all(feature = "mqtt", feature = "nats"))]
    #[test]
    fn ids_the_broker_cannot_carry_are_published_without_id() {
        let copies = [
            RawEnvelope::new("credit-7\n", "{}"),
            RawEnvelope::new("credit-8", "{}"),
        ];
        for url in ["mqtt://127.0.0.1:1883", "nats://127.0.0.1:4222"] {
            let out = carriable(url, &copies);
            assert_eq!(out[0].id, None, "{url}");
            assert_eq!(out[1].id.as_deref(), Some(&b"credit-8"[..]), "{url}");
        }
        let out = carriable("redis://127.0.0.1:6379", &copies);
        assert_eq!(out[0].id.as_deref(), Some(&b"credit-7\n"[..]));
    }

    #[test]
    fn warns_only_when_the_broker_delivered_fewer() {
        assert!(broker_dropped(100, 100).is_none());
        assert!(broker_dropped(100, 120).is_none());
        let w = broker_dropped(2500, 1020).expect("dropped");
        assert!(
            w.contains("1480") && w.contains("max_queued_messages"),
            "{w}"
        );
    }
}
