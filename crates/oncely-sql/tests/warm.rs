//! PostgreSQL's checked commit (`SELECT 1; COMMIT; BEGIN`) leaves an open, empty transaction;
//! the store keeps it for its next `begin` (crates/oncely-sql/src/warm.rs). These tests pin
//! what that may and may not do: it is taken by the next `begin` on the same connection, with
//! the store's isolation level; it is not taken once it is older than 50 ms; a connection
//! killed while kept costs one failed attempt, not a hang; and it never keeps a pool from
//! closing.

mod common;

use common::{HarnessStore, pg};
use oncely_core::{Claim, ConsumerName, ErrorKind, MessageId, PayloadHash, Store};
use oncely_sql::Isolation;
use oncely_sql::sqlx::{self, Postgres, Row, Transaction};
use std::time::Duration;

async fn backend_pid(tx: &mut Transaction<'static, Postgres>) -> i32 {
    sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut **tx)
        .await
        .unwrap()
}

/// How long before its first statement the transaction began (`statement_timestamp() - now()`).
async fn opened_before(tx: &mut Transaction<'static, Postgres>) -> Duration {
    let row = sqlx::raw_sql("SELECT extract(epoch from statement_timestamp() - now())::float8")
        .fetch_one(&mut **tx)
        .await
        .unwrap();
    Duration::from_secs_f64(row.get::<f64, _>(0))
}

/// The transaction's isolation level, as PostgreSQL names it.
async fn isolation_of(tx: &mut Transaction<'static, Postgres>) -> String {
    sqlx::query_scalar("SHOW transaction_isolation")
        .fetch_one(&mut **tx)
        .await
        .unwrap()
}

async fn commit_one(s: &oncely_sql::PgStore, id: &str) -> i32 {
    let c = ConsumerName::new("c").unwrap();
    let mut tx = s.begin().await.unwrap();
    let pid = backend_pid(&mut tx).await;
    let id = MessageId::new(id).unwrap();
    let claim = s.claim(&mut tx, &c, &id, PayloadHash::of(b"p")).await;
    assert_eq!(claim.unwrap(), Claim::Fresh);
    s.commit(tx).await.unwrap();
    pid
}

#[tokio::test]
async fn pg_next_begin_takes_the_transaction_the_commit_opened() {
    let Some(fx) = pg("pg_warm_taken").await else {
        return;
    };
    let s = fx.store.clone().with_isolation(Isolation::Serializable);
    let pid = commit_one(&s, "a").await;
    let mut tx = s.begin().await.unwrap();
    assert_eq!(backend_pid(&mut tx).await, pid, "same connection");
    assert_eq!(
        isolation_of(&mut tx).await,
        "serializable",
        "the store's isolation level is kept"
    );
    s.rollback(tx).await.unwrap();
    // A transaction kept by the store it was cloned from (default level) is not taken.
    commit_one(&fx.store, "b").await;
    let mut tx = s.begin().await.unwrap();
    assert_eq!(
        isolation_of(&mut tx).await,
        "serializable",
        "a clone's kept transaction was taken"
    );
    s.rollback(tx).await.unwrap();
}

#[tokio::test]
async fn pg_kept_transaction_older_than_50ms_is_not_taken() {
    let Some(fx) = pg("pg_warm_stale").await else {
        return;
    };
    let s = &fx.store;
    commit_one(s, "a").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut tx = s.begin().await.unwrap();
    let before = opened_before(&mut tx).await;
    assert!(
        before < Duration::from_millis(150),
        "a transaction opened {before:?} before its first statement was taken"
    );
    s.rollback(tx).await.unwrap();
    // While fresh, it is taken (so the check above can fail).
    commit_one(s, "b").await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let mut tx = s.begin().await.unwrap();
    assert!(opened_before(&mut tx).await >= Duration::from_millis(5));
    s.rollback(tx).await.unwrap();
}

#[tokio::test]
async fn pg_kept_connection_killed_fails_one_attempt_then_recovers() {
    let Some(fx) = pg("pg_warm_killed").await else {
        return;
    };
    let s = &fx.store;
    let c = ConsumerName::new("c").unwrap();
    let pid = commit_one(s, "a").await;
    let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(fx.other.pool())
        .await
        .unwrap();
    assert!(killed);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let id = MessageId::new("b").unwrap();
    let h = PayloadHash::of(b"p");
    let first = tokio::time::timeout(Duration::from_secs(10), async {
        let mut tx = s.begin().await?;
        s.claim(&mut tx, &c, &id, h).await?;
        s.commit(tx).await
    })
    .await
    .expect("an attempt on a killed connection must not hang");
    // Taken within 50 ms the killed connection fails the attempt with an error the runtime
    // retries; on a slow machine the kept one may have expired and the attempt succeeds.
    let expect = match &first {
        Err(e) => {
            let kind = e.kind();
            assert!(
                matches!(kind, ErrorKind::Unavailable | ErrorKind::Transient),
                "{kind:?}: {e}"
            );
            Claim::Fresh
        }
        Ok(()) => Claim::Duplicate,
    };
    let mut tx = s.begin().await.unwrap();
    assert_eq!(s.claim(&mut tx, &c, &id, h).await.unwrap(), expect);
    s.commit(tx).await.unwrap();
}

#[tokio::test]
async fn pg_kept_transactions_do_not_hold_a_pool_open() {
    let Some(fx) = pg("pg_warm_close").await else {
        return;
    };
    let s = &fx.store;
    for i in 0..4 {
        commit_one(s, &format!("m{i}")).await;
    }
    tokio::time::timeout(Duration::from_secs(5), s.pool().close())
        .await
        .expect("the pool closes once the kept transaction is rolled back");
    let e = s.begin().await.expect_err("a closed pool begins nothing");
    assert!(e.to_string().contains("closed"), "{e}");
    let _ = fx
        .other
        .exec(format!("DROP SCHEMA IF EXISTS {} CASCADE", fx.name()))
        .await;
}
