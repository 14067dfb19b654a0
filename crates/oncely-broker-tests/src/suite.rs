//! The source conformance checks every broker adapter runs against its real server.

use crate::check::Report;
use crate::faults::wait_for_rows;
use crate::ledger::Db;
use crate::runner::{RunOptions, RunSummary, run_until_idle};
use crate::workload::Workload;
use oncely_core::Source;
use oncely_testkit::chaos::{CrashPlan, Step};
use std::future::Future;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A fresh SQLite database in a temp dir (kept alive by the returned guard).
pub async fn sqlite_db() -> (Db, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite:{}", dir.path().join("oncely.db").display());
    (Db::open(&url, None).await.expect("sqlite store"), dir)
}

/// Publishes `workload` through `publish` (after `source` exists, so that subscriptions
/// and groups are in place), consumes it with crashes injected after the claim and after
/// the commit, and checks: every id applied exactly once (ledger rows == unique ids),
/// none lost, the bad ids dead-lettered as `bad_id`, redeliveries reported by the broker
/// (attempt ≥ 2) and the deliveries abandoned after the commit skipped as `Duplicate`.
/// `bad` messages without a usable id are published (1: missing id; 2: also one with a
/// control character in the id, for brokers that can carry it).
pub async fn conformance<Src, P, PF>(
    label: &str,
    source: Src,
    publish: P,
    bad: usize,
    idle: Duration,
) where
    Src: Source,
    P: FnOnce(Vec<oncely_core::RawEnvelope>) -> PF,
    PF: Future<Output = oncely_core::Result<()>>,
{
    let (db, _dir) = sqlite_db().await;
    let workload = Workload::new(label, 300, 0.2, bad, 7);
    publish(workload.messages.clone()).await.expect("publish");
    let mut options = RunOptions::new("conformance");
    options.idle_exit = idle;
    options.chaos = Some(CrashPlan::new(11, 0.1).only_at(&[Step::Claimed, Step::Committed]));
    let run = run_until_idle(&db, source, &options, CancellationToken::new())
        .await
        .expect("run");
    eprintln!("{label}: {:?}, max attempt {}", run.stats, run.max_attempt);
    let report = Report::read(&db, &workload).await.expect("report");
    report.assert_exact(label);
    assert!(run.crashes > 0, "{label}: the crash plan never fired");
    assert!(
        run.max_attempt >= 2,
        "{label}: abandoned deliveries were not redelivered with a higher delivery count"
    );
    assert!(
        run.stats.duplicates > 0,
        "{label}: no Duplicate outcomes although deliveries were abandoned after commit"
    );
}

/// Consumes `workload` while `cut` severs the connection twice mid-stream; checks
/// 0 double, 0 lost. Returns the run summary (its rate is the measured throughput).
pub async fn connection_loss<Src, C, CF>(
    label: &str,
    db: &Db,
    workload: &Workload,
    source: Src,
    mut cut: C,
    idle: Duration,
) -> RunSummary
where
    Src: Source,
    C: FnMut() -> CF,
    CF: Future<Output = usize>,
{
    let mut options = RunOptions::new("connloss");
    options.idle_exit = idle;
    let db2 = db.clone();
    let run = tokio::spawn(async move {
        run_until_idle(&db2, source, &options, CancellationToken::new()).await
    });
    let n = workload.unique.len() as i64;
    for at in [n / 4, n / 2] {
        wait_for_rows(db, at).await;
        let mut cut_count = 0;
        for _ in 0..50 {
            cut_count = cut().await;
            if cut_count > 0 {
                break;
            }
            // Not (re)connected yet: try again shortly.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        eprintln!("{label}: cut {cut_count} connection(s) at ≥{at} ledger rows");
        assert!(cut_count > 0, "{label}: nothing to cut");
    }
    let run = run.await.expect("join").expect("run");
    eprintln!("{label}: {:?}; {:.0} deliveries/s", run.stats, run.rate());
    Report::read(db, workload)
        .await
        .expect("report")
        .assert_exact(label);
    run
}
