//! The PostgreSQL queue table against the real server: duplicates, bad ids, crashes at every
//! step before the ack, two consumers leasing concurrently. 0 double, 0 lost, queue empty.

use oncely_broker_tests::check::Report;
use oncely_broker_tests::ledger::Db;
use oncely_broker_tests::services::{PG_URL, available, unique};
use oncely_broker_tests::workload::Workload;
use oncely_core::{Consumer, ConsumerName, CrashPlan, Step};
use oncely_sql_queue::{Dequeue, SqlQueue};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_queue_table_exactly_once_with_crashes_and_two_consumers() {
    let test = "pg_queue_table_exactly_once_with_crashes_and_two_consumers";
    if !available(test, "PostgreSQL", "127.0.0.1:5432") {
        return;
    }
    let schema = unique("t_queue");
    let db = Db::open(PG_URL, Some(&schema)).await.expect("postgres");
    let Db::Pg(store) = &db else { unreachable!() };
    let queue = SqlQueue::of(store);
    queue.migrate().await.expect("queue table");
    let workload = Workload::new(&schema, 1000, 0.2, 2, 5);
    queue.enqueue(&workload.messages).await.expect("enqueue");
    let plan = CrashPlan::new(3, 0.1).only_at(&[Step::Claimed, Step::Effected, Step::Committed]);
    let mut runs = Vec::new();
    for _ in 0..2 {
        let consumer = Consumer::new(
            ConsumerName::new("queue").expect("name"),
            store.clone(),
            Dequeue::new(&queue, db.handler()),
        )
        .concurrency(4)
        .chaos(Arc::new(plan.clone()));
        let source = queue.source(Duration::from_millis(500)).stop_when_empty();
        runs.push(tokio::spawn(async move {
            consumer.run(source, CancellationToken::new()).await
        }));
    }
    for run in runs {
        let stats = run.await.expect("join").expect("run");
        eprintln!("{test}: {stats:?}");
    }
    assert_eq!(queue.len().await.expect("len"), 0, "queue not drained");
    Report::read(&db, &workload)
        .await
        .expect("report")
        .assert_exact(test);
    let _ = oncely_sql::sqlx::raw_sql(oncely_sql::sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA {schema} CASCADE"
    )))
    .execute(store.pool())
    .await;
}
