//! The store fails mid-run (unavailable, permanent, transient; from the store or from the
//! handler's own database call): the runtime holds its deliveries, pauses intake, probes one
//! at a time and resumes by itself. Effects are counted in the store's ledger rows, never in
//! the consumer's counters: 0 double, 0 lost, and the source sees no nack during the outage.

mod support;

use oncely_core::{Consumer, ConsumerName, ErrorKind, MemorySource, RawEnvelope, StoreHealth};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{Calls, Faulty, Ledger, double_and_lost};
use tokio_util::sync::CancellationToken;

const MESSAGES: usize = 200;
const CONCURRENCY: usize = 8;
const OUTAGE: Duration = Duration::from_millis(1500);

fn publish(
    source: &MemorySource,
    n: usize,
    payload: impl Fn(usize) -> &'static str,
) -> Vec<String> {
    let ids: Vec<String> = (0..n).map(|i| format!("m-{i:04}")).collect();
    for (i, id) in ids.iter().enumerate() {
        source.publish(RawEnvelope::new(id.clone(), payload(i)));
    }
    source.close();
    ids
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// One delivery per transaction, `CONCURRENCY` at once: the outage tests count what intake
/// takes while the store is down, one delivery per slot (group commit, whose lanes buffer
/// what they read ahead, has `batch_consumer_holds_its_batch`).
fn consumer(store: &Faulty, handler: Ledger) -> Consumer<Faulty, Ledger> {
    Consumer::new(ConsumerName::new("health").unwrap(), store.clone(), handler)
        .concurrency(CONCURRENCY)
        .group_commit(1)
}

/// What the source and the breaker saw during one outage.
#[derive(Debug)]
struct Seen {
    deliveries: u64,
    requeued: u64,
    probes: u64,
}

/// Starts the outage after 50 applied effects (via `start`), ends it after [`OUTAGE`]
/// (via `end`), and returns what the source and the breaker saw meanwhile.
async fn outage(
    source: &MemorySource,
    store: &Faulty,
    health: &StoreHealth,
    start: impl FnOnce(),
    end: impl FnOnce(),
) -> Seen {
    until("50 applied", || store.inner.ledger().len() >= 50).await;
    start();
    let before = source.stats();
    let probes = health.probes();
    tokio::time::sleep(OUTAGE).await;
    let after = source.stats();
    let seen = Seen {
        deliveries: after.deliveries - before.deliveries,
        requeued: after.requeued - before.requeued,
        probes: health.probes() - probes,
    };
    end();
    seen
}

fn check_once(store: &Faulty, published: &[String]) {
    let (double, lost) = double_and_lost(&store.inner.ledger(), published);
    assert_eq!((double, lost), (0, 0), "double, lost");
}

async fn store_outage(kind: ErrorKind) {
    let source = MemorySource::new();
    let published = publish(&source, MESSAGES, |_| "x");
    let store = Faulty::default();
    let consumer = consumer(&store, Ledger::default());
    let health = consumer.health();
    let run = tokio::spawn({
        let (consumer, source) = (consumer.clone(), source.clone());
        async move { consumer.run(source, CancellationToken::new()).await }
    });
    let seen = outage(
        &source,
        &store,
        &health,
        || store.fail(kind, Calls::All),
        || store.heal(),
    )
    .await;
    let stats = run.await.unwrap().unwrap();
    let total = source.stats();
    println!(
        "{kind:?} outage {OUTAGE:?}: {seen:?}; store failures {}; source {total:?}; {stats:?}",
        store.failed_calls()
    );
    check_once(&store, &published);
    assert_eq!(
        seen.requeued, 0,
        "no delivery handed back during the outage"
    );
    assert_eq!(total.requeued, 0, "no nack at all");
    assert_eq!(
        total.deliveries, MESSAGES as u64,
        "one delivery per message"
    );
    assert!(
        seen.deliveries <= CONCURRENCY as u64 + 1,
        "intake paused: {seen:?}"
    );
    assert_eq!(
        (health.outages(), health.recoveries()),
        (1, 1),
        "one WARN, one INFO"
    );
    assert!(health.is_healthy());
    assert!(
        seen.probes >= 1 && seen.probes <= 8,
        "one probe at a time: {seen:?}"
    );
    assert!(
        store.failed_calls() <= CONCURRENCY as u64 + seen.probes + 2,
        "a handful of failed calls, not a loop: {}",
        store.failed_calls()
    );
    assert_eq!(stats.applied, MESSAGES as u64);
    assert_eq!(stats.nacked, 0);
    assert!(stats.store_retries >= 1);
    assert!(store.inner.dead_letters().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_store_holds_deliveries_and_pauses_intake() {
    store_outage(ErrorKind::Unavailable).await;
}

/// A permanent error from the store (a table dropped, a privilege revoked) is no message's
/// fault either: held the same way, never nacked in a loop, never dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_store_error_is_held_not_nacked() {
    store_outage(ErrorKind::Permanent).await;
}

/// Transient store errors (deadlock, serialization failure) retry with backoff without
/// opening the breaker and without counting toward dead-lettering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_store_errors_retry_without_dead_lettering() {
    let source = MemorySource::new();
    let published = publish(&source, MESSAGES, |_| "x");
    let store = Faulty::default();
    let consumer = consumer(&store, Ledger::default());
    let health = consumer.health();
    let run = tokio::spawn({
        let (consumer, source) = (consumer.clone(), source.clone());
        async move { consumer.run(source, CancellationToken::new()).await }
    });
    let seen = outage(
        &source,
        &store,
        &health,
        || store.fail(ErrorKind::Transient, Calls::All),
        || store.heal(),
    )
    .await;
    let stats = run.await.unwrap().unwrap();
    println!("transient: {seen:?}; {stats:?}");
    check_once(&store, &published);
    assert_eq!(source.stats().requeued, 0);
    assert_eq!(
        health.outages(),
        0,
        "the store works; only this message collided"
    );
    assert!(store.inner.dead_letters().is_empty(), "not dead-lettered");
    assert!(stats.retries > 0 && stats.store_retries == 0, "{stats:?}");
}

/// The handler's own database call hits the read-only database: `Unavailable` from the
/// handler holds the delivery like a store failure (not retried to exhaustion, not
/// dead-lettered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_from_the_handler_holds_too() {
    let source = MemorySource::new();
    let published = publish(&source, MESSAGES, |_| "x");
    let store = Faulty::default();
    let handler = Ledger::default();
    let consumer = consumer(&store, handler.clone());
    let health = consumer.health();
    let run = tokio::spawn({
        let (consumer, source) = (consumer.clone(), source.clone());
        async move { consumer.run(source, CancellationToken::new()).await }
    });
    let seen = outage(
        &source,
        &store,
        &health,
        || handler.set_unavailable(true),
        || handler.set_unavailable(false),
    )
    .await;
    let stats = run.await.unwrap().unwrap();
    println!("handler unavailable: {seen:?}; {stats:?}");
    check_once(&store, &published);
    assert_eq!(source.stats().requeued, 0);
    assert_eq!(source.stats().deliveries, MESSAGES as u64);
    assert_eq!((health.outages(), health.recoveries()), (1, 1));
    assert!(store.inner.dead_letters().is_empty());
    assert_eq!(stats.retries, 0, "not the handler retry policy");
}

/// Dead-lettering fails for a while: the rejected message is held, then dead-lettered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_dead_letter_insert_is_held_then_stored_once() {
    let source = MemorySource::new();
    let published = publish(&source, MESSAGES, |i| if i == 120 { "reject" } else { "x" });
    let store = Faulty::default();
    let consumer = consumer(&store, Ledger::default());
    let health = consumer.health();
    let run = tokio::spawn({
        let (consumer, source) = (consumer.clone(), source.clone());
        async move { consumer.run(source, CancellationToken::new()).await }
    });
    let seen = outage(
        &source,
        &store,
        &health,
        || store.fail(ErrorKind::Permanent, Calls::DeadLetter),
        || store.heal(),
    )
    .await;
    let stats = run.await.unwrap().unwrap();
    println!("dead-letter insert failing: {seen:?}; {stats:?}");
    assert_eq!(source.stats().requeued, 0, "never nacked");
    assert_eq!(store.inner.dead_letters(), vec!["m-0120".to_owned()]);
    let applied: Vec<String> = published
        .iter()
        .filter(|id| *id != "m-0120")
        .cloned()
        .collect();
    check_once(&store, &applied);
    assert_eq!(store.inner.ledger().len(), MESSAGES - 1);
    // The store's probe succeeds while only dead-letter inserts fail, so the held message may
    // be retried, fail again and open another outage before the heal: each ends in a
    // recovery, and the retries stay few (backoff, no hot loop).
    let (outages, recoveries) = (health.outages(), health.recoveries());
    assert!(
        outages >= 1 && outages == recoveries,
        "{outages} outages, {recoveries} recoveries"
    );
    assert!(
        stats.store_retries <= 20,
        "{} store retries in the outage",
        stats.store_retries
    );
}

/// Shutdown while the store is down: held deliveries are handed back (nothing lost) and
/// `run` returns; a later consumer applies them once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_during_outage_hands_back_held_deliveries() {
    let source = MemorySource::new();
    let published = publish(&source, MESSAGES, |_| "x");
    let store = Faulty::default();
    let consumer = consumer(&store, Ledger::default());
    let health = consumer.health();
    let shutdown = CancellationToken::new();
    let run = tokio::spawn({
        let (consumer, source, shutdown) = (consumer.clone(), source.clone(), shutdown.clone());
        async move { consumer.run(source, shutdown).await }
    });
    until("50 applied", || store.inner.ledger().len() >= 50).await;
    store.fail(ErrorKind::Unavailable, Calls::All);
    until("unhealthy", || !health.is_healthy()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(source.stats().requeued, 0, "held, not handed back");
    let held = health.in_flight() as u64;
    assert!(held >= 1);
    shutdown.cancel();
    let stats = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("run returns promptly on shutdown")
        .unwrap()
        .unwrap();
    assert_eq!(stats.nacked, held, "every held delivery handed back");
    // Plus what group commit had read ahead into its lanes: dropped unsettled, so requeued.
    assert!(source.stats().requeued >= held, "{:?}", source.stats());
    assert_eq!(health.in_flight(), 0);

    store.heal();
    let again = Consumer::new(
        ConsumerName::new("health").unwrap(),
        store.clone(),
        Ledger::default(),
    );
    again
        .run(source.clone(), CancellationToken::new())
        .await
        .unwrap();
    check_once(&store, &published);
}

/// The batch runtime shares the breaker: the batch in hand is held and retried whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_consumer_holds_its_batch() {
    let source = MemorySource::new();
    let published = publish(&source, MESSAGES, |_| "x");
    let store = Faulty::default();
    let consumer = Arc::new(
        Consumer::new(
            ConsumerName::new("health").unwrap(),
            store.clone(),
            Ledger::default(),
        )
        .group_commit(10)
        .concurrency(1),
    );
    let health = consumer.health();
    let run = tokio::spawn({
        let (consumer, source) = (consumer.clone(), source.clone());
        async move { consumer.run(source, CancellationToken::new()).await }
    });
    let seen = outage(
        &source,
        &store,
        &health,
        || store.fail(ErrorKind::Unavailable, Calls::All),
        || store.heal(),
    )
    .await;
    run.await.unwrap().unwrap();
    println!("batch: {seen:?}; failed calls {}", store.failed_calls());
    check_once(&store, &published);
    assert_eq!(source.stats().requeued, 0);
    assert_eq!(source.stats().deliveries, MESSAGES as u64);
    assert!(seen.deliveries <= 10, "{seen:?}");
    assert_eq!((health.outages(), health.recoveries()), (1, 1));
}
