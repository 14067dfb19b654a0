//! End to end against RabbitMQ: one message with `timestamp` 2^63 among good ones. On
//! `ed4fcfc` it panicked the source loop (`UNIX_EPOCH + Duration::from_secs`): the process
//! died and the message stayed queued. Now the consumer keeps going, every good message is
//! applied once and the hostile one is applied (time dropped) or dead-lettered — never left
//! in the queue.

use lapin::options::{BasicPublishOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use oncely_broker_tests::ledger::sqlite_db;
use oncely_broker_tests::runner::{RunOptions, run_until_idle};
use oncely_broker_tests::services::{AMQP_URL, available, unique};
use oncely_core::RawEnvelope;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const GOOD: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_timestamp_beyond_i64_does_not_stop_the_consumer() {
    if !available(
        "amqp_timestamp_beyond_i64_does_not_stop_the_consumer",
        "RabbitMQ",
        "127.0.0.1:5672",
    ) {
        return;
    }
    let queue = unique("poison");
    let url = format!("{AMQP_URL}?queue={queue}");
    // The source declares the queue (quorum, as by default).
    let source = oncely_amqp::connect_source(&url, "poison")
        .await
        .expect("connect");

    let conn = Connection::connect(AMQP_URL, ConnectionProperties::default())
        .await
        .expect("connect");
    let channel = conn.create_channel().await.expect("channel");
    let hostile = BasicProperties::default()
        .with_message_id("hostile-1".into())
        .with_timestamp(1 << 63)
        .with_delivery_mode(2);
    channel
        .basic_publish(
            "".into(),
            queue.as_str().into(),
            BasicPublishOptions::default(),
            br#"{"account":"acct-h","amount":5}"#,
            hostile,
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");
    let good: Vec<RawEnvelope> = (0..GOOD)
        .map(|i| {
            RawEnvelope::new(
                format!("good-{i}"),
                format!(r#"{{"account":"acct-{i}","amount":1}}"#),
            )
        })
        .collect();
    oncely_amqp::publish(&url, &good).await.expect("publish");

    let (db, _dir) = sqlite_db().await;
    let mut options = RunOptions::new("poison");
    options.idle_exit = Duration::from_secs(2);
    let run = run_until_idle(&db, source, &options, CancellationToken::new()).await;
    run.expect("the consumer ran to the end");

    use oncely_sql::{Column, SqlTx};
    let mut pool = db.store().pool();
    let sql = "SELECT message_id, COUNT(*) FROM ledger GROUP BY message_id ORDER BY message_id";
    let rows = pool.fetch(sql, &[], &[Column::Text, Column::I64]).await;
    let applied: Vec<(String, i64)> = rows
        .expect("ledger")
        .iter()
        .map(|r| (r[0].text(), r[1].i64()))
        .collect();
    let sql = format!("SELECT message_id, reason FROM {}", db.dead_letters());
    let rows = pool
        .fetch(&sql, &[], &[Column::OptText, Column::Text])
        .await;
    let dead: Vec<(Option<String>, String)> = rows
        .expect("dead letters")
        .iter()
        .map(|r| (r[0].opt_text(), r[1].text()))
        .collect();
    for i in 0..GOOD {
        let id = format!("good-{i}");
        let n = applied.iter().find(|(m, _)| *m == id).map(|(_, n)| *n);
        assert_eq!(n, Some(1), "{id} applied exactly once; ledger {applied:?}");
    }
    assert!(
        applied.iter().all(|(_, n)| *n == 1),
        "no double: {applied:?}"
    );
    let hostile_applied = applied.iter().any(|(m, _)| m == "hostile-1");
    let hostile_dead = dead
        .iter()
        .any(|(m, r)| (m.as_deref() == Some("hostile-1") || m.is_none()) && !r.is_empty());
    assert!(
        hostile_applied ^ hostile_dead,
        "the hostile message is applied or dead-lettered, once: ledger {applied:?}, dead letters {dead:?}"
    );
    assert_eq!(applied.len() + dead.len(), GOOD + 1, "nothing lost");

    // Nothing left in the queue once the consumer's connection is gone.
    let mut left = None;
    for _ in 0..50 {
        let q = channel
            .queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("passive declare");
        if q.consumer_count() == 0 {
            left = Some(q.message_count());
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(left, Some(0), "the queue is empty and the consumer gone");
    let _ = channel
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await;
}
