//! `oncely demo --store redis://…`: balances and ledger kept in Redis, claim and effect in one
//! Lua script; the demo's checker reads the ledger, balances, inbox and dead letters back
//! from Redis. Once with the in-process broker, once through RabbitMQ.

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

fn redis_demo(extra: &[&str]) -> Value {
    let tag = unique("demo");
    let mut args = vec![
        "demo",
        "--json",
        "--messages",
        "2000",
        "--seed",
        "5",
        "--store",
        "redis://127.0.0.1:6379/14",
        "--schema",
        &tag,
    ];
    args.extend_from_slice(extra);
    let (code, stdout, stderr) = oncely(&args);
    let r: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("demo printed no JSON report ({e}); stdout: {stdout}; stderr: {stderr}")
    });
    assert_eq!(code, 0, "demo failed: {r}; stderr: {stderr}");
    assert_eq!(n(&r, "messages"), 2000, "{r}");
    assert_eq!(n(&r, "double_effects"), 0, "{r}");
    assert_eq!(n(&r, "lost"), 0, "{r}");
    assert_eq!(n(&r, "expected_total"), n(&r, "actual_total"), "{r}");
    assert!(n(&r, "conflicts_injected") > 0, "{r}");
    assert_eq!(
        n(&r, "conflicts_caught"),
        n(&r, "conflicts_injected"),
        "{r}"
    );
    assert!(n(&r, "duplicates_skipped") > 0, "{r}");
    assert!(n(&r, "crashes") > 0, "no crash was injected: {r}");
    assert!(r["ok"].as_bool().unwrap_or(false), "{r}");
    r
}

#[test]
fn demo_on_the_redis_store() {
    if !services::available_blocking("demo on the Redis store", "Redis", "127.0.0.1:6379") {
        return;
    }
    redis_demo(&[]);
}

#[test]
fn demo_on_the_redis_store_through_rabbitmq() {
    if !services::available_blocking("demo on Redis via RabbitMQ", "Redis", "127.0.0.1:6379")
        || !services::available_blocking("demo on Redis via RabbitMQ", "RabbitMQ", "127.0.0.1:5672")
    {
        return;
    }
    let queue = unique("redis-store");
    let source = format!("amqp://guest:guest@127.0.0.1:5672/%2f?queue={queue}");
    redis_demo(&["--source", &source, "--idle-exit", "5"]);
}
