//! The demo's report, for people and for scripts.

use super::DemoArgs;
use super::check::Verdict;
use super::publish::Published;
use oncely_core::StatsSnapshot;
use serde::Serialize;
use std::time::Duration;

/// What the demo's source counted.
#[derive(Debug, Clone, Copy)]
pub struct SourceCounts {
    /// Deliveries handed to the consumer (redeliveries included).
    pub deliveries: u64,
    /// Extra copies published as duplicates.
    pub duplicates_injected: u64,
    /// Acks the broker dropped on purpose.
    pub lost_acks: u64,
}

/// The report `oncely demo` prints.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Distinct messages published (good and bad ids).
    pub messages: u64,
    /// Deliveries handed to the consumer (redeliveries included).
    pub deliveries: u64,
    /// Duplicate deliveries skipped by the inbox.
    pub duplicates_skipped: u64,
    /// Extra copies the broker injected.
    pub duplicates_injected: u64,
    /// Ids published with two payloads.
    pub conflicts_injected: u64,
    /// Of those, caught and dead-lettered (from the database).
    pub conflicts_caught: u64,
    /// Conflicting copies a broker dropped itself (NATS JetStream's `Nats-Msg-Id` dedup).
    pub conflicts_dropped_by_broker: u64,
    /// Dead-letter rows (from the database).
    pub dead_lettered: u64,
    /// Dead-letter rows by reason.
    pub dead_letters_by_reason: std::collections::BTreeMap<String, u64>,
    /// Consumer crashes injected (oncely-testkit chaos wrappers) and survived.
    pub crashes: u64,
    /// Of those, crashes right after receipt: the delivery was dropped before the runtime
    /// saw it, so it has no outcome (every other crash abandons the deliveries it held, one
    /// or, with group commit, a whole group, each counted as `abandoned`).
    pub crashes_at_receipt: u64,
    /// Acks dropped by the broker on purpose.
    pub lost_acks: u64,
    /// Transient failures retried.
    pub retries: u64,
    /// Expected total credits, from the winning payloads.
    pub expected_total: i64,
    /// Total credits read back from the accounts table.
    pub actual_total: i64,
    /// Ledger rows beyond one per id.
    pub double_effects: u64,
    /// Ids with neither an effect nor a dead-letter row.
    pub lost: u64,
    /// Distinct messages per second of consuming.
    pub messages_per_sec: f64,
    /// Seconds spent consuming.
    pub elapsed_secs: f64,
    /// Store URL (password redacted).
    pub store: String,
    /// Seed.
    pub seed: u64,
    /// Workers.
    pub workers: usize,
    /// Every invariant held.
    pub ok: bool,
}

impl Report {
    /// Assembles the report.
    pub fn new(
        args: &DemoArgs,
        store: String,
        published: &Published,
        source: &SourceCounts,
        stats: &StatsSnapshot,
        verdict: &Verdict,
        elapsed: Duration,
    ) -> Self {
        let messages = (published.variants.len() + published.bad_ids) as u64;
        Self {
            messages,
            deliveries: source.deliveries,
            duplicates_skipped: stats.duplicates,
            duplicates_injected: source.duplicates_injected,
            conflicts_injected: verdict.conflicts_injected,
            conflicts_caught: verdict.conflicts_caught,
            conflicts_dropped_by_broker: verdict.broker_dropped_conflicts,
            dead_lettered: verdict.dead_letter_rows,
            dead_letters_by_reason: verdict.dead_letters_by_reason.clone(),
            crashes: 0, // set by the caller: the crash plan counts them
            crashes_at_receipt: 0,
            lost_acks: source.lost_acks,
            retries: stats.retries,
            expected_total: verdict.expected_total,
            actual_total: verdict.actual_total,
            double_effects: verdict.double_effects,
            lost: verdict.lost,
            messages_per_sec: messages as f64 / elapsed.as_secs_f64().max(1e-9),
            elapsed_secs: elapsed.as_secs_f64(),
            store,
            seed: args.seed,
            workers: args.workers,
            ok: verdict.holds(),
        }
    }

    /// Prints JSON or a table.
    pub fn print(&self, json: bool) {
        if json {
            println!(
                "{}",
                serde_json::to_string(self).expect("serializable report")
            );
            return;
        }
        let reasons: Vec<String> = self
            .dead_letters_by_reason
            .iter()
            .map(|(r, n)| format!("{r}={n}"))
            .collect();
        println!("oncely demo — credits ledger on {}", self.store);
        println!("  seed {}, {} workers", self.seed, self.workers);
        let rows: [(&str, String); 16] = [
            ("messages", self.messages.to_string()),
            ("deliveries", self.deliveries.to_string()),
            ("duplicates injected", self.duplicates_injected.to_string()),
            ("duplicates skipped", self.duplicates_skipped.to_string()),
            ("lost acks (redelivered)", self.lost_acks.to_string()),
            ("crashes survived", self.crashes.to_string()),
            ("retries", self.retries.to_string()),
            ("conflicts injected", self.conflicts_injected.to_string()),
            ("conflicts caught", self.conflicts_caught.to_string()),
            (
                "conflicts broker-dropped",
                self.conflicts_dropped_by_broker.to_string(),
            ),
            (
                "dead-lettered",
                format!("{} ({})", self.dead_lettered, reasons.join(", ")),
            ),
            ("expected total credits", self.expected_total.to_string()),
            ("actual total credits", self.actual_total.to_string()),
            ("double effects", self.double_effects.to_string()),
            ("lost messages", self.lost.to_string()),
            (
                "throughput",
                format!(
                    "{:.0} messages/s ({:.1} s)",
                    self.messages_per_sec, self.elapsed_secs
                ),
            ),
        ];
        for (label, value) in rows {
            println!("  {label:<26} {value}");
        }
        println!(
            "  {:<26} {}",
            "verdict",
            if self.ok {
                "OK: every effect exactly once, nothing lost"
            } else {
                "FAILED: invariants broken"
            }
        );
    }
}
