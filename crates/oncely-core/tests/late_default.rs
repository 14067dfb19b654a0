//! Late detection is on by default and agrees with the default retention window: a fresh
//! message whose source time is older than [`DEFAULT_RETENTION`] is dead-lettered `late`
//! (its claim may have been pruned), a younger one is applied, one with no source time is
//! applied, and a source time in the future (a producer clock ahead) is treated as now.

mod support;

use oncely_core::{
    Consumer, ConsumerName, DEFAULT_RETENTION, LatePolicy, MemorySource, RawEnvelope,
};
use std::time::{Duration, SystemTime};
use support::{Ledger, MemStore};
use tokio_util::sync::CancellationToken;

const DAY: Duration = Duration::from_secs(24 * 3600);

fn message(id: &str, source_time: Option<SystemTime>) -> RawEnvelope {
    let mut raw = RawEnvelope::new(id, "5");
    raw.meta.source_time = source_time;
    raw
}

async fn run(consumer: Consumer<MemStore, Ledger>) {
    let now = SystemTime::now();
    let source = MemorySource::new();
    source.publish(message("old", Some(now - DEFAULT_RETENTION - DAY)));
    source.publish(message("young", Some(now - DEFAULT_RETENTION + DAY)));
    source.publish(message("untimed", None));
    source.publish(message("future", Some(now + 30 * DAY)));
    source.close();
    consumer
        .run(source, CancellationToken::new())
        .await
        .unwrap();
}

#[tokio::test]
async fn messages_older_than_the_default_retention_are_quarantined() {
    let store = MemStore::default();
    let consumer = Consumer::new(
        ConsumerName::new("late").unwrap(),
        store.clone(),
        Ledger::default(),
    );
    run(consumer).await;
    let mut applied = store.ledger();
    applied.sort();
    assert_eq!(applied, ["future", "untimed", "young"], "applied once each");
    assert_eq!(
        store.dead_letters(),
        ["old"],
        "the late one is dead-lettered, not lost"
    );
}

#[tokio::test]
async fn apply_policy_turns_the_default_check_off() {
    let store = MemStore::default();
    let consumer = Consumer::new(
        ConsumerName::new("late").unwrap(),
        store.clone(),
        Ledger::default(),
    )
    .late_after(DEFAULT_RETENTION, LatePolicy::Apply);
    run(consumer).await;
    assert_eq!(store.ledger().len(), 4);
    assert!(store.dead_letters().is_empty());
}
