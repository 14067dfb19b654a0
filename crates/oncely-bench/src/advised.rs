//! `--horizon-advised`: the long-horizon mode on servers set as `oncely stats` advises for a
//! large inbox (docs/retention.md), applied before a store's cells and restored after them.
//!
//! - PostgreSQL: `wal_compression = zstd` and a `max_wal_size` that holds one checkpoint
//!   interval's WAL, so that checkpoints come from the timer (`ALTER SYSTEM`, reloaded; the
//!   previous values are put back the same way). `shared_buffers` above the inbox is advised
//!   too, but takes a restart: the mode only says when it is smaller.
//! - MariaDB: an `innodb_buffer_pool_size` above the inbox (resized online, then back).
//!
//! SQLite has nothing to advise and runs as it is. Both settings are global to the server:
//! run this mode on a server of your own, not on one other work depends on. A run stopped
//! midway (Ctrl-C, a crash) leaves them set: `ALTER SYSTEM RESET wal_compression`,
//! `ALTER SYSTEM RESET max_wal_size`, `SELECT pg_reload_conf()`, and on MariaDB
//! `SET GLOBAL innodb_buffer_pool_size` to its value before (128 MB by default).

use crate::innodb::{global_status, set_global};
use anyhow::{Context, Result, bail};
use oncely_sql::sqlx::{self, AssertSqlSafe, MySqlPool, PgPool};
use std::time::{Duration, Instant};

/// PostgreSQL's settings and the values this mode gives them. 8 GB holds a checkpoint
/// interval of a fast consumer at 10^7 ids: about 1 kB of WAL per message (compressed) ×
/// 15,000 msgs/s × 300 s is 4.5 GB, and the rest is headroom.
const POSTGRES: [(&str, &str); 2] = [
    (
        "wal_compression",
        oncely_ops::stats::ADVISED_WAL_COMPRESSION,
    ),
    ("max_wal_size", "8GB"),
];

/// The `shared_buffers` advised for the plain inbox at 10^7 ids (2.5 GB). Changing it takes a
/// restart: this mode says when it is smaller, and leaves it.
const SHARED_BUFFERS_BYTES: i64 = 4 << 30;

/// The buffer pool this mode gives MariaDB: above the 2.6 GB a 10^7-id inbox takes.
const BUFFER_POOL_BYTES: i64 = 4 << 30;

/// How long a reload or a buffer pool resize may take before the mode gives up.
const SETTLE: Duration = Duration::from_secs(180);

/// What to put back on PostgreSQL: one statement per setting.
pub(crate) struct PgAdvised {
    restore: Vec<String>,
}

impl PgAdvised {
    /// Sets [`POSTGRES`] server-wide and waits until a session sees them.
    pub(crate) async fn apply(pool: &PgPool) -> Result<Self> {
        let mut restore = Vec::new();
        for (name, value) in POSTGRES {
            // A value set by an earlier ALTER SYSTEM is put back as it was; any other is
            // reset, so postgresql.auto.conf ends as it began.
            let (current, by_alter_system): (String, bool) = sqlx::query_as(
                "SELECT current_setting(name), coalesce(sourcefile LIKE '%postgresql.auto.conf', false) \
                 FROM pg_settings WHERE name = $1",
            )
            .bind(name)
            .fetch_one(pool)
            .await
            .with_context(|| format!("reading {name}"))?;
            restore.push(if by_alter_system {
                format!("ALTER SYSTEM SET {name} = '{current}'")
            } else {
                format!("ALTER SYSTEM RESET {name}")
            });
            run_pg(pool, &format!("ALTER SYSTEM SET {name} = '{value}'")).await?;
        }
        let advised = Self { restore };
        run_pg(pool, "SELECT pg_reload_conf()").await?;
        let expected = POSTGRES[0].1;
        let started = Instant::now();
        loop {
            let seen: String = sqlx::query_scalar("SELECT current_setting('wal_compression')")
                .fetch_one(pool)
                .await
                .context("reading wal_compression")?;
            if seen == expected {
                break;
            }
            if started.elapsed() > SETTLE {
                advised.restore(pool).await?;
                bail!("PostgreSQL still says wal_compression = {seen} after a reload");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        eprintln!("horizon: PostgreSQL set as advised: {POSTGRES:?}");
        let buffers: i64 = sqlx::query_scalar(oncely_ops::stats::SHARED_BUFFERS_BYTES_SQL)
            .fetch_one(pool)
            .await
            .context("reading shared_buffers")?;
        if buffers < SHARED_BUFFERS_BYTES {
            eprintln!(
                "horizon: shared_buffers is {} MB, below the 2.5 GB of the plain inbox at 10^7 ids, \
                 as advised it would be {} MB; that takes a restart, which this mode does not do \
                 (ALTER SYSTEM SET shared_buffers = '4GB', then restart PostgreSQL)",
                buffers >> 20,
                SHARED_BUFFERS_BYTES >> 20
            );
        }
        Ok(advised)
    }

    /// Puts the settings back as they were and reloads.
    pub(crate) async fn restore(self, pool: &PgPool) -> Result<()> {
        for sql in &self.restore {
            run_pg(pool, sql).await?;
        }
        run_pg(pool, "SELECT pg_reload_conf()").await?;
        eprintln!("horizon: PostgreSQL settings restored");
        Ok(())
    }
}

async fn run_pg(pool: &PgPool, sql: &str) -> Result<()> {
    sqlx::query(AssertSqlSafe(sql.to_owned()))
        .execute(pool)
        .await
        .with_context(|| format!("running `{sql}`"))?;
    Ok(())
}

/// MariaDB's buffer pool size before this mode resized it.
pub(crate) struct MariaDbAdvised {
    pool_bytes: i64,
}

impl MariaDbAdvised {
    /// Resizes InnoDB's buffer pool to [`BUFFER_POOL_BYTES`] (when smaller) and waits for it.
    pub(crate) async fn apply(pool: &MySqlPool) -> Result<Self> {
        let pool_bytes = buffer_pool(pool).await?;
        if pool_bytes < BUFFER_POOL_BYTES {
            resize(pool, BUFFER_POOL_BYTES).await?;
        }
        eprintln!("horizon: MariaDB's buffer pool set as advised: {BUFFER_POOL_BYTES} bytes");
        Ok(Self { pool_bytes })
    }

    /// Resizes the buffer pool back.
    pub(crate) async fn restore(self, pool: &MySqlPool) -> Result<()> {
        if buffer_pool(pool).await? != self.pool_bytes {
            resize(pool, self.pool_bytes).await?;
        }
        eprintln!("horizon: MariaDB's buffer pool restored");
        Ok(())
    }
}

async fn buffer_pool(pool: &MySqlPool) -> Result<i64> {
    sqlx::query_scalar(oncely_ops::stats::BUFFER_POOL_BYTES_SQL)
        .fetch_one(pool)
        .await
        .context("reading innodb_buffer_pool_size")
}

/// Sets the buffer pool to `bytes` and waits until InnoDB's pages add up to it (the resize
/// runs in the background, chunk by chunk).
async fn resize(pool: &MySqlPool, bytes: i64) -> Result<()> {
    set_global(pool, "innodb_buffer_pool_size", bytes).await?;
    let target = buffer_pool(pool).await?;
    let page: i64 = sqlx::query_scalar("SELECT CAST(@@innodb_page_size AS SIGNED)")
        .fetch_one(pool)
        .await
        .context("reading innodb_page_size")?;
    let started = Instant::now();
    loop {
        let pages = global_status(pool, "Innodb_buffer_pool_pages_total")
            .await?
            .context("MariaDB does not report Innodb_buffer_pool_pages_total")?;
        let now = pages as i64 * page;
        // Within 5 %: InnoDB keeps part of the pool for itself.
        if (now - target).abs() * 20 <= target {
            return Ok(());
        }
        if started.elapsed() > SETTLE {
            bail!("InnoDB's buffer pool is {now} bytes, {target} asked, after {SETTLE:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
