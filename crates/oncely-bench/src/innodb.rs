//! MariaDB's counterpart of the `CHECKPOINT` the long-horizon mode takes on PostgreSQL after a
//! prefill: InnoDB's dirty pages written out before a cell is measured. Also the bench's one
//! way to set a MariaDB global and read a status counter ([`set_global`], [`global_status`]).
//!
//! A bulk prefill of 10^7 random ids leaves gigabytes of dirty pages in the buffer pool, and
//! InnoDB's page cleaner writes them out in the background, for minutes, on the cores the
//! consumer under test runs on. An inbox that grew over a week has no such backlog: its pages
//! went to disk as they were written. So the mode sets `innodb_max_dirty_pages_pct` to 0
//! (the page cleaner then flushes every dirty page), waits until the buffer pool holds
//! almost none, and sets it back.
//!
//! Setting it takes a user allowed to set global variables (`root` on a test server); without
//! that the mode says so and measures beside the page cleaner. Stopped midway (Ctrl-C), the
//! setting stays at 0 until the server restarts or it is reset by hand:
//! `SET GLOBAL innodb_max_dirty_pages_pct = DEFAULT`.

use anyhow::{Context, Result};
use oncely_sql::sqlx::{self, AssertSqlSafe, MySqlPool};
use std::time::{Duration, Instant};

/// How long the flush may take before the cell runs anyway (10^7 ids: about 92,000 pages,
/// 3 minutes at the default `innodb_io_capacity`).
const FLUSH_LIMIT: Duration = Duration::from_secs(600);
/// The setting the flush lowers to 0 and puts back.
const MAX_DIRTY_PCT: &str = "innodb_max_dirty_pages_pct";
/// Dirty pages left that count as flushed (the purge and the statistics keep writing a few).
const CLEAN_ENOUGH: u64 = 1_000;

/// Writes InnoDB's dirty pages out, waits for it and says how many and how long. Past
/// [`FLUSH_LIMIT`] it says so and returns: the cell then runs beside the flush.
pub(crate) async fn flush_dirty_pages(pool: &MySqlPool) -> Result<()> {
    let started = Instant::now();
    let dirty_before = dirty_pages(pool).await?;
    let pct: f64 = sqlx::query_scalar("SELECT CAST(@@GLOBAL.innodb_max_dirty_pages_pct AS DOUBLE)")
        .fetch_one(pool)
        .await
        .context("reading innodb_max_dirty_pages_pct")?;
    if let Err(e) = set_global(pool, MAX_DIRTY_PCT, 0.0).await {
        eprintln!(
            "horizon: MariaDB's {dirty_before} dirty pages not flushed before the cell ({e:#}); \
             measuring beside the page cleaner"
        );
        return Ok(());
    }
    // Polled until clean or the limit; the setting is put back either way.
    let left = async {
        loop {
            let dirty = dirty_pages(pool).await?;
            if dirty <= CLEAN_ENOUGH || started.elapsed() > FLUSH_LIMIT {
                return Ok::<_, anyhow::Error>(dirty);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    .await;
    set_global(pool, MAX_DIRTY_PCT, pct).await?;
    let (left, took) = (left?, started.elapsed());
    if left > CLEAN_ENOUGH {
        eprintln!(
            "horizon: MariaDB still holds {left} of {dirty_before} dirty pages after {took:.0?}; \
             measuring beside the page cleaner"
        );
    } else {
        eprintln!(
            "horizon: MariaDB flushed {dirty_before} dirty pages before the cell in {took:.1?}"
        );
    }
    Ok(())
}

/// `SET GLOBAL {name} = {value}` (the bench's own constants, never user input).
pub(crate) async fn set_global(
    pool: &MySqlPool,
    name: &str,
    value: impl std::fmt::Display,
) -> Result<()> {
    sqlx::query(AssertSqlSafe(format!("SET GLOBAL {name} = {value}")))
        .execute(pool)
        .await
        .with_context(|| format!("setting {name}"))?;
    Ok(())
}

/// A counter of `SHOW GLOBAL STATUS` (`name`: the bench's own constant); `None` when the
/// server does not report it.
pub(crate) async fn global_status(pool: &MySqlPool, name: &str) -> Result<Option<u64>> {
    let row: Option<(String, String)> =
        sqlx::query_as(AssertSqlSafe(format!("SHOW GLOBAL STATUS LIKE '{name}'")))
            .fetch_optional(pool)
            .await
            .with_context(|| format!("reading {name}"))?;
    row.map(|(_, value)| {
        value
            .parse()
            .with_context(|| format!("{name} is {value:?}"))
    })
    .transpose()
}

async fn dirty_pages(pool: &MySqlPool) -> Result<u64> {
    global_status(pool, "Innodb_buffer_pool_pages_dirty")
        .await?
        .context("MariaDB does not report Innodb_buffer_pool_pages_dirty")
}
