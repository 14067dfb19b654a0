//! Kafka throughput (informational, no timed assertion): 5,000 unique messages on 4
//! partitions, published first, then consumed with concurrency 8 into SQLite
//! (synchronous=FULL) and into PostgreSQL. Still checks 0 double / 0 lost. Ignored by
//! default: `cargo test --release -p oncely-kafka --test kafka_throughput -- --ignored --nocapture`.

use oncely_broker_tests::check::Report;
use oncely_broker_tests::fixture::Broker;
use oncely_broker_tests::kafka::{brokers, consume, url};
use oncely_broker_tests::ledger::Db;
use oncely_broker_tests::ledger::{postgres_db, sqlite_db};
use oncely_broker_tests::services::unique;
use oncely_broker_tests::workload::Workload;
use oncely_kafka::create_topic;
use tokio_util::sync::CancellationToken;

async fn measure(label: &str, db: &Db, n: usize) -> f64 {
    let topic = unique("tp");
    create_topic(&brokers(), &topic, 4, &[])
        .await
        .expect("topic");
    let workload = Workload::new(&topic, n, 0.0, 0, 5);
    let url = format!("{}&group={topic}", url(&topic, 4, 2000));
    oncely_kafka::publish(&url, &workload.messages)
        .await
        .expect("publish");
    let (stats, timing) = consume(db, &url, "throughput", 8, CancellationToken::new())
        .await
        .expect("consume");
    let report = Report::read(db, &workload).await.expect("report");
    report.assert_exact(&format!("kafka throughput into {label}"));
    eprintln!(
        "kafka → {label}: {} deliveries in {:?}: {:.0} messages/s",
        stats.received,
        timing.busy(),
        timing.rate()
    );
    timing.rate()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "informational; run with --release -- --ignored --nocapture"]
async fn kafka_throughput() {
    if !Broker::Kafka.up("kafka_throughput") {
        return;
    }
    let (db, _dir) = sqlite_db().await;
    let sqlite = measure("SQLite (FULL)", &db, 5000).await;
    let mut postgres = None;
    if let Some((db, _place)) = postgres_db("kafka_throughput").await {
        postgres = Some(measure("PostgreSQL", &db, 5000).await);
    }
    let postgres = postgres.map_or("skipped".to_owned(), |r| format!("{r:.0}/s"));
    eprintln!("kafka throughput: SQLite {sqlite:.0}/s, PostgreSQL {postgres}");
}
