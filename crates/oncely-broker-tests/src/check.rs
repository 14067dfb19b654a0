//! The independent checker: counts effects in the database (or the Redis store) against the
//! workload.

use crate::ledger::{Db, db_err};
use crate::workload::Workload;
use oncely_core::Result;
use oncely_sql::{Column, SqlTx};
use oncely_testkit::credits::Credit;
use std::collections::{HashMap, HashSet};

/// What the database holds, compared with what was published.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Messages published (duplicates and bad ones included).
    pub published: usize,
    /// Unique valid ids published.
    pub unique: usize,
    /// Ledger rows (effects).
    pub ledger_rows: usize,
    /// Distinct ids in the ledger.
    pub ledger_ids: usize,
    /// Effects beyond one per id, plus effects of ids never published.
    pub double: usize,
    /// Unique ids with neither an effect nor a dead letter.
    pub lost: usize,
    /// Up to ten of the lost ids, sorted (to start a diagnosis from).
    pub lost_sample: Vec<String>,
    /// Valid ids that were dead-lettered instead of applied (none expected in these tests).
    pub valid_dead_lettered: usize,
    /// Bad-id messages published.
    pub bad_expected: usize,
    /// Bad-id messages found as `bad_id` dead letters.
    pub bad_dead_lettered: usize,
    /// Ids published a second time with another payload.
    pub conflicts_injected: usize,
    /// Of those, ids whose copy that was not applied is in a `conflict` dead letter.
    pub conflicts_caught: usize,
    /// Effects whose amount no published copy of their id carried.
    pub foreign: usize,
    /// The sum of the applied copies' amounts, one per id.
    pub expected_total: i64,
    /// The sum of the balances, where the effect keeps them (the Redis ledger).
    pub balance_total: Option<i64>,
}

/// A dead letter as the checker reads it: message id, reason, payload.
pub type DeadRow = (Option<String>, String, Vec<u8>);

/// Where a run's effects are read back from: a SQL database ([`Db`]) or the Redis store
/// ([`crate::redis_db::RedisDb`]).
pub trait Effects: Sync {
    /// `(ledger rows, dead letters)` so far.
    fn counts(&self) -> impl Future<Output = Result<(i64, i64)>> + Send;
    /// The checker's report against `workload`.
    fn report(&self, workload: &Workload) -> impl Future<Output = Result<Report>> + Send;
}

impl Effects for Db {
    async fn counts(&self) -> Result<(i64, i64)> {
        Db::counts(self).await
    }

    async fn report(&self, workload: &Workload) -> Result<Report> {
        Report::read(self, workload).await
    }
}

impl Report {
    /// Reads the database and compares it with `workload`.
    pub async fn read(db: &Db, workload: &Workload) -> Result<Self> {
        let ledger_q = format!("SELECT message_id, amount FROM {}", db.ledger());
        let dl_q = format!(
            "SELECT message_id, reason, payload FROM {}",
            db.dead_letters()
        );
        let mut pool = db.store().pool();
        let ledger: Vec<(String, i64)> = pool
            .fetch(&ledger_q, &[], &[Column::Text, Column::I64])
            .await
            .map_err(db_err)?
            .iter()
            .map(|r| (r[0].text(), r[1].i64()))
            .collect();
        let dead: Vec<DeadRow> = pool
            .fetch(&dl_q, &[], &[Column::OptText, Column::Text, Column::Bytes])
            .await
            .map_err(db_err)?
            .iter()
            .map(|r| (r[0].opt_text(), r[1].text(), r[2].bytes()))
            .collect();
        let total = db.balance_total().await?;
        Ok(Self::judge(workload, &ledger, &dead, Some(total)))
    }

    /// Compares effects with `workload`: `ledger` holds `(message id, amount)` per applied
    /// effect, `dead` the dead letters, `balance_total` the sum of the balances where the
    /// effect keeps them. Of an id published with two payloads (a conflict) either copy may
    /// be applied, whichever came first; the other must be in a `conflict` dead letter.
    pub fn judge(
        workload: &Workload,
        ledger: &[(String, i64)],
        dead: &[DeadRow],
        balance_total: Option<i64>,
    ) -> Self {
        let expected: HashMap<&str, &[u8]> = workload
            .unique
            .iter()
            .map(|(id, p)| (id.as_str(), p.as_slice()))
            .collect();
        let conflicting: HashMap<&str, &[u8]> = workload
            .conflicts
            .iter()
            .map(|(id, p)| (id.as_str(), p.as_slice()))
            .collect();
        let amount = |p: &[u8]| Credit::parse(p).ok().map(|c| c.amount);
        let mut per_id: HashMap<&str, Vec<i64>> = HashMap::new();
        for (id, a) in ledger {
            per_id.entry(id.as_str()).or_default().push(*a);
        }
        let mut double = 0;
        let mut foreign = 0;
        let mut expected_total = 0;
        for (id, amounts) in &per_id {
            let Some(original) = expected.get(id) else {
                double += amounts.len();
                continue;
            };
            double += amounts.len() - 1;
            let published = [Some(*original), conflicting.get(id).copied()];
            let known = |a: i64| published.iter().flatten().any(|p| amount(p) == Some(a));
            foreign += amounts.iter().filter(|a| !known(**a)).count();
            expected_total += amounts[0];
        }
        let conflict_rows: HashSet<(&str, &[u8])> = dead
            .iter()
            .filter(|(_, reason, _)| reason == "conflict")
            .filter_map(|(id, _, p)| Some((id.as_deref()?, p.as_slice())))
            .collect();
        let conflicts_caught = workload
            .conflicts
            .iter()
            .filter(|(id, copy)| {
                let (Some(applied), Some(&original)) =
                    (per_id.get(id.as_str()), expected.get(id.as_str()))
                else {
                    return false;
                };
                // The dead-lettered copy is the one that was not applied.
                let loser = if amount(original) == Some(applied[0]) {
                    copy.as_slice()
                } else {
                    original
                };
                conflict_rows.contains(&(id.as_str(), loser))
            })
            .count();
        let dead_ids: HashSet<&str> = dead
            .iter()
            .filter(|(_, reason, _)| reason != "conflict")
            .filter_map(|(id, _, _)| id.as_deref())
            .collect();
        let mut lost_ids: Vec<&str> = expected
            .keys()
            .filter(|id| !per_id.contains_key(*id) && !dead_ids.contains(*id))
            .copied()
            .collect();
        lost_ids.sort_unstable();
        let lost = lost_ids.len();
        let lost_sample = lost_ids.iter().take(10).map(|s| s.to_string()).collect();
        let valid_dead_lettered = expected.keys().filter(|id| dead_ids.contains(*id)).count();
        let bad_payloads: HashSet<&[u8]> = dead
            .iter()
            .filter(|(_, reason, _)| reason == "bad_id")
            .map(|(_, _, p)| p.as_slice())
            .collect();
        let bad_dead_lettered = workload
            .bad
            .iter()
            .filter(|p| bad_payloads.contains(p.as_slice()))
            .count();
        Self {
            published: workload.messages.len(),
            unique: workload.unique.len(),
            ledger_rows: ledger.len(),
            ledger_ids: per_id.len(),
            double,
            lost,
            lost_sample,
            valid_dead_lettered,
            bad_expected: workload.bad.len(),
            bad_dead_lettered,
            conflicts_injected: workload.conflicts.len(),
            conflicts_caught,
            foreign,
            expected_total,
            balance_total,
        }
    }

    /// True when every id was applied exactly once and every bad message dead-lettered.
    pub fn complete(&self) -> bool {
        self.double == 0
            && self.lost == 0
            && self.valid_dead_lettered == 0
            && self.ledger_rows == self.unique
            && self.bad_dead_lettered == self.bad_expected
            && self.conflicts_caught == self.conflicts_injected
            && self.foreign == 0
            && self.balance_total.is_none_or(|b| b == self.expected_total)
    }

    /// Panics with the whole report unless [`Report::complete`].
    pub fn assert_exact(&self, what: &str) {
        assert!(
            self.complete(),
            "{what}: 0 double / 0 lost violated: {self:#?}"
        );
        eprintln!(
            "{what}: published {} ({} unique, {} bad), ledger rows {} = unique ids {}, double {}, lost {}, bad dead-lettered {}/{}, conflicts caught {}/{}{}",
            self.published,
            self.unique,
            self.bad_expected,
            self.ledger_rows,
            self.ledger_ids,
            self.double,
            self.lost,
            self.bad_dead_lettered,
            self.bad_expected,
            self.conflicts_caught,
            self.conflicts_injected,
            self.balance_total
                .map(|b| format!(", balances {b} = expected {}", self.expected_total))
                .unwrap_or_default()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 20 ids, ids 0 and 1 also published with amount + 1000 (conflicts).
    fn workload() -> Workload {
        let mut w = Workload::new("t", 20, 0.0, 0, 1);
        w.conflicts = w.unique[..2]
            .iter()
            .map(|(id, p)| {
                let credit = Credit::parse(p).unwrap();
                (
                    id.clone(),
                    Credit::payload(&credit.account, credit.amount + 1000),
                )
            })
            .collect();
        w
    }

    fn amount(p: &[u8]) -> i64 {
        Credit::parse(p).unwrap().amount
    }

    #[test]
    fn conflicts_are_judged_by_the_copy_applied_and_the_total() {
        let w = workload();
        let mut ledger: Vec<(String, i64)> = w
            .unique
            .iter()
            .map(|(id, p)| (id.clone(), amount(p)))
            .collect();
        // Id 1's conflicting copy came first: it is applied, the original dead-lettered.
        ledger[1].1 = amount(&w.conflicts[1].1);
        let dead: Vec<DeadRow> = vec![
            (
                Some(w.conflicts[0].0.clone()),
                "conflict".into(),
                w.conflicts[0].1.clone(),
            ),
            (
                Some(w.unique[1].0.clone()),
                "conflict".into(),
                w.unique[1].1.clone(),
            ),
        ];
        let total: i64 = ledger.iter().map(|(_, a)| a).sum();
        let ok = Report::judge(&w, &ledger, &dead, Some(total));
        assert!(ok.complete(), "{ok:#?}");
        assert_eq!((ok.conflicts_caught, ok.conflicts_injected), (2, 2));

        // A guard beside the effect: the conflicting copy applied too.
        let mut doubled = ledger.clone();
        doubled.push((w.conflicts[0].0.clone(), amount(&w.conflicts[0].1)));
        let extra = amount(&w.conflicts[0].1);
        let bad = Report::judge(&w, &doubled, &dead[1..], Some(total + extra));
        assert!(!bad.complete());
        assert_eq!((bad.double, bad.conflicts_caught), (1, 1));

        // The right rows, a balance off; an amount never published.
        assert!(!Report::judge(&w, &ledger, &dead, Some(total + 1)).complete());
        let mut forged = ledger.clone();
        forged[2].1 += 7;
        let bad = Report::judge(&w, &forged, &dead, Some(total + 7));
        assert_eq!(bad.foreign, 1);
        assert!(!bad.complete());
    }
}
