//! The Kafka SIGKILL crash tests: records on 4 partitions consumed by
//! `oncely-kafka-consumer` (src/bin) into one SQLite file; the process is killed with SIGKILL at
//! random moments while it makes progress, restarted, and finally run until the topic is
//! drained. The checkers count ledger rows against what was published: 0 double, 0 lost.
//!
//! - ids from the `message-id` header: 10,000 messages, ~20% duplicates, 5 without a
//!   usable id;
//! - ids from the offset (`id=offset`): 5,000 records without any id header.

use oncely_broker_tests::check::Report;
use oncely_broker_tests::kafka::{brokers, up, url};
use oncely_broker_tests::ledger::Db;
use oncely_broker_tests::services::unique;
use oncely_broker_tests::workload::{Workload, payload};
use oncely_core::RawEnvelope;
use oncely_kafka::create_topic;
use oncely_sql::sqlx;
use rand::Rng;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::Command;

/// The consumer binary of this package (`src/bin/oncely-kafka-consumer.rs`), built by cargo
/// for this test.
fn consumer_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_oncely-kafka-consumer"))
}

/// Kills the consumer `rounds` times, each time once it has made progress (after its
/// group join) and at a random moment after that: mid-batch, mid-commit, mid-rebalance.
/// Returns the number of kills.
async fn kill_repeatedly(binary: &PathBuf, args: &[&str], db: &Db, rounds: u32) -> u32 {
    let started = Instant::now();
    let mut rng = rand::rng();
    let mut kills = 0;
    for round in 1..=rounds {
        let mut child = Command::new(binary)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("consumer starts");
        let before = db.counts().await.expect("counts").0;
        let exited = loop {
            tokio::select! {
                status = child.wait() => break Some(status),
                _ = tokio::time::sleep(Duration::from_millis(50)) => {
                    if db.counts().await.expect("counts").0 >= before + 300 {
                        break None;
                    }
                }
            }
        };
        if let Some(status) = exited {
            eprintln!("crash round {round}: consumer exited on its own ({status:?})");
            break;
        }
        // Short: with group commit a consumer applies thousands of records a second, and
        // each round must still find work to be killed in.
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..150))).await;
        child.start_kill().expect("SIGKILL");
        let _ = child.wait().await;
        kills += 1;
        let (rows, dead) = db.counts().await.expect("counts");
        eprintln!(
            "crash round {round}: SIGKILL at {:?}; ledger rows {rows}, dead letters {dead}",
            started.elapsed()
        );
    }
    kills
}

/// Runs the consumer to the end (it exits once idle), up to `max` times until `done`.
async fn clean_runs<F, Fut>(binary: &PathBuf, args: &[&str], max: u32, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for round in 1..=max {
        let out = Command::new(binary)
            .args(args)
            .stderr(Stdio::inherit())
            .output()
            .await
            .expect("consumer runs");
        assert!(out.status.success(), "consumer failed: {:?}", out.status);
        eprintln!(
            "clean run {round}: {}",
            String::from_utf8_lossy(&out.stdout).trim()
        );
        if done().await {
            break;
        }
    }
}

/// A topic with 4 partitions, and a SQLite database in a temporary directory.
async fn setup(prefix: &str) -> (String, tempfile::TempDir, String, Db) {
    let topic = unique(prefix);
    create_topic(&brokers(), &topic, 4, &[])
        .await
        .expect("topic");
    let dir = tempfile::tempdir().expect("tmp");
    let store = format!("sqlite:{}", dir.path().join("crash.db").display());
    let db = Db::open(&store, None).await.expect("db");
    (topic, dir, store, db)
}

async fn publish_timed(url: &str, messages: &[RawEnvelope]) {
    let started = Instant::now();
    oncely_kafka::publish(url, messages).await.expect("publish");
    let took = started.elapsed();
    eprintln!(
        "crash: published {} records in {took:?} ({:.0}/s)",
        messages.len(),
        messages.len() as f64 / took.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_sigkill_crash_10k() {
    if !up("kafka_sigkill_crash_10k") {
        return;
    }
    let binary = consumer_binary();
    let (topic, _dir, store, db) = setup("crash").await;
    let workload = Workload::new(&topic, 10_000, 0.2, 5, 42);
    let source = format!("{}&group={topic}", url(&topic, 4, 4000));
    let started = Instant::now();
    publish_timed(&source, &workload.messages).await;
    eprintln!(
        "crash: {} duplicates, {} bad",
        workload.duplicates(),
        workload.bad.len()
    );
    let args = [
        "--source",
        &source,
        "--consumer",
        "crash",
        "--store",
        &store,
    ];
    let kills = kill_repeatedly(&binary, &args, &db, 5).await;
    clean_runs(&binary, &args, 4, || async {
        let report = Report::read(&db, &workload).await.expect("report");
        report.complete() || report.double > 0
    })
    .await;
    eprintln!(
        "crash: {kills} SIGKILLs, total {:?} (publish included)",
        started.elapsed()
    );
    let report = Report::read(&db, &workload).await.expect("report");
    report.assert_exact("kafka SIGKILL crash test");
    assert!(kills >= 3, "the consumer was killed only {kills} times");
}

/// `(ledger rows, distinct ids, sum of amounts)`.
async fn ledger_totals(db: &Db) -> (i64, i64, i64) {
    let oncely_sql::AnyStore::Sqlite(s) = db.store() else {
        unreachable!("SQLite in this test")
    };
    sqlx::query_as(
        "SELECT COUNT(*), COUNT(DISTINCT message_id), COALESCE(SUM(amount), 0) FROM ledger",
    )
    .fetch_one(s.pool())
    .await
    .expect("ledger totals")
}

/// Records without any id: the source takes `TOPIC/PARTITION/OFFSET` as the id, so the
/// inbox records offsets in the effect's transaction. Each record's amount is distinct
/// (1..=N), so the ledger's sum shows a double or a lost record independently of the ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_sigkill_crash_offset_ids() {
    if !up("kafka_sigkill_crash_offset_ids") {
        return;
    }
    let binary = consumer_binary();
    let (topic, _dir, store, db) = setup("crashoff").await;
    let n: i64 = 5_000;
    let messages: Vec<RawEnvelope> = (1..=n)
        .map(|i| RawEnvelope {
            id: None,
            payload: payload(&format!("acct-{}", i % 50), i),
            meta: Default::default(),
        })
        .collect();
    let source = format!("{}&group={topic}&id=offset", url(&topic, 4, 4000));
    publish_timed(&source, &messages).await;
    let args = [
        "--source",
        &source,
        "--consumer",
        "crashoff",
        "--store",
        &store,
    ];
    let kills = kill_repeatedly(&binary, &args, &db, 3).await;
    clean_runs(&binary, &args, 4, || async {
        ledger_totals(&db).await.0 >= n
    })
    .await;
    let (rows, ids, sum) = ledger_totals(&db).await;
    let expected_sum = n * (n + 1) / 2;
    eprintln!(
        "kafka offset ids: {kills} SIGKILLs; ledger rows {rows}, distinct ids {ids}, sum {sum} (expected {n} rows, sum {expected_sum})"
    );
    assert_eq!(rows, ids, "an offset was applied twice");
    assert_eq!((rows, sum), (n, expected_sum), "double or lost records");
    assert!(kills >= 2, "the consumer was killed only {kills} times");
}
