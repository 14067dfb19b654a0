//! Producers in another language: `scripts/python_producers.py` publishes with Python's
//! ordinary clients (pika, nats-py, redis, paho-mqtt), duplicates and an id-less message
//! included; the consumer binary consumes; the checker compares the database with the
//! script's manifest. Skipped (loudly) when Python or the client package is missing,
//! unless `CI`, `ONCELY_REQUIRE_SERVICES` or `ONCELY_REQUIRE_PYTHON` is set.

use oncely_broker_tests::check::Report;
use oncely_broker_tests::ledger::Db;
use oncely_broker_tests::python::{python_has, script};
use oncely_broker_tests::services::{AMQP_URL, MQTT_URL, NATS_URL, REDIS_URL, available, unique};
use oncely_broker_tests::workload::Workload;
use std::process::Command;

/// Creates the topology through the Rust source, runs the Python producer, consumes with
/// the consumer binary, checks the database against the manifest.
async fn roundtrip(test: &str, broker: &str, source_url: &str, script_args: &[&str]) {
    let dir = tempfile::tempdir().expect("tmp");
    let store = format!("sqlite:{}", dir.path().join("py.db").display());
    let db = Db::open(&store, None).await.expect("db");
    // Subscriptions, groups, streams and durable consumers exist before anything is published.
    drop(
        oncely_broker_tests::brokers::connect_source(source_url, "python")
            .await
            .expect("source"),
    );
    let manifest = dir.path().join("manifest.json");
    let out = Command::new("python3")
        .arg(script())
        .arg(broker)
        .args(script_args)
        .args(["--count", "300", "--dup-rate", "0.2", "--bad", "1"])
        .args(["--prefix", &unique("py"), "--out"])
        .arg(&manifest)
        .output()
        .expect("python3 runs");
    eprintln!(
        "{test}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{test}: the Python producer failed");
    let workload = Workload::from_manifest(&manifest).expect("manifest");
    let run = Command::new(env!("CARGO_BIN_EXE_oncely-broker-consumer"))
        .args([
            "--source",
            source_url,
            "--consumer",
            "python",
            "--store",
            &store,
        ])
        .args(["--idle-exit", "4"])
        .output()
        .expect("consumer runs");
    eprintln!(
        "{test}: consumer: {}",
        String::from_utf8_lossy(&run.stdout).trim()
    );
    assert!(run.status.success(), "{test}: consumer failed");
    Report::read(&db, &workload)
        .await
        .expect("report")
        .assert_exact(test);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_pika_to_amqp_source() {
    let test = "python_pika_to_amqp_source";
    if !available(test, "RabbitMQ", "127.0.0.1:5672") || !python_has(test, "pika") {
        return;
    }
    let queue = unique("py");
    let url = format!("{AMQP_URL}?queue={queue}");
    roundtrip(test, "amqp", &url, &["--url", AMQP_URL, "--target", &queue]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_nats_py_to_nats_source() {
    let test = "python_nats_py_to_nats_source";
    if !available(test, "NATS", "127.0.0.1:4222") || !python_has(test, "nats") {
        return;
    }
    let name = unique("py");
    let stream = name.to_uppercase();
    let url = format!("{NATS_URL}?stream={stream}&subject={name}&dup_window_ms=100");
    roundtrip(
        test,
        "nats",
        &url,
        &["--url", NATS_URL, "--target", &name, "--stream", &stream],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_redis_py_to_redis_source() {
    let test = "python_redis_py_to_redis_source";
    if !available(test, "Redis", "127.0.0.1:6379") || !python_has(test, "redis") {
        return;
    }
    let stream = unique("py");
    let url = format!("{REDIS_URL}/?stream={stream}");
    roundtrip(
        test,
        "redis",
        &url,
        &["--url", REDIS_URL, "--target", &stream],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_paho_mqtt5_to_mqtt_source() {
    let test = "python_paho_mqtt5_to_mqtt_source";
    if !available(test, "Mosquitto", "127.0.0.1:1883") || !python_has(test, "paho.mqtt") {
        return;
    }
    let name = unique("py");
    let topic = format!("oncely-test/{name}");
    let url = format!("{MQTT_URL}?topic={topic}&client_id={name}&session_expiry=600");
    roundtrip(test, "mqtt", &url, &["--url", MQTT_URL, "--target", &topic]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_paho_mqtt311_id_in_payload_to_mqtt_source() {
    let test = "python_paho_mqtt311_id_in_payload_to_mqtt_source";
    if !available(test, "Mosquitto", "127.0.0.1:1883") || !python_has(test, "paho.mqtt") {
        return;
    }
    let name = unique("py311");
    let topic = format!("oncely-test/{name}");
    let url = format!("{MQTT_URL}?topic={topic}&client_id={name}&session_expiry=600");
    roundtrip(
        test,
        "mqtt",
        &url,
        &["--url", MQTT_URL, "--target", &topic, "--mqtt-v311"],
    )
    .await;
}
