//! The Kafka SIGKILL crash with ids from offsets (`id=offset`): 5,000 records without any id
//! header on 4 partitions, consumed by `oncely-broker-consumer` into one SQLite file; the
//! process is killed with SIGKILL mid-stream, restarted, and finally run until the topic is
//! drained. The source takes `TOPIC/PARTITION/OFFSET` as the id, so the inbox records offsets
//! in the effect's transaction. Each record's amount is distinct (1..=N), so the ledger's sum
//! shows a double or a lost record independently of the ids.
//!
//! The crash with ids from the `message-id` header is the scenario every broker runs
//! (`oncely_broker_tests::scenarios::sigkill_crash`, in `tests/kafka.rs`).

use oncely_broker_tests::faults::{kill_mid_stream, run_until};
use oncely_broker_tests::fixture::Broker;
use oncely_broker_tests::ledger::Db;
use oncely_broker_tests::procs::consumer_args;
use oncely_core::RawEnvelope;
use oncely_testkit::credits::Credit;

/// `(ledger rows, distinct ids, sum of amounts)`.
async fn ledger_totals(db: &Db) -> (i64, i64, i64) {
    use oncely_sql::{Column, SqlTx};
    let sql = "SELECT COUNT(*), COUNT(DISTINCT message_id), COALESCE(SUM(amount), 0) FROM ledger";
    let rows = db.store().pool().fetch(sql, &[], &[Column::I64; 3]).await;
    let row = &rows.expect("ledger totals")[0];
    (row[0].i64(), row[1].i64(), row[2].i64())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_sigkill_crash_offset_ids() {
    let broker = Broker::Kafka;
    if !broker.up("kafka_sigkill_crash_offset_ids") {
        return;
    }
    let topic = broker.destination("crashoff").await.expect("topic");
    let dir = tempfile::tempdir().expect("tmp");
    let store = format!("sqlite:{}", dir.path().join("crash.db").display());
    let db = Db::open(&store, None).await.expect("db");
    let n: i64 = 5_000;
    let messages: Vec<RawEnvelope> = (1..=n)
        .map(|i| RawEnvelope {
            id: None,
            payload: Credit::payload(&format!("acct-{}", i % 50), i),
            meta: Default::default(),
        })
        .collect();
    let source = format!("{}&id=offset", topic.url);
    oncely_kafka::publish(&source, &messages)
        .await
        .expect("publish");
    let idle = broker.idle_after_kill().as_secs();
    let args = consumer_args(&source, "crashoff", &store, None, idle);
    let binary = env!("CARGO_BIN_EXE_oncely-broker-consumer");
    let kills = kill_mid_stream(binary, &args, 3, || async { ledger_totals(&db).await.0 }).await;
    run_until(binary, &args, 4, || async {
        ledger_totals(&db).await.0 >= n
    })
    .await;
    let (rows, ids, sum) = ledger_totals(&db).await;
    let expected_sum = n * (n + 1) / 2;
    eprintln!(
        "kafka offset ids: {kills} SIGKILLs; ledger rows {rows}, distinct ids {ids}, sum {sum} (expected {n} rows, sum {expected_sum})"
    );
    assert_eq!(rows, ids, "an offset was applied twice");
    assert_eq!((rows, sum), (n, expected_sum), "double or lost records");
    assert!(kills >= 2, "the consumer was killed only {kills} times");
}
