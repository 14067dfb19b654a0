//! The partitioned inbox keeps the store's contract: one claim per (consumer, id) across
//! partitions, concurrent claims of one id wait and see Duplicate, and pruning drops days.

mod common;
use oncely_core::{Claim, ConsumerName, Inspect, MessageId, PayloadHash, Store};
use oncely_ops::partition;
use oncely_sql::Isolation;
use oncely_sql::clock::now_ms;
use oncely_sql::sqlx::{self, AssertSqlSafe};

const DAY: i64 = 86_400_000;

#[tokio::test]
async fn partitioned_inbox_claims_once_across_partitions() {
    let Some((store, ops, _db)) =
        common::postgres("partitioned_inbox_claims_once_across_partitions").await
    else {
        return;
    };
    let created = partition::install(&ops, 2).await.unwrap();
    assert_eq!(created.len(), 3);
    store.migrate().await.unwrap();
    assert!(partition::is_partitioned(&ops).await.unwrap());
    partition::ensure(&ops, now_ms() - 9 * DAY, 2)
        .await
        .unwrap();
    let c = ConsumerName::new("billing").unwrap();
    let h = PayloadHash::of(b"x");

    // An id claimed 8 days ago sits in an old partition: today's claim is still a duplicate.
    let inbox = ops.tables().inbox();
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {inbox} VALUES ('billing', 'old-1', $1, $2)"
    )))
    .bind(h.to_hex())
    .bind(now_ms() - 8 * DAY)
    .execute(store.pool())
    .await
    .unwrap();
    let mut tx = store.begin().await.unwrap();
    assert_eq!(
        store
            .claim(&mut tx, &c, &MessageId::new("old-1").unwrap(), h)
            .await
            .unwrap(),
        Claim::Duplicate
    );
    let other = PayloadHash::of(b"y");
    assert_eq!(
        store
            .claim(&mut tx, &c, &MessageId::new("old-1").unwrap(), other)
            .await
            .unwrap(),
        Claim::Conflict { stored: h }
    );
    store.rollback(tx).await.unwrap();

    // Concurrent claims of one id: the second waits for the first, then sees Duplicate.
    let id = MessageId::new("race-1").unwrap();
    let mut first = store.begin().await.unwrap();
    assert_eq!(
        store.claim(&mut first, &c, &id, h).await.unwrap(),
        Claim::Fresh
    );
    let second = {
        let (store, c, id) = (store.clone(), c.clone(), id.clone());
        tokio::spawn(async move {
            let mut tx = store.begin().await.unwrap();
            let claim = store.claim(&mut tx, &c, &id, h).await.unwrap();
            store.commit(tx).await.unwrap();
            claim
        })
    };
    tokio::task::yield_now().await;
    store.commit(first).await.unwrap();
    assert_eq!(second.await.unwrap(), Claim::Duplicate);
    // A rolled-back first claim lets the next one be Fresh.
    let id2 = MessageId::new("race-2").unwrap();
    let mut tx = store.begin().await.unwrap();
    assert_eq!(
        store.claim(&mut tx, &c, &id2, h).await.unwrap(),
        Claim::Fresh
    );
    store.rollback(tx).await.unwrap();
    let mut tx = store.begin().await.unwrap();
    assert_eq!(
        store.claim(&mut tx, &c, &id2, h).await.unwrap(),
        Claim::Fresh
    );
    store.commit(tx).await.unwrap();
    assert_eq!(store.claimed_hash(&c, "race-2").await.unwrap(), Some(h));
    let rows: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM {inbox} WHERE message_id LIKE 'race-%'"
    )))
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(rows, 2);

    // Under REPEATABLE READ the guard refuses rather than risk a double claim.
    let rr = store.clone().with_isolation(Isolation::RepeatableRead);
    let mut tx = rr.begin().await.unwrap();
    assert!(
        rr.claim(&mut tx, &c, &MessageId::new("rr-1").unwrap(), h)
            .await
            .is_err()
    );
    rr.rollback(tx).await.unwrap();

    // Pruning with a 7-day window drops the old partitions, not today's.
    let dropped = partition::drop_expired(&ops, now_ms() - 7 * DAY)
        .await
        .unwrap();
    assert!(dropped.len() >= 2, "{dropped:?}");
    assert_eq!(store.claimed_hash(&c, "old-1").await.unwrap(), None);
    assert_eq!(store.claimed_hash(&c, "race-1").await.unwrap(), Some(h));
}

#[tokio::test]
async fn stray_rows_in_the_default_partition_move_into_a_new_partition() {
    let Some((store, ops, _db)) = common::postgres("stray_rows_in_the_default_partition").await
    else {
        return;
    };
    partition::install(&ops, 1).await.unwrap();
    store.migrate().await.unwrap();
    // Ten days ahead has no partition yet: the row lands in the default partition.
    let at = now_ms() + 10 * DAY;
    let inbox = ops.tables().inbox();
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {inbox} VALUES ('c', 'future-1', 'h', $1)"
    )))
    .bind(at)
    .execute(store.pool())
    .await
    .unwrap();
    let created = partition::ensure(&ops, now_ms(), 11).await.unwrap();
    assert!(!created.is_empty());
    let in_default: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM {}",
        ops.tables().inbox_default()
    )))
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(in_default, 0);
    let total: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM {inbox} WHERE message_id = 'future-1'"
    )))
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(total, 1);
}

/// The group-commit path: oncely-sql claims a group with one lock statement and one checked
/// insert, and the guard trigger skips its own check for that insert only.
#[tokio::test]
async fn partitioned_inbox_batch_claims_once() {
    let Some((store, ops, _db)) = common::postgres("partitioned_inbox_batch_claims_once").await
    else {
        return;
    };
    partition::install(&ops, 1).await.unwrap();
    store.migrate().await.unwrap();
    partition::ensure(&ops, now_ms() - 3 * DAY, 1)
        .await
        .unwrap();
    let c = ConsumerName::new("billing").unwrap();
    let (h, other) = (PayloadHash::of(b"x"), PayloadHash::of(b"y"));
    let inbox = ops.tables().inbox();
    for id in ["old-1", "old-2"] {
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {inbox} VALUES ('billing', $1, $2, $3)"
        )))
        .bind(id)
        .bind(h.to_hex())
        .bind(now_ms() - 2 * DAY)
        .execute(store.pool())
        .await
        .unwrap();
    }
    let id = |s: &str| MessageId::new(s).unwrap();
    let items = vec![
        (id("new-1"), h),
        (id("old-1"), h),
        (id("old-2"), other),
        (id("new-2"), h),
        (id("new-1"), h),
    ];
    let mut tx = store.begin().await.unwrap();
    let claims = store.claim_batch(&mut tx, &c, &items).await.unwrap();
    assert_eq!(
        claims,
        [
            Claim::Fresh,
            Claim::Duplicate,
            Claim::Conflict { stored: h },
            Claim::Fresh,
            Claim::Duplicate
        ]
    );
    // The claim's planner setting is the user's again for the handler's statements.
    let seqscan: String = sqlx::query_scalar("SELECT current_setting('enable_seqscan')")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert_eq!(seqscan, "on");
    // The trigger's bypass lasted one statement: a single claim after it is guarded again.
    assert_eq!(
        store.claim(&mut tx, &c, &id("old-1"), h).await.unwrap(),
        Claim::Duplicate
    );
    store.commit(tx).await.unwrap();

    // Overlapping groups at once: every id fresh exactly once, one inbox row each.
    let ids: Vec<MessageId> = (0..200).map(|i| id(&format!("race-{i:03}"))).collect();
    let tasks: Vec<_> = (0..4)
        .map(|t| {
            let (store, c) = (store.clone(), c.clone());
            // Each group starts at another place, so the groups overlap in different orders.
            let mut group: Vec<(MessageId, PayloadHash)> =
                ids.iter().map(|i| (i.clone(), h)).collect();
            group.rotate_left(t * 50);
            tokio::spawn(async move {
                let mut tx = store.begin().await.unwrap();
                let claims = store.claim_batch(&mut tx, &c, &group).await.unwrap();
                store.commit(tx).await.unwrap();
                claims.iter().filter(|c| **c == Claim::Fresh).count()
            })
        })
        .collect();
    let mut fresh = 0;
    for task in tasks {
        fresh += task.await.unwrap();
    }
    assert_eq!(fresh, ids.len(), "each id fresh once over all groups");
    let rows: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM {inbox} WHERE message_id LIKE 'race-%'"
    )))
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(rows, ids.len() as i64, "one inbox row per id");

    // Under REPEATABLE READ the batch claim is refused too.
    let rr = store.clone().with_isolation(Isolation::RepeatableRead);
    let mut tx = rr.begin().await.unwrap();
    assert!(
        rr.claim_batch(&mut tx, &c, &[(id("rr-1"), h)])
            .await
            .is_err()
    );
    rr.rollback(tx).await.unwrap();
}
