//! A batch claim meets an uncommitted claim of another transaction: it waits on the row lock.

use super::{Fx, TestStore};
use oncely_core::{Claim, ConsumerName, MessageId, PayloadHash};

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
}
