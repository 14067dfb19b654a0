//! A store call that never answers (a connection the network stranded: no RST, no FIN, the
//! client waits for a reply that never comes) must not hold a delivery forever, whichever
//! call it is: the inbox read before a group's claim and the read after a lost commit answer
//! end at [`Consumer::attempt_timeout`] like a transaction does, with a WARN, and the
//! delivery goes on. (Found in CI: `mariadb_connections_stranded_mid_run` hung silently
//! after the store recovered, a lane waiting on a group's inbox read.) Effects are counted
//! in the store's ledger rows: 0 double, 0 lost.

mod support;

use oncely_core::{
    Consumer, ConsumerName, ErrorKind, MemorySource, RawEnvelope, RetryPolicy, StatsSnapshot,
};
use std::time::Duration;
use support::{Calls, Faulty, Ledger, double_and_lost};
use tokio_util::sync::CancellationToken;

/// Far above what the runs below need (a few seconds): reaching it means a call waited
/// forever.
const HANG: Duration = Duration::from_secs(60);

async fn run_to_end(consumer: Consumer<Faulty, Ledger>, source: MemorySource) -> StatsSnapshot {
    tokio::time::timeout(HANG, consumer.run(source, CancellationToken::new()))
        .await
        .expect("the consumer finished: no store call may wait forever")
        .expect("run")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_inbox_read_that_never_answers_ends_at_the_attempt_timeout() {
    let store = Faulty::default();
    store.stall_reads(u64::MAX);
    let source = MemorySource::new();
    let ids: Vec<String> = (0..300).map(|i| format!("m-{i:04}")).collect();
    // Every id twice: the duplicates make the runtime read the inbox before each group's
    // claim, and every such read stalls.
    for id in ids.iter().chain(&ids) {
        source.publish(RawEnvelope::new(id.clone(), "1"));
    }
    source.close();
    // Groups of 8 (the ledger takes 2 ms a message): well within the attempt timeout.
    let consumer = Consumer::new(
        ConsumerName::new("stall").unwrap(),
        store.clone(),
        Ledger::default(),
    )
    .group_commit(8)
    .attempt_timeout(Duration::from_millis(200));
    let stats = run_to_end(consumer, source).await;
    assert!(
        store.stalled_reads() > 0,
        "no inbox read stalled: the test exercised nothing"
    );
    let (double, lost) = double_and_lost(&store.inner.ledger(), &ids);
    assert_eq!((double, lost), (0, 0), "double, lost");
    assert_eq!(stats.applied, ids.len() as u64);
    assert_eq!(stats.duplicates, ids.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_after_a_lost_commit_answer_that_never_answers_is_retried() {
    let store = Faulty::default();
    // Every commit fails (rolled back) on the only attempt, so the runtime asks the inbox
    // whether it landed; the first two such reads never answer.
    store.fail(ErrorKind::Transient, Calls::Commit);
    store.stall_reads(2);
    let source = MemorySource::new();
    source.publish(RawEnvelope::new("m-1", "1"));
    source.close();
    let consumer = Consumer::new(
        ConsumerName::new("stall").unwrap(),
        store.clone(),
        Ledger::default(),
    )
    .group_commit(1)
    .retry(RetryPolicy::default().max_attempts(1))
    .attempt_timeout(Duration::from_millis(100));
    let stats = run_to_end(consumer, source).await;
    assert_eq!(store.stalled_reads(), 2);
    // The commit never landed: no effect, one dead letter saying so.
    assert!(
        store.inner.ledger().is_empty(),
        "{:?}",
        store.inner.ledger()
    );
    let letters = store.inner.dead_letters();
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(stats.dead_lettered, 1);
}
