//! The long-horizon mode (`oncely bench --horizon`): what a claim costs when the inbox holds
//! a week of ids, not an empty table.
//!
//! For each layout (PostgreSQL plain and time-partitioned, MariaDB, SQLite) and each inbox
//! size of `--horizon-rows`, in one run: a fresh inbox is prefilled with that many claims of
//! the consumer, ids as producers make them (`--horizon-ids`: random UUIDv4 by default) and
//! `received_at` spread over the 7-day window, written by one bulk statement per million rows
//! (never through claims); statistics are refreshed and a checkpoint taken (on MariaDB: its dirty
//! pages flushed, [`crate::innodb`]);
//! then oncely with group commit at its defaults consumes the same kind of messages from the
//! in-process source. Reported per cell: msgs/s, WAL (redo) bytes per message, inbox bytes per
//! row, the median and 99th percentile of a message's time in the consumer (from its delivery
//! to its ack: with a backlog, mostly the wait behind the groups before it, so it grows as
//! groups slow down), and each figure as a ratio to the empty inbox of the same layout; the partitioned
//! layout also as a ratio to the plain one at the same size. The checker counts the ledger and
//! the balances against the published messages (0 double, 0 lost) and the inbox rows against
//! prefill + published.

use crate::advised::{MariaDbAdvised, PgAdvised};
use crate::bed::{Bed, Ops};
use crate::cells::{Check, workload_with};
use crate::group::{Timed, oncely_group, quantile_ms};
use crate::plan::{BenchArgs, GROUP};
use anyhow::{Context, Result, bail};
use oncely_core::{ConsumerName, DEFAULT_CONCURRENCY, MemorySource};
use oncely_sql::Dialect;
use oncely_sql::clock::now_ms;
use oncely_sql::migrate::MigrateDb;
use oncely_sql::sqlx::{self, AssertSqlSafe, MySql, Postgres, Sqlite};
use serde::Serialize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The retention window the prefill spreads its rows over (the default of `oncely prune`).
const WINDOW_MS: i64 = 7 * 86_400_000;
/// Rows per prefill statement.
const CHUNK: u64 = 1_000_000;
/// The consumer every cell claims for.
const CONSUMER: &str = "bench";

/// How producers make message ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IdKind {
    /// Random UUIDv4: what most producers send; each claim lands on a random index page.
    Uuid4,
    /// Time-ordered UUIDv7: claims land at the end of the index.
    Uuid7,
    /// Kafka-style `topic-partition-offset`: ordered within a partition.
    Offset,
}

impl IdKind {
    /// The `n`-th message id of the measured run (`n` counts on from the prefill).
    fn id(self, n: u64) -> String {
        match self {
            Self::Uuid4 => uuid::Uuid::new_v4().to_string(),
            Self::Uuid7 => uuid::Uuid::now_v7().to_string(),
            Self::Offset => format!("orders-0-{n:012}"),
        }
    }

    /// The SQL expression of the `g`-th prefilled id (`g` the row's number, `at` its time).
    fn sql(self, d: Dialect) -> &'static str {
        match (self, d) {
            (Self::Uuid4, Dialect::Postgres) => "gen_random_uuid()::text",
            (Self::Uuid7, Dialect::Postgres) => {
                "substr(lpad(to_hex(at), 12, '0'), 1, 8) || '-' || substr(lpad(to_hex(at), 12, '0'), 9, 4) || '-7' || substr(gen_random_uuid()::text, 16)"
            }
            (Self::Offset, Dialect::Postgres) => "'orders-0-' || lpad(g::text, 12, '0')",
            (Self::Uuid4, Dialect::MySql) => {
                "LOWER(CONCAT_WS('-', SUBSTR(h, 1, 8), SUBSTR(h, 9, 4), CONCAT('4', SUBSTR(h, 14, 3)), SUBSTR(h, 17, 4), SUBSTR(h, 21, 12)))"
            }
            (Self::Uuid7, Dialect::MySql) => {
                "LOWER(CONCAT(SUBSTR(LPAD(HEX(at), 12, '0'), 1, 8), '-', SUBSTR(LPAD(HEX(at), 12, '0'), 9, 4), '-7', SUBSTR(h, 14, 3), '-', SUBSTR(h, 17, 4), '-', SUBSTR(h, 21, 12)))"
            }
            (Self::Offset, Dialect::MySql) => "CONCAT('orders-0-', LPAD(g, 12, '0'))",
            (Self::Uuid4, Dialect::Sqlite) => {
                "lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(2)) || '-' || hex(randomblob(6)))"
            }
            (Self::Uuid7, Dialect::Sqlite) => {
                "lower(substr(printf('%012x', at), 1, 8) || '-' || substr(printf('%012x', at), 9, 4) || '-7' || substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(2)) || '-' || hex(randomblob(6)))"
            }
            (Self::Offset, Dialect::Sqlite) => "'orders-0-' || printf('%012d', g)",
        }
    }
}

/// One measured cell of the long-horizon mode.
#[derive(Debug, Clone, Serialize)]
pub struct HorizonCell {
    /// `postgres`, `postgres_partitioned`, `mariadb` or `sqlite`.
    pub layout: String,
    /// Claims in the inbox before the run.
    pub inbox_rows: u64,
    /// Which turn at this layout and size (`--horizon-repeat`), from 0.
    pub turn: u32,
    /// Messages consumed.
    pub messages: usize,
    /// Seconds the prefill took.
    pub prefill_seconds: f64,
    /// Messages per second of the run.
    pub msgs_per_sec: f64,
    /// WAL (PostgreSQL) or redo (InnoDB) bytes per message; `None` on SQLite.
    pub wal_bytes_per_msg: Option<f64>,
    /// Inbox table + index bytes per row after the run.
    pub inbox_bytes_per_row: f64,
    /// Median time of a message in the consumer (delivery to ack), milliseconds.
    pub p50_ms: f64,
    /// 99th percentile of the same, milliseconds.
    pub p99_ms: f64,
    /// The checker's verdict.
    pub check: Check,
}

/// A database the long-horizon mode prefills and measures.
trait Horizon: Ops {
    /// Bulk-inserts `rows` claims of [`CONSUMER`] with ids of `kind`, `received_at` spread
    /// over the window before now.
    async fn prefill(&self, rows: u64, kind: IdKind) -> Result<()>;
    /// WAL or redo position in bytes, if the database reports one.
    async fn wal_position(&self) -> Result<Option<u64>>;
    /// Inbox table + index bytes.
    async fn inbox_bytes(&self) -> Result<u64>;
}

/// The binds of a prefill of `rows` rows, one array per statement: its first row number
/// (`$1`), its row count (`$2`), the first `received_at` (`$3`) and the step between rows
/// (`$4`).
fn chunk_binds(rows: u64) -> Vec<[i64; 4]> {
    let start = now_ms() - WINDOW_MS;
    let step = (WINDOW_MS / rows.max(1) as i64).max(1);
    (0..rows)
        .step_by(CHUNK as usize)
        .map(|done| [done as i64, CHUNK.min(rows - done) as i64, start, step])
        .collect()
}

/// Runs the prefill statement `$sql` (numbered placeholders) once per chunk on `$exec`.
macro_rules! prefill_chunks {
    ($exec:expr, $dialect:expr, $sql:expr, $rows:expr) => {{
        let (sql, order) = $dialect.rewrite_params(&$sql);
        let order = order.unwrap_or_else(|| (0..4).collect());
        for binds in chunk_binds($rows) {
            let mut q = sqlx::query(AssertSqlSafe(sql.to_string()));
            for &i in &order {
                q = q.bind(binds[i]);
            }
            q.execute($exec)
                .await
                .with_context(|| format!("prefilling rows from {}", binds[0]))?;
        }
    }};
}

impl Horizon for Bed<Postgres> {
    async fn prefill(&self, rows: u64, kind: IdKind) -> Result<()> {
        let inbox = &self.sql.inbox;
        // The partitioned layout's days unsealed for the prefill (a size before this one may
        // have sealed them), sealed again after it.
        let ops = oncely_ops::Ops::new(self.pool.clone().into(), self.tables.clone());
        let partitioned = oncely_ops::partition::is_partitioned(&ops).await?;
        if partitioned {
            oncely_ops::sealed::unseal(&ops).await?;
        }
        let mut conn = self.pool.acquire().await.context("connecting")?;
        // Random keys into a large index one by one take minutes per million: the indexes
        // are dropped for the bulk insert and built after it, at 70 % leaf fill (what random
        // inserts leave in a B-tree), then reset to the default for the run. The partitioned
        // layout's guard trigger, which would probe every partition per row, is off meanwhile:
        // the prefilled ids are unique by construction.
        let rebuild: Vec<(String, String)> = sqlx::query_as(
            "SELECT 'ALTER TABLE ' || $1 || ' DROP CONSTRAINT ' || quote_ident(conname), \
                    'ALTER TABLE ' || $1 || ' ADD CONSTRAINT ' || quote_ident(conname) || ' ' || \
                    regexp_replace(pg_get_constraintdef(oid), ' WITH \\(.*\\)$', '') || ' WITH (fillfactor = 70)' \
             FROM pg_constraint WHERE conrelid = to_regclass($1) AND contype = 'p' \
             UNION ALL \
             SELECT 'DROP INDEX ' || indexrelid::regclass::text, \
                    regexp_replace(replace(pg_get_indexdef(indexrelid), ' ON ONLY ', ' ON '), ' WITH \\(.*\\)$', '') \
                    || ' WITH (fillfactor = 70)' \
             FROM pg_index WHERE indrelid = to_regclass($1) AND NOT indisprimary",
        )
        .bind(inbox)
        .fetch_all(&mut *conn)
        .await
        .context("reading the inbox's indexes")?;
        let script = |sql: String| sqlx::raw_sql(AssertSqlSafe(sql));
        let drops: Vec<&str> = rebuild.iter().map(|(drop, _)| drop.as_str()).collect();
        script(format!(
            "ALTER TABLE {inbox} DISABLE TRIGGER USER; {}",
            drops.join("; ")
        ))
        .execute(&mut *conn)
        .await
        .context("dropping the inbox's indexes for the prefill")?;
        let sql = format!(
            "INSERT INTO {inbox} (consumer, message_id, payload_hash, received_at) \
             SELECT '{CONSUMER}', {id}, encode(sha256(int8send(g)), 'hex'), at \
             FROM (SELECT g, $3 + g * $4 AS at FROM generate_series($1 + 1, $1 + $2) AS g) AS rows",
            id = kind.sql(Dialect::Postgres)
        );
        let filled: Result<()> = async {
            prefill_chunks!(&mut *conn, Dialect::Postgres, sql, rows);
            Ok(())
        }
        .await;
        let adds: Vec<&str> = rebuild.iter().map(|(_, add)| add.as_str()).collect();
        script(format!(
            "SET maintenance_work_mem = '512MB'; {}; ALTER TABLE {inbox} ENABLE TRIGGER USER; RESET maintenance_work_mem",
            adds.join("; ")
        ))
        .execute(&mut *conn)
        .await
        .context("building the inbox's indexes after the prefill")?;
        filled?;
        // The fill factor was for the build: later splits leave the default free space
        // (a partitioned index takes no storage parameter of its own: those fail, harmlessly).
        let indexes: Vec<String> = sqlx::query_scalar(
            "SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = to_regclass($1) \
             OR indrelid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = to_regclass($1))",
        )
        .bind(inbox)
        .fetch_all(&mut *conn)
        .await
        .context("listing the inbox's indexes")?;
        for index in indexes {
            let reset = script(format!("ALTER INDEX {index} RESET (fillfactor)"));
            let _ = reset.execute(&mut *conn).await;
        }
        // The days before today sealed and their keys indexed, as the next `oncely prune`
        // would (the partitioned layout).
        if partitioned {
            oncely_ops::sealed::seal(&ops).await?;
        }
        // Each alone: a script of several statements runs as one transaction, and VACUUM
        // refuses to run inside one.
        for sql in [format!("VACUUM ANALYZE {inbox}"), "CHECKPOINT".to_owned()] {
            script(sql)
                .execute(&mut *conn)
                .await
                .context("vacuum and checkpoint after the prefill")?;
        }
        Ok(())
    }

    async fn wal_position(&self) -> Result<Option<u64>> {
        Ok(Some(Bed::<Postgres>::wal_position(self).await? as u64))
    }

    async fn inbox_bytes(&self) -> Result<u64> {
        // The inbox and, for the partitioned layout, every partition and the sealed days'
        // keys (oncely_ops::sealed).
        let bytes: i64 = sqlx::query_scalar(
            "SELECT COALESCE(sum(pg_total_relation_size(c)), 0)::bigint FROM \
             (SELECT to_regclass($1) AS c UNION ALL \
              SELECT inhrelid FROM pg_inherits WHERE inhparent = to_regclass($1) UNION ALL \
              SELECT to_regclass($2) UNION ALL SELECT to_regclass($3)) AS rels",
        )
        .bind(&self.sql.inbox)
        .bind(self.tables.inbox_sealed_keys("a"))
        .bind(self.tables.inbox_sealed_keys("b"))
        .fetch_one(&self.pool)
        .await
        .context("reading the inbox size")?;
        Ok(bytes as u64)
    }
}

impl Horizon for Bed<MySql> {
    async fn prefill(&self, rows: u64, kind: IdKind) -> Result<()> {
        // MariaDB's sequence engine gives the row numbers.
        let sql = format!(
            "INSERT INTO {inbox} (consumer, message_id, payload_hash, received_at) \
             SELECT '{CONSUMER}', {id}, SHA2(g, 256), at FROM \
             (SELECT seq + $1 AS g, $3 + (seq + $1) * $4 AS at, MD5(CONCAT(seq + $1, RAND())) AS h \
              FROM seq_1_to_{CHUNK} WHERE seq <= $2) AS s",
            inbox = self.sql.inbox,
            id = kind.sql(Dialect::MySql)
        );
        prefill_chunks!(&self.pool, Dialect::MySql, sql, rows);
        sqlx::query(AssertSqlSafe(format!("ANALYZE TABLE {}", self.sql.inbox)))
            .execute(&self.pool)
            .await
            .context("analyzing the inbox")?;
        // As PostgreSQL's checkpoint: the prefill's pages written out before the cell.
        crate::innodb::flush_dirty_pages(&self.pool).await
    }

    async fn wal_position(&self) -> Result<Option<u64>> {
        crate::innodb::global_status(&self.pool, "Innodb_lsn_current").await
    }

    async fn inbox_bytes(&self) -> Result<u64> {
        // information_schema's sizes are InnoDB's statistics: refreshed first.
        sqlx::query(AssertSqlSafe(format!("ANALYZE TABLE {}", self.sql.inbox)))
            .execute(&self.pool)
            .await
            .context("analyzing the inbox")?;
        let (schema, table) = self
            .sql
            .inbox
            .split_once('.')
            .unwrap_or(("", &self.sql.inbox));
        let bytes: Option<i64> = sqlx::query_scalar(
            "SELECT CAST(data_length + index_length AS SIGNED) FROM information_schema.tables \
             WHERE table_schema = ? AND table_name = ?",
        )
        .bind(schema)
        .bind(table)
        .fetch_optional(&self.pool)
        .await
        .context("reading the inbox size")?;
        Ok(bytes.unwrap_or(0) as u64)
    }
}

impl Horizon for Bed<Sqlite> {
    async fn prefill(&self, rows: u64, kind: IdKind) -> Result<()> {
        let sql = format!(
            "WITH RECURSIVE s(g) AS (SELECT $1 + 1 UNION ALL SELECT g + 1 FROM s WHERE g < $1 + $2) \
             INSERT INTO {inbox} (consumer, message_id, payload_hash, received_at) \
             SELECT '{CONSUMER}', {id}, lower(hex(randomblob(32))), at \
             FROM (SELECT g, $3 + g * $4 AS at FROM s)",
            inbox = self.sql.inbox,
            id = kind.sql(Dialect::Sqlite)
        );
        prefill_chunks!(&self.pool, Dialect::Sqlite, sql, rows);
        sqlx::raw_sql("ANALYZE; PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&self.pool)
            .await
            .context("analyzing the inbox")?;
        Ok(())
    }

    async fn wal_position(&self) -> Result<Option<u64>> {
        Ok(None)
    }

    async fn inbox_bytes(&self) -> Result<u64> {
        // The whole file: the inbox is nearly all of it.
        let bytes: i64 = sqlx::query_scalar(
            "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
        )
        .fetch_one(&self.pool)
        .await
        .context("reading the database size")?;
        Ok(bytes as u64)
    }
}

/// Prefills `bed` to `rows`, consumes `n` messages, checks and measures.
async fn cell<B: Horizon>(
    bed: &B,
    layout: &str,
    (rows, turn): (u64, u32),
    n: usize,
    kind: IdKind,
) -> Result<HorizonCell> {
    bed.reset().await?;
    let started = Instant::now();
    bed.prefill(rows, kind).await?;
    let prefill_seconds = started.elapsed().as_secs_f64();
    let (msgs, total) = workload_with(n, |i| kind.id(rows + 1 + i as u64));
    let source = MemorySource::new();
    for m in &msgs {
        source.publish(m.clone());
    }
    source.close();
    let times: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let timed = {
        let times = times.clone();
        Timed::new(source, move |_, took| {
            times.lock().expect("lock").push(took)
        })
    };
    let before = bed.wal_position().await?;
    let started = Instant::now();
    let name = ConsumerName::new(CONSUMER)?;
    oncely_group(bed, &name, timed, GROUP, DEFAULT_CONCURRENCY).await?;
    let seconds = started.elapsed().as_secs_f64();
    let mut times = std::mem::take(&mut *times.lock().expect("lock"));
    times.sort();
    let after = bed.wal_position().await?;
    let mut counts = bed.counts().await?;
    let found = counts.inbox_rows;
    // The checker's inbox count is of the run's messages: the prefill is not theirs.
    counts.inbox_rows = found.saturating_sub(rows);
    let check = Check::new(msgs.len() as u64, total, counts, true);
    let wal = before
        .zip(after)
        .map(|(b, a)| a.saturating_sub(b) as f64 / n as f64);
    Ok(HorizonCell {
        layout: layout.to_owned(),
        inbox_rows: rows,
        turn,
        messages: n,
        prefill_seconds,
        msgs_per_sec: n as f64 / seconds.max(1e-9),
        wal_bytes_per_msg: wal,
        inbox_bytes_per_row: bed.inbox_bytes().await? as f64 / found.max(1) as f64,
        p50_ms: quantile_ms(&times, 0.5),
        p99_ms: quantile_ms(&times, 0.99),
        check,
    })
}

/// Messages per cell of `args`.
fn messages(args: &BenchArgs) -> usize {
    args.messages
        .unwrap_or(if args.quick { 3_000 } else { 100_000 })
}

/// Warm-up, not recorded: opens the pool's connections and prepares the statements, so that
/// the first size (the empty inbox, the baseline) does not pay for them.
async fn warm_up<B: Horizon>(bed: &B, layout: &str, args: &BenchArgs) -> Result<()> {
    let n = (messages(args) / 20).max(500);
    cell(bed, layout, (0, 0), n, args.horizon_ids).await?;
    Ok(())
}

/// One measured cell at `rows` (turn `turn`), printed as it ends.
async fn measured<B: Horizon>(
    bed: &B,
    layout: &str,
    (rows, turn): (u64, u32),
    args: &BenchArgs,
) -> Result<HorizonCell> {
    let c = cell(bed, layout, (rows, turn), messages(args), args.horizon_ids)
        .await
        .with_context(|| format!("{layout} at {rows} inbox rows"))?;
    eprintln!(
        "horizon: {layout:<21} {rows:>10} rows  {:>8.0} msgs/s  WAL {:>6} B/msg  {:>5.0} B/row  p50 {:.1} ms p99 {:.1} ms  prefill {:.0} s  double {} lost {}",
        c.msgs_per_sec,
        c.wal_bytes_per_msg
            .map_or("-".into(), |w| format!("{w:.0}")),
        c.inbox_bytes_per_row,
        c.p50_ms,
        c.p99_ms,
        c.prefill_seconds,
        c.check.double,
        c.check.lost
    );
    Ok(c)
}

/// Runs every size of `args` on `bed`, `--horizon-repeat` cells each.
async fn sizes<B: Horizon>(bed: &B, layout: &str, args: &BenchArgs) -> Result<Vec<HorizonCell>> {
    warm_up(bed, layout, args).await?;
    let mut cells = Vec::new();
    for &rows in &args.horizon_rows {
        for turn in 0..args.horizon_repeat {
            cells.push(measured(bed, layout, (rows, turn), args).await?);
        }
    }
    bed.reset().await?;
    Ok(cells)
}

/// PostgreSQL's two layouts at every size of `args`, taking turns: at each size and turn both
/// layouts run a cell, the plain one first on even turns, so that neither always runs on
/// the warmer (or the more checkpoint-burdened) server.
async fn paired_sizes<B: Horizon>(
    plain: &B,
    partitioned: &B,
    args: &BenchArgs,
) -> Result<Vec<HorizonCell>> {
    let (a, b) = ((plain, "postgres"), (partitioned, "postgres_partitioned"));
    warm_up(a.0, a.1, args).await?;
    warm_up(b.0, b.1, args).await?;
    let mut cells = Vec::new();
    for &rows in &args.horizon_rows {
        for turn in 0..args.horizon_repeat {
            let order = if turn % 2 == 0 { [a, b] } else { [b, a] };
            for (bed, layout) in order {
                cells.push(measured(bed, layout, (rows, turn), args).await?);
            }
        }
    }
    plain.reset().await?;
    partitioned.reset().await?;
    Ok(cells)
}

/// The report of the long-horizon mode: the cells and the ratios the targets are set on.
#[derive(Debug, Serialize)]
pub struct HorizonReport {
    /// Ids of the run.
    pub ids: IdKind,
    /// Whether the servers were set as `oncely stats` advises (`--horizon-advised`).
    pub advised: bool,
    /// Every cell.
    pub cells: Vec<HorizonCell>,
    /// `layout/rows/turn` → (msgs/s, WAL per message) as ratios to the same layout's empty
    /// inbox in the same turn.
    pub vs_empty: Vec<(String, f64, Option<f64>)>,
    /// `(rows, turn)` → the partitioned layout's msgs/s and WAL per message over the plain
    /// layout's in the same turn.
    pub partitioned_vs_plain: Vec<(u64, u32, f64, Option<f64>)>,
}

impl HorizonReport {
    fn new(ids: IdKind, advised: bool, cells: Vec<HorizonCell>) -> Self {
        let find = |layout: &str, rows: u64, turn: u32| {
            cells
                .iter()
                .find(|c| c.layout == layout && c.inbox_rows == rows && c.turn == turn)
        };
        let ratio = |a: &HorizonCell, b: &HorizonCell| {
            let wal = a.wal_bytes_per_msg.zip(b.wal_bytes_per_msg);
            (
                a.msgs_per_sec / b.msgs_per_sec.max(1e-9),
                wal.map(|(a, b)| a / b.max(1e-9)),
            )
        };
        let vs_empty = cells
            .iter()
            .filter(|c| c.inbox_rows > 0)
            .filter_map(|c| {
                let (speed, wal) = ratio(c, find(&c.layout, 0, c.turn)?);
                Some((
                    format!("{}/{}/{}", c.layout, c.inbox_rows, c.turn),
                    speed,
                    wal,
                ))
            })
            .collect();
        let partitioned_vs_plain = cells
            .iter()
            .filter(|c| c.layout == "postgres_partitioned")
            .filter_map(|c| {
                let (speed, wal) = ratio(c, find("postgres", c.inbox_rows, c.turn)?);
                Some((c.inbox_rows, c.turn, speed, wal))
            })
            .collect();
        Self {
            ids,
            advised,
            cells,
            vs_empty,
            partitioned_vs_plain,
        }
    }

    /// The median over the turns of the partitioned layout's speed over the plain one's, per
    /// size, in `--horizon-rows` order.
    pub fn partitioned_vs_plain_median(&self) -> Vec<(u64, f64)> {
        let mut sizes: Vec<u64> = Vec::new();
        for (rows, ..) in &self.partitioned_vs_plain {
            if !sizes.contains(rows) {
                sizes.push(*rows);
            }
        }
        sizes
            .into_iter()
            .filter_map(|rows| {
                let speeds = (self.partitioned_vs_plain.iter())
                    .filter(|p| p.0 == rows)
                    .map(|p| p.2)
                    .collect();
                Some((rows, crate::report::median(speeds)?))
            })
            .collect()
    }

    fn print(&self) {
        println!(
            "\nlong horizon ({:?} ids{}): ratios to the same layout's empty inbox (layout/rows/turn)",
            self.ids,
            if self.advised {
                ", servers set as advised"
            } else {
                ""
            }
        );
        let wal = |w: Option<f64>| w.map_or("-".into(), |w| format!("{w:.2}"));
        for (key, speed, w) in &self.vs_empty {
            println!("  {key:<34} msgs/s {speed:.2}x  WAL/msg {}x", wal(*w));
        }
        for (rows, turn, speed, w) in &self.partitioned_vs_plain {
            println!(
                "  partitioned vs plain at {rows:>10} rows, turn {turn}: msgs/s {speed:.2}x  WAL/msg {}x",
                wal(*w)
            );
        }
        for (rows, median) in self.partitioned_vs_plain_median() {
            println!(
                "  partitioned vs plain at {rows:>10} rows, median of the turns: msgs/s {median:.2}x"
            );
        }
    }
}

/// Runs the long-horizon mode; returns whether every cell's checker passed.
pub(crate) async fn run(args: &BenchArgs, schema: &str) -> Result<bool> {
    let mut cells = Vec::new();
    if !args.no_postgres {
        let part_schema = format!("{schema}_part");
        let plain = crate::plan::postgres(args, schema).await?;
        let partitioned = crate::plan::postgres_partitioned(args, &part_schema).await?;
        let advised = if args.horizon_advised {
            Some(PgAdvised::apply(&plain.pool).await?)
        } else {
            None
        };
        let paired = Box::pin(paired_sizes(&plain, &partitioned, args)).await;
        if let Some(advised) = advised {
            advised.restore(&plain.pool).await?;
        }
        drop_schema(&plain, schema).await;
        drop_schema(&partitioned, &part_schema).await;
        cells.extend(paired?);
    }
    if !args.no_mariadb {
        let bed = crate::plan::mariadb(args, schema).await?;
        let advised = if args.horizon_advised {
            Some(MariaDbAdvised::apply(&bed.pool).await?)
        } else {
            None
        };
        let measured = Box::pin(sizes(&bed, "mariadb", args)).await;
        drop_schema(&bed, schema).await;
        if let Some(advised) = advised {
            advised.restore(&bed.pool).await?;
        }
        cells.extend(measured?);
    }
    if !args.no_sqlite {
        let dir = tempfile::tempdir()?;
        let bed = crate::plan::sqlite(args, dir.path(), oncely_sql::Durability::Full).await?;
        cells.extend(Box::pin(sizes(&bed, "sqlite", args)).await?);
    }
    if cells.is_empty() {
        bail!("the long-horizon mode needs a database: all were skipped");
    }
    let ok = cells.iter().all(|c| c.check.ok);
    let report = HorizonReport::new(args.horizon_ids, args.horizon_advised, cells);
    std::fs::create_dir_all(&args.out)?;
    let json = serde_json::to_string_pretty(&report)?;
    std::fs::write(args.out.join("horizon.json"), &json)?;
    crate::chart::horizon(&report, &args.out.join("horizon.svg"))?;
    if args.json {
        println!("{json}");
    } else {
        report.print();
    }
    Ok(ok)
}

/// Drops `schema` (PostgreSQL schema, MySQL database) and everything in it; errors ignored.
pub(crate) async fn drop_schema<DB: MigrateDb>(bed: &Bed<DB>, schema: &str) {
    if let (Some(sql), Ok(mut conn)) = (
        DB::DIALECT.drop_schema_sql(schema),
        bed.pool.acquire().await,
    ) {
        let _ = DB::script(&mut conn, &sql).await;
    }
}
