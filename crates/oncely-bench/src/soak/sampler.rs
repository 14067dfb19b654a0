//! The sampler of the soak mode: every [`SAMPLE_SECS`] the counters of the source, the
//! latencies the ack hook noted, the pruner's runs, and three readings of PostgreSQL.

use super::load::{Clock, PruneLog, Tracked};
use super::targets::{Latencies, Phase, SAMPLE_SECS, Sample};
use crate::bed::Bed;
use crate::group::quantile_ms;
use anyhow::{Context, Result};
use oncely_core::MemorySource;
use oncely_sql::sqlx::{self, AssertSqlSafe, Postgres};
use tokio::time::sleep_until;

/// What PostgreSQL's statistics say of one table.
#[derive(Default)]
struct TableStats {
    dead_tuples: i64,
    vacuums: i64,
    /// Index entries its indexes' scans have returned so far.
    index_reads: i64,
}

/// The statistics of `table`, in one read of `pg_stat_user_tables`.
async fn table_stats(bed: &Bed<Postgres>, table: &str) -> Result<TableStats> {
    let stats: Option<(i64, i64, i64)> = sqlx::query_as(
        "SELECT t.n_dead_tup, t.vacuum_count + t.autovacuum_count, \
         COALESCE((SELECT SUM(i.idx_tup_read) FROM pg_stat_user_indexes i \
         WHERE i.relid = t.relid), 0)::bigint FROM pg_stat_user_tables t WHERE t.relid = to_regclass($1)",
    )
    .bind(table)
    .fetch_optional(&bed.pool)
    .await
    .with_context(|| format!("reading the statistics of {table}"))?;
    Ok(stats
        .map(|(dead_tuples, vacuums, index_reads)| TableStats {
            dead_tuples,
            vacuums,
            index_reads,
        })
        .unwrap_or_default())
}

/// `count(*)` of the inbox.
async fn inbox_rows(bed: &Bed<Postgres>) -> Result<i64> {
    let inbox = &bed.sql.inbox;
    sqlx::query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM {inbox}")))
        .fetch_one(&bed.pool)
        .await
        .context("counting the inbox")
}

/// Where the previous sample left off.
struct Mark {
    secs: f64,
    published: u64,
    wal: i64,
    inbox_reads: i64,
    accounts_reads: i64,
}

/// Samples the run until its end (`clock`), printing each sample as it is taken; returns the
/// samples and each one's latencies.
pub(crate) async fn sample(
    bed: &Bed<Postgres>,
    source: &MemorySource,
    tracked: &Tracked,
    prunes: &PruneLog,
    clock: Clock,
) -> Result<(Vec<Sample>, Vec<Latencies>)> {
    let total = clock.total.as_secs_f64();
    let mut last = Mark {
        secs: 0.0,
        published: 0,
        wal: bed.wal_position().await?,
        inbox_reads: table_stats(bed, &bed.sql.inbox).await?.index_reads,
        accounts_reads: table_stats(bed, &bed.sql.accounts).await?.index_reads,
    };
    let (mut samples, mut all) = (Vec::new(), Vec::new());
    let intervals = (total / SAMPLE_SECS).ceil() as usize;
    for k in 1..=intervals {
        let end = (k as f64 * SAMPLE_SECS).min(total);
        sleep_until(clock.at(end / total)).await;
        // The counters first, then the database (its readings take a moment).
        let (secs, stats, latencies) = (clock.secs(), source.stats(), tracked.take());
        let wal = bed.wal_position().await?;
        let rows = inbox_rows(bed).await?;
        let inbox = table_stats(bed, &bed.sql.inbox).await?;
        let accounts = table_stats(bed, &bed.sql.accounts).await?;
        let seconds = (secs - last.secs).max(1e-9);
        let runs = prunes.ended(last.secs, secs);
        let sorted = latencies.sorted();
        let s = Sample {
            elapsed_secs: secs,
            seconds,
            phase: Phase::at((last.secs + secs) / 2.0 / total),
            offered_per_sec: (stats.published - last.published) as f64 / seconds,
            consumed_per_sec: latencies.len() as f64 / seconds,
            backlog: stats.published.saturating_sub(stats.acked),
            p50_ms: quantile_ms(&sorted, 0.5),
            p99_ms: quantile_ms(&sorted, 0.99),
            prunes: runs.len() as u32,
            pruned_rows: runs.iter().map(|r| r.deleted).sum(),
            inbox_rows: rows as u64,
            dead_tuples: inbox.dead_tuples as u64,
            vacuums: inbox.vacuums as u64,
            wal_bytes_per_sec: (wal - last.wal) as f64 / seconds,
            accounts_dead_tuples: accounts.dead_tuples as u64,
            inbox_index_reads_per_sec: (inbox.index_reads - last.inbox_reads) as f64 / seconds,
            accounts_index_reads_per_sec: (accounts.index_reads - last.accounts_reads) as f64
                / seconds,
        };
        print_sample(&s);
        last = Mark {
            secs,
            published: stats.published,
            wal,
            inbox_reads: inbox.index_reads,
            accounts_reads: accounts.index_reads,
        };
        samples.push(s);
        all.push(latencies);
    }
    Ok((samples, all))
}

fn print_sample(s: &Sample) {
    let prune = if s.prunes > 0 {
        format!("prune {} rows", s.pruned_rows)
    } else {
        "no prune".to_owned()
    };
    eprintln!(
        "soak: {:>5.0} s {:<9} offered {:>6.0}/s consumed {:>6.0}/s backlog {:>6}  p50 {:>6.1} ms p99 {:>7.1} ms  {prune:<17} inbox {:>8} dead {:>8} vacuums {:>2}  WAL {:>6.2} MB/s  index reads/s inbox {:>8.0} accounts {:>8.0} (dead {:>7})",
        s.elapsed_secs,
        s.phase.name(),
        s.offered_per_sec,
        s.consumed_per_sec,
        s.backlog,
        s.p50_ms,
        s.p99_ms,
        s.inbox_rows,
        s.dead_tuples,
        s.vacuums,
        s.wal_bytes_per_sec / 1e6,
        s.inbox_index_reads_per_sec,
        s.accounts_index_reads_per_sec,
        s.accounts_dead_tuples
    );
}
