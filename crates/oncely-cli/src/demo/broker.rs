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

/// Acks and discards whatever an earlier run left in the queue, so that the checker compares
/// this run's messages only. Returns how many were discarded.
pub async fn drain<S: Source>(source: &mut S) -> Result<u64> {
    let mut discarded = 0;
    while let Ok(next) = tokio::time::timeout(Duration::from_secs(1), source.next()).await {
        let Some(delivery) = next? else { break };
        // Deliberately dropped without processing: not part of this run.
        delivery.ack(Committed::after_durable_commit()).await?;
        discarded += 1;
    }
    Ok(discarded)
}
