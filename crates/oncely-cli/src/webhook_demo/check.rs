//! The demo's checker: it trusts nothing the server counted. It reads the ledger, the
//! balances, the inbox and the dead letters back from the database and compares them with
//! what the senders sent and were answered.

use super::Mode;
use super::events::{PROVIDERS, Plan, source_name};
use super::send::{Answer, Counts, Outcome};
use anyhow::{Context, Result};
use oncely_core::{Inspect, PayloadHash};
use oncely_sql::{AnyStore, Column, SqlTx};
use oncely_testkit::credits::CreditTables;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};

/// One source's share of the run.
#[derive(Debug, Default, Serialize)]
pub struct SourceReport {
    pub source: &'static str,
    /// Distinct events sent.
    pub events: u64,
    /// Events answered 2xx (200 inline, 202 deferred).
    pub accepted: u64,
    /// Events with an effect in the ledger.
    pub applied: u64,
    /// Forged requests sent, and of those answered 401.
    pub forged: u64,
    pub forged_refused: u64,
}

/// The report `oncely webhook-demo` prints.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub mode: Option<Mode>,
    /// Seconds from the first request to the last answer.
    pub seconds: f64,
    pub events: u64,
    pub accepted: u64,
    /// Genuine events never answered 2xx (refused, or retried until the sender gave up).
    pub unaccepted: u64,
    /// Ledger rows beyond one per event.
    pub double_effects: u64,
    /// Accepted events with no effect.
    pub lost: u64,
    /// Events applied with an amount other than the body the inbox recorded.
    pub wrong_amount: u64,
    /// Effects without an inbox claim.
    pub effects_without_claim: u64,
    /// Changed bodies (same id) sent after the first was accepted, and of those dead-lettered
    /// as `conflict`.
    pub conflicts_sent: u64,
    pub conflicts_caught: u64,
    /// Dead letters of genuine events other than conflicts (none are planned).
    pub unexpected_dead_letters: u64,
    pub forged_sent: u64,
    /// Forged requests answered 2xx.
    pub forged_accepted: u64,
    /// Rows of forged ids in the ledger, the inbox or the dead letters.
    pub forged_rows: u64,
    /// Credits of the accepted events (the bodies the inbox recorded), from the senders.
    pub expected_total: i64,
    /// The balances read back, and the ledger's sum.
    pub actual_total: i64,
    pub ledger_total: i64,
    /// Server processes SIGKILLed and restarted.
    pub kills: usize,
    pub wire: Counts,
    pub sources: Vec<SourceReport>,
}

impl Report {
    /// Every check held.
    pub fn holds(&self) -> bool {
        self.unaccepted == 0
            && self.double_effects == 0
            && self.lost == 0
            && self.wrong_amount == 0
            && self.effects_without_claim == 0
            && self.conflicts_caught == self.conflicts_sent
            && self.unexpected_dead_letters == 0
            && self.forged_accepted == 0
            && self.forged_rows == 0
            && self.expected_total == self.actual_total
            && self.ledger_total == self.actual_total
    }

    pub fn print(&self, json: bool) -> Result<()> {
        if json {
            println!("{}", serde_json::to_string_pretty(self)?);
            return Ok(());
        }
        let w = &self.wire;
        println!(
            "  requests   {} in {:.1} s ({} retries: {} timeouts, {} answered 5xx, {} connections refused; {} answered duplicate)",
            w.requests,
            self.seconds,
            w.retries,
            w.timeouts,
            w.unavailable,
            w.connection_errors,
            w.duplicates_answered
        );
        println!("  server     SIGKILLed and restarted {} times", self.kills);
        for s in &self.sources {
            println!(
                "  {:<9}  {} events, {} accepted, {} applied; {} forged, {} refused",
                s.source, s.events, s.accepted, s.applied, s.forged, s.forged_refused
            );
        }
        println!(
            "  effects    double {}, lost {}, wrong amount {}, without a claim {}, never accepted {}",
            self.double_effects,
            self.lost,
            self.wrong_amount,
            self.effects_without_claim,
            self.unaccepted
        );
        println!(
            "  conflicts  {} changed bodies sent, {} dead-lettered as conflict ({} other dead letters)",
            self.conflicts_sent, self.conflicts_caught, self.unexpected_dead_letters
        );
        println!(
            "  forged     {} sent, {} accepted, {} rows in the database",
            self.forged_sent, self.forged_accepted, self.forged_rows
        );
        println!(
            "  balances   {} (ledger {}), accepted credits {}",
            self.actual_total, self.ledger_total, self.expected_total
        );
        if self.holds() {
            println!("PASS: 0 double, 0 lost, 0 forged accepted");
        } else {
            println!("FAIL: see the counts above");
        }
        Ok(())
    }
}

/// Reads the store back and judges the run.
pub async fn check(
    store: &AnyStore,
    tables: &CreditTables,
    plan: &Plan,
    (outcomes, forged): &(Vec<Outcome>, Vec<Answer>),
    wire: Counts,
    kills: usize,
) -> Result<Report> {
    let (ledger, balances) = tables
        .read_back(store)
        .await
        .context("reading the ledger")?;
    let id = store.dialect().text("message_id");
    let inbox_sql = format!(
        "SELECT consumer, {id}, payload_hash FROM {}",
        store.tables().inbox()
    );
    let inbox: HashMap<(String, String), String> = store
        .pool()
        .fetch(&inbox_sql, &[], &[Column::Text, Column::Text, Column::Text])
        .await
        .context("reading the inbox")?
        .iter()
        .map(|r| ((r[0].text(), r[1].text()), r[2].text()))
        .collect();
    let letters = store.dead_letters(None).await?;

    let mut r = Report {
        events: plan.events.len() as u64,
        forged_sent: plan.forged.len() as u64,
        actual_total: balances.iter().map(|(_, b)| b).sum(),
        ledger_total: ledger.iter().map(|(_, a)| a).sum(),
        kills,
        wire,
        ..Report::default()
    };
    let mut sources: BTreeMap<&str, SourceReport> = PROVIDERS
        .iter()
        .map(|p| {
            (
                source_name(*p),
                SourceReport {
                    source: source_name(*p),
                    ..Default::default()
                },
            )
        })
        .collect();
    let mut applied: HashMap<&str, Vec<i64>> = HashMap::new();
    for (id, amount) in &ledger {
        applied.entry(id).or_default().push(*amount);
    }
    let conflicts: HashSet<(&str, &str)> = letters
        .iter()
        .filter(|l| l.reason == "conflict")
        .filter_map(|l| Some((l.consumer.as_str(), l.message_id.as_deref()?)))
        .collect();
    let genuine: HashSet<&str> = plan.events.iter().map(|e| e.id.as_str()).collect();
    r.unexpected_dead_letters = letters
        .iter()
        .filter(|l| l.reason != "conflict")
        .filter(|l| {
            l.message_id
                .as_deref()
                .is_some_and(|id| genuine.contains(id))
        })
        .count() as u64;

    for (event, outcome) in plan.events.iter().zip(outcomes) {
        let source = source_name(event.provider);
        let s = sources.get_mut(source).expect("every provider");
        s.events += 1;
        if !matches!(outcome.first, Answer::Accepted(_)) {
            r.unaccepted += 1;
            continue;
        }
        s.accepted += 1;
        r.accepted += 1;
        let rows = applied
            .get(event.id.as_str())
            .map(Vec::as_slice)
            .unwrap_or_default();
        r.double_effects += rows.len().saturating_sub(1) as u64;
        if matches!(outcome.changed, Some(Answer::Accepted(_))) {
            r.conflicts_sent += 1;
            r.conflicts_caught += u64::from(conflicts.contains(&(source, event.id.as_str())));
        }
        let Some(first) = rows.first() else {
            r.lost += 1;
            continue;
        };
        s.applied += 1;
        // The winner is the body whose hash the inbox recorded: the first one, or (in
        // deferred mode, where a killed consumer's lease can expire after the changed copy
        // was taken) the changed one; the other is the conflict.
        let recorded = inbox.get(&(source.to_owned(), event.id.clone()));
        let winner = [
            (event.body(), event.amount),
            (event.changed_body(), event.amount + 1),
        ]
        .into_iter()
        .find(|(body, _)| Some(&PayloadHash::of(body.as_bytes()).to_hex()) == recorded);
        match winner {
            Some((_, amount)) => {
                r.expected_total += amount;
                r.wrong_amount += u64::from(*first != amount);
            }
            None => r.effects_without_claim += 1,
        }
    }
    for (f, answer) in plan.forged.iter().zip(forged) {
        let s = sources
            .get_mut(source_name(f.provider))
            .expect("every provider");
        s.forged += 1;
        match answer {
            Answer::Accepted(_) => r.forged_accepted += 1,
            Answer::Refused(401) => s.forged_refused += 1,
            _ => {}
        }
    }
    let forged_ids: HashSet<&str> = plan.forged.iter().map(|f| f.id.as_str()).collect();
    r.forged_rows = (ledger
        .iter()
        .filter(|(id, _)| forged_ids.contains(id.as_str()))
        .count()
        + inbox
            .keys()
            .filter(|(_, id)| forged_ids.contains(id.as_str()))
            .count()
        + letters
            .iter()
            .filter(|l| {
                l.message_id
                    .as_deref()
                    .is_some_and(|id| forged_ids.contains(id))
            })
            .count()) as u64;
    r.sources = PROVIDERS
        .iter()
        .filter_map(|p| sources.remove(source_name(*p)))
        .collect();
    Ok(r)
}
