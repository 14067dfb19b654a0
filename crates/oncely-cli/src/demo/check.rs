//! The demo's checker. It trusts nothing the consumer counted: it reads the ledger, the
//! balances, the inbox and the dead letters back from the database and compares them with
//! what was published.

use super::publish::Published;
use anyhow::{Context, Result};
use oncely_core::{ConsumerName, Inspect, PayloadHash};
use oncely_sql::{AnyStore, Column, SqlTx};
use oncely_testkit::credits::CreditTables;
use std::collections::{BTreeMap, HashMap};

/// What the database says happened.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Verdict {
    /// Sum of the amounts of the winning payloads (the ones the inbox recorded).
    pub expected_total: i64,
    /// Sum of all account balances read back.
    pub actual_total: i64,
    /// Sum of the ledger rows (must equal the balances).
    pub ledger_total: i64,
    /// Ledger rows beyond one per id.
    pub double_effects: u64,
    /// Ids with neither an effect nor a dead-letter row (bad-id messages counted by number).
    pub lost: u64,
    /// Ids published with two payloads.
    pub conflicts_injected: u64,
    /// Of those, ids with a `conflict` dead-letter row.
    pub conflicts_caught: u64,
    /// Ids applied with an amount other than their recorded payload's.
    pub wrong_amount: u64,
    /// Ids with an effect but no inbox claim.
    pub effects_without_claim: u64,
    /// Conflicting copies the broker itself dropped (NATS JetStream dedups by `Nats-Msg-Id`).
    pub broker_dropped_conflicts: u64,
    /// Dead-letter rows of the demo consumer.
    pub dead_letter_rows: u64,
    /// Dead-letter rows by reason.
    pub dead_letters_by_reason: BTreeMap<String, u64>,
}

impl Verdict {
    /// True when every invariant holds.
    pub fn holds(&self) -> bool {
        self.double_effects == 0
            && self.lost == 0
            && self.wrong_amount == 0
            && self.effects_without_claim == 0
            && self.conflicts_caught + self.broker_dropped_conflicts == self.conflicts_injected
            && self.expected_total == self.actual_total
            && self.ledger_total == self.actual_total
    }
}

/// What a store holds after a run, read back independently of the consumer's counters.
pub(super) struct Readings {
    /// The consumer's inbox: message id → payload hash (hex).
    pub(super) inbox: HashMap<String, String>,
    /// Ledger rows `(message id, amount)`.
    pub(super) ledger: Vec<(String, i64)>,
    /// Every account's balance.
    pub(super) balances: Vec<i64>,
}

async fn read(store: &AnyStore, tables: &CreditTables, consumer: &str) -> Result<Readings> {
    let inbox_table = store.tables().inbox();
    let id_col = store.dialect().text("message_id");
    let consumer = consumer.replace('\'', "");
    let inbox_sql =
        format!("SELECT {id_col}, payload_hash FROM {inbox_table} WHERE consumer = '{consumer}'");
    let inbox = store
        .pool()
        .fetch(&inbox_sql, &[], &[Column::Text, Column::Text])
        .await
        .context("reading the inbox")?;
    let (ledger, balances) = tables
        .read_back(store)
        .await
        .context("reading the demo tables")?;
    Ok(Readings {
        inbox: inbox.iter().map(|r| (r[0].text(), r[1].text())).collect(),
        ledger,
        balances: balances.into_iter().map(|(_, balance)| balance).collect(),
    })
}

/// Reads the database back and judges the run.
pub async fn check(
    store: &AnyStore,
    tables: &CreditTables,
    consumer: &ConsumerName,
    published: &Published,
) -> Result<Verdict> {
    let r = read(store, tables, consumer.as_str()).await?;
    let letters = store.dead_letters(Some(consumer)).await?;
    Ok(judge(&r, &letters, published))
}

/// Judges a run from what the store holds.
pub(super) fn judge(
    r: &Readings,
    letters: &[oncely_core::StoredDeadLetter],
    published: &Published,
) -> Verdict {
    let mut v = Verdict {
        dead_letter_rows: letters.len() as u64,
        ..Verdict::default()
    };
    let mut reasons_by_id: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut bad_id_rows = 0u64;
    for l in letters {
        *v.dead_letters_by_reason
            .entry(l.reason.clone())
            .or_default() += 1;
        if l.reason == "bad_id" {
            bad_id_rows += 1;
        } else if let Some(id) = &l.message_id {
            reasons_by_id.entry(id).or_default().push(&l.reason);
        }
    }
    let mut rows: HashMap<&str, Vec<i64>> = HashMap::new();
    for (id, amount) in &r.ledger {
        rows.entry(id).or_default().push(*amount);
        v.ledger_total += amount;
    }
    v.actual_total = r.balances.iter().sum();
    for (id, variants) in &published.variants {
        let reasons = reasons_by_id.get(id.as_str()).cloned().unwrap_or_default();
        if variants.len() > 1 {
            v.conflicts_injected += 1;
            if reasons.contains(&"conflict") {
                v.conflicts_caught += 1;
            }
        }
        let applied = rows.get(id.as_str()).map(Vec::as_slice).unwrap_or(&[]);
        v.double_effects += applied.len().saturating_sub(1) as u64;
        let Some(first) = applied.first() else {
            if !reasons.iter().any(|r| *r != "conflict") {
                v.lost += 1;
            }
            continue;
        };
        let recorded = r.inbox.get(id).and_then(|h| PayloadHash::from_hex(h));
        match recorded.and_then(|h| variants.iter().find(|(vh, _)| *vh == h)) {
            Some((_, Some(amount))) => {
                v.expected_total += amount;
                if first != amount {
                    v.wrong_amount += 1;
                }
            }
            _ => v.effects_without_claim += 1,
        }
    }
    v.lost += (published.bad_ids as u64).saturating_sub(bad_id_rows);
    v
}
