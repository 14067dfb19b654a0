//! Typed payloads through `Json`: a handler receives the decoded value; a payload that does
//! not decode is dead-lettered `undecodable_payload` by the runtime (per message and in batch
//! mode), the other messages apply once each.

mod support;

use oncely_core::{
    CancellationToken, Consumer, ConsumerName, Envelope, Error, Handled, Json, JsonHandler,
    MemorySource, Outcome, RawEnvelope, Source,
};
use serde::Deserialize;
use std::sync::{Arc, Mutex};
use support::{MemStore, MemTx};

#[derive(Deserialize)]
struct Credit {
    amount: i64,
}

/// Writes one effect row per message and sums the decoded amounts it was handed.
#[derive(Clone, Default)]
struct Credits {
    handed: Arc<Mutex<i64>>,
}

impl JsonHandler<MemTx> for Credits {
    type Payload = Credit;

    async fn handle(
        &self,
        tx: &mut MemTx,
        message: &Envelope,
        credit: Credit,
    ) -> Result<Handled, Error> {
        *self.handed.lock().unwrap() += credit.amount;
        tx.effect(message.id().as_str());
        Ok(Handled::Applied)
    }
}

fn messages() -> Vec<RawEnvelope> {
    vec![
        RawEnvelope::new("c-1", r#"{"amount": 5}"#),
        RawEnvelope::new("c-2", r#"{"amount": 7}"#),
        RawEnvelope::new("bad-1", "five"),
        RawEnvelope::new("c-3", r#"{"amount": 1}"#),
        RawEnvelope::new("bad-2", r#"{"amount": "x"}"#),
        RawEnvelope::new("c-1", r#"{"amount": 5}"#),
    ]
}

#[tokio::test]
async fn undecodable_payloads_are_dead_lettered_with_their_reason() {
    let store = MemStore::default();
    let handler = Credits::default();
    let consumer = Consumer::new(
        ConsumerName::new("json").unwrap(),
        store.clone(),
        Json(handler.clone()),
    );
    let mut source = MemorySource::new();
    for m in messages() {
        source.publish(m);
    }
    source.close();
    let mut codes = Vec::new();
    while let Some(delivery) = source.next().await.unwrap() {
        match consumer.process(delivery).await {
            Outcome::DeadLettered(reason) => {
                assert!(reason.to_string().contains("not a JSON Credit"), "{reason}");
                codes.push(reason.code());
            }
            Outcome::Applied | Outcome::Duplicate => {}
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    assert_eq!(codes, ["undecodable_payload", "undecodable_payload"]);
    assert_eq!(store.dead_letters(), ["bad-1", "bad-2"]);
    let mut ledger = store.ledger();
    ledger.sort();
    assert_eq!(
        ledger,
        ["c-1", "c-2", "c-3"],
        "each good message applied once"
    );
    assert_eq!(*handler.handed.lock().unwrap(), 13, "the decoded amounts");
}

#[tokio::test]
async fn batch_mode_isolates_an_undecodable_payload() {
    let store = MemStore::default();
    let handler = Credits::default();
    let consumer = Consumer::new(
        ConsumerName::new("json").unwrap(),
        store.clone(),
        Json(handler.clone()),
    )
    .group_commit(10);
    let source = MemorySource::new();
    for m in messages() {
        source.publish(m);
    }
    source.close();
    let stats = consumer
        .run(source, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        (stats.applied, stats.duplicates, stats.dead_lettered),
        (3, 1, 2),
        "{stats:?}"
    );
    let mut letters = store.dead_letters();
    letters.sort();
    assert_eq!(letters, ["bad-1", "bad-2"]);
    let mut ledger = store.ledger();
    ledger.sort();
    assert_eq!(
        ledger,
        ["c-1", "c-2", "c-3"],
        "each good message applied once"
    );
    assert!(
        consumer.group_commit_stats().fallbacks >= 1,
        "the batch fell back to one at a time"
    );
}
