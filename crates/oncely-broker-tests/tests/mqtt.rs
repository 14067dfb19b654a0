//! MQTT (Mosquitto) against the real server: the scenarios every broker runs (source suite,
//! connection dropped, SIGKILL crash), and nacks retried in-process under paced publishing.
//!
//! Mosquitto keeps at most `max_queued_messages` (default 1000) unacked QoS 1 messages per
//! client and drops the rest, so the larger tests publish paced: on the in-process source's
//! PUBACK count (`oncely_mqtt::publish_paced`), or on the database catching up (the fixture's
//! `Broker::publish`).

use oncely_broker_tests::check::Report;
use oncely_broker_tests::fixture::{Broker, Destination};
use oncely_broker_tests::ledger::sqlite_db;
use oncely_broker_tests::runner::{RunOptions, run_until_idle};
use oncely_broker_tests::workload::Workload;
use oncely_testkit::chaos::CrashPlan;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

oncely_broker_tests::broker_scenarios!(Broker::Mosquitto => source_suite, connection_loss, sigkill_crash);

/// A handed-back delivery (here: crashes at every step, about 1 in 5 deliveries) is held
/// and retried in-process: no reconnect, so the broker does not redeliver the whole window
/// in flight. Deliveries stay within 1.5 per published copy (a reconnect per nack gave over
/// 100 per message), and the paced publisher keeps Mosquitto's default queue limit (1000)
/// from dropping anything at 3,000 messages published while the consumer runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_nacks_are_retried_in_process_and_publishing_is_paced() {
    if !Broker::Mosquitto.up("mqtt_nacks_are_retried_in_process_and_publishing_is_paced") {
        return;
    }
    let Destination { name, url } = Broker::Mosquitto
        .destination("nack")
        .await
        .expect("destination");
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
