//! The deferred mode on PostgreSQL: verified requests (retries and a conflicting copy
//! included) are answered 202 once queued, forged ones 401 with nothing queued; a consumer
//! with the source's name then drains the queue through the inbox: each event applied once,
//! the conflict dead-lettered, the queue empty. Counted from the database.

mod common;

use oncely_core::{CancellationToken, Consumer};
use oncely_sql::{ConnectOptions, PgStore};
use oncely_sql_queue::{Dequeue, SqlQueue};
use oncely_webhook::{Deferred, Verifier};
use std::time::{Duration, SystemTime};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_deferred_queues_then_applies_once() {
    let Some(db) = common::postgres("postgres_deferred_queues_then_applies_once").await else {
        return;
    };
    db.store
        .migrate_with(&[&oncely_sql::INBOX, &oncely_sql_queue::MIGRATIONS])
        .await
        .unwrap();
    let options = ConnectOptions {
        tables: db.store.tables().clone(),
        ..ConnectOptions::default()
    };
    let pg = PgStore::connect_with(&db.url, &options).await.unwrap();
    let queue = SqlQueue::of(&pg);
    let verifier = Verifier::standard_webhooks([common::STANDARD_SECRET]).unwrap();
    let hook = Deferred::new("standard", queue.clone(), verifier.clone());
    let url = common::serve(axum::Router::new().route("/", hook.into_route())).await + "/";

    let (events, copies) = (10, 4);
    let mut requests = tokio::task::JoinSet::new();
    let send =
        |requests: &mut tokio::task::JoinSet<_>, id: String, body: String, signer: &Verifier| {
            let headers = signer.sign(&id, body.as_bytes(), SystemTime::now());
            let url = url.clone();
            requests.spawn(async move {
                common::outcome(common::post(&url, &headers, body).await).await
            });
        };
    for _ in 0..copies {
        for e in 0..events {
            let id = format!("msg_{e}");
            let body = format!(r#"{{"id":"{id}","act":"apply"}}"#);
            send(&mut requests, id, body, &verifier);
        }
    }
    send(
        &mut requests,
        "msg_0".into(),
        r#"{"id":"msg_0","act":"apply","changed":true}"#.into(),
        &verifier,
    );
    let forger = Verifier::standard_webhooks(["whsec_Zm9yZ2VkLWZvcmdlZC1mb3JnZWQ="]).unwrap();
    send(
        &mut requests,
        "msg_forged".into(),
        r#"{"id":"msg_forged"}"#.into(),
        &forger,
    );
    let (mut queued, mut refused) = (0, 0);
    while let Some(answer) = requests.join_next().await {
        match answer.unwrap() {
            (202, o) if o == "queued" => queued += 1,
            (401, o) if o == "bad_signature" => refused += 1,
            other => panic!("unexpected answer {other:?}"),
        }
    }
    assert_eq!((queued, refused), (events * copies + 1, 1));
    assert_eq!(queue.len().await.unwrap(), (events * copies + 1) as i64);
    assert_eq!(
        db.effects().await,
        0,
        "nothing applied before the consumer runs"
    );

    let consumer = Consumer::new(
        "standard",
        db.store.clone(),
        Dequeue::new(&queue, common::Ledger::new(&db)),
    );
    let source = queue.source(Duration::from_secs(30)).stop_when_empty();
    consumer
        .run(source, CancellationToken::new())
        .await
        .unwrap();

    let (effects, distinct) = (db.effects().await, db.events().await);
    assert_eq!(
        (effects - distinct, events as i64 - distinct),
        (0, 0),
        "0 double, 0 lost"
    );
    assert_eq!(db.effects_of("msg_0").await, 1);
    assert_eq!(
        db.dead_letters_of("msg_0", "conflict").await,
        1,
        "the other copy of msg_0 is the conflict"
    );
    assert_eq!(db.effects_of("msg_forged").await, 0);
    assert_eq!(db.dead_letters().await, 1);
    assert_eq!(queue.len().await.unwrap(), 0, "the queue drained");
}
