//! Metrics the pruner records through the `metrics` facade (the consumer runtime's own
//! metrics are listed in `oncely_core::metrics`). All carry the label `inbox` (the table).
//!
//! | name | kind | meaning |
//! |---|---|---|
//! | `oncely_inbox_rows` | gauge | ids held in the inbox (PostgreSQL/MySQL: the planner's estimate) |
//! | `oncely_prune_lag_seconds` | gauge | how far the oldest id is past the retention window after a run (0 = fully pruned) |
//! | `oncely_pruned_total` | counter | ids deleted by batches |
//! | `oncely_partitions_dropped_total` | counter | daily partitions dropped |
//! | `oncely_prune_runs_total` | counter | runs, labelled `result` = `ran` / `skipped_locked` |
//! | `oncely_prune_seconds` | histogram | duration of a run |

use crate::db::Ops;
use crate::prune::PruneReport;

/// Names of the metrics, for dashboards and tests.
pub mod names {
    /// Ids held.
    pub const INBOX_ROWS: &str = "oncely_inbox_rows";
    /// Prune lag.
    pub const PRUNE_LAG_SECONDS: &str = "oncely_prune_lag_seconds";
    /// Ids deleted.
    pub const PRUNED: &str = "oncely_pruned_total";
    /// Partitions dropped.
    pub const PARTITIONS_DROPPED: &str = "oncely_partitions_dropped_total";
    /// Prune runs.
    pub const PRUNE_RUNS: &str = "oncely_prune_runs_total";
    /// Prune duration.
    pub const PRUNE_SECONDS: &str = "oncely_prune_seconds";
}

pub(crate) fn pruned(ops: &Ops, r: &PruneReport) {
    let inbox = ops.tables().inbox();
    let result = if r.ran { "ran" } else { "skipped_locked" };
    metrics::counter!(names::PRUNE_RUNS, "inbox" => inbox.clone(), "result" => result).increment(1);
    if !r.ran {
        return;
    }
    metrics::counter!(names::PRUNED, "inbox" => inbox.clone()).increment(r.deleted);
    metrics::counter!(names::PARTITIONS_DROPPED, "inbox" => inbox.clone())
        .increment(r.partitions_dropped.len() as u64);
    metrics::gauge!(names::PRUNE_LAG_SECONDS, "inbox" => inbox.clone()).set(r.lag_secs);
    metrics::histogram!(names::PRUNE_SECONDS, "inbox" => inbox).record(r.elapsed_secs);
}

pub(crate) fn inbox_rows(ops: &Ops, rows: u64) {
    metrics::gauge!(names::INBOX_ROWS, "inbox" => ops.tables().inbox()).set(rows as f64);
}
