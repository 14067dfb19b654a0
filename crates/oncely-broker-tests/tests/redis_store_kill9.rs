//! kill -9 on the Redis store with a real broker and third-party producers (issue 28):
//! `scripts/python_producers.py` publishes with pika to RabbitMQ (and with redis-py to a
//! Redis stream) 6,000 messages with about 20 % exact duplicates, 5 % same-id copies with
//! another amount (conflicts) and one message without an id, at most 1,000 a second; while
//! it publishes, the consumer binary consumes with `--store redis://127.0.0.1:6379/13`
//! (ledger and balances in Redis, committed with the claim in one Lua script) and is
//! SIGKILLed 6 times mid-stream, then runs until idle.
//! The checker reads Redis alone and compares it with the producer's manifest: one ledger
//! entry per unique id (0 double, 0 lost), every conflict's other copy dead-lettered
//! `conflict`, the id-less message dead-lettered `bad_id`, and the sum of the balances equal
//! to the sum of the applied copies' amounts.
//!
//! Skipped (loudly) when RabbitMQ, Redis, Python or its client package is missing; a
//! failure instead under `CI` / `ONCELY_REQUIRE_SERVICES`.

use oncely_broker_tests::faults::crash_run;
use oncely_broker_tests::python::{python_has, script};
use oncely_broker_tests::redis_db::RedisDb;
use oncely_broker_tests::services::{AMQP_URL, REDIS_URL, available, unique};
use oncely_broker_tests::workload::Workload;
use std::process::Stdio;
use std::time::Duration;

/// The Redis database of the store (the machine's Redis; keys under a per-run hash tag,
/// deleted afterwards).
const STORE_URL: &str = "redis://127.0.0.1:6379/13";

async fn kill9(test: &str, broker: &str, source_url: &str, script_args: &[&str]) {
    let tag = unique("kill9");
    let db = RedisDb::open(STORE_URL, &tag).await.expect("Redis store");
    // Queues, groups and streams exist before anything is published.
    drop(
        oncely_broker_tests::brokers::connect_source(source_url, "kill9")
            .await
            .expect("source"),
    );
    let dir = tempfile::tempdir().expect("tmp");
    let manifest = dir.path().join("manifest.json");
    // The producer publishes while the consumer is killed: at most 1,000 messages/s, so the
    // kills (each once the consumer made progress) land while deliveries are in flight.
    let producer = tokio::process::Command::new("python3")
        .arg(script())
        .arg(broker)
        .args(script_args)
        .args([
            "--count",
            "6000",
            "--dup-rate",
            "0.2",
            "--conflict-rate",
            "0.05",
        ])
        .args([
            "--bad", "1", "--seed", "28", "--rate", "1000", "--prefix", &tag, "--out",
        ])
        .arg(&manifest)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 starts");
    // The manifest is written (atomically) before the first message is published.
    for _ in 0..300 {
        if manifest.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let workload = Workload::from_manifest(&manifest).expect("manifest");
    assert!(
        !workload.conflicts.is_empty(),
        "{test}: no conflicts published"
    );
    let args: Vec<String> = [
        "--source",
        source_url,
        "--consumer",
        "kill9",
        "--store",
        STORE_URL,
        "--schema",
        &tag,
        "--idle-exit",
        "3",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let run = crash_run(
        env!("CARGO_BIN_EXE_oncely-broker-consumer"),
        &args,
        &db,
        &workload,
        6,
    )
    .await;
    let out = producer.wait_with_output().await.expect("python3 runs");
    eprintln!(
        "{test}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = db.reset().await;
    assert!(out.status.success(), "{test}: the Python producer failed");
    eprintln!(
        "{test}: {} of 6 kills hit a running consumer; {} deliveries published",
        run.kills,
        workload.messages.len()
    );
    run.report.assert_exact(test);
    assert!(run.kills > 0, "{test}: no kill hit a running consumer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_kill9_python_pika_rabbitmq() {
    let test = "redis_store_kill9_python_pika_rabbitmq";
    if !available(test, "RabbitMQ", "127.0.0.1:5672")
        || !available(test, "Redis", "127.0.0.1:6379")
        || !python_has(test, "pika")
    {
        return;
    }
    let queue = unique("kill9");
    let url = format!("{AMQP_URL}?queue={queue}");
    kill9(test, "amqp", &url, &["--url", AMQP_URL, "--target", &queue]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_kill9_python_redis_streams() {
    let test = "redis_store_kill9_python_redis_streams";
    if !available(test, "Redis", "127.0.0.1:6379") || !python_has(test, "redis") {
        return;
    }
    let stream = unique("kill9");
    // Entries of a killed consumer are claimed again after 2 s idle (default 30 s).
    let url = format!("{REDIS_URL}/?stream={stream}&reclaim_ms=2000");
    kill9(
        test,
        "redis",
        &url,
        &["--url", REDIS_URL, "--target", &stream],
    )
    .await;
    let client = oncely_redis::redis::Client::open(REDIS_URL).expect("Redis URL");
    if let Ok(mut conn) = client.get_multiplexed_async_connection().await {
        let _: Result<i64, _> = oncely_redis::redis::cmd("DEL")
            .arg(&stream)
            .query_async(&mut conn)
            .await;
    }
}
