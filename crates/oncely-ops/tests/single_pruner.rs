//! Two pruners started together never run at once: each records every batch it runs, and the
//! combined record must show one pruner's batches strictly before the other's.

mod common;
use oncely_ops::Ops;
use oncely_ops::prune::{PruneOptions, PruneReport, prune};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const DAY: i64 = 86_400_000;

async fn two_pruners(ops: &Ops, wait: bool) -> (Vec<usize>, Vec<PruneReport>) {
    let log: Arc<Mutex<Vec<usize>>> = Arc::default();
    let start = Arc::new(tokio::sync::Barrier::new(2));
    let mut tasks = Vec::new();
    for who in 0..2 {
        let (ops, log, start) = (ops.clone(), log.clone(), start.clone());
        tasks.push(tokio::spawn(async move {
            let options = PruneOptions {
                batch_size: 50,
                pause: Duration::from_millis(5),
                wait_for_lock: wait,
                max_batches: Some(6),
                ..PruneOptions::default()
            };
            start.wait().await;
            prune(&ops, &options, &mut |_| log.lock().unwrap().push(who))
                .await
                .unwrap()
        }));
    }
    let mut reports = Vec::new();
    for t in tasks {
        reports.push(t.await.unwrap());
    }
    let log = log.lock().unwrap().clone();
    (log, reports)
}

/// The log has no interleaving: once the second pruner's batches start, the first's are over.
fn assert_not_interleaved(log: &[usize]) {
    let switches = log.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(switches <= 1, "two pruners ran at once: {log:?}");
}

async fn check(ops: &Ops) {
    // 600 expired rows for each phase: in the second, a pruner that finds the lease already
    // free again also runs and deletes its full 300 (with less left, it would delete less).
    common::fill(ops, "old", 1_200, 8 * DAY).await;
    // Waiting: both run, one after the other, 6 batches each.
    let (log, reports) = two_pruners(ops, true).await;
    assert_not_interleaved(&log);
    assert_eq!(log.len(), 12, "{log:?}");
    assert!(
        reports.iter().all(|r| r.ran && r.deleted == 300),
        "{reports:?}"
    );
    // Not waiting: whoever comes second while the first runs does nothing.
    let (log, reports) = two_pruners(ops, false).await;
    assert_not_interleaved(&log);
    let deleted: u64 = reports.iter().map(|r| r.deleted).sum();
    let ran = reports.iter().filter(|r| r.ran).count();
    assert!(ran >= 1);
    assert_eq!(deleted, 300 * ran as u64, "{reports:?}");
    assert!(reports.iter().all(|r| r.ran || r.deleted == 0));
}

#[tokio::test]
async fn sqlite_lease_serializes_pruners() {
    let dir = tempfile::tempdir().unwrap();
    let (_store, ops) = common::sqlite(&dir).await;
    check(&ops).await;
}

#[tokio::test]
async fn postgres_advisory_lock_serializes_pruners() {
    let Some((store, ops, _db)) =
        common::postgres("postgres_advisory_lock_serializes_pruners").await
    else {
        return;
    };
    store.migrate().await.unwrap();
    check(&ops).await;
}

#[tokio::test]
async fn mariadb_named_lock_serializes_pruners() {
    let Some((_store, ops, _db)) = common::mysql("mariadb_named_lock_serializes_pruners").await
    else {
        return;
    };
    check(&ops).await;
}

#[tokio::test]
async fn postgres_portable_lease_serializes_pruners() {
    let Some((store, _, db)) = common::postgres("postgres_portable_lease_serializes_pruners").await
    else {
        return;
    };
    store.migrate().await.unwrap();
    check(&common::portable(db.url(), db.tables()).await).await;
}

#[tokio::test]
async fn mariadb_portable_lease_serializes_pruners() {
    let Some((_, _, db)) = common::mysql("mariadb_portable_lease_serializes_pruners").await else {
        return;
    };
    check(&common::portable(db.url(), db.tables()).await).await;
}
