//! MariaDB / MySQL store against the real server: each test in its own database.

mod common;

use common::{HarnessStore, mysql, suite};
use oncely_core::{Claim, ConsumerName, ErrorKind, MessageId, PayloadHash, Store};
use oncely_sql::MySqlStore;
use oncely_sql::sqlx::{self, AssertSqlSafe};
use oncely_testkit::test_db::TestDb;

#[tokio::test]
async fn mysql_migrate_twice_is_noop() {
    let Some(fx) = mysql("my_migrate_twice").await else {
        return;
    };
    suite::migrate_twice(fx).await;
}

#[tokio::test]
async fn mysql_concurrent_migrators() {
    let Some(db) = TestDb::mysql("my_conc_migrate").await else {
        return;
    };
    suite::concurrent_migrators::<MySqlStore>(db.url(), db.schema().unwrap()).await;
}

#[tokio::test]
async fn mysql_custom_schema_and_prefix() {
    let Some(db) = TestDb::mysql("my_prefix").await else {
        return;
    };
    suite::custom_prefix::<MySqlStore>(
        db.url(),
        db.schema(),
        "SELECT CAST(message_id AS CHAR), CAST(consumer AS CHAR), 'x' FROM {inbox}",
    )
    .await;
}

#[tokio::test]
async fn mysql_credentials_not_in_errors() {
    let Some(_fx) = mysql("my_creds").await else {
        return;
    };
    let secret = "hunter2-S3cret";
    let urls = [
        format!("mysql://root:{secret}@127.0.0.1:3306/test"),
        format!("mysql://no_such_user:{secret}@127.0.0.1:3306/test"),
        format!("mysql://root:{secret}@127.0.0.1:1/test"),
        format!("mysql://root:{secret}@127.0.0.1:notaport/test"),
        format!("mariadb://root:{secret}@127.0.0.1:3306/test?ssl-mode=bogus"),
    ];
    suite::credentials_not_in_errors::<MySqlStore>(&urls, secret).await;
}

#[tokio::test]
async fn mysql_concurrent_duplicate_waits_then_duplicate() {
    let Some(fx) = mysql("my_conc_dup").await else {
        return;
    };
    suite::concurrent_duplicate(fx, false).await;
}

#[tokio::test]
async fn mysql_concurrent_duplicate_after_rollback_applies() {
    let Some(fx) = mysql("my_conc_rb").await else {
        return;
    };
    suite::concurrent_duplicate(fx, true).await;
}

/// Two claims taken in opposite orders deadlock; InnoDB aborts one with error 1213, which
/// oncely classifies as transient (the runtime retries it).
#[tokio::test]
async fn mysql_deadlock_is_transient() {
    let Some(fx) = mysql("my_deadlock").await else {
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
            if r.is_err() {
                let _ = s1.rollback(t1).await;
            } else {
                let _ = s1.commit(t1).await;
            }
            r
        },
        async {
            let r = s2.claim(&mut t2, &c, &a, h).await;
            if r.is_err() {
                let _ = s2.rollback(t2).await;
            } else {
                let _ = s2.commit(t2).await;
            }
            r
        }
    );
    let failed: Vec<_> = [&r1, &r2]
        .into_iter()
        .filter_map(|r| r.as_ref().err())
        .collect();
    assert_eq!(failed.len(), 1, "exactly one victim: {r1:?} {r2:?}");
    let e = failed[0];
    assert_eq!(e.kind(), ErrorKind::Transient, "{e}");
    assert!(
        format!("{e}").contains("1213") || format!("{e}").to_lowercase().contains("deadlock"),
        "{e}"
    );
}

/// A claim that waits longer than `innodb_lock_wait_timeout` fails with error 1205: transient.
#[tokio::test]
async fn mysql_lock_wait_timeout_is_transient() {
    let Some(fx) = mysql("my_lockwait").await else {
        return;
    };
    let c = ConsumerName::new("c").unwrap();
    let x = MessageId::new("X").unwrap();
    let h = PayloadHash::of(b"p");
    let mut t1 = fx.store.begin().await.unwrap();
    assert_eq!(
        fx.store.claim(&mut t1, &c, &x, h).await.unwrap(),
        Claim::Fresh
    );
    let mut t2 = fx.other.begin().await.unwrap();
    sqlx::query(AssertSqlSafe(
        "SET SESSION innodb_lock_wait_timeout = 1".to_owned(),
    ))
    .execute(&mut *t2)
    .await
    .unwrap();
    let e = fx.other.claim(&mut t2, &c, &x, h).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Transient, "{e}");
    assert!(
        format!("{e}").contains("1205") || format!("{e}").contains("Lock wait timeout"),
        "{e}"
    );
    drop(t2);
    fx.store.commit(t1).await.unwrap();
}

/// Under READ COMMITTED, REPEATABLE READ (InnoDB's default) and SERIALIZABLE, a concurrent
/// duplicate waits and then sees `Duplicate` (the claim's hash lookup is a locking read).
#[tokio::test]
async fn mysql_isolation_levels_all_see_duplicates() {
    use oncely_sql::Isolation::*;
    for level in [ReadCommitted, RepeatableRead, Serializable] {
        let Some(mut fx) = mysql("my_iso").await else {
            return;
        };
        fx.store = fx.store.clone().with_isolation(level);
        fx.other = fx.other.clone().with_isolation(level);
        suite::concurrent_duplicate(fx, false).await;
    }
}

/// The isolation level really applies: under READ COMMITTED a second read sees a row
/// committed meanwhile, under REPEATABLE READ it does not.
#[tokio::test]
async fn mysql_isolation_level_applies() {
    use oncely_sql::Isolation::*;
    let Some(fx) = mysql("my_iso_applies").await else {
        return;
    };
    let count = format!("SELECT COUNT(*) FROM {}", fx.ledger_table);
    let insert = format!(
        "INSERT INTO {} (message_id, payload, instance) VALUES ('r', 'p', 'x')",
        fx.ledger_table
    );
    let mut seen = vec![];
    for level in [ReadCommitted, RepeatableRead] {
        let store = fx.store.clone().with_isolation(level);
        let mut tx = store.begin().await.unwrap();
        let before: i64 = sqlx::query_scalar(AssertSqlSafe(count.clone()))
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        fx.other.exec(insert.clone()).await.unwrap();
        let after: i64 = sqlx::query_scalar(AssertSqlSafe(count.clone()))
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        seen.push(after - before);
        store.rollback(tx).await.unwrap();
    }
    assert_eq!(
        seen,
        vec![1, 0],
        "READ COMMITTED sees the new row, REPEATABLE READ does not"
    );
}

/// Three deliveries of one id: consumer 1 holds it and then rolls back, consumers 2 and 3
/// wait. InnoDB may abort one waiter with a deadlock (both held the duplicate-key shared
/// lock and want the exclusive one); that error is transient, so the retry sees `Duplicate`.
/// Exactly one effect either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_three_way_duplicate_after_rollback_applies_once() {
    use common::Gate;
    use oncely_core::{Consumer, Outcome, RetryPolicy};
    use std::time::Duration;
    let Some(fx) = mysql("my_three_way").await else {
        return;
    };
    let name = ConsumerName::new("billing").unwrap();
    let retry = RetryPolicy::default()
        .max_attempts(10)
        .base_delay(Duration::from_millis(20));
    let gate = Gate::new();
    let c1 = Consumer::new(
        name.clone(),
        fx.any(),
        fx.ledger("one").gated(gate.clone(), true),
    )
    .retry(retry.clone());
    let c2 = Consumer::new(name.clone(), fx.any_other(), fx.ledger("two")).retry(retry.clone());
    let c3 = Consumer::new(
        name.clone(),
        oncely_sql::AnyStore::from(fx.open_another().await),
        fx.ledger("three"),
    )
    .retry(retry);
    let delivery = || suite::delivery("X", b"credit 5".to_vec());
    let ((d1, _s1), (d2, _s2), (d3, _s3)) = (delivery(), delivery(), delivery());
    let first = tokio::spawn(async move { c1.process(d1).await });
    gate.entered().await;
    let (c2b, c3b) = (c2.clone(), c3.clone());
    let second = tokio::spawn(async move { c2b.process(d2).await });
    let third = tokio::spawn(async move { c3b.process(d3).await });
    assert!(fx.until_lock_waiters(2).await);
    gate.release();
    let o1 = first.await.unwrap();
    let (o2, o3) = (second.await.unwrap(), third.await.unwrap());
    assert!(matches!(o1, Outcome::DeadLettered(_)), "{o1:?}");
    let mut names = [o2.name(), o3.name()];
    names.sort();
    assert_eq!(names, ["applied", "duplicate"], "{o2:?} {o3:?}");
    assert_eq!(fx.effects().await.len(), 1, "exactly one effect");
    let retries = c2.stats().snapshot().retries + c3.stats().snapshot().retries;
    eprintln!("three-way duplicate: {retries} deadlock retries");
}
