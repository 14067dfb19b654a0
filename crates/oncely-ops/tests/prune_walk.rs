//! The batched prune walks the expired rows once, in `(received_at, consumer, message_id)`
//! order: every full batch deletes exactly its batch size, also where many rows share one
//! `received_at` across a batch's edge; recent rows stay. On PostgreSQL, with a transaction
//! pinning the horizon (so nothing deleted can be vacuumed away), a run reads each expired
//! index entry a bounded number of times, not once per later batch.

mod common;
use oncely_ops::Ops;
use oncely_ops::prune::{PruneOptions, prune};
use oncely_sql::SqlTx;
use oncely_sql::clock::now_ms;
use sqlx::Connection;
use std::time::Duration;

const DAY: i64 = 86_400_000;

/// Inserts `count` rows of `consumer` received `age_ms(i)` ago (the `i`-th row).
async fn rows(ops: &Ops, consumer: &str, count: usize, age_ms: impl Fn(usize) -> i64) {
    let now = now_ms();
    let inbox = ops.tables().inbox();
    for chunk in (0..count).collect::<Vec<_>>().chunks(500) {
        let values: Vec<String> = chunk
            .iter()
            .map(|&i| format!("('{consumer}', 'm{i:05}', 'h', {})", now - age_ms(i)))
            .collect();
        let sql = format!(
            "INSERT INTO {inbox} (consumer, message_id, payload_hash, received_at) VALUES {}",
            values.join(", ")
        );
        ops.pool().clone().script(&sql).await.unwrap();
    }
}

async fn count(ops: &Ops, condition: &str) -> i64 {
    let sql = format!(
        "SELECT COUNT(*) FROM {} WHERE {condition}",
        ops.tables().inbox()
    );
    let n = ops.pool().clone().fetch_i64(&sql, &[]).await.unwrap();
    n.unwrap_or(0)
}

/// 3 consumers × 200 expired ids on only 7 distinct `received_at` values (each shared by ~86
/// rows, so batches of 37 end inside a run of equal times), and 100 recent ids.
async fn check_ties(ops: &Ops) {
    for consumer in ["a", "b", "c"] {
        rows(ops, consumer, 200, |i| 8 * DAY + (i % 7) as i64).await;
    }
    rows(ops, "d", 100, |_| 1_000).await;
    let options = PruneOptions {
        batch_size: 37,
        pause: Duration::ZERO,
        ..PruneOptions::default()
    };
    let mut deleted = Vec::new();
    let mut last = 0;
    let report = prune(ops, &options, &mut |p| {
        deleted.push(p.deleted - last);
        last = p.deleted;
    })
    .await
    .unwrap();
    assert_eq!(report.deleted, 600, "{report:?}");
    // 600 = 16 × 37 + 8: every batch but the last is full, none larger.
    assert_eq!(deleted.len(), 17, "{deleted:?}");
    assert!(deleted[..16].iter().all(|&d| d == 37), "{deleted:?}");
    assert_eq!(deleted[16], 8, "{deleted:?}");
    assert_eq!(count(ops, "1 = 1").await, 100, "the recent ids stay");
    assert_eq!(count(ops, "consumer = 'd'").await, 100);
}

#[tokio::test]
async fn sqlite_prune_batches_are_exact_across_equal_times() {
    let dir = tempfile::tempdir().unwrap();
    let (_store, ops) = common::sqlite(&dir).await;
    check_ties(&ops).await;
}

#[tokio::test]
async fn postgres_prune_batches_are_exact_across_equal_times() {
    let Some((store, ops, _db)) = common::postgres("prune_batches_exact_pg").await else {
        return;
    };
    store.migrate().await.unwrap();
    check_ties(&ops).await;
}

#[tokio::test]
async fn mariadb_prune_batches_are_exact_across_equal_times() {
    let Some((_store, ops, _db)) = common::mysql("prune_batches_exact_mariadb").await else {
        return;
    };
    check_ties(&ops).await;
}

/// Index entries the scans of the inbox's `received_at` index have returned, once the
/// counters stop moving. A backend that goes idle within a second of its last report holds
/// its statistics for up to 10 s (PostgreSQL's `PGSTAT_IDLE_INTERVAL`): the scans to count
/// must run on connections closed before this (a backend reports all on exit).
async fn received_at_entries_read(ops: &Ops) -> i64 {
    let sql = "SELECT COALESCE(SUM(idx_tup_read), 0)::bigint FROM pg_stat_all_indexes \
               WHERE relid = to_regclass($1) AND indexrelname LIKE '%received_at'";
    let args = [ops.tables().inbox().into()];
    let mut seen = -1;
    for _ in 0..20 {
        let now = ops.pool().clone().fetch_i64(sql, &args).await.unwrap();
        let now = now.unwrap_or(0);
        if now == seen {
            return now;
        }
        seen = now;
        tokio::time::sleep(Duration::from_millis(1_500)).await;
    }
    panic!("the index statistics did not settle in 30 s (last {seen})");
}

#[tokio::test]
async fn postgres_prune_under_a_pinned_horizon_reads_each_expired_entry_a_bounded_number_of_times()
{
    let Some((store, ops, db)) = common::postgres("prune_walk_pinned").await else {
        return;
    };
    store.migrate().await.unwrap();
    const EXPIRED: usize = 3_000;
    // One millisecond apart, as a consumer's claims are: no run of equal times to re-read.
    rows(&ops, "c", EXPIRED, |i| 8 * DAY + i as i64).await;
    rows(&ops, "c-new", 200, |_| 1_000).await;
    // The pin: a transaction with an xid, idle, as a long backup or a forgotten session holds.
    let mut pin = sqlx::PgConnection::connect(db.url()).await.unwrap();
    sqlx::raw_sql("BEGIN; SELECT txid_current()")
        .execute(&mut pin)
        .await
        .unwrap();
    let before = received_at_entries_read(&ops).await;
    let options = PruneOptions {
        batch_size: 100,
        pause: Duration::ZERO,
        ..PruneOptions::default()
    };
    // The prune on a pool of its own, closed after it: its backends report their statistics
    // as they exit (left idle, they may hold them for 10 s; read as 0 entries, once in CI).
    let pruner = oncely_sql::PgStore::connect_with(db.url(), &db.options())
        .await
        .unwrap();
    let report = prune(&Ops::from(&pruner), &options, &mut |_| {})
        .await
        .unwrap();
    pruner.pool().close().await;
    assert_eq!((report.deleted, report.batches), (3_000, 31), "{report:?}");
    let read = received_at_entries_read(&ops).await - before;
    eprintln!("{read} index entries read to prune {EXPIRED} ids in 30 batches under a pin");
    // Each batch reads its own 100 entries two or three times (the boundary's subquery and
    // query, the delete), the count at the start and the oldest-row lookup at the end at most
    // the 3,000 once each: at most about 5 × 3,000. A walk that started every batch from the
    // oldest entry would read 100 + 200 + … + 3,000 = 46,500 (so did this one, 49,562, while
    // the planner, on this never-analyzed table, sorted every remaining row for the boundary).
    assert!(
        (EXPIRED as i64..=5 * EXPIRED as i64).contains(&read),
        "{read} entries read for {EXPIRED} expired ids"
    );
    sqlx::raw_sql("ROLLBACK").execute(&mut pin).await.unwrap();
    assert_eq!(count(&ops, "1 = 1").await, 200);
}
