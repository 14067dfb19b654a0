//! The invariants, checked after every run from the store's own state (the reference
//! store's inbox, effect rows and dead letters, the version table) against what was
//! published; only the stats identity reads the consumer's counters, since it is about them.
//! "No ack before its commit" is checked at each ack ([`crate::faults`]).

use crate::faults::SimStore;
use crate::run::consumer_name;
use crate::world::World;
use oncely_core::{Inspect, MessageId, PayloadHash, RawEnvelope, StatsSnapshot};
use oncely_testkit::FaultySource;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Every published copy by raw id: hash (hex) → (hash, amount).
type CopiesById = BTreeMap<Option<Vec<u8>>, BTreeMap<String, (PayloadHash, i64)>>;

/// Checks every invariant and records what is broken in `world`; the final state goes
/// into the trace (and so into the digest).
pub async fn run(
    world: &World,
    store: &SimStore,
    source: &FaultySource,
    published: &[RawEnvelope],
    stats: &[StatsSnapshot],
    uninterrupted: bool,
    exact_deliveries: bool,
) {
    let name = consumer_name();
    let memory = &store.memory;
    let effects = memory.effects();
    let letters = memory.dead_letters(Some(&name)).await.unwrap_or_default();
    let stale: BTreeSet<String> = {
        let v = store.versions.lock().unwrap_or_else(|p| p.into_inner());
        check_versions(world, &v.log);
        v.stale.iter().cloned().collect()
    };
    let lettered = |raw: &Option<Vec<u8>>, hash: &PayloadHash| {
        letters
            .iter()
            .any(|l| l.raw_id == *raw && l.payload_hash == hash.to_hex())
    };
    let mut rows: HashMap<&str, Vec<i64>> = HashMap::new();
    for (id, amount) in &effects {
        rows.entry(id.as_str()).or_default().push(*amount);
    }
    // Every published copy, by raw id: the hashes and the amount each carries.
    let mut by_id: CopiesById = BTreeMap::new();
    for m in published {
        let hash = PayloadHash::of(&m.payload);
        let amount = std::str::from_utf8(&m.payload)
            .ok()
            .and_then(|t| t.parse().ok())
            .unwrap_or(0);
        by_id
            .entry(m.id.clone())
            .or_default()
            .insert(hash.to_hex(), (hash, amount));
    }
    for (raw, copies) in &by_id {
        let shown = String::from_utf8_lossy(raw.as_deref().unwrap_or_default()).into_owned();
        let id = raw
            .as_deref()
            .and_then(|b| MessageId::parse(b).ok())
            .map(|id| id.as_str().to_owned());
        let Some(id) = id else {
            for (hash, _) in copies.values() {
                if !lettered(raw, hash) {
                    world.violation(format!("bad id {shown:?} neither dead-lettered nor kept"));
                }
            }
            continue;
        };
        let got = rows.get(id.as_str()).cloned().unwrap_or_default();
        if got.len() > 1 {
            world.violation(format!(
                "double effect: {id:?} applied {} times ({got:?})",
                got.len()
            ));
        }
        let held = memory.claimed_hash(&name, &id).await.ok().flatten();
        match held {
            Some(h) => {
                let Some((_, amount)) = copies.get(&h.to_hex()) else {
                    world.violation(format!("inbox holds {id:?} with a hash never published"));
                    continue;
                };
                if got.is_empty() && !stale.contains(&id) {
                    world.violation(format!(
                        "claim without effect: {id:?} is in the inbox but its effect is not"
                    ));
                }
                if got.first().is_some_and(|a| a != amount) {
                    world.violation(format!(
                        "conflict applied: {id:?} has effect {got:?}, the inbox holds the copy of {amount}"
                    ));
                }
                for (other, _) in copies.values().filter(|(c, _)| *c != h) {
                    if !lettered(raw, other) {
                        world.violation(format!(
                            "conflicting copy of {id:?} neither dead-lettered nor kept"
                        ));
                    }
                }
            }
            None => {
                if !got.is_empty() {
                    world.violation(format!(
                        "effect without claim: {id:?} applied {got:?}, not in the inbox"
                    ));
                }
                for (hash, amount) in copies.values() {
                    if !lettered(raw, hash) {
                        world.violation(format!(
                            "lost: {id:?} (copy of {amount}) neither applied nor dead-lettered"
                        ));
                    }
                }
            }
        }
        for l in letters
            .iter()
            .filter(|l| l.raw_id == *raw && l.reason == "conflict")
        {
            let stored = l.stored_hash.as_deref();
            if held.map(|h| h.to_hex()).as_deref() != stored
                || stored == Some(l.payload_hash.as_str())
            {
                world.violation(format!(
                    "conflict dead letter of {id:?} does not match the inbox"
                ));
            }
        }
    }
    for id in rows.keys() {
        if !by_id.contains_key(&Some(id.as_bytes().to_vec())) {
            world.violation(format!("effect for {id:?}, never published"));
        }
    }
    if source.unacked() > 0 {
        world.violation(format!(
            "{} deliveries left unsettled in the broker",
            source.unacked()
        ));
    }
    check_stats(world, source, stats, uninterrupted && exact_deliveries);
    let dl: Vec<String> = letters
        .iter()
        .map(|l| {
            format!(
                "{}:{}x{}",
                l.message_id.clone().unwrap_or_default(),
                l.reason,
                l.deliveries
            )
        })
        .collect();
    let mut sorted = effects.clone();
    sorted.sort();
    world.event(format!(
        "final effects {sorted:?} dead letters {dl:?} stale {stale:?}"
    ));
    world.event(format!("final broker {:?}", broker_counters(source)));
}

/// The broker's counters, as the trace has shown them since the faults were part of the
/// memory broker (kept so that a seed's trace and digest stay what they were).
#[derive(Debug)]
#[allow(dead_code)] // read through `Debug` only
struct MemoryStats {
    published: u64,
    duplicates_injected: u64,
    deliveries: u64,
    redeliveries: u64,
    acked: u64,
    lost_acks: u64,
    requeued: u64,
}

fn broker_counters(source: &FaultySource) -> MemoryStats {
    let (broker, faults) = (source.stats(), source.fault_stats());
    MemoryStats {
        published: faults.published,
        duplicates_injected: faults.duplicates_injected,
        deliveries: broker.deliveries,
        redeliveries: broker.redeliveries,
        acked: broker.acked,
        lost_acks: faults.lost_acks,
        requeued: broker.requeued,
    }
}

/// Per-key versions never go back.
fn check_versions(world: &World, log: &[(String, i64)]) {
    let mut newest: HashMap<&str, i64> = HashMap::new();
    for (key, version) in log {
        if let Some(before) = newest.insert(key, *version)
            && before >= *version
        {
            world.violation(format!(
                "version went back: key {key} from {before} to {version}"
            ));
        }
    }
}

/// deliveries = outcomes + crashes at receipt (the broker's count against the runtime's).
fn check_stats(world: &World, source: &FaultySource, stats: &[StatsSnapshot], exact: bool) {
    let received: u64 = stats.iter().map(|s| s.received).sum();
    let outcomes: u64 = stats
        .iter()
        .map(|s| s.applied + s.duplicates + s.stale + s.dead_lettered + s.nacked + s.abandoned)
        .sum();
    if received != outcomes {
        world.violation(format!(
            "stats: {received} deliveries received, {outcomes} outcomes"
        ));
    }
    let dropped = u64::from(world.counted("dropped at receipt"));
    let delivered = source.stats().deliveries;
    if exact && delivered != outcomes + dropped {
        world.violation(format!(
            "stats: the broker made {delivered} deliveries, the consumer {outcomes} outcomes and {dropped} crashes at receipt"
        ));
    }
    let total = |f: fn(&StatsSnapshot) -> u64| stats.iter().map(f).sum::<u64>();
    world.event(format!(
        "stats received={received} applied={} duplicate={} stale={} dead_lettered={} conflicts={} nacked={} abandoned={}",
        total(|s| s.applied),
        total(|s| s.duplicates),
        total(|s| s.stale),
        total(|s| s.dead_lettered),
        total(|s| s.conflicts),
        total(|s| s.nacked),
        total(|s| s.abandoned),
    ));
    for (what, n) in [
        ("outcome: duplicate", total(|s| s.duplicates)),
        ("outcome: stale", total(|s| s.stale)),
        ("outcome: conflict", total(|s| s.conflicts)),
        ("outcome: abandoned", total(|s| s.abandoned)),
        ("outcome: handed back", total(|s| s.nacked)),
        ("path: store hold", total(|s| s.store_retries)),
    ] {
        if n > 0 {
            world.mark(what);
        }
    }
}
