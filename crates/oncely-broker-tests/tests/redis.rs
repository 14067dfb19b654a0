//! Redis Streams: connection loss, SIGKILL crash test — against the real server. The source
//! conformance suite runs in `source_suite.rs`.

use oncely_broker_tests::faults::{connection_loss, crash_loop, redis_kill_clients};
use oncely_broker_tests::ledger::{Db, sqlite_db};
use oncely_broker_tests::services::{REDIS_URL, available, unique};
use oncely_broker_tests::workload::Workload;
use oncely_core::Source;
use oncely_redis::{RedisOptions, RedisSource};
use std::time::Duration;

fn up(test: &str) -> bool {
    available(test, "Redis", "127.0.0.1:6379")
}

fn url(stream: &str) -> String {
    format!("{REDIS_URL}/?stream={stream}&reclaim_ms=1000")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_connection_killed_by_server_mid_stream() {
    if !up("redis_connection_killed_by_server_mid_stream") {
        return;
    }
    let stream = unique("connloss");
    let url = url(&stream);
    let workload = Workload::new(&stream, 3000, 0.2, 2, 3);
    oncely_redis::publish(&url, &workload.messages)
        .await
        .expect("publish");
    let (base, mut options) = RedisOptions::from_url(&url, "connloss").expect("options");
    options.client_name = unique("oncely_cut");
    let name = options.client_name.clone();
    let source = RedisSource::connect(&base, options).await.expect("connect");
    let (db, _dir) = sqlite_db().await;
    connection_loss(
        "redis connection loss",
        &db,
        &workload,
        source,
        || redis_kill_clients(&name),
        Duration::from_secs(8),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_sigkill_crash_10k() {
    if !up("redis_sigkill_crash_10k") {
        return;
    }
    let stream = unique("crash");
    // A killed member's pending entries are taken over after 2 s idle.
    let url = format!("{REDIS_URL}/?stream={stream}&reclaim_ms=2000");
    let workload = Workload::new(&stream, 10_000, 0.2, 5, 42);
    oncely_redis::publish(&url, &workload.messages)
        .await
        .expect("publish");
    let dir = tempfile::tempdir().expect("tmp");
    let store = format!("sqlite:{}", dir.path().join("crash.db").display());
    let db = Db::open(&store, None).await.expect("db");
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
    report.assert_exact("redis SIGKILL crash test");
}

/// `Source::next` dropped while its `XREADGROUP` blocks (a timeout around it, as
/// `StopWhenIdle` and the demo's drain of leftovers do) strands nothing: Redis hands an entry
/// published in that window to the blocked read, and the next call delivers it at once. Before
/// the read was kept across calls, the entry sat pending on this member until a reclaim
/// (30 s by default), so a run ending idle reported it lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_next_dropped_while_blocked_strands_nothing() {
    if !up("redis_next_dropped_while_blocked_strands_nothing") {
        return;
    }
    let stream = unique("cancel");
    let url = format!("{REDIS_URL}/?stream={stream}");
    let mut source = oncely_redis::connect_source(&url, "cancel")
        .await
        .expect("connect");
    assert_eq!(source.options().reclaim_idle, Duration::from_secs(30));
    let block = source.options().block;
    for round in 0..3 {
        let id = format!("cancel-{round}");
        // The read blocks on the empty stream; the call is dropped halfway through the block.
        let dropped = tokio::time::timeout(block / 4, source.next()).await;
        assert!(dropped.is_err(), "round {round}: the stream was not empty");
        // Published while Redis still holds the dropped call's read.
        oncely_redis::publish(&url, &[oncely_core::RawEnvelope::new(&id, b"{}".to_vec())])
            .await
            .expect("publish");
        let delivery = tokio::time::timeout(Duration::from_secs(5), source.next())
            .await
            .unwrap_or_else(|_| panic!("round {round}: {id} not delivered within 5 s (stranded?)"))
            .expect("next")
            .expect("a delivery");
        assert_eq!(delivery.message().id.as_deref(), Some(id.as_bytes()));
        assert_eq!(delivery.attempt(), 1, "round {round}: a first delivery");
        delivery.discard().await.expect("discard");
    }
}
