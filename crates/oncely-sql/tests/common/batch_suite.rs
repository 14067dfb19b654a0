//! Batch mode on every store: one-statement claims with intra-batch duplicates, and the
//! batch mode (`Consumer::group_commit`) isolating a failing message while the others apply once.

use super::{Fx, TestStore};
use oncely_core::{
    Claim, Consumer, ConsumerName, MemorySource, MessageId, Outcome, PayloadHash, RawEnvelope,
    RetryPolicy, Source,
};
use oncely_sql::AnyStore;
use oncely_testkit::{FaultySource, SourceFaults};
use std::collections::BTreeMap;
use std::time::Duration;

fn item(id: &str, payload: &str) -> (MessageId, PayloadHash) {
    (
        MessageId::new(id).unwrap(),
        PayloadHash::of(payload.as_bytes()),
    )
}

/// A batch claim meets an id another transaction claimed and has not committed: it waits,
/// then sees `Duplicate` (the other committed) or `Fresh` (the other rolled back). On MySQL
/// this takes the savepoint fallback (the multi-row INSERT IGNORE inserted fewer rows).
pub async fn batch_waits_for_concurrent_claim<S: TestStore>(fx: Fx<S>, other_rolls_back: bool) {
    let c = ConsumerName::new("batcher").unwrap();
    let (first, batcher) = (fx.other.clone(), fx.store.clone());
    let x = item("x", "one");
    let mut t1 = first.begin().await.unwrap();
    assert_eq!(
        first.claim(&mut t1, &c, &x.0, x.1).await.unwrap(),
        Claim::Fresh
    );
    let waiting = tokio::spawn({
        let c = c.clone();
        async move {
            let batch = [item("w", "one"), item("x", "one"), item("y", "one")];
            let mut t2 = batcher.begin().await.unwrap();
            let claims = batcher.claim_batch(&mut t2, &c, &batch).await.unwrap();
            batcher.commit(t2).await.unwrap();
            claims
        }
    });
    let observed = fx.until_lock_wait().await;
    assert!(
        !waiting.is_finished(),
        "the batch must wait (lock wait observed: {observed})"
    );
    if other_rolls_back {
        first.rollback(t1).await.unwrap();
    } else {
        first.commit(t1).await.unwrap();
    }
    let claims = waiting.await.unwrap();
    let x_claim = if other_rolls_back {
        Claim::Fresh
    } else {
        Claim::Duplicate
    };
    assert_eq!(claims, vec![Claim::Fresh, x_claim, Claim::Fresh]);
    for id in ["w", "x", "y"] {
        assert_eq!(
            fx.store.claimed_hash(&c, id).await.unwrap(),
            Some(x.1),
            "{id}"
        );
    }
    fx.cleanup().await;
}

/// Expected ledger for the published messages: the first copy of each id applies, except
/// ids whose handler fails permanently. Computed from what was published, not from outcomes.
fn expected(published: &[(String, String)]) -> BTreeMap<String, String> {
    let mut first = BTreeMap::new();
    for (id, payload) in published {
        first.entry(id.clone()).or_insert_with(|| payload.clone());
    }
    first.retain(|_, p| !p.starts_with("fail:permanent"));
    first
}

/// One batch holding duplicates, a conflicting copy, a permanently failing message and a
/// flaky one: the batch rolls back, the messages are isolated one at a time, the failing one
/// is dead-lettered, every other id applies exactly once, and everything is acked.
pub async fn batch_isolates_failure<S: TestStore>(fx: Fx<S>, multi_row: bool) {
    let mut published = vec![];
    for i in 0..20 {
        let payload = match i {
            10 => "fail:permanent".to_owned(),
            12 => "flaky credit".to_owned(),
            _ => format!("credit {i}"),
        };
        published.push((format!("m{i:02}"), payload));
        if i == 3 || i == 5 {
            published.push((format!("m{i:02}"), format!("credit {i}")));
        }
        if i == 7 {
            published.push(("m07".to_owned(), "credit 700".to_owned()));
        }
    }
    let (outcomes, batches) = run_batches(&fx, &published, 64, multi_row).await;
    assert_eq!(
        batches.fallbacks, 1,
        "the failing message rolled the batch back"
    );
    let effects = fx.effects().await;
    let mut counted: BTreeMap<String, String> = BTreeMap::new();
    for (id, payload, _) in &effects {
        assert!(
            counted.insert(id.clone(), payload.clone()).is_none(),
            "double effect for {id}"
        );
    }
    assert_eq!(counted, expected(&published), "0 double effects, 0 lost");
    assert_eq!(effects.len(), 19);
    let name = ConsumerName::new("batcher").unwrap();
    let letters = fx.store.dead_letters(Some(&name)).await.unwrap();
    let mut reasons: Vec<_> = letters
        .iter()
        .map(|l| (l.message_id.clone().unwrap_or_default(), l.reason.clone()))
        .collect();
    reasons.sort();
    assert_eq!(
        reasons,
        vec![
            ("m07".into(), "conflict".into()),
            ("m10".into(), "permanent".into())
        ]
    );
    let dups = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Duplicate))
        .count();
    assert_eq!(dups, 2, "{outcomes:?}");
    fx.cleanup().await;
}

/// A batch without failures commits in one transaction: same per-message outcomes, and
/// intra-batch duplicates don't trip the statement (no SQLSTATE 21000).
pub async fn batch_commits_once<S: TestStore>(fx: Fx<S>, multi_row: bool) {
    let published: Vec<(String, String)> = [
        ("a", "credit 1"),
        ("b", "credit 2"),
        ("a", "credit 1"),
        ("c", "credit 3"),
        ("b", "credit 99"),
        ("a", "credit 1"),
    ]
    .iter()
    .map(|(i, p)| ((*i).to_owned(), (*p).to_owned()))
    .collect();
    let (outcomes, batches) = run_batches(&fx, &published, 64, multi_row).await;
    assert_eq!(
        (batches.committed, batches.fallbacks),
        (1, 0),
        "one transaction"
    );
    let names: Vec<_> = outcomes.iter().map(Outcome::name).collect();
    assert_eq!(
        names,
        [
            "applied",
            "applied",
            "duplicate",
            "applied",
            "conflict",
            "duplicate"
        ]
    );
    let effects: Vec<_> = fx
        .effects()
        .await
        .into_iter()
        .map(|(i, p, _)| (i, p))
        .collect();
    let want: Vec<_> = expected(&published).into_iter().collect();
    assert_eq!(effects, want);
    fx.cleanup().await;
}

/// A late message (source time beyond the window) leaves the batch and is quarantined; the
/// rest of the batch commits together.
pub async fn batch_quarantines_late<S: TestStore>(fx: Fx<S>) {
    use oncely_core::LatePolicy;
    let mut source = MemorySource::new();
    let old = std::time::SystemTime::now() - Duration::from_secs(3600);
    let mut late = RawEnvelope::new("old", "credit 1");
    late.meta.source_time = Some(old);
    source.publish(RawEnvelope::new("a", "credit 2"));
    source.publish(late);
    source.publish(RawEnvelope::new("b", "credit 3"));
    source.close();
    let name = ConsumerName::new("batcher").unwrap();
    let consumer = Consumer::new(name.clone(), fx.any(), fx.ledger("one"))
        .late_after(Duration::from_secs(60), LatePolicy::Quarantine);
    let mut batch = vec![];
    for _ in 0..3 {
        batch.push(source.next().await.unwrap().unwrap());
    }
    let names: Vec<_> = consumer
        .process_batch(batch)
        .await
        .iter()
        .map(Outcome::name)
        .collect();
    assert_eq!(names, ["applied", "dead_lettered", "applied"]);
    assert_eq!(consumer.group_commit_stats().committed, 1);
    let ids: Vec<_> = fx
        .effects()
        .await
        .into_iter()
        .map(|(id, _, _)| id)
        .collect();
    assert_eq!(ids, ["a", "b"]);
    let letters = fx.store.dead_letters(Some(&name)).await.unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].reason, "late");
    assert_eq!(source.unacked(), 0);
    fx.cleanup().await;
}

/// Two batch consumers on separate pools draining one source full of duplicates.
pub async fn two_batch_consumers<S: TestStore>(fx: Fx<S>) {
    let source = FaultySource::new(SourceFaults {
        seed: 7,
        duplicate_rate: 0.3,
        reorder_window: 8,
        lost_ack_rate: 0.05,
    });
    let mut published = vec![];
    for i in 0..300 {
        let (id, payload) = (format!("n{i:04}"), format!("credit {i}"));
        source.publish(RawEnvelope::new(id.clone(), payload.clone()));
        published.push((id, payload));
    }
    source.close();
    let name = ConsumerName::new("batcher").unwrap();
    let retry = RetryPolicy::default()
        .max_attempts(20)
        .base_delay(Duration::from_millis(5));
    let make = |store: AnyStore, instance| {
        Consumer::new(name.clone(), store, fx.ledger(instance))
            .group_commit(25)
            .linger(Duration::from_millis(5))
            .retry(retry.clone())
    };
    let (one, two) = (make(fx.any(), "one"), make(fx.any_other(), "two"));
    let stop = tokio_util::sync::CancellationToken::new();
    let (a, b) = tokio::join!(
        one.run(source.clone(), stop.clone()),
        two.run(source.clone(), stop)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let effects = fx.effects().await;
    let mut counted = BTreeMap::new();
    for (id, payload, _) in &effects {
        assert!(
            counted.insert(id.clone(), payload.clone()).is_none(),
            "double effect for {id}"
        );
    }
    assert_eq!(counted, expected(&published), "0 double effects, 0 lost");
    assert_eq!(a.applied + b.applied, 300, "{a:?} {b:?}");
    assert_eq!(source.unacked(), 0);
    assert!(fx.store.dead_letters(None).await.unwrap().is_empty());
    let (one, two) = (one.group_commit_stats(), two.group_commit_stats());
    assert!(one.committed + two.committed > 0, "{one:?} {two:?}");
    eprintln!("two batch consumers: {one:?} {two:?}; {a:?} {b:?}");
    fx.cleanup().await;
}

/// Publishes `published` and runs a batch consumer over it until the source is drained.
/// Returns the outcomes (one batch) and how the batch went.
async fn run_batches<S: TestStore>(
    fx: &Fx<S>,
    published: &[(String, String)],
    group_commit: usize,
    multi_row: bool,
) -> (Vec<Outcome>, oncely_core::GroupCommitStats) {
    let mut source = MemorySource::new();
    for (id, payload) in published {
        source.publish(RawEnvelope::new(id.clone(), payload.clone()));
    }
    source.close();
    let name = ConsumerName::new("batcher").unwrap();
    let ledger = if multi_row {
        fx.ledger("one").multi_row()
    } else {
        fx.ledger("one")
    };
    let consumer = Consumer::new(name, fx.any(), ledger)
        .group_commit(group_commit)
        .retry(RetryPolicy::default().base_delay(Duration::from_millis(5)));
    let mut batch = vec![];
    while batch.len() < published.len() {
        batch.push(source.next().await.unwrap().unwrap());
    }
    let outcomes = consumer.process_batch(batch).await;
    assert_eq!(source.unacked(), 0, "every delivery settled: {outcomes:?}");
    (outcomes, consumer.group_commit_stats())
}
