//! The demo end to end, through the real binary: its checker reads the database back, so
//! these tests assert on independently counted effects.

use oncely_testkit::services;
use serde_json::Value;
use std::process::Command;

fn demo(args: &[&str]) -> (i32, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_oncely"))
        .arg("demo")
        .arg("--json")
        .args(args)
        .output()
        .expect("run oncely demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "demo printed no JSON report ({e}); stdout: {stdout}; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), report)
}

fn n(report: &Value, key: &str) -> i64 {
    report[key]
        .as_i64()
        .unwrap_or_else(|| panic!("report lacks {key}: {report}"))
}

fn assert_exactly_once(code: i32, r: &Value) {
    assert_eq!(code, 0, "demo failed: {r}");
    assert_eq!(n(r, "double_effects"), 0, "{r}");
    assert_eq!(n(r, "lost"), 0, "{r}");
    assert_eq!(n(r, "expected_total"), n(r, "actual_total"), "{r}");
    assert_eq!(n(r, "conflicts_caught"), n(r, "conflicts_injected"), "{r}");
    assert!(
        n(r, "conflicts_injected") > 0,
        "no conflict was injected: {r}"
    );
    assert!(
        n(r, "duplicates_skipped") > 0,
        "no duplicate was skipped: {r}"
    );
    assert!(n(r, "crashes") > 0, "no crash was injected: {r}");
    assert!(n(r, "deliveries") > n(r, "messages"), "no redelivery: {r}");
    assert!(r["ok"].as_bool().unwrap());
}

#[test]
fn demo_on_sqlite_applies_each_message_once() {
    let (code, r) = demo(&["--messages", "2000", "--seed", "7"]);
    assert_exactly_once(code, &r);
    assert_eq!(n(&r, "messages"), 2000);
}

/// Issue 27: the reset of the second run dropped an old table name while the migration ledger
/// stayed, so migrations were skipped and the run hung, holding every claim. Each run must
/// start from a clean slate on the same file and pass.
#[test]
fn the_demo_twice_on_one_sqlite_file_passes_both_times() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("x.db").display());
    for run in 1..=2 {
        let started = std::time::Instant::now();
        let (code, r) = demo(&["--messages", "1000", "--seed", "11", "--store", &store]);
        assert_exactly_once(code, &r);
        assert_eq!(n(&r, "messages"), 1000, "run {run}: {r}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "run {run} took {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn unsafe_ack_before_commit_is_caught_by_the_checker() {
    let (code, r) = demo(&[
        "--messages",
        "1500",
        "--seed",
        "7",
        "--unsafe-ack-before-commit",
    ]);
    assert_eq!(code, 1, "the broken contract must fail the run: {r}");
    assert!(
        n(&r, "lost") > 0,
        "ack-before-commit with crashes must lose messages: {r}"
    );
    assert!(!r["ok"].as_bool().unwrap());
}

/// One worker, one delivery per transaction: every choice comes from the seed. (With group
/// commit, what a group holds depends on what was ready when it started, which is timing.)
#[test]
fn the_same_seed_reproduces_a_single_worker_run() {
    let strip = |mut v: Value| {
        for k in ["messages_per_sec", "elapsed_secs", "store"] {
            v.as_object_mut().unwrap().remove(k);
        }
        v
    };
    let args = [
        "--messages",
        "800",
        "--seed",
        "3",
        "--workers",
        "1",
        "--group-commit",
        "1",
    ];
    let (_, a) = demo(&args);
    let (_, b) = demo(&args);
    assert_eq!(strip(a), strip(b));
}

/// The demo on a server ([`services`]' rule: SKIPPED when it does not answer, a failure
/// under CI).
fn server_demo(test: &str, server: &str, url: &str, schema: &str) {
    if !services::available_blocking(test, server, url) {
        return;
    }
    let (code, r) = demo(&["--messages", "2000", "--store", url, "--schema", schema]);
    assert_exactly_once(code, &r);
}

#[test]
fn demo_on_postgres_applies_each_message_once() {
    server_demo(
        "demo_on_postgres_applies_each_message_once",
        "PostgreSQL",
        &services::pg_url(),
        "oncely_demo_test_pg",
    );
}

/// Through PgBouncer in transaction pooling mode with the plain URL (the pooler is found at
/// connect), one message at a time and in groups: 10,000 messages each, 0 double, 0 lost.
#[test]
fn demo_through_pgbouncer_applies_each_message_once() {
    let (test, url) = (
        "demo_through_pgbouncer_applies_each_message_once",
        services::pgbouncer_url(),
    );
    if !services::available_blocking(test, "PgBouncer (scripts/pgbouncer.sh start)", &url) {
        return;
    }
    for group in ["1", "32"] {
        let schema = format!("oncely_demo_bouncer_g{group}");
        let args = [
            "--messages",
            "10000",
            "--group-commit",
            group,
            "--store",
            &url,
            "--schema",
            &schema,
        ];
        let (code, r) = demo(&args);
        assert_exactly_once(code, &r);
    }
}

#[test]
fn demo_on_mariadb_applies_each_message_once() {
    server_demo(
        "demo_on_mariadb_applies_each_message_once",
        "MariaDB",
        &services::mysql_url(),
        "oncely_demo_test_my",
    );
}
