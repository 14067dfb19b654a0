//! `oncely prune`: deletes inbox ids older than the retention window, and HTTP Idempotency-Key
//! rows past their TTL (`oncely_http::prune_expired`, where that table exists).

use super::metrics::MetricsArgs;
use super::{DbArgs, print_json, print_table};
use crate::prune::{PruneOptions, prune};
use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use std::time::Duration;

/// Flags of `oncely prune`.
#[derive(Debug, Clone, clap::Args)]
pub struct PruneArgs {
    #[command(flatten)]
    db: DbArgs,
    /// Retention window: ids received longer ago are deleted (e.g. 7d, 36h).
    #[arg(long, default_value = "7d", value_parser = super::duration)]
    older_than: std::time::Duration,
    /// Rows per DELETE statement.
    #[arg(long, default_value_t = 5_000)]
    batch_size: u32,
    /// Pause between batches, in milliseconds.
    #[arg(long, default_value_t = 50)]
    pause_ms: u64,
    /// Wait for another running pruner instead of exiting at once.
    #[arg(long)]
    wait: bool,
    /// Partitioned inbox: daily partitions to keep created ahead.
    #[arg(long, default_value_t = 3)]
    days_ahead: u32,
    /// Stop after this many batches (the next run continues).
    #[arg(long)]
    max_batches: Option<u64>,
    #[command(flatten)]
    metrics: MetricsArgs,
}

/// Runs `oncely prune`. Exit status 0 also when another pruner held the lock.
pub(crate) async fn run(args: PruneArgs) -> Result<bool> {
    let metrics = super::metrics::serve(&args.metrics)?;
    let (_store, ops) = args.db.open().await?;
    let options = PruneOptions {
        window: args.older_than,
        batch_size: args.batch_size,
        pause: Duration::from_millis(args.pause_ms),
        wait_for_lock: args.wait,
        days_ahead: args.days_ahead,
        max_batches: args.max_batches,
        stop: None,
    };
    let bar = if args.db.json {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} pruning [{bar:40}] {pos}/{len} ids  {per_sec}  eta {eta}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        bar
    };
    let report = prune(&ops, &options, &mut |p| {
        bar.set_length(p.expired_at_start.max(p.deleted));
        bar.set_position(p.deleted);
    })
    .await?;
    bar.finish_and_clear();
    let http_keys = prune_http_keys(&ops, args.batch_size, args.max_batches).await?;
    if args.db.json {
        let mut json = serde_json::to_value(&report)?;
        json["http_keys_deleted"] = http_keys.into();
        print_json(&json);
    } else if !report.ran {
        println!(
            "another pruner holds the lock for {}; nothing done",
            ops.tables().inbox()
        );
    } else {
        let rows = vec![
            vec!["inbox".into(), ops.tables().inbox()],
            vec!["mode".into(), report.mode.to_owned()],
            vec!["cutoff".into(), super::when(Some(report.cutoff_ms))],
            vec!["ids deleted".into(), report.deleted.to_string()],
            vec!["batches".into(), report.batches.to_string()],
            vec![
                "partitions dropped".into(),
                report.partitions_dropped.join(", "),
            ],
            vec![
                "partitions created".into(),
                report.partitions_created.join(", "),
            ],
            vec![
                "days sealed".into(),
                report.sealed.map_or_else(String::new, |s| {
                    format!("before {} ({} keys)", super::when(Some(s.below_ms)), s.keys)
                }),
            ],
            vec!["prune lag".into(), format!("{:.0} s", report.lag_secs)],
            vec!["http keys deleted".into(), http_keys.to_string()],
            vec!["took".into(), format!("{:.2} s", report.elapsed_secs)],
        ];
        print_table(&["", ""], &rows);
    }
    metrics.hold().await;
    Ok(true)
}

/// Deletes expired HTTP Idempotency-Key rows in batches (none without the table).
async fn prune_http_keys(ops: &crate::Ops, batch: u32, max_batches: Option<u64>) -> Result<u64> {
    let (mut deleted, mut batches) = (0, 0);
    while max_batches.is_none_or(|max| batches < max) {
        let n = oncely_http::prune_expired(ops.pool(), ops.tables(), batch).await?;
        deleted += n;
        batches += 1;
        if n < u64::from(batch.max(1)) {
            break;
        }
    }
    Ok(deleted)
}
