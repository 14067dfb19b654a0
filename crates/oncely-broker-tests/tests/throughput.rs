//! Throughput per broker (informational, no timed assertion): 5,000 unique messages, no
//! faults, consumed into SQLite (synchronous=FULL) and into PostgreSQL, concurrency 8.
//! Still checks 0 double / 0 lost. Ignored by default: `cargo test -p oncely-broker-tests
//! --test throughput -- --ignored --nocapture`.

use oncely_broker_tests::brokers::{connect_source, publish};
use oncely_broker_tests::check::Report;
use oncely_broker_tests::faults::paced_publish;
use oncely_broker_tests::ledger::Db;
use oncely_broker_tests::ledger::postgres_db;
use oncely_broker_tests::ledger::sqlite_db;
use oncely_broker_tests::runner::{RunOptions, run_until_idle};
use oncely_broker_tests::services::{AMQP_URL, MQTT_URL, NATS_URL, REDIS_URL, available, unique};
use oncely_broker_tests::workload::Workload;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

async fn measure(label: &str, url: &str, db: &Db, n: usize) -> f64 {
    let workload = Workload::new(&unique("tp"), n, 0.0, 0, 5);
    let source = connect_source(url, "throughput").await.expect("connect");
    let mut options = RunOptions::new("throughput");
    options.idle_exit = Duration::from_secs(2);
    let run = {
        let db = db.clone();
        tokio::spawn(async move {
            run_until_idle(&db, source, &options, CancellationToken::new()).await
        })
    };
    if url.starts_with("mqtt") {
        paced_publish(url, &workload.messages, db, 400, 300)
            .await
            .expect("publish");
    } else {
        publish(url, &workload.messages).await.expect("publish");
    }
    let summary = run.await.expect("join").expect("run");
    Report::read(db, &workload)
        .await
        .expect("report")
        .assert_exact(label);
    eprintln!(
        "THROUGHPUT {label}: {} deliveries in {:?} = {:.0}/s",
        summary.stats.received,
        summary.busy,
        summary.rate()
    );
    summary.rate()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement"]
async fn throughput_per_broker() {
    let n = 5000;
    let brokers = [
        (
            "amqp",
            "127.0.0.1:5672",
            format!("{AMQP_URL}?queue={}", unique("tp")),
        ),
        ("nats", "127.0.0.1:4222", {
            let s = unique("tp");
            format!("{NATS_URL}?stream={}&subject={s}", s.to_uppercase())
        }),
        (
            "redis",
            "127.0.0.1:6379",
            format!("{REDIS_URL}/?stream={}", unique("tp")),
        ),
        ("mqtt", "127.0.0.1:1883", {
            let s = unique("tp");
            format!("{MQTT_URL}?topic=oncely-test/{s}&client_id={s}&session_expiry=600")
        }),
    ];
    for (name, addr, url) in brokers {
        if !available("throughput_per_broker", name, addr) {
            continue;
        }
        let (db, _dir) = sqlite_db().await;
        measure(&format!("{name} -> sqlite"), &url, &db, n).await;
        if let Some((pg, _place)) = postgres_db("throughput_per_broker").await {
            measure(&format!("{name} -> postgres"), &url, &pg, n).await;
        }
    }
}
