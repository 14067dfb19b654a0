//! Portable pruning (issue 16): by primary-key ranges, never `ctid`, forced with
//! portable mode forced at connect (`ConnectOptions::portable`) on PostgreSQL and MariaDB. Counts the rows before and after,
//! checks the batches go in key order (not physical order) and leave recent rows alone.

mod common;
use oncely_ops::Ops;
use oncely_ops::prune::{PruneOptions, prune};
use oncely_sql::clock::now_ms;
use oncely_sql::{Column, SqlTx};
use std::collections::BTreeSet;
use std::time::Duration;

const DAY: i64 = 86_400_000;
/// Rows: 3 consumers × 300 ids; every 4th is recent, the others 8 days old.
const ROWS: usize = 900;

fn old(i: usize) -> bool {
    !i.is_multiple_of(4)
}

fn key(i: usize) -> (String, String) {
    (format!("c{}", i % 3), format!("m{i:04}"))
}

/// Inserts the rows in descending key order, so that physical order is the reverse of key order.
async fn fill(ops: &Ops) {
    let now = now_ms();
    let inbox = ops.tables().inbox();
    let mut rows: Vec<usize> = (0..ROWS).collect();
    rows.sort_by_key(|&i| std::cmp::Reverse(key(i)));
    for chunk in rows.chunks(300) {
        let values: Vec<String> = chunk
            .iter()
            .map(|&i| {
                let (c, m) = key(i);
                let at = if old(i) { now - 8 * DAY } else { now - 1000 };
                format!("('{c}', '{m}', 'h', {at})")
            })
            .collect();
        let sql = format!(
            "INSERT INTO {inbox} (consumer, message_id, payload_hash, received_at) VALUES {}",
            values.join(", ")
        );
        ops.pool().clone().script(&sql).await.unwrap();
    }
}

async fn count(ops: &Ops, sql: String) -> i64 {
    let n = ops.pool().clone().fetch_i64(&sql, &[]).await.unwrap();
    n.unwrap_or(0)
}

async fn old_keys(ops: &Ops) -> BTreeSet<(String, String)> {
    let d = ops.dialect();
    let sql = format!(
        "SELECT {}, {} FROM {} WHERE received_at < {}",
        d.text("consumer"),
        d.text("message_id"),
        ops.tables().inbox(),
        now_ms() - DAY
    );
    let mut pool = ops.pool().clone();
    let rows = pool.fetch(&sql, &[], &[Column::Text, Column::Text]).await;
    let rows = rows.unwrap();
    rows.iter().map(|r| (r[0].text(), r[1].text())).collect()
}

async fn check(ops: &Ops) {
    fill(ops).await;
    let inbox = ops.tables().inbox();
    let expired = format!(
        "SELECT COUNT(*) FROM {inbox} WHERE received_at < {}",
        now_ms() - DAY
    );
    let total = format!("SELECT COUNT(*) FROM {inbox}");
    let old_count = (0..ROWS).filter(|&i| old(i)).count() as i64; // 675
    assert_eq!(count(ops, expired.clone()).await, old_count);
    assert_eq!(count(ops, total.clone()).await, ROWS as i64);

    // One batch of 40: exactly the 40 smallest expired keys go (key order, not physical).
    let mut expected: Vec<(String, String)> = (0..ROWS).filter(|&i| old(i)).map(key).collect();
    expected.sort();
    let one = PruneOptions {
        batch_size: 40,
        pause: Duration::ZERO,
        max_batches: Some(1),
        ..PruneOptions::default()
    };
    let r = prune(ops, &one, &mut |_| {}).await.unwrap();
    assert!(r.ran);
    assert_eq!((r.deleted, r.batches), (40, 1), "{r:?}");
    let left = old_keys(ops).await;
    let want: BTreeSet<_> = expected[40..].iter().cloned().collect();
    assert_eq!(
        left, want,
        "the first batch deleted the 40 smallest expired keys"
    );

    // The rest, 40 at a time: 635 = 15 full batches + 35.
    let rest = PruneOptions {
        max_batches: None,
        ..one
    };
    let mut seen = 0;
    let r = prune(ops, &rest, &mut |_| seen += 1).await.unwrap();
    assert_eq!((r.deleted, r.batches, seen), (635, 16, 16), "{r:?}");
    assert_eq!(r.expired_at_start, 635);
    assert_eq!(count(ops, expired).await, 0, "no expired row left");
    assert_eq!(
        count(ops, total).await,
        ROWS as i64 - old_count,
        "every recent row kept"
    );
    // The single-pruner lock was the lease, released.
    let leases = format!("SELECT COUNT(*) FROM {}", ops.tables().ops_leases());
    assert_eq!(count(ops, leases).await, 0);
    // Nothing left: one empty batch.
    let r = prune(ops, &rest, &mut |_| {}).await.unwrap();
    assert_eq!((r.deleted, r.batches), (0, 1), "{r:?}");
}

#[tokio::test]
async fn postgres_portable_prune_by_key_ranges() {
    let Some((store, _, db)) = common::postgres("postgres_portable_prune_by_key_ranges").await
    else {
        return;
    };
    store.migrate().await.unwrap();
    check(&common::portable(db.url(), db.tables()).await).await;
}

#[tokio::test]
async fn mariadb_portable_prune_by_key_ranges() {
    let Some((_, _, db)) = common::mysql("mariadb_portable_prune_by_key_ranges").await else {
        return;
    };
    check(&common::portable(db.url(), db.tables()).await).await;
}

#[tokio::test]
async fn sqlite_portable_prune_by_key_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = common::sqlite(&dir).await; // migrated
    let url = format!("sqlite:{}", dir.path().join("ops.db").display());
    check(&common::portable(&url, store.tables()).await).await;
}
