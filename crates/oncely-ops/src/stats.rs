//! Per-consumer numbers read from the inbox and dead-letter tables.

use crate::db::{Ops, doing};
use oncely_core::Result;
use oncely_sql::{Column, Dialect, SqlTx, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// One consumer's numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ConsumerStats {
    /// Consumer name.
    pub consumer: String,
    /// Ids held in the inbox.
    pub ids_held: u64,
    /// `received_at` of the oldest id (unix ms).
    pub oldest_ms: Option<i64>,
    /// `received_at` of the newest id (unix ms).
    pub newest_ms: Option<i64>,
    /// Dead-letter rows of this consumer.
    pub dead_letters: u64,
    /// Of those, conflicts (same id, other payload).
    pub conflicts: u64,
    /// Of those, late messages quarantined.
    pub late: u64,
    /// Dead-letter rows by reason code.
    pub dead_letters_by_reason: BTreeMap<String, u64>,
}

/// The whole installation.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct InboxStats {
    /// The inbox table.
    pub inbox: String,
    /// Per consumer, by name.
    pub consumers: Vec<ConsumerStats>,
    /// Ids held, all consumers.
    pub ids_held: u64,
    /// Dead-letter rows, all consumers.
    pub dead_letters: u64,
    /// Inbox size on disk with indexes (bytes), where the database reports it.
    pub inbox_bytes: Option<i64>,
    /// Dead-letter table size on disk with indexes (bytes), where the database reports it.
    pub dead_letter_bytes: Option<i64>,
    /// True for the PostgreSQL partitioned layout.
    pub partitioned: bool,
    /// Daily partitions (partitioned layout).
    pub partitions: usize,
}

/// Reads the numbers. Counting is exact (an index scan per table).
pub async fn stats(ops: &Ops) -> Result<InboxStats> {
    let inbox = ops.tables().inbox();
    let dl = ops.tables().dead_letters();
    let consumer = ops.dialect().text("consumer");
    let inbox_sql = format!(
        "SELECT {consumer} AS consumer, COUNT(*) AS n, MIN(received_at) AS oldest, MAX(received_at) AS newest FROM {inbox} GROUP BY consumer"
    );
    let dl_sql = format!(
        "SELECT {consumer} AS consumer, reason, COUNT(*) AS n FROM {dl} GROUP BY consumer, reason"
    );
    let mut by_name: BTreeMap<String, ConsumerStats> = BTreeMap::new();
    let mut pool = ops.autocommit();
    let held = pool
        .fetch(
            &inbox_sql,
            &[],
            &[Column::Text, Column::I64, Column::OptI64, Column::OptI64],
        )
        .await
        .map_err(doing("reading the inbox"))?;
    let letters = pool
        .fetch(&dl_sql, &[], &[Column::Text, Column::Text, Column::I64])
        .await
        .map_err(doing("reading dead letters"))?;
    for row in held {
        let name = row[0].text();
        let s = by_name.entry(name.clone()).or_default();
        s.consumer = name;
        s.ids_held = row[1].i64().max(0) as u64;
        s.oldest_ms = row[2].opt_i64();
        s.newest_ms = row[3].opt_i64();
    }
    for row in letters {
        let (name, reason) = (row[0].text(), row[1].text());
        let s = by_name.entry(name.clone()).or_default();
        s.consumer = name;
        let n = row[2].i64().max(0) as u64;
        s.dead_letters += n;
        match reason.as_str() {
            "conflict" => s.conflicts += n,
            "late" => s.late += n,
            _ => {}
        }
        *s.dead_letters_by_reason.entry(reason).or_default() += n;
    }
    let consumers: Vec<ConsumerStats> = by_name.into_values().collect();
    let partitioned = crate::partition::is_partitioned(ops).await?;
    let partitions = if partitioned {
        crate::partition::list(ops).await?.len()
    } else {
        0
    };
    Ok(InboxStats {
        ids_held: consumers.iter().map(|c| c.ids_held).sum(),
        dead_letters: consumers.iter().map(|c| c.dead_letters).sum(),
        inbox_bytes: table_bytes(ops, "inbox").await,
        dead_letter_bytes: table_bytes(ops, "dead_letters").await,
        inbox,
        consumers,
        partitioned,
        partitions,
    })
}

/// What the inbox will hold once it keeps a whole retention window at the rate of the last
/// hour: the rows `oncely prune --older-than WINDOW` leaves at steady state, and their size at
/// today's bytes per id.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Projection {
    /// The retention window (ms).
    pub window_ms: i64,
    /// Ids claimed in the last hour, per second.
    pub ids_per_sec: f64,
    /// Ids the inbox holds at that rate over the window.
    pub ids: u64,
    /// Bytes on disk per id today (table and indexes over ids held), where the database says.
    pub bytes_per_id: Option<f64>,
    /// Bytes the inbox takes at that rate over the window.
    pub bytes: Option<i64>,
}

/// Projects the inbox of `stats` over a retention `window` at the rate of the last hour.
pub async fn projection(ops: &Ops, stats: &InboxStats, window: Duration) -> Result<Projection> {
    const HOUR_MS: i64 = 3_600_000;
    let inbox = ops.tables().inbox();
    let sql = format!("SELECT COUNT(*) FROM {inbox} WHERE received_at >= $1");
    let since = oncely_sql::clock::now_ms() - HOUR_MS;
    let last_hour = ops.autocommit().fetch_i64(&sql, &[since.into()]).await;
    let last_hour = last_hour.map_err(doing("counting the last hour's claims"))?;
    let ids_per_sec = last_hour.unwrap_or(0).max(0) as f64 / 3600.0;
    let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
    let ids = (ids_per_sec * window_ms as f64 / 1000.0).round() as u64;
    let bytes_per_id = stats
        .inbox_bytes
        .filter(|_| stats.ids_held > 0)
        .map(|b| b as f64 / stats.ids_held as f64);
    Ok(Projection {
        window_ms,
        ids_per_sec,
        ids,
        bytes_per_id,
        bytes: bytes_per_id.map(|b| (b * ids as f64).round() as i64),
    })
}

/// Ids from which a plain PostgreSQL inbox's WAL is worth a server setting (retention.md).
pub const LARGE_INBOX_IDS: u64 = 1_000_000;

/// The server settings worth changing for this inbox (none, one or more):
/// - PostgreSQL, a large plain inbox (holding, or projected to hold, at least
///   [`LARGE_INBOX_IDS`]) on a server that does not compress full-page writes: a claim of a
///   random id can write a whole 8 kB index page to the WAL;
/// - PostgreSQL, a plain inbox that takes, or at the last hour's rate will take, more bytes
///   than `shared_buffers`, and MariaDB / MySQL, an inbox larger than InnoDB's buffer pool: a
///   claim of a random id then reads its page from outside the database's cache.
///
/// A setting that cannot be read gives no advice.
pub async fn advice(ops: &Ops, stats: &InboxStats, projection: &Projection) -> Vec<String> {
    let setting = |sql: &'static str| async move {
        ops.autocommit().fetch_i64(sql, &[]).await.ok().flatten()
    };
    let inbox = stats.inbox_bytes.max(projection.bytes);
    let mut advice = Vec::new();
    match ops.dialect() {
        Dialect::Postgres => {
            let compressed =
                setting("SELECT (current_setting('wal_compression') <> 'off')::int::bigint").await;
            let ids = stats.ids_held.max(projection.ids);
            advice.extend(compressed.and_then(|c| wal_advice(stats.partitioned, ids, c != 0)));
            // The partitioned layout writes to today's partition: its claims need no cache
            // that holds the whole inbox.
            if !stats.partitioned {
                let buffers = setting(SHARED_BUFFERS_BYTES_SQL).await;
                advice.extend(inbox.zip(buffers).and_then(|(inbox, buffers)| {
                    cache_advice(inbox, ("shared_buffers", buffers), SHARED_BUFFERS_MEASURED)
                }));
            }
        }
        Dialect::MySql => {
            let pool = setting(BUFFER_POOL_BYTES_SQL).await;
            advice.extend(inbox.zip(pool).and_then(|(inbox, pool)| {
                cache_advice(
                    inbox,
                    ("innodb_buffer_pool_size", pool),
                    BUFFER_POOL_MEASURED,
                )
            }));
        }
        Dialect::Sqlite => {}
    }
    advice
}

/// PostgreSQL's `shared_buffers` in bytes (one `bigint`).
pub const SHARED_BUFFERS_BYTES_SQL: &str = "SELECT (setting::bigint * pg_size_bytes(unit))::bigint \
     FROM pg_settings WHERE name = 'shared_buffers'";

/// InnoDB's buffer pool in bytes (one signed integer).
pub const BUFFER_POOL_BYTES_SQL: &str = "SELECT CAST(@@innodb_buffer_pool_size AS SIGNED)";

/// The `wal_compression` advised for a plain PostgreSQL inbox of [`LARGE_INBOX_IDS`] or more.
pub const ADVISED_WAL_COMPRESSION: &str = "zstd";

fn wal_advice(partitioned: bool, ids: u64, compressed: bool) -> Option<String> {
    (!partitioned && !compressed && ids >= LARGE_INBOX_IDS).then(|| {
        format!(
            "wal_compression is off and the inbox holds or will hold {ids} ids: a claim of a random id can write a whole 8 kB index page to the WAL (measured: 5.3x an empty inbox's WAL per message at 10^7 ids); set wal_compression = {ADVISED_WAL_COMPRESSION} and a max_wal_size that holds one checkpoint interval's WAL (docs/retention.md)"
        )
    })
}

/// What a cache smaller than the inbox was measured to cost (docs/retention.md).
const SHARED_BUFFERS_MEASURED: &str = "measured in process at 10^7 ids, 2.5 GB, with wal_compression on: 0.87x an empty inbox's rate with the default 128 MB, 0.98x with 4 GB; it takes a restart";
const BUFFER_POOL_MEASURED: &str = "measured through RabbitMQ at 10^7 ids, 2.6 GB: 0.40x an empty inbox's rate with the default 128 MB pool, 0.92x with 4 GB";

/// Advice when the inbox (`inbox_bytes`) outgrows the database's cache (`name`, its bytes).
fn cache_advice(
    inbox_bytes: i64,
    (name, cache_bytes): (&str, i64),
    measured: &str,
) -> Option<String> {
    const MB: i64 = 1 << 20;
    (inbox_bytes > cache_bytes).then(|| {
        format!(
            "the inbox takes or will take {} MB and {name} is {} MB: a claim of a random id then reads a page from outside the database's cache and writes one back ({measured}); set {name} above the inbox's size (docs/retention.md)",
            inbox_bytes / MB,
            cache_bytes / MB
        )
    })
}

/// Size on disk of the oncely table `name` with its indexes (and, on PostgreSQL, its
/// partitions), if the database says (SQLite needs the `dbstat` table).
pub async fn table_bytes(ops: &Ops, name: &str) -> Option<i64> {
    let tables = ops.tables();
    let (table, bare) = (tables.table(name), format!("{}{name}", tables.prefix()));
    let (sql, args): (&str, Vec<Value>) = match ops.dialect() {
        Dialect::Postgres => (
            "SELECT (pg_total_relation_size(to_regclass($1)) + COALESCE((SELECT SUM(pg_total_relation_size(inhrelid)) \
             FROM pg_inherits WHERE inhparent = to_regclass($1)), 0))::bigint",
            vec![table.into()],
        ),
        Dialect::MySql => (
            "SELECT CAST(DATA_LENGTH + INDEX_LENGTH AS SIGNED) FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = COALESCE($1, DATABASE()) AND TABLE_NAME = $2",
            vec![tables.schema().map(str::to_owned).into(), bare.into()],
        ),
        Dialect::Sqlite => (
            "SELECT SUM(pgsize) FROM dbstat WHERE name IN (SELECT name FROM sqlite_master WHERE tbl_name = $1)",
            vec![bare.into()],
        ),
    };
    ops.autocommit().fetch_i64(sql, &args).await.ok().flatten()
}

/// The planner's row estimate of the oncely table `name` (with its partitions), without
/// scanning it; `None` where there is none (SQLite) or on error.
async fn estimated_rows(ops: &Ops, name: &str) -> Option<i64> {
    let tables = ops.tables();
    let (sql, args): (&str, Vec<Value>) = match ops.dialect() {
        Dialect::Postgres => (
            "SELECT COALESCE(SUM(GREATEST(reltuples, 0)), 0)::bigint FROM pg_class WHERE oid = to_regclass($1) \
             OR oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = to_regclass($1))",
            vec![tables.table(name).into()],
        ),
        Dialect::MySql => (
            "SELECT CAST(TABLE_ROWS AS SIGNED) FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = COALESCE($1, DATABASE()) AND TABLE_NAME = $2",
            vec![
                tables.schema().map(str::to_owned).into(),
                format!("{}{name}", tables.prefix()).into(),
            ],
        ),
        Dialect::Sqlite => return None,
    };
    ops.autocommit().fetch_i64(sql, &args).await.ok().flatten()
}

/// Ids held in the inbox: the planner's estimate where the database keeps one (PostgreSQL after
/// the inbox's first vacuum or analyze, MySQL), else an exact count (SQLite, a PostgreSQL inbox
/// never analyzed). Every prune run reports it: an exact count there read every row of the
/// inbox each run, and with the xmin horizon pinned every dead row too.
pub async fn inbox_rows_estimate(ops: &Ops) -> Result<u64> {
    let inbox = ops.tables().inbox();
    let estimate = estimated_rows(ops, "inbox").await;
    if let Some(n) = estimate.filter(|n| *n > 0) {
        return Ok(n as u64);
    }
    let sql = format!("SELECT COUNT(*) FROM {inbox}");
    let n = (ops.autocommit().fetch_i64(&sql, &[]).await).map_err(doing("counting the inbox"))?;
    Ok(n.unwrap_or(0).max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wal_advice_only_for_a_large_plain_inbox_without_compression() {
        let advice = wal_advice(false, LARGE_INBOX_IDS, false).expect("advice");
        assert!(advice.contains("1000000 ids") && advice.contains("wal_compression = zstd"));
        assert_eq!(wal_advice(false, LARGE_INBOX_IDS - 1, false), None, "small");
        assert_eq!(
            wal_advice(true, 10 * LARGE_INBOX_IDS, false),
            None,
            "partitioned"
        );
        assert_eq!(
            wal_advice(false, 10 * LARGE_INBOX_IDS, true),
            None,
            "compressed"
        );
    }

    #[test]
    fn buffer_pool_advice_only_for_an_inbox_larger_than_the_pool() {
        let pool = 128 << 20;
        let advice = cache_advice(
            2_600 << 20,
            ("innodb_buffer_pool_size", pool),
            BUFFER_POOL_MEASURED,
        )
        .expect("advice");
        assert!(
            advice.contains("2600 MB") && advice.contains("128 MB"),
            "{advice}"
        );
        assert!(advice.contains("innodb_buffer_pool_size"), "{advice}");
        assert_eq!(
            cache_advice(
                pool,
                ("innodb_buffer_pool_size", pool),
                BUFFER_POOL_MEASURED
            ),
            None,
            "fits"
        );
    }
}
