//! The peer's workload (issue 28): unique messages, exact duplicates of 20 % of them and a
//! same-id copy with another amount of 5 %, shuffled; and the checker that judges what Redis
//! holds afterwards against it.

use oncely_core::RawEnvelope;
use serde::Serialize;
use std::collections::HashMap;

/// One published copy of an id: its payload and amount.
#[derive(Debug, Clone)]
pub(crate) struct Copy {
    pub(crate) payload: Vec<u8>,
    pub(crate) amount: i64,
}

/// What a cell publishes and what its checker expects.
#[derive(Debug, Clone)]
pub(crate) struct PeerWorkload {
    /// Every delivery, in delivery order (duplicates and conflicting copies included).
    pub(crate) messages: Vec<RawEnvelope>,
    /// Per unique id: the original first, then the conflicting copy if it has one.
    pub(crate) copies: HashMap<String, Vec<Copy>>,
    /// Exact copies published beyond one per id.
    pub(crate) duplicates: usize,
    /// Ids published a second time with another amount.
    pub(crate) conflicts: usize,
}

fn payload(account: &str, amount: i64) -> Vec<u8> {
    format!(r#"{{"account":"{account}","amount":{amount}}}"#).into_bytes()
}

impl PeerWorkload {
    /// `n` unique ids `{tag}-{i}` over 100 accounts; ids with `i % 5 == 1` (20 %) are
    /// delivered twice identically, ids with `i % 20 == 2` (5 %) a second time with another
    /// amount; then everything is shuffled (seeded), so either copy of a conflict may come
    /// first.
    pub(crate) fn new(n: usize, tag: &str) -> Self {
        let mut messages = Vec::with_capacity(n + n / 4 + 1);
        let mut copies = HashMap::with_capacity(n);
        let (mut duplicates, mut conflicts) = (0, 0);
        for i in 0..n {
            let id = format!("{tag}-{i:06}");
            let account = format!("acct-{}", i % 100);
            let amount = 1 + (i as i64 * 37) % 100;
            let original = payload(&account, amount);
            messages.push(RawEnvelope::new(id.clone(), original.clone()));
            let mut mine = vec![Copy {
                payload: original.clone(),
                amount,
            }];
            if i % 5 == 1 {
                messages.push(RawEnvelope::new(id.clone(), original));
                duplicates += 1;
            } else if i % 20 == 2 {
                let other = amount + 1 + (i as i64 % 9);
                let p = payload(&account, other);
                messages.push(RawEnvelope::new(id.clone(), p.clone()));
                mine.push(Copy {
                    payload: p,
                    amount: other,
                });
                conflicts += 1;
            }
            copies.insert(id, mine);
        }
        shuffle(&mut messages, 0x5eed_0028);
        Self {
            messages,
            copies,
            duplicates,
            conflicts,
        }
    }
}

/// Fisher–Yates with a xorshift generator: the same order on every run and machine.
fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut x = seed | 1;
    for i in (1..items.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        items.swap(i, (x % (i as u64 + 1)) as usize);
    }
}

/// A dead letter as the checker needs it: message id, reason, payload.
pub(crate) type Letter = (Option<String>, String, Vec<u8>);

/// The checker's verdict on one run, from what Redis holds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct PeerCheck {
    /// Ledger entries (one per applied effect).
    pub ledger_entries: u64,
    /// Effects beyond one per id, plus effects of ids never published.
    pub double: u64,
    /// Published ids without an effect.
    pub lost: u64,
    /// Effects whose amount no copy of their id carried.
    pub foreign: u64,
    /// Ids published with two payloads.
    pub conflicts_injected: u64,
    /// Of those: a `conflict` dead letter holds the copy that was not applied.
    pub conflicts_caught: u64,
    /// Dead letters for any other reason (none expected).
    pub other_dead_letters: u64,
    /// Sum of the applied copy's amount over the published ids.
    pub expected_total: i64,
    /// Sum of the balances in Redis.
    pub balance_total: i64,
    /// `balance_total - expected_total` (AWS Powertools: +114 on this workload).
    pub total_off: i64,
    /// Every check holds: 0 double, 0 lost, conflicts caught = injected, the total exact.
    pub ok: bool,
}

impl PeerCheck {
    /// Two rounds' verdicts together.
    pub(crate) fn merge(self, o: PeerCheck) -> PeerCheck {
        merged!(self, o => PeerCheck {
            sum: [ledger_entries, double, lost, foreign, conflicts_injected, conflicts_caught,
                other_dead_letters, expected_total, balance_total, total_off],
            max: [],
            all: [ok]
        })
    }
}

/// Judges a run: `ledger` holds `(id, amount)` per applied effect, `balance_total` the sum of
/// the balances, `letters` the consumer's dead letters. Which copy of a conflicting id wins
/// depends on the order of delivery; the winner is the copy whose amount the ledger holds,
/// and the other copy must be in a `conflict` dead letter.
pub(crate) fn judge(
    workload: &PeerWorkload,
    ledger: &[(String, i64)],
    balance_total: i64,
    letters: &[Letter],
) -> PeerCheck {
    let mut applied: HashMap<&str, Vec<i64>> = HashMap::new();
    for (id, amount) in ledger {
        applied.entry(id.as_str()).or_default().push(*amount);
    }
    let mut c = PeerCheck {
        ledger_entries: ledger.len() as u64,
        balance_total,
        ..PeerCheck::default()
    };
    for (id, amounts) in &applied {
        let Some(copies) = workload.copies.get(*id) else {
            c.double += amounts.len() as u64;
            continue;
        };
        c.double += amounts.len() as u64 - 1;
        c.foreign += amounts
            .iter()
            .filter(|a| !copies.iter().any(|p| p.amount == **a))
            .count() as u64;
    }
    for (id, copies) in &workload.copies {
        let Some(amounts) = applied.get(id.as_str()) else {
            c.lost += 1;
            continue;
        };
        let winner = amounts[0];
        c.expected_total += winner;
        if copies.len() < 2 {
            continue;
        }
        c.conflicts_injected += 1;
        let caught = letters.iter().any(|(lid, reason, payload)| {
            lid.as_deref() == Some(id.as_str())
                && reason == "conflict"
                && copies
                    .iter()
                    .any(|p| p.amount != winner && p.payload == *payload)
        });
        c.conflicts_caught += u64::from(caught);
    }
    c.other_dead_letters = letters.iter().filter(|(_, r, _)| r != "conflict").count() as u64;
    c.total_off = c.balance_total - c.expected_total;
    c.ok = c.double == 0
        && c.lost == 0
        && c.foreign == 0
        && c.other_dead_letters == 0
        && c.conflicts_caught == c.conflicts_injected
        && c.conflicts_injected == workload.conflicts as u64
        && c.total_off == 0;
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied_once(w: &PeerWorkload) -> (Vec<(String, i64)>, i64, Vec<Letter>) {
        let mut ledger = Vec::new();
        let mut letters = Vec::new();
        for (id, copies) in &w.copies {
            ledger.push((id.clone(), copies[0].amount));
            if let Some(other) = copies.get(1) {
                letters.push((Some(id.clone()), "conflict".into(), other.payload.clone()));
            }
        }
        let total = ledger.iter().map(|(_, a)| a).sum();
        (ledger, total, letters)
    }

    #[test]
    fn the_workload_has_the_issues_shares() {
        let w = PeerWorkload::new(5000, "p");
        assert_eq!((w.duplicates, w.conflicts), (1000, 250));
        assert_eq!(w.messages.len(), 6250);
        assert_eq!(w.copies.len(), 5000);
    }

    #[test]
    fn the_checker_passes_exactly_once_and_catches_each_failure() {
        let w = PeerWorkload::new(200, "p");
        let (ledger, total, letters) = applied_once(&w);
        let ok = judge(&w, &ledger, total, &letters);
        assert!(ok.ok, "{ok:?}");
        assert_eq!(ok.conflicts_caught, 10);

        // A guard beside the effect: conflicting copies applied as well (the peer's failure).
        let (conflicting, extra): (Vec<_>, i64) = w
            .copies
            .iter()
            .filter_map(|(id, c)| Some((id.clone(), c.get(1)?.amount)))
            .fold((Vec::new(), 0), |(mut v, t), (id, a)| {
                v.push((id, a));
                (v, t + a)
            });
        let doubled: Vec<_> = ledger.iter().cloned().chain(conflicting).collect();
        let bad = judge(&w, &doubled, total + extra, &[]);
        assert!(!bad.ok);
        assert_eq!((bad.double, bad.conflicts_caught), (10, 0));
        assert_eq!(bad.total_off, extra);

        // One effect lost, one balance written twice.
        let bad = judge(&w, &ledger[1..], total, &letters);
        assert_eq!(bad.lost, 1);
        assert!(!bad.ok);
        let bad = judge(&w, &ledger, total + 5, &letters);
        assert_eq!(bad.total_off, 5);
        assert!(!bad.ok);
    }
}
