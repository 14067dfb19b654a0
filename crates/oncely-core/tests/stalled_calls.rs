//! A call that never answers (a connection the network stranded: no RST, no FIN, the client
//! waits for a reply that never comes) must not hold a delivery, or the run's end, forever,
//! whichever call it is: the inbox read before a group's claim and the read after a lost
//! commit answer end at [`Consumer::attempt_timeout`] like a transaction does, with a WARN,
//! and the delivery goes on; a broker ack that is never taken is given up at the same bound
//! (the broker redelivers, a `Duplicate`). (Found in CI: `mariadb_connections_stranded_mid_run`
//! hung silently after the store recovered, a lane waiting on a group's inbox read.) Effects
//! are counted in the store's ledger rows: 0 double, 0 lost.

mod support;

use futures::future::BoxFuture;
use oncely_core::{
    Acker, Consumer, ConsumerName, Delivery, ErrorKind, MemorySource, RawEnvelope, Result,
    RetryPolicy, Source, StatsSnapshot,
};
use std::collections::VecDeque;
use std::time::Duration;
use support::{Calls, Faulty, Ledger, double_and_lost};
use tokio_util::sync::CancellationToken;

/// Far above what the runs below need (a few seconds): reaching it means a call waited
/// forever.
const HANG: Duration = Duration::from_secs(60);

async fn run_to_end(consumer: Consumer<Faulty, Ledger>, source: impl Source) -> StatsSnapshot {
    tokio::time::timeout(HANG, consumer.run(source, CancellationToken::new()))
        .await
        .expect("the consumer finished: no store call may wait forever")
        .expect("run")
}

/// A consumer of `store` into the ledger, in groups of `group`, each store call bounded at
/// `attempt_timeout`.
fn consumer(store: &Faulty, group: usize, attempt_timeout: Duration) -> Consumer<Faulty, Ledger> {
    Consumer::new(
        ConsumerName::new("stall").unwrap(),
        store.clone(),
        Ledger::default(),
    )
    .group_commit(group)
    .attempt_timeout(attempt_timeout)
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
    let consumer = consumer(&store, 8, Duration::from_millis(200));
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
    let consumer = consumer(&store, 1, Duration::from_millis(100))
        .retry(RetryPolicy::default().max_attempts(1));
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

/// Hands out its messages once each; their acks (and hand-backs) never answer, as on a broker
/// connection the network stranded.
struct AcksNeverAnswer(VecDeque<RawEnvelope>);

struct NeverAnswers;

impl Acker for NeverAnswers {
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        Box::pin(std::future::pending())
    }

    fn nack(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        Box::pin(std::future::pending())
    }
}

impl Source for AcksNeverAnswer {
    async fn next(&mut self) -> Result<Option<Delivery>> {
        Ok(self
            .0
            .pop_front()
            .map(|message| Delivery::new(message, 1, Box::new(NeverAnswers))))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_the_broker_never_takes_is_given_up_at_the_attempt_timeout() {
    let store = Faulty::default();
    let ids: Vec<String> = (0..200).map(|i| format!("m-{i:04}")).collect();
    let source = AcksNeverAnswer(
        ids.iter()
            .map(|id| RawEnvelope::new(id.clone(), "1"))
            .collect(),
    );
    // Both paths: group commit (its acks handed off past the lane) and one at a time.
    for group in [8, 1] {
        let consumer = consumer(&store, group, Duration::from_millis(200));
        let stats = run_to_end(consumer, AcksNeverAnswer(source.0.clone())).await;
        assert_eq!(stats.ack_failures, ids.len() as u64, "group {group}");
    }
    // The second run's deliveries were redeliveries of committed messages: Duplicates.
    let (double, lost) = double_and_lost(&store.inner.ledger(), &ids);
    assert_eq!((double, lost), (0, 0), "double, lost");
}
