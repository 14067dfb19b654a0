//! The Kafka SIGKILL crash test: 10,000 messages (~20% duplicates, a few without a usable
//! id) on 4 partitions, consumed by `examples/kafka_consumer.rs` into one SQLite file; the
//! process is killed with SIGKILL at random moments while it makes progress, restarted,
//! and finally run until the topic is drained. The checker counts ledger rows and dead
//! letters against the workload: 0 double, 0 lost.

mod common;

use common::{brokers, up, url};
use oncely_broker_tests::check::Report;
use oncely_broker_tests::ledger::Db;
use oncely_broker_tests::services::unique;
use oncely_broker_tests::workload::Workload;
use oncely_kafka::create_topic;
use rand::Rng;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::Command;

/// `target/<profile>/examples/kafka_consumer`, built by `cargo test` (which builds the
/// package's examples) or `cargo build --examples`.
fn consumer_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let path = profile_dir
        .join("examples")
        .join(format!("kafka_consumer{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.exists(),
        "{} is missing: run `cargo test -p oncely-kafka` (it builds the examples) or \
         `cargo build -p oncely-kafka --examples` first",
        path.display()
    );
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_sigkill_crash_10k() {
    if !up("kafka_sigkill_crash_10k") {
        return;
    }
    let binary = consumer_binary();
    let topic = unique("crash");
    let partitions = 4;
    create_topic(&brokers(), &topic, partitions, &[])
        .await
        .expect("topic");
    let workload = Workload::new(&topic, 10_000, 0.2, 5, 42);
    let source = format!("{}&group={topic}", url(&topic, partitions, 4000));
    let started = Instant::now();
    oncely_kafka::publish(&source, &workload.messages)
        .await
        .expect("publish");
    let published = started.elapsed();
    eprintln!(
        "crash: published {} records ({} duplicates, {} bad) in {published:?} ({:.0}/s)",
        workload.messages.len(),
        workload.duplicates(),
        workload.bad.len(),
        workload.messages.len() as f64 / published.as_secs_f64()
    );
    let dir = tempfile::tempdir().expect("tmp");
    let store = format!("sqlite:{}", dir.path().join("crash.db").display());
    let db = Db::open(&store, None).await.expect("db");
    let args = [
        "--source",
        &source,
        "--consumer",
        "crash",
        "--store",
        &store,
    ];
    let mut rng = rand::rng();
    let mut kills = 0;
    for round in 1..=5 {
        let mut child = Command::new(&binary)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("consumer starts");
        let before = db.counts().await.expect("counts").0;
        // Kill only once the process makes progress (after its group join), at a random
        // moment: mid-batch, mid-commit, mid-rebalance.
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
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..1500))).await;
        child.start_kill().expect("SIGKILL");
        let _ = child.wait().await;
        kills += 1;
        let (rows, dead) = db.counts().await.expect("counts");
        eprintln!(
            "crash round {round}: SIGKILL at {:?}; ledger rows {rows}, dead letters {dead}",
            started.elapsed()
        );
    }
    let mut report = Report::read(&db, &workload).await.expect("report");
    for round in 1..=4 {
        let out = Command::new(&binary)
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
        report = Report::read(&db, &workload).await.expect("report");
        if report.complete() || report.double > 0 {
            break;
        }
    }
    eprintln!(
        "crash: {kills} SIGKILLs, total {:?} (publish included)",
        started.elapsed()
    );
    report.assert_exact("kafka SIGKILL crash test");
    assert!(kills >= 3, "the consumer was killed only {kills} times");
}
