//! MQTT (Mosquitto): connection loss, SIGKILL crash test — against the real server. The source
//! conformance suite runs in `source_suite.rs`.
//!
//! Mosquitto keeps at most `max_queued_messages` (default 1000) unacked QoS 1 messages per
//! client and drops the rest, so the larger tests publish paced: on the in-process source's
//! PUBACK count (`oncely_mqtt::publish_paced`), or, for a consumer in another process, a
//! chunk only once the database has caught up (`paced_publish`).

use oncely_broker_tests::check::Report;
use oncely_broker_tests::faults::{connection_loss, crash_loop, paced_publish};
use oncely_broker_tests::ledger::{Db, sqlite_db};
use oncely_broker_tests::runner::{RunOptions, run_until_idle};
use oncely_broker_tests::services::{MQTT_URL, available, unique};
use oncely_broker_tests::workload::Workload;
use oncely_testkit::chaos::CrashPlan;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn up(test: &str) -> bool {
    available(test, "Mosquitto", "127.0.0.1:1883")
}

fn url(name: &str) -> String {
    format!("{MQTT_URL}?topic=oncely-test/{name}&client_id={name}&session_expiry=600")
}

/// Publishing pace for a consumer in another process (the crash test): chunks of this many
/// messages, each only once the database is at most `PACE_BACKLOG` unique ids behind. Mosquitto drops QoS 1 messages queued for a client beyond
/// `max_queued_messages` (1000 by default; "Outgoing messages are being dropped" in its log),
/// and while a connection is cut or a consumer restarts, the in-flight messages whose acks
/// were lost are queued again on top of the backlog. 400/300 let that pass 1000 once in CI.
const PACE_CHUNK: usize = 200;
const PACE_BACKLOG: i64 = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_connection_dropped_mid_stream() {
    if !up("mqtt_connection_dropped_mid_stream") {
        return;
    }
    let name = unique("connloss");
    let url = url(&name);
    let workload = Workload::new(&name, 3000, 0.2, 1, 3);
    let source = oncely_mqtt::connect_source(&url, "connloss")
        .await
        .expect("connect");
    let handle = source.reconnect_handle();
    let (db, _dir) = sqlite_db().await;
    // Paced on the in-process source's PUBACKs (no chunks needed).
    let publisher = {
        let (url, messages, acked) = (url.clone(), workload.messages.clone(), source.acked());
        tokio::spawn(async move {
            oncely_mqtt::publish_paced(&url, &messages, &acked, oncely_mqtt::PACING_WINDOW).await
        })
    };
    connection_loss(
        "mqtt connection loss",
        &db,
        &workload,
        source,
        || {
            handle.reconnect();
            async { 1 }
        },
        Duration::from_secs(5),
    )
    .await;
    publisher.await.expect("join").expect("publish");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_sigkill_crash_10k() {
    if !up("mqtt_sigkill_crash_10k") {
        return;
    }
    let name = unique("crash");
    let url = url(&name);
    let workload = Workload::new(&name, 10_000, 0.2, 1, 42);
    // Create the persistent session (and its subscription) before anything is published.
    drop(
        oncely_mqtt::connect_source(&url, "crash")
            .await
            .expect("session"),
    );
    let dir = tempfile::tempdir().expect("tmp");
    let store = format!("sqlite:{}", dir.path().join("crash.db").display());
    let db = Db::open(&store, None).await.expect("db");
    let publisher = {
        let (url, db, messages) = (url.clone(), db.clone(), workload.messages.clone());
        tokio::spawn(
            async move { paced_publish(&url, &messages, &db, PACE_CHUNK, PACE_BACKLOG).await },
        )
    };
    let args: Vec<String> = [
        "--source",
        &url,
        "--consumer",
        "crash",
        "--store",
        &store,
        "--idle-exit",
        "5",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (report, _) = crash_loop(
        env!("CARGO_BIN_EXE_oncely-broker-consumer"),
        &args,
        &db,
        &workload,
        6,
    )
    .await;
    publisher.await.expect("join").expect("publish");
    report.assert_exact("mqtt SIGKILL crash test");
}

/// A handed-back delivery (here: crashes at every step, about 1 in 5 deliveries) is held
/// and retried in-process: no reconnect, so the broker does not redeliver the whole window
/// in flight. Deliveries stay within 1.5 per published copy (a reconnect per nack gave over
/// 100 per message), and the paced publisher keeps Mosquitto's default queue limit (1000)
/// from dropping anything at 3,000 messages published while the consumer runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_nacks_are_retried_in_process_and_publishing_is_paced() {
    if !up("mqtt_nacks_are_retried_in_process_and_publishing_is_paced") {
        return;
    }
    let name = unique("nack");
    let url = url(&name);
    let workload = Workload::new(&name, 3000, 0.2, 1, 9);
    let source = oncely_mqtt::connect_source(&url, "nack")
        .await
        .expect("connect");
    let (received, acked) = (source.received(), source.acked());
    let publisher = {
        let (url, messages) = (url.clone(), workload.messages.clone());
        tokio::spawn(async move {
            oncely_mqtt::publish_paced(&url, &messages, &acked, oncely_mqtt::PACING_WINDOW).await
        })
    };
    let (db, _dir) = sqlite_db().await;
    let mut options = RunOptions::new("nack");
    options.idle_exit = Duration::from_secs(4);
    options.chaos = Some(CrashPlan::new(5, 0.05));
    // One delivery per transaction: the test counts deliveries per copy to show that a
    // handed-back publish is retried alone. Under group commit a crash hands back its whole
    // group, which inflates that count for a reason that is not MQTT's.
    options.group_commit = 1;
    let run = run_until_idle(&db, source, &options, CancellationToken::new())
        .await
        .expect("run");
    publisher.await.expect("join").expect("publish");
    let copies = workload.messages.len() as u64;
    eprintln!(
        "mqtt nacks: {copies} copies, {} deliveries, broker sent {}, {:?}",
        run.stats.received,
        received.get(),
        run.stats
    );
    Report::read(&db, &workload)
        .await
        .expect("report")
        .assert_exact("mqtt nacks");
    assert!(
        run.crashes > 50,
        "too few crashes: {} ({:?})",
        run.crashes,
        run.stats
    );
    assert!(
        run.stats.received * 2 <= copies * 3,
        "{} deliveries for {copies} copies: handed-back deliveries were redelivered wholesale",
        run.stats.received
    );
    assert!(
        received.get() <= copies + 20,
        "the broker sent {} publishes for {copies} copies",
        received.get()
    );
}
