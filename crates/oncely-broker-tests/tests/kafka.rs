//! Kafka against a real Kafka-compatible broker (tansu, started by
//! `scripts/kafka-broker.sh start`): the scenarios every broker runs (source suite, SIGKILL
//! crash; no connection cut, librdkafka reconnects on its own), and Kafka's own: exactly once
//! under crashes on three partitions, redelivery and contiguous commits, a two-consumer group
//! with a rebalance mid-stream.
//!
//! The SIGKILL crash with ids from offsets is in `tests/kafka_crash.rs`.

use oncely_broker_tests::check::Report;
use oncely_broker_tests::faults::wait_for_rows;
use oncely_broker_tests::fixture::Broker;
use oncely_broker_tests::kafka::{brokers, consume, url};
use oncely_broker_tests::ledger::sqlite_db;
use oncely_broker_tests::runner::{RunOptions, run_until_idle};
use oncely_broker_tests::services::unique;
use oncely_broker_tests::workload::Workload;
use oncely_core::{Delivery, RawEnvelope, Source};
use oncely_kafka::{KafkaOptions, KafkaSource, create_topic};
use oncely_testkit::chaos::{CrashPlan, Step};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

oncely_broker_tests::broker_scenarios!(Broker::Kafka => source_suite, sigkill_crash);

/// Three partitions (the source suite runs on one): 300 ids, about 20% published twice, one
/// record without the id header and one with a control character in the id, consumed with
/// crashes injected after the claim and after the commit. Checked in the database: every id
/// applied once, none lost, both bad records dead-lettered `bad_id`; abandoned records
/// redelivered with a higher attempt, the copies abandoned after the commit `Duplicate`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_three_partitions_exactly_once_under_crashes() {
    let test = "kafka_three_partitions_exactly_once_under_crashes";
    if !Broker::Kafka.up(test) {
        return;
    }
    let topic = unique("crashes3");
    create_topic(&brokers(), &topic, 3, &[])
        .await
        .expect("create topic");
    let url = format!("{}&group={topic}", url(&topic, 3, 3000));
    let source = oncely_kafka::connect_source(&url, "crashes3")
        .await
        .expect("connect");
    let (db, _dir) = sqlite_db().await;
    let workload = Workload::new("kafka", 300, 0.2, 2, 7);
    oncely_kafka::publish(&url, &workload.messages)
        .await
        .expect("publish");
    let mut options = RunOptions::new("crashes3");
    // The source ends itself after 3 s idle; this outer bound also covers the group join.
    options.idle_exit = Duration::from_secs(120);
    options.chaos = Some(CrashPlan::new(11, 0.1).only_at(&[Step::Claimed, Step::Committed]));
    let run = run_until_idle(&db, source, &options, CancellationToken::new())
        .await
        .expect("run");
    eprintln!("{test}: {:?}, max attempt {}", run.stats, run.max_attempt);
    Report::read(&db, &workload)
        .await
        .expect("report")
        .assert_exact(test);
    assert!(run.crashes > 0, "{test}: the crash plan never fired");
    assert!(
        run.max_attempt >= 2,
        "{test}: abandoned deliveries were not redelivered with a higher delivery count"
    );
    assert!(
        run.stats.duplicates > 0,
        "{test}: no Duplicate outcomes although deliveries were abandoned after commit"
    );
}

async fn next(source: &mut KafkaSource) -> Delivery {
    source
        .next()
        .await
        .expect("receive")
        .expect("a delivery before the idle exit")
}

fn id(d: &Delivery) -> String {
    d.message().display_id().unwrap_or_default()
}

fn options(topic: &str, group: &str) -> KafkaOptions {
    let mut o = KafkaOptions::from_url(&url(topic, 1, 5000), group).expect("options");
    o.revoke_wait = Duration::from_secs(1);
    o
}

async fn send(topic: &str, ids: &[&str]) {
    let messages: Vec<RawEnvelope> = ids.iter().map(|i| RawEnvelope::new(*i, "{}")).collect();
    oncely_kafka::publish(&format!("kafka://{}/{topic}", brokers()), &messages)
        .await
        .expect("publish");
}

/// A nack redelivers with attempt 2 (done records are not handed out
/// again); a later offset is not committed while an earlier one is in flight, so after a
/// crash with a record in flight, the next consumer starts at that record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_redelivery_and_contiguous_commits() {
    if !Broker::Kafka.up("kafka_redelivery_and_contiguous_commits") {
        return;
    }
    let topic = unique("redeliver");
    let group = topic.clone();
    create_topic(&brokers(), &topic, 1, &[])
        .await
        .expect("topic");
    send(&topic, &["k-0", "k-1", "k-2"]).await;

    let mut s = KafkaSource::connect(options(&topic, &group))
        .await
        .expect("connect");
    let d0 = next(&mut s).await;
    let d1 = next(&mut s).await;
    let d2 = next(&mut s).await;
    assert_eq!([id(&d0), id(&d1), id(&d2)], ["k-0", "k-1", "k-2"]);
    assert_eq!(d0.attempt(), 1);
    d2.discard().await.expect("ack");
    d1.discard().await.expect("ack");
    assert_eq!(
        s.commit_now().await.expect("commit"),
        0,
        "k-0 in flight blocks k-1, k-2"
    );
    d0.nack().await.expect("nack");
    let again = next(&mut s).await;
    assert_eq!((id(&again).as_str(), again.attempt()), ("k-0", 2));
    again.discard().await.expect("ack");
    assert_eq!(s.commit_now().await.expect("commit"), 1);
    assert!(
        s.next().await.expect("idle").is_none(),
        "k-1, k-2 are done: not handed out again"
    );
    drop(s);

    // A crash with k-3 in flight and k-4 done: nothing past k-3 may be committed.
    send(&topic, &["k-3", "k-4"]).await;
    let mut s = KafkaSource::connect(options(&topic, &group))
        .await
        .expect("connect");
    let d3 = next(&mut s).await;
    assert_eq!(id(&d3), "k-3", "offsets 0..=2 were committed");
    let d4 = next(&mut s).await;
    d4.discard().await.expect("ack");
    assert_eq!(s.commit_now().await.expect("commit"), 0);
    std::mem::forget(d3); // the process "dies" with k-3 unsettled
    drop(s);

    let mut s = KafkaSource::connect(options(&topic, &group))
        .await
        .expect("connect");
    let first = next(&mut s).await;
    let second = next(&mut s).await;
    assert_eq!([id(&first), id(&second)], ["k-3", "k-4"]);
    first.discard().await.expect("ack");
    second.discard().await.expect("ack");
}

/// Records without a usable `message-id` header are delivered with a bad id (and
/// dead-lettered by the runtime — covered by the source suite and the crash tests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_missing_id_header_is_delivered_for_dead_lettering() {
    if !Broker::Kafka.up("kafka_missing_id_header_is_delivered_for_dead_lettering") {
        return;
    }
    let topic = unique("noid");
    create_topic(&brokers(), &topic, 1, &[])
        .await
        .expect("topic");
    let no_id = RawEnvelope {
        id: None,
        payload: b"x".to_vec(),
        meta: Default::default(),
    };
    let bad_id = RawEnvelope {
        id: Some(b"\xff\xfe".to_vec()),
        payload: b"y".to_vec(),
        meta: Default::default(),
    };
    oncely_kafka::publish(&format!("kafka://{}/{topic}", brokers()), &[no_id, bad_id])
        .await
        .expect("publish");
    let mut s = KafkaSource::connect(options(&topic, &topic))
        .await
        .expect("connect");
    let a = next(&mut s).await;
    let b = next(&mut s).await;
    assert_eq!(a.message().id, None);
    assert_eq!(b.message().id.as_deref(), Some(&b"\xff\xfe"[..]));
    assert!(oncely_core::MessageId::parse_optional(b.message().id.as_deref()).is_err());
}

/// Two consumers in one group: the second joins mid-stream (while the producer is still
/// publishing), partitions are revoked from the first after its in-flight deliveries
/// finished and committed, and the checker finds 0 double, 0 lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_two_consumers_rebalance_mid_stream() {
    if !Broker::Kafka.up("kafka_two_consumers_rebalance_mid_stream") {
        return;
    }
    let topic = unique("rebal");
    let partitions = 4;
    create_topic(&brokers(), &topic, partitions, &[])
        .await
        .expect("topic");
    let workload = Workload::new(&topic, 6000, 0.2, 3, 5);
    let (db, _dir) = sqlite_db().await;
    let url = format!("{}&group={topic}", url(&topic, partitions, 8000));

    let publish_url = url.clone();
    let messages = workload.messages.clone();
    let publisher = tokio::spawn(async move {
        for chunk in messages.chunks(250) {
            oncely_kafka::publish(&publish_url, chunk)
                .await
                .expect("publish");
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
        Instant::now()
    });
    let started = Instant::now();
    let (db_a, url_a) = (db.clone(), url.clone());
    let a =
        tokio::spawn(
            async move { consume(&db_a, &url_a, "rebal", 8, CancellationToken::new()).await },
        );
    wait_for_rows(&db, workload.unique.len() as i64 / 5).await;
    let b_joined = Instant::now();
    eprintln!(
        "rebalance: second consumer starts at {:?}, {} ledger rows",
        b_joined - started,
        db.counts().await.expect("counts").0
    );
    let (db_b, url_b) = (db.clone(), url.clone());
    let b =
        tokio::spawn(
            async move { consume(&db_b, &url_b, "rebal", 8, CancellationToken::new()).await },
        );
    let published_at = publisher.await.expect("publisher");
    let (sa, ta) = a.await.expect("join a").expect("consumer a");
    let (sb, tb) = b.await.expect("join b").expect("consumer b");
    eprintln!(
        "rebalance: publishing ended {:?} after the second consumer started",
        published_at.saturating_duration_since(b_joined)
    );
    eprintln!(
        "rebalance: consumer a {sa:?}, {:.0} deliveries/s",
        ta.rate()
    );
    eprintln!(
        "rebalance: consumer b {sb:?}, {:.0} deliveries/s",
        tb.rate()
    );
    let report = Report::read(&db, &workload).await.expect("report");
    report.assert_exact("kafka two consumers with a rebalance");
    assert!(sa.received > 0, "the first consumer got nothing");
    assert!(
        sb.received > 0,
        "the second consumer never got a partition: no rebalance happened"
    );
}
