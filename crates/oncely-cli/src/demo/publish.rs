//! What the demo publishes, recorded independently of the consumer for the checker.

use oncely_core::{PayloadHash, RawEnvelope};
use oncely_testkit::credits::Credit;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

/// Fault rates of the published stream (duplicates are injected by the broker side).
#[derive(Debug, Clone, Copy)]
pub struct Mix {
    /// Distinct messages.
    pub messages: usize,
    /// Accounts credited.
    pub accounts: usize,
    /// Share of ids published a second time with another amount.
    pub conflict_rate: f64,
    /// Share of messages published without a usable id.
    pub bad_id_rate: f64,
    /// Share of messages whose payload cannot be decoded.
    pub undecodable_rate: f64,
}

/// Everything published, by id: each distinct payload variant with its hash and amount.
#[derive(Debug, Default)]
pub struct Published {
    /// Copies to publish, in order.
    pub messages: Vec<RawEnvelope>,
    /// Variants per good id: (payload hash, amount; None when undecodable).
    pub variants: BTreeMap<String, Vec<(PayloadHash, Option<i64>)>>,
    /// Messages published without a usable id.
    pub bad_ids: usize,
    /// Ids whose payload cannot be decoded.
    pub undecodable: usize,
    /// Ids published with two different payloads.
    pub conflicts: usize,
}

/// Generates the demo stream for `seed`; `run` is appended to the ids (empty for the
/// in-process broker; a run stamp for real brokers, whose dedup windows remember old ids).
pub fn generate(seed: u64, run: &str, mix: Mix) -> Published {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    let mut out = Published::default();
    for i in 0..mix.messages {
        if rng.random_bool(mix.bad_id_rate) {
            let id = match i % 3 {
                0 => None,
                1 => Some(Vec::new()),
                _ => Some(format!("credit-{i}\n").into_bytes()),
            };
            out.messages.push(RawEnvelope {
                id,
                payload: credit_json(&mut rng, mix.accounts).0,
                ..Default::default()
            });
            out.bad_ids += 1;
            continue;
        }
        let id = format!("credit-{seed}{run}-{i:07}");
        let (payload, amount) = if rng.random_bool(mix.undecodable_rate) {
            out.undecodable += 1;
            (
                b"{\"account\": \"acct-1\", \"amount\": \"five\"}".to_vec(),
                None,
            )
        } else {
            let (p, a) = credit_json(&mut rng, mix.accounts);
            (p, Some(a))
        };
        let mut variants = vec![(PayloadHash::of(&payload), amount)];
        out.messages.push(RawEnvelope::new(id.clone(), payload));
        if amount.is_some() && rng.random_bool(mix.conflict_rate) {
            let (other, other_amount) = credit_json(&mut rng, mix.accounts);
            if PayloadHash::of(&other) != variants[0].0 {
                variants.push((PayloadHash::of(&other), Some(other_amount)));
                out.messages.push(RawEnvelope::new(id.clone(), other));
                out.conflicts += 1;
            }
        }
        out.variants.insert(id, variants);
    }
    out
}

fn credit_json(rng: &mut ChaCha8Rng, accounts: usize) -> (Vec<u8>, i64) {
    let credit = Credit {
        account: format!("acct-{}", rng.random_range(0..accounts.max(1))),
        amount: rng.random_range(1..=100),
    };
    (
        serde_json::to_vec(&credit).expect("serializable"),
        credit.amount,
    )
}
