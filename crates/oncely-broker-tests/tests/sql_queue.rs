//! The PostgreSQL queue table against the real server: duplicates, bad ids, crashes at every
//! step before the ack, two consumers leasing concurrently. 0 double, 0 lost, queue empty.

use oncely_broker_tests::check::Report;
use oncely_broker_tests::ledger::Db;
use oncely_broker_tests::ledger::postgres_db;
use oncely_broker_tests::workload::Workload;
use oncely_core::{Consumer, ConsumerName};
use oncely_sql::PgStore;
use oncely_sql_queue::{Dequeue, SqlQueue};
use oncely_testkit::chaos::{CrashPlan, CrashingHandler, CrashingStore, Step};
use oncely_testkit::test_db::TestDb;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A schema of the test's own on the shared PostgreSQL (dropped with the [`TestDb`]) with the
/// credits tables and the queue table; None (after the SKIPPED banner) without PostgreSQL.
async fn fresh_queue(test: &str) -> Option<(Db, SqlQueue, TestDb)> {
    let (db, place) = postgres_db(test).await?;
    let store = PgStore::connect_with(place.url(), &place.options())
        .await
        .expect("postgres");
    store
        .migrate_with(&[&oncely_sql_queue::MIGRATIONS])
        .await
        .expect("queue table");
    Some((db, SqlQueue::of(&store), place))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_queue_table_exactly_once_with_crashes_and_two_consumers() {
    let test = "pg_queue_table_exactly_once_with_crashes_and_two_consumers";
    let Some((db, queue, place)) = fresh_queue(test).await else {
        return;
    };
    let schema = place.schema().expect("a schema");
    let workload = Workload::new(schema, 1000, 0.2, 2, 5);
    queue.enqueue(&workload.messages).await.expect("enqueue");
    let plan = CrashPlan::new(3, 0.1).only_at(&[Step::Claimed, Step::Effected, Step::Committed]);
    let mut runs = Vec::new();
    for _ in 0..2 {
        let consumer = Consumer::new(
            ConsumerName::new("queue").expect("name"),
            CrashingStore::new(db.store().clone(), plan.clone()),
            CrashingHandler(Dequeue::new(&queue, db.handler())),
        )
        .concurrency(4);
        let source = queue.source(Duration::from_millis(500)).stop_when_empty();
        runs.push(tokio::spawn(async move {
            consumer.run(source, CancellationToken::new()).await
        }));
    }
    for run in runs {
        let stats = run.await.expect("join").expect("run");
        eprintln!("{test}: {stats:?}");
    }
    assert!(plan.fired() > 0, "the crash plan never fired");
    assert_eq!(queue.len().await.expect("len"), 0, "queue not drained");
    Report::read(&db, &workload)
        .await
        .expect("report")
        .assert_exact(test);
}

/// Ids are kept byte-exact: two ids that are not UTF-8 and only differ in their invalid bytes
/// (both `"\u{FFFD}\u{1}"` when decoded lossily) come out as two different ids, each its own.
#[tokio::test]
async fn pg_queue_keeps_invalid_utf8_ids_exact() {
    use oncely_core::{RawEnvelope, Source};
    let test = "pg_queue_keeps_invalid_utf8_ids_exact";
    let Some((_db, queue, place)) = fresh_queue(test).await else {
        return;
    };
    let _schema = place.schema().expect("a schema");
    let ids: [Vec<u8>; 3] = [vec![0xff, 0x01], vec![0xfe, 0x01], b"plain-1".to_vec()];
    let messages: Vec<RawEnvelope> = ids
        .iter()
        .map(|id| RawEnvelope {
            id: Some(id.clone()),
            ..RawEnvelope::new("x", b"payload".to_vec())
        })
        .collect();
    queue.enqueue(&messages).await.expect("enqueue");
    let mut source = queue.source(Duration::from_secs(30)).stop_when_empty();
    let mut seen = Vec::new();
    for _ in 0..ids.len() {
        let d = source.next().await.expect("next").expect("a row");
        seen.push(d.message().id.clone().expect("an id"));
    }
    assert_eq!(seen, ids.to_vec(), "ids must come back byte-exact");
}

/// One lease statement takes the consumer's read-ahead: told 10, the first `next` leases 10
/// rows and the next nine come from them in the table's order; told nothing, one row a time.
#[tokio::test]
async fn pg_queue_leases_the_read_ahead_in_one_statement() {
    use oncely_core::{RawEnvelope, Source};
    use oncely_sql::SqlTx;
    let test = "pg_queue_leases_the_read_ahead_in_one_statement";
    let Some((db, queue, place)) = fresh_queue(test).await else {
        return;
    };
    let schema = place.schema().expect("a schema");
    let messages: Vec<RawEnvelope> = (0..25)
        .map(|n| RawEnvelope::new(format!("m-{n:02}"), b"payload".to_vec()))
        .collect();
    queue.enqueue(&messages).await.expect("enqueue");
    let leased_sql =
        format!("SELECT COUNT(*) FROM {schema}.oncely_queue WHERE leased_until IS NOT NULL");
    let leased = || async {
        db.store()
            .pool()
            .fetch_i64(&leased_sql, &[])
            .await
            .unwrap()
            .unwrap()
    };

    let mut one_by_one = queue.source(Duration::from_secs(30));
    let first = one_by_one.next().await.expect("next").expect("a row");
    assert_eq!(first.message().id.as_deref(), Some(&b"m-00"[..]));
    assert_eq!(leased().await, 1, "without a read-ahead: one row");

    let mut batched = queue.source(Duration::from_secs(30));
    batched.read_ahead(10);
    let mut ids = Vec::new();
    for _ in 0..10 {
        let d = batched.next().await.expect("next").expect("a row");
        ids.push(String::from_utf8(d.message().id.clone().unwrap()).unwrap());
        assert_eq!(leased().await, 11, "one statement leased the ten");
    }
    let expected: Vec<String> = (1..=10).map(|n| format!("m-{n:02}")).collect();
    assert_eq!(ids, expected, "in the table's order");
}
