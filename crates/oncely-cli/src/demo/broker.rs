//! The demo over a real broker: the broker does not inject faults, so the demo publishes
//! the duplicates and the local reordering itself.

use super::DemoArgs;
use anyhow::Result;
use oncely_core::{Committed, RawEnvelope, Source};
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
        delivery.ack(Committed::after_durable_commit()).await?;
        discarded += 1;
    }
    Ok(discarded)
}
