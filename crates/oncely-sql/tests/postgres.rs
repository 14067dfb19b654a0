//! PostgreSQL store against the real server: each test in its own schema.

mod common;

use common::{pg, suite};
use oncely_core::{Claim, ConsumerName, ErrorKind, MessageId, PayloadHash, Store};
use oncely_sql::sqlx;
use oncely_sql::{Isolation, PgStore};
use oncely_testkit::test_db::TestDb;

#[tokio::test]
async fn pg_migrate_twice_is_noop() {
    let Some(fx) = pg("pg_migrate_twice").await else {
        return;
    };
    suite::migrate_twice(fx).await;
}

#[tokio::test]
async fn pg_concurrent_migrators() {
    let Some(db) = TestDb::postgres("pg_conc_migrate").await else {
        return;
    };
    suite::concurrent_migrators::<PgStore>(db.url(), db.schema().unwrap()).await;
}

#[tokio::test]
async fn pg_custom_schema_and_prefix() {
    let Some(db) = TestDb::postgres("pg_prefix").await else {
        return;
    };
    suite::custom_prefix::<PgStore>(
        db.url(),
        db.schema(),
        "SELECT message_id, consumer, 'x' FROM {inbox}",
    )
    .await;
}

#[test]
fn configuration_injection_rejected() {
    suite::injection_rejected();
}

#[tokio::test]
async fn pg_credentials_not_in_errors() {
    let Some(_fx) = pg("pg_creds").await else {
        return;
    };
    let secret = "hunter2-S3cret";
    let urls = [
        format!("postgres://no_such_role:{secret}@127.0.0.1:5432/test"),
        format!("postgres://postgres:{secret}@127.0.0.1:1/test"),
        format!("postgres://postgres:{secret}@127.0.0.1:notaport/test"),
        format!("postgres://postgres:{secret}@127.0.0.1:5432/no_such_db_x"),
    ];
    suite::credentials_not_in_errors::<PgStore>(&urls, secret).await;
}

#[tokio::test]
async fn pg_concurrent_duplicate_waits_then_duplicate() {
    let Some(fx) = pg("pg_conc_dup").await else {
        return;
    };
    suite::concurrent_duplicate(fx, false).await;
}

#[tokio::test]
async fn pg_concurrent_duplicate_after_rollback_applies() {
    let Some(fx) = pg("pg_conc_rb").await else {
        return;
    };
    suite::concurrent_duplicate(fx, true).await;
}

#[tokio::test]
async fn pg_default_isolation_is_read_committed() {
    let Some(fx) = pg("pg_iso_default").await else {
        return;
    };
    for (store, expected) in [
        (fx.store.clone(), "read committed"),
        (
            fx.store.clone().with_isolation(Isolation::RepeatableRead),
            "repeatable read",
        ),
        (
            fx.store.clone().with_isolation(Isolation::Serializable),
            "serializable",
        ),
        (
            fx.store.clone().with_isolation(Isolation::ReadCommitted),
            "read committed",
        ),
    ] {
        let mut tx = store.begin().await.unwrap();
        let level: String = sqlx::query_scalar("SHOW transaction_isolation")
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        assert_eq!(level, expected);
        store.rollback(tx).await.unwrap();
    }
}

/// Under SERIALIZABLE (and REPEATABLE READ) the claim that waited for a concurrent commit of
/// the same id fails with 40001; it is transient, so the runtime retries and sees `Duplicate`.
#[tokio::test]
async fn pg_serializable_concurrent_duplicate_retries_then_duplicate() {
    for level in [Isolation::Serializable, Isolation::RepeatableRead] {
        let Some(mut fx) = pg("pg_serializable").await else {
            return;
        };
        fx.store = fx.store.clone().with_isolation(level);
        fx.other = fx.other.clone().with_isolation(level);
        let stats = suite::concurrent_duplicate(fx, false).await;
        assert!(
            stats.retries >= 1,
            "{level:?}: the 40001 was retried: {stats:?}"
        );
        assert_eq!(stats.duplicates, 1, "{level:?}: {stats:?}");
    }
}

/// The raw claim under SERIALIZABLE: the error is transient and names the serialization failure.
#[tokio::test]
async fn pg_serialization_failure_is_transient() {
    let Some(fx) = pg("pg_40001").await else {
        return;
    };
    let (s1, s2) = (
        fx.store.clone().with_isolation(Isolation::Serializable),
        fx.other.clone().with_isolation(Isolation::Serializable),
    );
    let c = ConsumerName::new("c").unwrap();
    let x = MessageId::new("X").unwrap();
    let h = PayloadHash::of(b"p");
    let mut t1 = s1.begin().await.unwrap();
    assert_eq!(s1.claim(&mut t1, &c, &x, h).await.unwrap(), Claim::Fresh);
    let waiter = tokio::spawn(async move {
        let mut t2 = s2.begin().await.unwrap();
        s2.claim(&mut t2, &c, &x, h).await
    });
    assert!(fx.until_lock_wait().await);
    s1.commit(t1).await.unwrap();
    let e = waiter.await.unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Transient, "{e}");
    assert!(
        e.to_string().contains("40001") || e.to_string().contains("serialize"),
        "{e}"
    );
}

/// Two claims in opposite orders: PostgreSQL aborts one with 40P01, classified transient.
#[tokio::test]
async fn pg_deadlock_is_transient() {
    let Some(fx) = pg("pg_deadlock").await else {
        return;
    };
    let c = ConsumerName::new("c").unwrap();
    let (a, b) = (MessageId::new("A").unwrap(), MessageId::new("B").unwrap());
    let h = PayloadHash::of(b"p");
    let (s1, s2) = (fx.store.clone(), fx.other.clone());
    let mut t1 = s1.begin().await.unwrap();
    let mut t2 = s2.begin().await.unwrap();
    assert_eq!(s1.claim(&mut t1, &c, &a, h).await.unwrap(), Claim::Fresh);
    assert_eq!(s2.claim(&mut t2, &c, &b, h).await.unwrap(), Claim::Fresh);
    let (r1, r2) = tokio::join!(
        async {
            let r = s1.claim(&mut t1, &c, &b, h).await;
            let _ = s1.rollback(t1).await;
            r
        },
        async {
            let r = s2.claim(&mut t2, &c, &a, h).await;
            let _ = s2.rollback(t2).await;
            r
        }
    );
    let failed: Vec<_> = [&r1, &r2]
        .into_iter()
        .filter_map(|r| r.as_ref().err())
        .collect();
    assert_eq!(failed.len(), 1, "exactly one victim: {r1:?} {r2:?}");
    assert_eq!(failed[0].kind(), ErrorKind::Transient, "{}", failed[0]);
    assert!(failed[0].to_string().contains("deadlock"), "{}", failed[0]);
}
