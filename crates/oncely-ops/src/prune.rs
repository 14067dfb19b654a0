//! Retention: removes inbox ids older than the window without long transactions.
//!
//! Batched path (every dialect, and the PostgreSQL default partition): repeated small
//! `DELETE`s, each its own short transaction, with a pause between them, walking the expired
//! rows once in `(received_at, consumer, message_id)` order: each batch
//! reads the row `n` places after the previous batch's last one, then deletes the range between
//! them. A batch never starts over from the oldest row, so rows that earlier batches deleted
//! but vacuum (or InnoDB's purge) may not remove yet, while a long transaction such as a backup
//! holds the horizon, are not read again by every later batch: a run reads each expired row a
//! bounded number of times, not once per batch. In portable mode
//! ([`oncely_sql::SqlStore::portable()`]: detected, or forced with `ConnectOptions::portable`)
//! the same walk goes in primary-key order `(consumer, message_id)`: primary-key ranges,
//! never `ctid`.
//!
//! Partitioned path (PostgreSQL, see [`crate::partition`]): drops every daily partition older
//! than the window and creates the partitions for the coming days.
//!
//! Either way only one pruner runs at a time per inbox ([`oncely_sql::DbLock`]), and on a
//! PostgreSQL server with autovacuum off a run that deleted rows vacuums the table itself
//! ([`crate::vacuum`]).

use crate::db::Ops;
use crate::partition;
use oncely_core::Result;
use oncely_sql::clock::now_ms;
use oncely_sql::{Column, DbLock, Dialect, Value};
use std::time::{Duration, Instant};
use tracing::info;

/// Settings of one prune run.
#[derive(Debug, Clone)]
pub struct PruneOptions {
    /// Ids received longer ago than this are removed (default 7 days).
    pub window: Duration,
    /// Rows per `DELETE` (default 5,000).
    pub batch_size: u32,
    /// Pause between batches, so that consumers and replication keep up (default 50 ms).
    pub pause: Duration,
    /// Wait for another pruner to finish instead of returning at once (default false).
    pub wait_for_lock: bool,
    /// Partitioned inbox only: partitions to keep created ahead of today (default 3).
    pub days_ahead: u32,
    /// Stop after this many batches (default: none); the next run continues.
    pub max_batches: Option<u64>,
    /// Stop before the next batch once this flag is set (default: none), e.g. an operator's
    /// cancel; the next run continues.
    pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl Default for PruneOptions {
    fn default() -> Self {
        Self {
            window: crate::retention::DEFAULT_WINDOW,
            batch_size: 5_000,
            pause: Duration::from_millis(50),
            wait_for_lock: false,
            days_ahead: 3,
            max_batches: None,
            stop: None,
        }
    }
}

/// Progress of a run, reported after every batch (for progress bars).
#[derive(Debug, Clone, Copy)]
pub struct PruneProgress {
    /// Expired rows found when the run started.
    pub expired_at_start: u64,
    /// Rows deleted so far.
    pub deleted: u64,
    /// Batches run so far.
    pub batches: u64,
}

/// What a run did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PruneReport {
    /// False when another pruner held the lock (nothing was done).
    pub ran: bool,
    /// `batched` or `partitions`.
    pub mode: &'static str,
    /// Rows with `received_at` below this (unix ms) were expired.
    pub cutoff_ms: i64,
    /// Expired rows found at the start (partitioned: in the default partition only).
    pub expired_at_start: u64,
    /// Rows deleted by batches.
    pub deleted: u64,
    /// Batches run.
    pub batches: u64,
    /// Partitions dropped (partitioned layout).
    pub partitions_dropped: Vec<String>,
    /// Partitions created ahead (partitioned layout).
    pub partitions_created: Vec<String>,
    /// The days sealed and their claim keys rebuilt (partitioned layout, once a day:
    /// [`crate::sealed`]).
    pub sealed: Option<crate::sealed::Sealed>,
    /// Seconds the run took.
    pub elapsed_secs: f64,
    /// Seconds the oldest remaining row is past the window (0 when fully pruned).
    pub lag_secs: f64,
    /// Whether the run vacuumed the table it deleted from: PostgreSQL with autovacuum off
    /// for it ([`crate::vacuum`]).
    pub vacuumed: bool,
}

/// Prunes the inbox of `ops`, calling `progress` after every batch.
pub async fn prune(
    ops: &Ops,
    options: &PruneOptions,
    progress: &mut (dyn FnMut(PruneProgress) + Send),
) -> Result<PruneReport> {
    let started = Instant::now();
    let cutoff_ms = now_ms() - options.window.as_millis() as i64;
    let mut report = PruneReport {
        mode: "batched",
        cutoff_ms,
        ..PruneReport::default()
    };
    // Portable mode as the pool's engine says (decided when the store connected).
    let portable = ops.portable();
    let lock = DbLock::acquire(ops.pool(), ops.tables(), "prune", options.wait_for_lock);
    let Some(mut lock) = lock.await? else {
        info!(inbox = %ops.tables().inbox(), "another pruner holds the lock; skipping this run");
        return Ok(report);
    };
    report.ran = true;
    let result = run(ops, options, portable, &mut lock, &mut report, progress).await;
    let released = lock.release().await;
    result?;
    released?;
    report.elapsed_secs = started.elapsed().as_secs_f64();
    let oldest = oldest_received(ops).await?;
    report.lag_secs = oldest
        .map(|o| ((cutoff_ms - o).max(0)) as f64 / 1000.0)
        .unwrap_or(0.0);
    crate::metrics::pruned(ops, &report);
    if let Ok(rows) = crate::stats::inbox_rows_estimate(ops).await {
        crate::metrics::inbox_rows(ops, rows);
    }
    info!(inbox = %ops.tables().inbox(), deleted = report.deleted, dropped = report.partitions_dropped.len(), "prune done");
    Ok(report)
}

async fn run(
    ops: &Ops,
    options: &PruneOptions,
    portable: bool,
    lock: &mut DbLock,
    report: &mut PruneReport,
    progress: &mut (dyn FnMut(PruneProgress) + Send),
) -> Result<()> {
    // The watermark goes in before the first delete: a crashed run still counts.
    crate::events::record(
        ops,
        "prune",
        Some(report.cutoff_ms),
        &serde_json::json!({ "window_ms": options.window.as_millis() as i64 }),
    )
    .await?;
    let mut table = ops.tables().inbox();
    if partition::is_partitioned(ops).await? {
        report.mode = "partitions";
        report.partitions_dropped = partition::drop_expired(ops, report.cutoff_ms).await?;
        report.partitions_created = partition::ensure(ops, now_ms(), options.days_ahead).await?;
        report.sealed = crate::sealed::seal(ops).await?;
        table = ops.tables().inbox_default();
    }
    report.expired_at_start = count_expired(ops, &table, report.cutoff_ms).await?;
    let batch = options.batch_size.max(1);
    let walk = if portable { Walk::Key } else { Walk::Received };
    let mut last = None;
    loop {
        if options.max_batches.is_some_and(|m| report.batches >= m)
            || options
                .stop
                .as_ref()
                .is_some_and(|s| s.load(std::sync::atomic::Ordering::SeqCst))
        {
            break;
        }
        let (deleted, full) = walk
            .batch(ops, &table, batch, report.cutoff_ms, &mut last)
            .await?;
        report.batches += 1;
        report.deleted += deleted;
        progress(PruneProgress {
            expired_at_start: report.expired_at_start,
            deleted: report.deleted,
            batches: report.batches,
        });
        if !full {
            break;
        }
        lock.renew().await?;
        tokio::time::sleep(options.pause).await;
    }
    report.vacuumed = crate::vacuum::after_prune(ops, &table, report.deleted).await?;
    Ok(())
}

/// The order a batched prune walks the expired rows in, and the statements of that walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Walk {
    /// `(received_at, consumer, message_id)`: along the `received_at` index, oldest first.
    Received,
    /// `(consumer, message_id)`: the primary key, for portable mode (a distributed engine
    /// deletes a primary-key range without a full scan; it may have no `ctid`-like order).
    Key,
}

/// A row's place in a [`Walk`]: its values of the walk's columns.
type Place = Vec<Value>;

impl Walk {
    fn columns(self) -> &'static [(&'static str, Column)] {
        match self {
            Walk::Received => &[
                ("received_at", Column::I64),
                ("consumer", Column::Text),
                ("message_id", Column::Text),
            ],
            Walk::Key => &[("consumer", Column::Text), ("message_id", Column::Text)],
        }
    }

    fn order_by(self) -> String {
        let names: Vec<&str> = self.columns().iter().map(|(name, _)| *name).collect();
        names.join(", ")
    }

    /// The condition "the row's place `op` the place bound from `$n` on": the row-value
    /// comparison written out, so that every database ranges its index on the first column
    /// (`op` is `>` or `<`; the place itself is included with `<`).
    fn place_condition(self, op: char, n: usize) -> String {
        let columns = self.columns();
        let (equal_first, last) = if op == '>' { (">=", ">") } else { ("<=", "<=") };
        let (first, _) = columns[0];
        // From the last column back: `c op $k OR (c = $k AND <the rest>)`.
        let mut rest = String::new();
        for (k, (column, _)) in columns.iter().enumerate().skip(1).rev() {
            let at = n + k;
            rest = if rest.is_empty() {
                format!("{column} {last} ${at}")
            } else {
                format!("{column} {op} ${at} OR ({column} = ${at} AND {rest})")
            };
        }
        format!(" AND {first} {equal_first} ${n} AND ({first} {op} ${n} OR {rest})")
    }

    /// The walk's first statement: the place of the expired row `batch` places after the
    /// previous batch's last one (bound from `$2`, with `after`); none when fewer remain.
    /// Along `received_at`, a subquery first finds that row's `received_at` in the index's own
    /// order (it stops after `batch` entries), so the outer query sorts only the rows up to it
    /// (the batch and the rest of its last millisecond), never every expired row, whatever
    /// the planner thinks of the table.
    fn boundary_sql(self, table: &str, batch: u32, after: bool) -> String {
        let after = if after {
            self.place_condition('>', 2)
        } else {
            String::new()
        };
        let (offset, order) = (batch - 1, self.order_by());
        let upto = match self {
            Walk::Received => format!(
                " AND received_at <= (SELECT received_at FROM {table} WHERE received_at < $1{after} \
                 ORDER BY received_at LIMIT 1 OFFSET {offset})"
            ),
            Walk::Key => String::new(),
        };
        format!(
            "SELECT {order} FROM {table} WHERE received_at < $1{after}{upto} \
             ORDER BY {order} LIMIT 1 OFFSET {offset}"
        )
    }

    /// The walk's second statement: deletes the expired rows after the previous batch's last
    /// place (with `after`) up to and including the place bound next (with `upto`), or all of
    /// them.
    fn delete_sql(self, table: &str, after: bool, upto: bool) -> String {
        let mut sql = format!("DELETE FROM {table} WHERE received_at < $1");
        if after {
            sql += &self.place_condition('>', 2);
        }
        if upto {
            let n = if after { 2 + self.columns().len() } else { 2 };
            sql += &self.place_condition('<', n);
        }
        sql
    }

    /// One batch, in one transaction: finds the place `batch` expired rows after `last` (the
    /// previous batch's last place), deletes the rows up to it and moves `last` there; with
    /// fewer than `batch` left, deletes them all. Returns the rows deleted and whether the
    /// batch was full (more may remain).
    async fn batch(
        self,
        ops: &Ops,
        table: &str,
        batch: u32,
        cutoff_ms: i64,
        last: &mut Option<Place>,
    ) -> Result<(u64, bool)> {
        let mut args = vec![Value::I64(cutoff_ms)];
        args.extend(last.iter().flatten().cloned());
        let after = last.is_some();
        let mut tx = ops.begin().await?;
        if self == Walk::Received && ops.dialect() == Dialect::Postgres {
            // The boundary's subquery must walk the index in order and stop after `batch`
            // entries. On a table whose statistics are stale or missing (autovacuum off,
            // never analyzed) the planner may read every expired row into a sort instead (a
            // bitmap scan and a top-N sort), once per batch: quadratic in the rows to prune.
            // Sorting costs it more than anything here, for this transaction only.
            tx.execute("SET LOCAL enable_sort = off", &[]).await?;
        }
        let columns: Vec<Column> = self.columns().iter().map(|&(_, c)| c).collect();
        let rows = tx
            .fetch(&self.boundary_sql(table, batch, after), &args, &columns)
            .await?;
        let place = rows.into_iter().next();
        args.extend(place.iter().flatten().cloned());
        let sql = self.delete_sql(table, after, place.is_some());
        let deleted = tx.execute(&sql, &args).await?.rows;
        tx.commit().await?;
        let full = place.is_some();
        if full {
            *last = place;
        }
        Ok((deleted, full))
    }
}

/// How many inbox ids a prune with `window` would remove now (the preview an operator sees
/// before confirming one).
pub async fn expired(ops: &Ops, window: Duration) -> Result<u64> {
    let cutoff_ms = now_ms() - window.as_millis() as i64;
    count_expired(ops, &ops.tables().inbox(), cutoff_ms).await
}

async fn count_expired(ops: &Ops, table: &str, cutoff_ms: i64) -> Result<u64> {
    let sql = format!("SELECT COUNT(*) FROM {table} WHERE received_at < $1");
    let mut tx = ops.begin().await?;
    let n = tx.fetch_i64(&sql, &[cutoff_ms.into()]).await?;
    tx.commit().await?;
    Ok(n.unwrap_or(0).max(0) as u64)
}

/// `received_at` of the oldest id in the inbox (unix ms), if any.
pub async fn oldest_received(ops: &Ops) -> Result<Option<i64>> {
    let sql = format!("SELECT MIN(received_at) FROM {}", ops.tables().inbox());
    let mut tx = ops.begin().await?;
    let oldest = tx.fetch_i64(&sql, &[]).await?;
    tx.commit().await?;
    Ok(oldest)
}

#[cfg(test)]
mod tests {
    use super::Walk;

    #[test]
    fn a_place_bound_compares_the_walks_columns_as_one_row_value() {
        assert_eq!(
            Walk::Received.place_condition('>', 2),
            " AND received_at >= $2 AND (received_at > $2 OR consumer > $3 \
             OR (consumer = $3 AND message_id > $4))"
        );
        assert_eq!(
            Walk::Key.place_condition('<', 4),
            " AND consumer <= $4 AND (consumer < $4 OR message_id <= $5)"
        );
    }

    #[test]
    fn a_batch_after_a_place_deletes_up_to_the_next_one() {
        assert_eq!(
            Walk::Key.delete_sql("t", true, true),
            "DELETE FROM t WHERE received_at < $1 AND consumer >= $2 AND (consumer > $2 \
             OR message_id > $3) AND consumer <= $4 AND (consumer < $4 OR message_id <= $5)"
        );
        // The last batch: no place ahead, everything after the last one goes.
        assert_eq!(
            Walk::Received.delete_sql("t", false, false),
            "DELETE FROM t WHERE received_at < $1"
        );
        assert!(Walk::Received.delete_sql("t", true, true).ends_with(
            "AND (received_at < $5 OR consumer < $6 OR (consumer = $6 AND message_id <= $7))"
        ));
    }
}
