//! The independent checker: counts effects in the database against the workload.

use crate::ledger::{Db, db_err};
use crate::workload::Workload;
use oncely_core::Result;
use oncely_sql::sqlx::AssertSqlSafe;
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
}

impl Report {
    /// Reads the database and compares it with `workload`.
    pub async fn read(db: &Db, workload: &Workload) -> Result<Self> {
        let ledger_q = format!("SELECT message_id FROM {}", db.ledger());
        let dl_q = format!(
            "SELECT message_id, reason, payload FROM {}",
            db.dead_letters()
        );
        type Dl = (Option<String>, String, Vec<u8>);
        let pool = db.store().pool();
        let (ledger, dead): (Vec<String>, Vec<Dl>) = oncely_sql::with_autocommit!(&pool, c => (
            oncely_sql::query_scalar(AssertSqlSafe(ledger_q))
                .fetch_all(&mut *c)
                .await
                .map_err(db_err)?,
            oncely_sql::query_as(AssertSqlSafe(dl_q))
                .fetch_all(&mut *c)
                .await
                .map_err(db_err)?,
        ))?;
        let expected: HashSet<&str> = workload.unique.iter().map(|(id, _)| id.as_str()).collect();
        let mut per_id: HashMap<&str, usize> = HashMap::new();
        for id in &ledger {
            *per_id.entry(id.as_str()).or_default() += 1;
        }
        let double = per_id
            .iter()
            .map(|(id, n)| if expected.contains(id) { n - 1 } else { *n })
            .sum();
        let dead_ids: HashSet<&str> = dead.iter().filter_map(|(id, _, _)| id.as_deref()).collect();
        let mut lost_ids: Vec<&str> = expected
            .iter()
            .filter(|id| !per_id.contains_key(*id) && !dead_ids.contains(*id))
            .copied()
            .collect();
        lost_ids.sort_unstable();
        let lost = lost_ids.len();
        let lost_sample = lost_ids.iter().take(10).map(|s| s.to_string()).collect();
        let valid_dead_lettered = expected.iter().filter(|id| dead_ids.contains(*id)).count();
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
        Ok(Self {
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
        })
    }

    /// True when every id was applied exactly once and every bad message dead-lettered.
    pub fn complete(&self) -> bool {
        self.double == 0
            && self.lost == 0
            && self.valid_dead_lettered == 0
            && self.ledger_rows == self.unique
            && self.bad_dead_lettered == self.bad_expected
    }

    /// Panics with the whole report unless [`Report::complete`].
    pub fn assert_exact(&self, what: &str) {
        assert!(
            self.complete(),
            "{what}: 0 double / 0 lost violated: {self:#?}"
        );
        eprintln!(
            "{what}: published {} ({} unique, {} bad), ledger rows {} = unique ids {}, double {}, lost {}, bad dead-lettered {}/{}",
            self.published,
            self.unique,
            self.bad_expected,
            self.ledger_rows,
            self.ledger_ids,
            self.double,
            self.lost,
            self.bad_dead_lettered,
            self.bad_expected
        );
    }
}
