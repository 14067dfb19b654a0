//! `oncely webhook-demo` through the binary: signed senders of the three providers retrying
//! into a receiver that is SIGKILLed and restarted, on SQLite (inline) and PostgreSQL (the
//! GitHub source deferred). The demo judges itself; this test counts again from the
//! database it leaves: one ledger row per distinct event, as many events as the senders saw
//! accepted, the balances equal to the ledger, a conflict dead letter per changed body, no
//! forged id anywhere. A missing PostgreSQL fails under `CI` / `ONCELY_REQUIRE_SERVICES` and
//! is SKIPPED otherwise.

mod admin_support;

use oncely_sql::{AnyStore, ConnectOptions, Dialect, SqlTx, Tables};
use std::process::Command;

/// Runs the demo on `url` and returns its JSON report (and whether it exited 0).
fn demo(url: &str, schema: &str, extra: &[&str]) -> (bool, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_oncely"))
        .args(["webhook-demo", "--store", url, "--schema", schema, "--json"])
        .args(["--events", "60", "--kills", "3", "--concurrency", "8"])
        .args(extra)
        .output()
        .expect("run oncely webhook-demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "not a JSON report ({e}):\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.success(), report)
}

async fn scalar(store: &AnyStore, sql: &str) -> i64 {
    store
        .pool()
        .fetch_i64(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .unwrap_or(0)
}

/// The demo's database, counted by this test.
async fn recount(url: &str, schema: &str, report: &serde_json::Value) {
    let mut tables = Tables::default();
    if Dialect::from_url(url).unwrap().has_schemas() {
        tables = tables.with_schema(schema).unwrap();
    }
    let options = ConnectOptions {
        tables: tables.clone(),
        ..ConnectOptions::default()
    };
    let store = AnyStore::connect_with(url, &options).await.unwrap();
    // The demo's own tables, named as its ledger names them (no prefix).
    let demo_table = |t: &str| match tables.schema() {
        Some(schema) => format!("{schema}.{t}"),
        None => t.to_owned(),
    };
    let ledger = demo_table("demo_ledger");
    let rows = scalar(&store, &format!("SELECT COUNT(*) FROM {ledger}")).await;
    let distinct = scalar(
        &store,
        &format!("SELECT COUNT(DISTINCT message_id) FROM {ledger}"),
    )
    .await;
    let accepted = report["accepted"].as_i64().unwrap();
    assert_eq!(accepted, report["events"].as_i64().unwrap(), "{report}");
    assert_eq!(
        (rows - distinct, accepted - distinct),
        (0, 0),
        "0 double, 0 lost"
    );
    let sum_ledger = scalar(
        &store,
        &format!("SELECT CAST(SUM(amount) AS BIGINT) FROM {ledger}"),
    )
    .await;
    let balances = demo_table("demo_accounts");
    let sum_balances = scalar(
        &store,
        &format!("SELECT CAST(SUM(balance) AS BIGINT) FROM {balances}"),
    )
    .await;
    assert_eq!(sum_ledger, sum_balances, "balances equal the ledger");
    assert_eq!(sum_ledger, report["expected_total"].as_i64().unwrap());
    let letters = store.tables().dead_letters();
    let conflicts = scalar(
        &store,
        &format!("SELECT COUNT(*) FROM {letters} WHERE reason = 'conflict'"),
    )
    .await;
    assert_eq!(conflicts, report["conflicts_sent"].as_i64().unwrap());
    let id = store.dialect().text("message_id");
    for table in [ledger, store.tables().inbox(), letters] {
        let forged = format!("SELECT COUNT(*) FROM {table} WHERE {id} LIKE 'forged-%'");
        assert_eq!(scalar(&store, &forged).await, 0, "no forged id in {table}");
    }
    if let Some(schema) = store.tables().schema()
        && let Some(drop) = store.dialect().drop_schema_sql(schema)
    {
        let _ = store.pool().script(&drop).await;
    }
}

fn assert_passed(ok: bool, report: &serde_json::Value) {
    assert!(ok, "the demo failed its own checks: {report:#}");
    assert_eq!(report["kills"], 3, "{report}");
    assert!(report["forged_sent"].as_u64().unwrap() > 0, "{report}");
    assert!(report["conflicts_sent"].as_u64().unwrap() > 0, "{report}");
    let wire = &report["wire"];
    assert!(
        wire["connection_errors"].as_u64().unwrap() + wire["timeouts"].as_u64().unwrap() > 0,
        "the kills were felt by the senders: {report}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn webhook_demo_on_sqlite_survives_kills() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("webhooks.db").display());
    let (ok, report) = demo(&url, "unused", &[]);
    assert_passed(ok, &report);
    assert_eq!(report["mode"], "inline");
    recount(&url, "unused", &report).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn webhook_demo_on_postgres_with_a_deferred_source_survives_kills() {
    let test = "webhook_demo_on_postgres_with_a_deferred_source_survives_kills";
    let Some(t) = admin_support::Target::postgres(test).await else {
        return;
    };
    let schema = t.schema.as_deref().unwrap();
    let (ok, report) = demo(&t.url, schema, &[]);
    assert_passed(ok, &report);
    assert_eq!(report["mode"], "deferred");
    recount(&t.url, schema, &report).await;
}

/// The checker can fail: a server without the inbox applies retries and copies again, and
/// the demo says so (non-zero exit, double effects counted).
#[tokio::test(flavor = "multi_thread")]
async fn webhook_demo_catches_a_receiver_without_an_inbox() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("webhooks.db").display());
    let (ok, report) = demo(&url, "unused", &["--unsafe-without-inbox"]);
    assert!(
        !ok,
        "the demo passed a receiver without an inbox: {report:#}"
    );
    assert!(report["double_effects"].as_u64().unwrap() > 0, "{report:#}");
}
