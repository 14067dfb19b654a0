//! NATS JetStream against the real server: the scenarios every broker runs (source suite,
//! connection dropped, SIGKILL crash), and NATS's own: durable names, acks nobody answers,
//! batched acks.

use oncely_broker_tests::check::Report;
use oncely_broker_tests::fixture::{Broker, Destination};
use oncely_broker_tests::ledger::sqlite_db;
use oncely_broker_tests::runner::{RunOptions, run_until_idle};
use oncely_broker_tests::services::NATS_URL;
use oncely_broker_tests::workload::Workload;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

oncely_broker_tests::broker_scenarios!(Broker::Nats => source_suite, connection_loss, sigkill_crash);

/// Consumers `X.v1` and `X_v1` once shared one durable (`X_v1`) and split each other's
/// messages; now each has its own durable and gets every message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_similar_consumer_names_get_separate_durables() {
    if !Broker::Nats.up("nats_similar_consumer_names_get_separate_durables") {
        return;
    }
    let Destination { name, url } = Broker::Nats
        .destination("durable")
        .await
        .expect("destination");
    let (dotted, underscored) = (format!("{name}.v1"), format!("{name}_v1"));
    assert_ne!(
        oncely_nats::durable_name(&dotted),
        oncely_nats::durable_name(&underscored)
    );
    let workload = Workload::new(&name, 500, 0.0, 0, 5);
    let a = oncely_nats::connect_source(&url, &dotted)
        .await
        .expect("connect a");
    let b = oncely_nats::connect_source(&url, &underscored)
        .await
        .expect("connect b");
    oncely_nats::publish(&url, &workload.messages)
        .await
        .expect("publish");
    let ((db_a, _dir_a), (db_b, _dir_b)) = (sqlite_db().await, sqlite_db().await);
    let mut options = RunOptions::new("orders");
    options.idle_exit = Duration::from_secs(3);
    let (ra, rb) = tokio::join!(
        run_until_idle(&db_a, a, &options, CancellationToken::new()),
        run_until_idle(&db_b, b, &options, CancellationToken::new()),
    );
    ra.expect("run a");
    rb.expect("run b");
    for (label, db) in [(&dotted, &db_a), (&underscored, &db_b)] {
        Report::read(db, &workload)
            .await
            .expect("report")
            .assert_exact(&format!("nats consumer {label}"));
    }
}

/// A confirmed ack the server does not answer as an ack (here: its durable consumer was
/// deleted between the commit and the ack, so nothing listens on the ack subject) counts as
/// an ack failure. async-nats' `double_ack`, used before, took the server's "no responders"
/// status for a confirmation and reported the ack as done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_ack_nobody_answers_is_reported_failed() {
    use oncely_core::{Consumer, Handled, RawEnvelope, handler_fn};
    use oncely_sql::{AnyStore, AnyTx};
    use std::sync::Arc;

    if !Broker::Nats.up("nats_ack_nobody_answers_is_reported_failed") {
        return;
    }
    let url = Broker::Nats
        .destination("ackfail")
        .await
        .expect("destination")
        .url;
    let source = oncely_nats::connect_source(&url, "ackfail")
        .await
        .expect("connect");
    let (stream, durable) = (
        source.options().stream.clone(),
        source.options().durable.clone(),
    );
    oncely_nats::publish(&url, &[RawEnvelope::new("m-1", "1")])
        .await
        .expect("publish");
    let js = async_nats::jetstream::new(async_nats::connect(NATS_URL).await.expect("client"));
    let handled = Arc::new(tokio::sync::Notify::new());
    let handler = {
        let handled = handled.clone();
        handler_fn(move |_tx: &mut AnyTx, _msg| {
            let (js, stream, durable, handled) =
                (js.clone(), stream.clone(), durable.clone(), handled.clone());
            Box::pin(async move {
                js.delete_consumer_from_stream(&durable, &stream)
                    .await
                    .map_err(|e| oncely_core::Error::permanent(e.to_string()))?;
                handled.notify_one();
                Ok(Handled::Applied)
            })
        })
    };
    let dir = tempfile::tempdir().expect("tmp");
    let store = AnyStore::connect(&format!("sqlite:{}", dir.path().join("a.db").display()))
        .await
        .expect("store");
    store.migrate().await.expect("migrate");
    let stop = CancellationToken::new();
    let consumer = Consumer::new("ackfail", store, handler);
    let run = tokio::spawn({
        let stop = stop.clone();
        async move { consumer.run(source, stop).await }
    });
    tokio::time::timeout(Duration::from_secs(20), handled.notified())
        .await
        .expect("the handler ran");
    // The run waits for every ack handed off before it returns.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.cancel();
    let stats = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("run ended")
        .expect("join")
        .expect("run");
    assert_eq!(stats.applied, 1, "{stats:?}");
    assert_eq!(stats.ack_failures, 1, "{stats:?}");
}

/// Acks asked for together go out as one batch (plain `+ACK`s, the last one confirmed): once
/// every ack of the batch has resolved, the server has handled all of them, not only the
/// confirmed one: the durable consumer holds no ack pending, and nothing comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_batched_acks_are_all_handled_when_confirmed() {
    use oncely_core::{RawEnvelope, Source};

    if !Broker::Nats.up("nats_batched_acks_are_all_handled_when_confirmed") {
        return;
    }
    let url = Broker::Nats
        .destination("ackbatch")
        .await
        .expect("destination")
        .url;
    let n = 300;
    let msgs: Vec<RawEnvelope> = (0..n)
        .map(|i| RawEnvelope::new(format!("m-{i}"), i.to_string()))
        .collect();
    oncely_nats::publish(&url, &msgs).await.expect("publish");
    let mut source = oncely_nats::connect_source(&url, "ackbatch")
        .await
        .expect("connect");
    source.read_ahead(n);
    let mut deliveries = Vec::new();
    while deliveries.len() < n {
        let next = tokio::time::timeout(Duration::from_secs(10), source.next())
            .await
            .expect("a delivery within 10 s")
            .expect("next")
            .expect("the source does not end");
        deliveries.push(next);
    }
    let acked = futures::future::join_all(deliveries.into_iter().map(|d| d.discard())).await;
    assert!(
        acked.iter().all(Result::is_ok),
        "every ack answered: {acked:?}"
    );
    let js = async_nats::jetstream::new(async_nats::connect(NATS_URL).await.expect("client"));
    let (stream, durable) = (&source.options().stream, &source.options().durable);
    let info = js
        .get_stream(stream)
        .await
        .expect("stream")
        .consumer_info(durable)
        .await
        .expect("consumer info");
    assert_eq!(
        info.num_ack_pending, 0,
        "acks the server has not handled: {info:?}"
    );
    assert_eq!(info.num_pending, 0, "{info:?}");
    assert_eq!(info.delivered.stream_sequence, n as u64, "{info:?}");
    // Nothing is redelivered (acks lost would come back after `ack_wait`, 3 s).
    let again = tokio::time::timeout(Duration::from_secs(4), source.next()).await;
    assert!(
        again.is_err(),
        "a delivery came back after every ack was confirmed"
    );
}
