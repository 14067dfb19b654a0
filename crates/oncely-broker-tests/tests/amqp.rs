//! RabbitMQ against the real server: the scenarios every broker runs (source suite,
//! connection cut by the server, SIGKILL crash), and RabbitMQ's own: redelivery after a
//! reconnect, a crash through PgBouncer, held acks.

use oncely_amqp::{AmqpOptions, AmqpSource};
use oncely_broker_tests::faults::crash_run;
use oncely_broker_tests::fixture::Broker;
use oncely_broker_tests::ledger::Db;
use oncely_broker_tests::procs::consumer_args;
use oncely_broker_tests::services::AMQP_URL;
use oncely_broker_tests::workload::Workload;
use oncely_core::Source;
use oncely_testkit::test_db::TestDb;
use std::time::Duration;

oncely_broker_tests::broker_scenarios!(Broker::RabbitMq => source_suite, connection_loss, sigkill_crash);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_unsettled_delivery_is_redelivered_after_reconnect() {
    let broker = Broker::RabbitMq;
    if !broker.up("amqp_unsettled_delivery_is_redelivered_after_reconnect") {
        return;
    }
    let url = broker.destination("unsettled").await.expect("queue").url;
    oncely_amqp::publish(&url, &[oncely_core::RawEnvelope::new("only-1", "{}")])
        .await
        .expect("publish");
    let (base, options) = AmqpOptions::from_url(&url, "t").expect("options");
    let mut source = AmqpSource::connect(&base, options).await.expect("connect");
    let first = source.next().await.expect("next").expect("delivery");
    assert_eq!(first.message().id.as_deref(), Some(&b"only-1"[..]));
    assert_eq!(first.attempt(), 1);
    // Keep it unsettled and lose the connection: the broker must deliver it again.
    std::mem::forget(first);
    source.close_connection().await;
    let again = source.next().await.expect("next").expect("redelivery");
    assert_eq!(again.message().id.as_deref(), Some(&b"only-1"[..]));
    assert_eq!(again.attempt(), 2, "a redelivery must say so");
}

/// PostgreSQL behind PgBouncer in transaction pooling mode (the test-owned one of
/// scripts/pgbouncer.sh, found by the store itself from the plain URL): RabbitMQ, a consumer
/// with 8 deliveries in flight SIGKILLed 6 times, then clean runs; effects counted from the
/// ledger against the published unique ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_sigkill_crash_through_pgbouncer() {
    let test = "amqp_sigkill_crash_through_pgbouncer";
    let broker = Broker::RabbitMq;
    if !broker.up(test) {
        return;
    }
    let Some(place) = TestDb::pgbouncer(test).await else {
        return;
    };
    let (bouncer, schema) = (place.url(), place.schema().expect("a schema"));
    let queue = broker.destination("crash_bouncer").await.expect("queue");
    let workload = Workload::new(&queue.name, 5_000, 0.2, 5, 7);
    let db = Db::open(bouncer, Some(schema)).await.expect("db");
    let publisher = broker.publish(&queue, &workload, &db).await;
    let idle = broker.idle_after_kill().as_secs();
    let mut args = consumer_args(&queue.url, "crash", bouncer, Some(schema), idle);
    args.extend(["--concurrency".to_owned(), "8".to_owned()]);
    let run = crash_run(
        env!("CARGO_BIN_EXE_oncely-broker-consumer"),
        &args,
        &db,
        &workload,
        6,
    )
    .await;
    publisher.await.expect("join").expect("publish");
    run.report.assert_exact(test);
}

/// Acks held for a run of tags, against the real broker: acks of later deliveries wait for an
/// earlier one; when that one is given back (a requeue), the requeue reaches the broker before
/// the `multiple` ack of the run, so the broker requeues exactly it, and the channel stays open
/// (an ack of a tag the broker no longer holds would close it). Then a held ack goes out alone
/// once an earlier delivery stays unsettled past the hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_held_acks_settle_exactly_what_was_settled() {
    use oncely_core::RawEnvelope;

    let broker = Broker::RabbitMq;
    if !broker.up("amqp_held_acks_settle_exactly_what_was_settled") {
        return;
    }
    let dest = broker.destination("heldacks").await.expect("queue");
    let (queue, url) = (dest.name, dest.url);
    let msgs: Vec<RawEnvelope> = (1..=5)
        .map(|i| RawEnvelope::new(format!("m-{i}"), "{}"))
        .collect();
    oncely_amqp::publish(&url, &msgs).await.expect("publish");
    let (base, options) = AmqpOptions::from_url(&url, "t").expect("options");
    let mut source = AmqpSource::connect(&base, options).await.expect("connect");
    let mut got = Vec::new();
    for _ in 0..5 {
        let d = tokio::time::timeout(Duration::from_secs(10), source.next())
            .await
            .expect("a delivery within 10 s")
            .expect("next")
            .expect("delivery");
        got.push(d);
    }
    let id = |d: &oncely_core::Delivery| d.message().display_id().expect("an id");
    assert_eq!(
        got.iter().map(id).collect::<Vec<_>>(),
        ["m-1", "m-2", "m-3", "m-4", "m-5"]
    );
    let mut got = got.into_iter();
    let (m1, m2, m3, m4, m5) = (
        got.next().unwrap(),
        got.next().unwrap(),
        got.next().unwrap(),
        got.next().unwrap(),
        got.next().unwrap(),
    );
    // m-2 and m-3 acked while m-1 is open: held. m-1 given back (within the hold): its
    // requeue first, then the run m-2..m-3 in one frame (the other order would ack m-1 with
    // the run, then fail on the requeue of a tag already acked).
    let held = tokio::spawn(async move { tokio::join!(m2.discard(), m3.discard()) });
    tokio::time::sleep(Duration::from_millis(5)).await;
    m1.nack().await.expect("requeue m-1");
    let (a2, a3) = held.await.expect("join");
    a2.expect("ack m-2");
    a3.expect("ack m-3");
    // m-5 acked while m-4 stays open: it goes out alone after the hold.
    tokio::time::timeout(Duration::from_secs(5), m5.discard())
        .await
        .expect("a held ack goes out within the hold")
        .expect("ack m-5");
    // The broker gives back m-1 (requeued) and nothing else; m-4 is still ours.
    let again = tokio::time::timeout(Duration::from_secs(10), source.next())
        .await
        .expect("the requeued delivery within 10 s")
        .expect("next")
        .expect("delivery");
    assert_eq!(id(&again), "m-1");
    assert!(
        again.attempt() >= 2,
        "a redelivery: attempt {}",
        again.attempt()
    );
    again.discard().await.expect("ack the redelivered m-1");
    m4.discard().await.expect("ack m-4");
    let nothing = tokio::time::timeout(Duration::from_secs(2), source.next()).await;
    assert!(nothing.is_err(), "a delivery came back that was acked");
    // The channel survived every frame: a passive declare on the same connection's queue
    // shows it empty, with nothing unacked left to return on close.
    drop(source);
    let conn = lapin::Connection::connect(AMQP_URL, Default::default())
        .await
        .expect("connect");
    let channel = conn.create_channel().await.expect("channel");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let q = channel
        .queue_declare(
            queue.as_str().into(),
            lapin::options::QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            Default::default(),
        )
        .await
        .expect("the queue is there");
    assert_eq!(
        q.message_count(),
        0,
        "messages left in the queue after every ack"
    );
}

/// RabbitMQ meets a silent network: twice in a run the consumer's connection stops carrying
/// bytes for good (no RST, no FIN: a NAT or firewall that dropped its state) while new
/// connections work. lapin ends the connection at twice the negotiated heartbeat (here the
/// URL's `heartbeat=2`, so 4 s; at RabbitMQ's default of 60 s, 2 minutes), the source says so
/// at WARN and reconnects, RabbitMQ requeues what the silent connection held once its own
/// heartbeat check gives up on it, and every message is applied once, counted from the
/// database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_connection_stranded_mid_run() {
    use oncely_broker_tests::check::Report;
    use oncely_broker_tests::faults::wait_for_rows;
    use oncely_broker_tests::runner::{RunOptions, run_until_idle};
    use std::time::Instant;
    let test = "amqp_connection_stranded_mid_run";
    let broker = Broker::RabbitMq;
    if !broker.up(test) {
        return;
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            "warn,oncely_amqp=info,lapin=error",
        ))
        .with_test_writer()
        .try_init();
    let dest = broker.destination("stranded").await.expect("queue");
    let proxy = oncely_testkit::FaultProxy::start("127.0.0.1:5672")
        .await
        .expect("proxy");
    let via_proxy = format!(
        "{}&heartbeat=2",
        dest.url
            .replace("127.0.0.1:5672", &proxy.addr().to_string())
    );
    let workload = Workload::new(&dest.name, 3_000, 0.2, 2, 29);
    let (db, _dir) = oncely_broker_tests::ledger::sqlite_db().await;
    let source = oncely_broker_tests::brokers::connect_source(&via_proxy, &dest.name)
        .await
        .expect("connect through the proxy");
    let publisher = broker.publish(&dest, &workload, &db).await;
    // Exits after 25 s without a delivery: past a reconnect whose handshake the second strand
    // catches (the source's 10 s open timeout, then a new connection), the heartbeat's 4 s
    // and the requeue.
    let mut options = RunOptions::new("stranded");
    options.idle_exit = Duration::from_secs(25);
    let run = {
        let db = db.clone();
        tokio::spawn(async move {
            run_until_idle(
                &db,
                source,
                &options,
                tokio_util::sync::CancellationToken::new(),
            )
            .await
        })
    };
    wait_for_rows(&db, 750).await;
    // Each strand silences the connection in use; the source must notice and open another.
    let mut noticed = Vec::new();
    for strand in 1..=2 {
        let accepted = proxy.stats().accepted;
        proxy.strand();
        let at = Instant::now();
        while proxy.stats().accepted == accepted {
            assert!(
                at.elapsed() < Duration::from_secs(30),
                "{test}: strand {strand}: no new connection within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        noticed.push(at.elapsed().as_secs_f64());
    }
    let run = run.await.expect("join").expect("run");
    publisher.await.expect("join").expect("publish");
    eprintln!(
        "FIGURES {test}: reconnected {:.1} s and {:.1} s after the strands (heartbeat 2 s); {} applied, {} duplicates",
        noticed[0], noticed[1], run.stats.applied, run.stats.duplicates
    );
    Report::read(&db, &workload)
        .await
        .expect("report")
        .assert_exact(test);
}

/// A host that accepts the TCP connection and then says nothing (a firewall that drops
/// packets after the handshake, a port forwarded to something silent): connecting fails within
/// the source's open timeout (10 s) with a message that says so, instead of waiting forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_connect_to_a_silent_host_fails_within_seconds() {
    let test = "amqp_connect_to_a_silent_host_fails_within_seconds";
    if !Broker::RabbitMq.up(test) {
        return;
    }
    let proxy = oncely_testkit::FaultProxy::start("127.0.0.1:5672")
        .await
        .expect("proxy");
    proxy.set(oncely_testkit::Fault::Blackhole);
    let url = format!("amqp://guest:guest@{}/%2f?queue=silent", proxy.addr());
    let (base, options) = AmqpOptions::from_url(&url, "t").expect("options");
    let started = std::time::Instant::now();
    let connected =
        tokio::time::timeout(Duration::from_secs(60), AmqpSource::connect(&base, options))
            .await
            .expect("connecting to a silent host must not wait forever");
    let error = connected.err().expect("nothing answered, so no source");
    eprintln!(
        "FIGURES {test}: failed after {:.1} s: {error}",
        started.elapsed().as_secs_f64()
    );
    assert!(error.to_string().contains("no answer within"), "{error}");
}
