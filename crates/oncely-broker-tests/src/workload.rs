//! Workloads: unique messages, exact duplicates and bad ids, shuffled.

use oncely_core::{Meta, RawEnvelope};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// What a test publishes and what the checker expects.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Each unique id with its payload (the one every copy carries).
    pub unique: Vec<(String, Vec<u8>)>,
    /// Payloads of messages without a usable id (each must end as a `bad_id` dead letter).
    pub bad: Vec<Vec<u8>>,
    /// Everything to publish, in publish order (duplicates and bad messages included).
    pub messages: Vec<RawEnvelope>,
}

/// The demo's payload: `{"account":"acct-17","amount":5}`.
pub fn payload(account: &str, amount: i64) -> Vec<u8> {
    format!(r#"{{"account":"{account}","amount":{amount}}}"#).into_bytes()
}

impl Workload {
    /// `n` unique messages with ids `{prefix}-{i}`, about `dup_rate` of them published twice
    /// (the copy at a random later position), and `bad` messages without an id (one of them,
    /// if `bad >= 2`, with an id containing a control character instead).
    pub fn new(prefix: &str, n: usize, dup_rate: f64, bad: usize, seed: u64) -> Self {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let unique: Vec<(String, Vec<u8>)> = (0..n)
            .map(|i| {
                let account = format!("acct-{}", i % 50);
                (
                    format!("{prefix}-{i}"),
                    payload(&account, rng.random_range(1..=100)),
                )
            })
            .collect();
        let mut messages: Vec<RawEnvelope> = unique
            .iter()
            .map(|(id, p)| RawEnvelope::new(id.clone(), p.clone()))
            .collect();
        let dups: Vec<RawEnvelope> = messages
            .iter()
            .filter(|_| rng.random_bool(dup_rate))
            .cloned()
            .collect();
        messages.extend(dups);
        let bad: Vec<Vec<u8>> = (0..bad)
            .map(|i| payload(&format!("bad-{prefix}-{i}"), 1))
            .collect();
        for (i, p) in bad.iter().enumerate() {
            let id = (i == 1).then(|| b"bad\nid".to_vec());
            messages.push(RawEnvelope {
                id,
                payload: p.clone(),
                meta: Meta::default(),
            });
        }
        // Shuffle, but keep each id's first copy before its duplicate only by chance:
        // reordering is part of what a broker may do.
        messages.shuffle(&mut rng);
        Self {
            unique,
            bad,
            messages,
        }
    }

    /// Copies published beyond one per unique id.
    pub fn duplicates(&self) -> usize {
        self.messages.len() - self.unique.len() - self.bad.len()
    }
}
