//! Workloads: unique messages, exact duplicates and bad ids, shuffled.

use oncely_core::{Meta, RawEnvelope};
use oncely_testkit::credits::Credit;
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
    /// Ids published a second time with another payload (that payload): a conflict each,
    /// one copy applied and the other dead-lettered `conflict`.
    pub conflicts: Vec<(String, Vec<u8>)>,
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
                    Credit::payload(&account, rng.random_range(1..=100)),
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
            .map(|i| Credit::payload(&format!("bad-{prefix}-{i}"), 1))
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
            conflicts: Vec::new(),
        }
    }

    /// What `scripts/python_producers.py --out FILE` published: its manifest's `unique`,
    /// `bad`, `messages` and `conflicts` (`[id, payload]` pairs; `null` for no id).
    pub fn from_manifest(path: &std::path::Path) -> std::io::Result<Self> {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path)?)?;
        let bad_manifest = |what: &str| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: {what}", path.display()),
            )
        };
        let pairs = |key: &str| -> std::io::Result<Vec<(Option<String>, Vec<u8>)>> {
            let Some(list) = v[key].as_array() else {
                return if key == "conflicts" {
                    Ok(Vec::new())
                } else {
                    Err(bad_manifest(&format!("no list {key:?}")))
                };
            };
            list.iter()
                .map(|p| {
                    let payload = p[1]
                        .as_str()
                        .ok_or_else(|| bad_manifest("a pair without payload"))?;
                    Ok((
                        p[0].as_str().map(str::to_owned),
                        payload.as_bytes().to_vec(),
                    ))
                })
                .collect()
        };
        let with_ids =
            |list: Vec<(Option<String>, Vec<u8>)>| -> std::io::Result<Vec<(String, Vec<u8>)>> {
                list.into_iter()
                    .map(|(id, p)| Ok((id.ok_or_else(|| bad_manifest("a pair without id"))?, p)))
                    .collect()
            };
        let bad = v["bad"]
            .as_array()
            .ok_or_else(|| bad_manifest("no list \"bad\""))?
            .iter()
            .map(|p| p.as_str().map(|s| s.as_bytes().to_vec()))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad_manifest("a bad payload that is not text"))?;
        Ok(Self {
            unique: with_ids(pairs("unique")?)?,
            bad,
            messages: pairs("messages")?
                .into_iter()
                .map(|(id, payload)| RawEnvelope {
                    id: id.map(String::into_bytes),
                    payload,
                    meta: Meta::default(),
                })
                .collect(),
            conflicts: with_ids(pairs("conflicts")?)?,
        })
    }

    /// Copies published beyond one per unique id (exact duplicates and conflicting copies).
    pub fn duplicates(&self) -> usize {
        self.messages.len() - self.unique.len() - self.bad.len()
    }
}
