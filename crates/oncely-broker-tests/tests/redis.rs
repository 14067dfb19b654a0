//! Redis Streams against the real server: the scenarios every broker runs (source suite,
//! connection killed by the server, SIGKILL crash), and a read dropped while it blocks.

use oncely_broker_tests::fixture::Broker;
use oncely_core::Source;
use std::time::Duration;

oncely_broker_tests::broker_scenarios!(Broker::Redis => source_suite, connection_loss, sigkill_crash);

/// `Source::next` dropped while its `XREADGROUP` blocks (a timeout around it, as
/// `StopWhenIdle` and the demo's drain of leftovers do) strands nothing: Redis hands an entry
/// published in that window to the blocked read, and the next call delivers it at once. Before
/// the read was kept across calls, the entry sat pending on this member until a reclaim
/// (30 s by default), so a run ending idle reported it lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_next_dropped_while_blocked_strands_nothing() {
    let broker = Broker::Redis;
    if !broker.up("redis_next_dropped_while_blocked_strands_nothing") {
        return;
    }
    // At the defaults: the reclaim that would otherwise find a stranded entry is 30 s.
    let url = broker
        .plain_destination("cancel")
        .await
        .expect("stream")
        .url;
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
