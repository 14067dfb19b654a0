//! `oncely demo --source URL` through each real broker, via the binary: the demo publishes
//! the messages plus duplicates and conflicting copies, consumes them with crash injection,
//! and its checker reads the effects back from the database.
//!
//! A broker that does not answer fails the test under `CI` / `ONCELY_REQUIRE_SERVICES`, and
//! is reported as SKIPPED otherwise (`oncely_testkit::services`).

mod admin_support;

use admin_support::oncely;
use oncely_testkit::services;
use oncely_testkit::services::unique;
use serde_json::Value;

fn n(report: &Value, key: &str) -> i64 {
    report[key]
        .as_i64()
        .unwrap_or_else(|| panic!("report lacks {key}: {report}"))
}

/// Runs the demo through `source` and checks the report: 0 double, 0 lost, totals equal,
/// every conflict caught (by the consumer, or dropped by a broker that dedups itself).
fn broker_demo(name: &str, addr: &str, source: &str, messages: u32) {
    if !services::available_blocking(&format!("demo via {name}"), name, addr) {
        return;
    }
    let messages_arg = messages.to_string();
    let (code, stdout, stderr) = oncely(&[
        "demo",
        "--json",
        "--idle-exit",
        "5",
        "--seed",
        "11",
        "--messages",
        &messages_arg,
        "--source",
        source,
    ]);
    let r: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("demo via {name} printed no JSON report ({e}); stdout: {stdout}; stderr: {stderr}")
    });
    assert_eq!(code, 0, "demo via {name} failed: {r}");
    assert_eq!(n(&r, "messages"), i64::from(messages), "{r}");
    assert_eq!(n(&r, "double_effects"), 0, "{name}: {r}");
    assert_eq!(n(&r, "lost"), 0, "{name}: {r}");
    assert_eq!(
        n(&r, "expected_total"),
        n(&r, "actual_total"),
        "{name}: {r}"
    );
    assert!(n(&r, "conflicts_injected") > 0, "{name}: {r}");
    assert_eq!(
        n(&r, "conflicts_caught") + n(&r, "conflicts_dropped_by_broker"),
        n(&r, "conflicts_injected"),
        "{name}: {r}"
    );
    assert!(n(&r, "duplicates_skipped") > 0, "{name}: {r}");
    assert!(n(&r, "crashes") > 0, "{name}: no crash was injected: {r}");
    assert!(r["ok"].as_bool().unwrap_or(false), "{name}: {r}");
}

#[test]
fn demo_via_kafka() {
    let brokers =
        std::env::var("ONCELY_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".to_owned());
    let first = brokers.split(',').next().unwrap_or_default().to_owned();
    let url = format!("kafka://{brokers}/{}?partitions=4", unique("demo"));
    broker_demo("Kafka", &first, &url, 2000);
}

#[test]
fn demo_via_rabbitmq() {
    let url = format!(
        "amqp://guest:guest@127.0.0.1:5672/%2f?queue={}",
        unique("demo")
    );
    broker_demo("RabbitMQ", "127.0.0.1:5672", &url, 1000);
}

#[test]
fn demo_via_nats() {
    let name = unique("demo");
    let url = format!(
        "nats://127.0.0.1:4222?stream={}&subject={name}&ack_wait_ms=3000",
        name.to_uppercase()
    );
    broker_demo("NATS", "127.0.0.1:4222", &url, 1000);
}

/// Default options (no `reclaim_ms`): a crashed delivery is claimed again by the same
/// member at once, not after the 30 s reclaim idle time (which outlasts the idle exit).
#[test]
fn demo_via_redis() {
    let url = format!("redis://127.0.0.1:6379/?stream={}", unique("demo"));
    broker_demo("Redis", "127.0.0.1:6379", &url, 2000);
}

/// The machine's Mosquitto at its defaults (`max_queued_messages` 1000): the demo's
/// publisher is paced by the consumer, so nothing is dropped.
#[test]
fn demo_via_mqtt() {
    let name = unique("demo");
    let url = format!(
        "mqtt://127.0.0.1:1883?topic=oncely-demo/{name}&client_id={name}&session_expiry=600"
    );
    broker_demo("MQTT", "127.0.0.1:1883", &url, 2000);
}

/// 10,000 messages through the project's own Mosquitto (scripts/mosquitto.sh, port 18830),
/// started here unless it answers already.
#[test]
fn demo_via_mqtt_10k_test_owned_mosquitto() {
    let script = oncely_testkit::services::workspace_root()
        .join("scripts/mosquitto.sh")
        .display()
        .to_string();
    let addr = "127.0.0.1:18830";
    if services::probe_blocking(addr).is_err() {
        let started = std::process::Command::new("bash")
            .args([script.as_str(), "start"])
            .status()
            .is_ok_and(|s| s.success());
        assert!(started || !services::required(), "{script} start failed");
    }
    let name = unique("demo");
    let url = format!("mqtt://{addr}?topic=oncely-demo/{name}&client_id={name}&session_expiry=600");
    broker_demo("MQTT (test-owned)", addr, &url, 10_000);
}
