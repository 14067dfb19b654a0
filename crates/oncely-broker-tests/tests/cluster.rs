//! Node loss in real clusters (`bash scripts/cluster.sh start galera|nats`):
//!
//! - Galera: three consumer processes share one RabbitMQ queue, each with a multi-host store
//!   URL starting at a different node; the Galera node of the first process is SIGKILLed mid-run
//!   and that process fails over to a surviving node.
//! - NATS: a stream with 3 replicas on the 3-node cluster; the durable consumer's leader is
//!   placed on the stream's leader, and that server is SIGKILLed mid-run while two consumer
//!   processes (connected to the two other servers) consume into PostgreSQL.
//!
//! Both end with 0 double, 0 lost, counted in the database's own ledger rows; the killed node
//! is restarted afterwards and rejoins.

use oncely_broker_tests::check::Report;
use oncely_broker_tests::ledger::Db;
use oncely_broker_tests::ledger::postgres_db;
use oncely_broker_tests::procs;
use oncely_broker_tests::services::{AMQP_URL, PG_URL, available, unique};
use oncely_broker_tests::workload::Workload;
use oncely_testkit::cluster::{self, galera_urls, host_port, nats_urls};
use std::time::{Duration, Instant};
use tokio::process::Child;

const CONSUMER: &str = env!("CARGO_BIN_EXE_oncely-broker-consumer");

fn spawn(args: &[String]) -> Child {
    procs::spawn(CONSUMER, args)
}

async fn finish(child: Child, who: &str) {
    procs::finish(child, who).await;
}

/// A consumer process's arguments. The idle exit (30 s) is longer than a cluster's pause after
/// a node loss (Galera evicts a dead node after about 6 s, commits wait meanwhile; a NATS pull
/// stream notices a lost consumer leader after two missed 1 s heartbeats, then waits for the
/// new leader), so no process takes the pause for the end.
fn args(source: &str, consumer: &str, store: &str, schema: &str) -> Vec<String> {
    procs::consumer_args(source, consumer, store, Some(schema), 30)
}

/// Waits until the ledger holds at least `rows` rows; returns how long that took.
async fn until_rows(db: &Db, rows: i64, limit: Duration) -> Duration {
    let start = Instant::now();
    loop {
        if db.counts().await.map(|(n, _)| n).unwrap_or(0) >= rows {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "the ledger did not reach {rows} rows within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every consumer finished; a drain run picks up anything still in flight at idle exit.
async fn report(db: &Db, workload: &Workload, args: &[String], what: &str) -> Report {
    let mut report = Report::read(db, workload).await.expect("report");
    if !report.complete() && report.double == 0 {
        finish(spawn(args), "drain").await;
        report = Report::read(db, workload).await.expect("report");
    }
    report.assert_exact(what);
    report
}

/// The multi-host URL of the Galera nodes, starting at node `first` (0-based).
fn galera_url_from(first: usize) -> String {
    let nodes = galera_urls();
    let hosts: Vec<String> = (0..nodes.len())
        .map(|i| host_port(&nodes[(first + i) % nodes.len()]))
        .collect();
    format!("mysql://root@{}/test", hosts.join(","))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn galera_node_killed_under_three_consumer_processes() {
    let test = "galera_node_killed_under_three_consumer_processes";
    if !available(test, "RabbitMQ", "127.0.0.1:5672")
        || !cluster::available(test, "galera", &galera_urls()).await
    {
        return;
    }
    let queue = unique("galera");
    let schema = unique("t_galera");
    let source = format!("{AMQP_URL}?queue={queue}");
    let workload = Workload::new(&queue, 20_000, 0.2, 3, 16);
    // The checker reads through node 2, which stays up.
    let db = Db::open(&galera_url_from(1), Some(&schema))
        .await
        .expect("galera");
    oncely_amqp::publish(&source, &workload.messages)
        .await
        .expect("publish");
    let started = Instant::now();
    let procs: Vec<Vec<String>> = (0..3)
        .map(|first| args(&source, "galera", &galera_url_from(first), &schema))
        .collect();
    let children: Vec<Child> = procs.iter().map(|a| spawn(a)).collect();
    until_rows(&db, 5_000, Duration::from_secs(120)).await;
    assert!(
        cluster::script(&["kill", "galera", "1"]),
        "killing Galera node 1"
    );
    let (at_kill, _) = db.counts().await.expect("counts");
    let resumed = until_rows(&db, at_kill + 1_000, Duration::from_secs(120)).await;
    eprintln!(
        "Galera node 1 SIGKILLed at {at_kill} ledger rows; 1,000 more rows within {resumed:?}"
    );
    for (i, child) in children.into_iter().enumerate() {
        finish(child, &format!("consumer {}", i + 1)).await;
    }
    let elapsed = started.elapsed();
    let r = report(
        &db,
        &workload,
        &procs[1],
        "Galera node loss (3 processes, RabbitMQ)",
    )
    .await;
    eprintln!(
        "{} messages ({} unique) in {elapsed:?} including the 20 s idle exit",
        r.published, r.unique
    );
    assert!(cluster::script(&["start", "galera"]), "node 1 rejoins");
    let _ = db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_r3_stream_leader_killed_mid_run() {
    let test = "nats_r3_stream_leader_killed_mid_run";
    let nodes = nats_urls();
    if !available(test, "PostgreSQL", "127.0.0.1:5432")
        || !cluster::available(test, "nats", &nodes).await
    {
        return;
    }
    let stream = unique("R3").to_uppercase();
    let subject = stream.to_lowercase();
    let source = format!(
        "{}?stream={stream}&subject={subject}&replicas=3",
        nodes.join(",")
    );
    let Some((db, place)) = postgres_db(test).await else {
        return;
    };
    let schema = place.schema().expect("a schema").to_owned();
    // One bad message: a NATS header cannot carry the control character of the second kind.
    let workload = Workload::new(&subject, 20_000, 0.2, 1, 17);
    oncely_nats::publish(&source, &workload.messages)
        .await
        .expect("publish");

    let servers: Vec<async_nats::ServerAddr> = nodes.iter().map(|n| n.parse().unwrap()).collect();
    let client = async_nats::connect(servers).await.expect("nats");
    let js = async_nats::jetstream::new(client);
    let mut info = js.get_stream(&stream).await.expect("stream");
    let info = info.info().await.expect("stream info");
    assert_eq!(info.config.num_replicas, 3, "the stream is replicated");
    // The durable consumer exists before the processes start (they find it by name), so its
    // leader can be placed on the stream's leader: the worst server to lose, as the pull
    // requests waiting there die with it. The processes talk to the two other servers only,
    // so no reconnect tells their clients that anything happened.
    let durable = oncely_nats::durable_name("r3");
    js.get_stream(&stream)
        .await
        .expect("stream")
        .get_or_create_consumer(
            &durable,
            async_nats::jetstream::consumer::pull::Config {
                durable_name: Some(durable.clone()),
                ack_policy: async_nats::jetstream::consumer::AckPolicy::Explicit,
                filter_subject: subject.clone(),
                ..Default::default()
            },
        )
        .await
        .expect("durable consumer");
    let leader = colocate_leaders(&js, &stream, &durable).await;
    let node = leader.trim_start_matches('n').to_owned();
    let port = format!(":{}", 14221 + node.parse::<u16>().expect("node number"));
    let survivors: Vec<&str> = nodes
        .iter()
        .filter(|n| !n.ends_with(&port))
        .map(String::as_str)
        .collect();
    let consumer_source = format!(
        "{}?stream={stream}&subject={subject}&replicas=3",
        survivors.join(",")
    );
    let procs: Vec<Vec<String>> = (0..2)
        .map(|_| args(&consumer_source, "r3", PG_URL, &schema))
        .collect();
    let children: Vec<Child> = procs.iter().map(|a| spawn(a)).collect();
    until_rows(&db, 5_000, Duration::from_secs(120)).await;
    assert!(
        cluster::script(&["kill", "nats", &node]),
        "killing the stream leader {leader}"
    );
    let (at_kill, _) = db.counts().await.expect("counts");
    let resumed = until_rows(&db, at_kill + 1_000, Duration::from_secs(120)).await;
    eprintln!(
        "stream leader {leader} SIGKILLed at {at_kill} ledger rows; 1,000 more rows within {resumed:?}"
    );
    for (i, child) in children.into_iter().enumerate() {
        finish(child, &format!("consumer {}", i + 1)).await;
    }
    report(&db, &workload, &procs[0], "NATS R3 stream leader loss").await;
    assert!(
        cluster::script(&["start", "nats"]),
        "the killed server rejoins"
    );
    let _ = js.delete_stream(&stream).await;
}

/// Steps the stream's leader down until the durable consumer's leader and the stream's are
/// the same server (the worst node to lose); returns that server's name (`n1`..`n3`).
async fn colocate_leaders(
    js: &async_nats::jetstream::Context,
    stream: &str,
    durable: &str,
) -> String {
    use async_nats::jetstream::consumer::pull;
    let leaders = || async {
        let mut s = js.get_stream(stream).await.expect("stream");
        let sl = s.info().await.expect("stream info").cluster.clone();
        let mut c = s
            .get_consumer::<pull::Config>(durable)
            .await
            .expect("durable consumer");
        let cl = c.info().await.expect("consumer info").cluster.clone();
        (
            sl.and_then(|c| c.leader).unwrap_or_default(),
            cl.and_then(|c| c.leader).unwrap_or_default(),
        )
    };
    for attempt in 0..20 {
        let (stream_leader, consumer_leader) = leaders().await;
        if !stream_leader.is_empty() && stream_leader == consumer_leader {
            return stream_leader;
        }
        let stepdown = if attempt % 2 == 0 {
            format!("STREAM.LEADER.STEPDOWN.{stream}")
        } else {
            format!("CONSUMER.LEADER.STEPDOWN.{stream}.{durable}")
        };
        let answer: Result<serde_json::Value, _> =
            js.request(stepdown.clone(), &serde_json::json!({})).await;
        eprintln!("leaders {stream_leader:?}/{consumer_leader:?}; {stepdown}: {answer:?}");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    panic!("the stream's and the consumer's leaders never met on one server");
}
