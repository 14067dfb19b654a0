//! Portable mode (issue 16, item 5) on the real PostgreSQL and MariaDB servers, forced with
//! `ConnectOptions::portable`: the lease lock, portable migrations, the MySQL-family
//! `FOR UPDATE` claim read, serialization failures retried, and detection (false here).
//! The conformance suite with portable tables runs in `conformance_{postgres,mysql}.rs`.

mod common;

use common::{TestStore, missing, mysql, mysql_portable, mysql_url, pg_portable, pg_url, suite};
use oncely_core::{Claim, ConsumerName, ErrorKind, MessageId, PayloadHash, Store};
use oncely_sql::sqlx::{self, AssertSqlSafe};
use oncely_sql::{
    AnyPool, AnyStore, DbLock, Isolation, MySqlStore, PgStore, SqliteStore, Tables, with_pool,
};
use oncely_testkit::{FaultySource, SourceFaults};
use std::time::Duration;

async fn count(pool: &AnyPool, sql: String) -> i64 {
    with_pool!(pool, p => sqlx::query_scalar::<_, i64>(AssertSqlSafe(sql))
        .fetch_one(p)
        .await
        .expect("count"))
}

async fn exec(pool: &AnyPool, sql: String) {
    with_pool!(pool, p => {
        sqlx::raw_sql(AssertSqlSafe(sql)).execute(p).await.expect("exec");
    });
}

/// The lease excludes a second holder, hands over to a waiter on release, is taken over once
/// expired (the old holder's renewal then fails), and leaves no row behind when released.
async fn lease_excludes_and_expires(pool: AnyPool, tables: Tables) {
    let leases = tables.ops_leases();
    let first = DbLock::acquire(&pool, &tables, "job", false)
        .await
        .unwrap()
        .expect("the lock is free");
    let name = first.name().to_owned();
    let rows = format!("SELECT COUNT(*) FROM {leases} WHERE name = '{name}'");
    assert_eq!(
        count(&pool, rows.clone()).await,
        1,
        "a lease row, not a session lock"
    );
    assert!(
        DbLock::acquire(&pool, &tables, "job", false)
            .await
            .unwrap()
            .is_none(),
        "a second holder is refused while the first holds the lease"
    );
    // Another purpose is another lease.
    let other = DbLock::acquire(&pool, &tables, "other", false)
        .await
        .unwrap();
    other
        .expect("another name is free")
        .release()
        .await
        .unwrap();

    // A waiter gets it once the first releases.
    let waiter = tokio::spawn({
        let (pool, tables) = (pool.clone(), tables.clone());
        async move { DbLock::acquire(&pool, &tables, "job", true).await }
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !waiter.is_finished(),
        "the waiter waits while the lease is held"
    );
    first.release().await.unwrap();
    let mut second = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter took the lease after the release")
        .unwrap()
        .unwrap()
        .expect("waited for the lease");
    second.renew().await.expect("the holder renews");

    // The holder "crashes": its lease expires and someone else takes it over.
    exec(&pool, format!("UPDATE {leases} SET expires_at = 0")).await;
    let mut third = DbLock::acquire(&pool, &tables, "job", false)
        .await
        .unwrap()
        .expect("an expired lease is taken over");
    let e = second
        .renew()
        .await
        .expect_err("the old holder lost the lease");
    assert_eq!(e.kind(), ErrorKind::Transient, "{e}");
    third.renew().await.unwrap();
    // The old holder's release does not free the new holder's lease.
    second.release().await.unwrap();
    assert_eq!(count(&pool, rows.clone()).await, 1);
    third.release().await.unwrap();
    assert_eq!(count(&pool, rows).await, 0, "released: no row left");
}

#[tokio::test]
async fn pg_portable_lease_lock_excludes_and_expires() {
    let Some(fx) = pg_portable("pg_port_lease").await else {
        return;
    };
    assert!(fx.store.portable());
    lease_excludes_and_expires(fx.store.any_pool(), fx.tables().clone()).await;
}

#[tokio::test]
async fn mysql_portable_lease_lock_excludes_and_expires() {
    let Some(fx) = mysql_portable("my_port_lease").await else {
        return;
    };
    assert!(fx.store.portable());
    lease_excludes_and_expires(fx.store.any_pool(), fx.tables().clone()).await;
}

/// Two migrators on a fresh schema with portable tables, three rounds: each migration is
/// applied exactly once, both succeed, the lease table was used and is empty afterwards.
async fn concurrent_portable_migrations<S: TestStore>(url: &str, test: &str) {
    for _ in 0..3 {
        let schema = oncely_testkit::services::unique(test);
        let tables = Tables::default().with_schema(&schema).unwrap();
        let a = S::open_with(url, tables.clone(), true).await.unwrap();
        let b = S::open_with(url, tables.clone(), true).await.unwrap();
        let (ra, rb) = tokio::join!(a.migrate_now(), b.migrate_now());
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        assert_eq!(
            ra + rb,
            oncely_sql::INBOX.migrations(S::DIALECT).len(),
            "each migration applied exactly once ({ra} + {rb})"
        );
        assert_eq!(a.migrate_now().await.unwrap(), 0);
        let any: AnyStore = a.clone().into();
        let pool = any.pool();
        let leases = format!("SELECT COUNT(*) FROM {}", tables.ops_leases());
        assert_eq!(
            count(&pool, leases).await,
            0,
            "lease table used, lease released"
        );
        let ledger = format!("SELECT COUNT(*) FROM {}", tables.migration_ledger());
        assert_eq!(count(&pool, ledger).await, ra as i64 + rb as i64);
        let mut tx = a.begin().await.unwrap();
        let c = ConsumerName::new("c").unwrap();
        let x = MessageId::new("x").unwrap();
        let claim = a.claim(&mut tx, &c, &x, PayloadHash::of(b"x")).await;
        assert_eq!(claim.unwrap(), Claim::Fresh);
        a.commit(tx).await.unwrap();
        let drop = S::DIALECT.drop_schema_sql(&schema).unwrap();
        a.exec(drop).await.unwrap();
    }
}

#[tokio::test]
async fn pg_portable_concurrent_migrations_apply_once() {
    if let Err(e) = common::probe(&pg_url()).await {
        return missing(
            "PostgreSQL",
            "pg_portable_concurrent_migrations_apply_once",
            &e,
        );
    }
    concurrent_portable_migrations::<PgStore>(&pg_url(), "pg_port_mig").await;
}

#[tokio::test]
async fn mysql_portable_concurrent_migrations_apply_once() {
    if let Err(e) = common::probe(&mysql_url()).await {
        return missing(
            "MariaDB",
            "mysql_portable_concurrent_migrations_apply_once",
            &e,
        );
    }
    concurrent_portable_migrations::<MySqlStore>(&mysql_url(), "my_port_mig").await;
}

/// PostgreSQL at SERIALIZABLE (what CockroachDB always runs) with portable tables: the
/// duplicate claim that waited fails with 40001, which is retried (not dead-lettered) and
/// ends as `Duplicate`; the ledger holds the effect exactly once, no dead letters.
#[tokio::test]
async fn pg_portable_serializable_duplicate_is_retried_not_dead_lettered() {
    let Some(mut fx) = pg_portable("pg_port_40001").await else {
        return;
    };
    fx.store = fx.store.clone().with_isolation(Isolation::Serializable);
    fx.other = fx.other.clone().with_isolation(Isolation::Serializable);
    // Asserts one effect, `Applied` + `Duplicate`, no dead letters, both acked.
    let stats = suite::concurrent_duplicate(fx, false).await;
    assert!(stats.retries >= 1, "the 40001 was retried: {stats:?}");
    assert_eq!(stats.duplicates, 1, "{stats:?}");
    assert_eq!(stats.dead_lettered, 0, "{stats:?}");
}

/// MariaDB with portable tables at every level: the duplicate waits, then `Duplicate` (or
/// applies after the first rolled back); one effect.
#[tokio::test]
async fn mysql_portable_concurrent_duplicate() {
    for level in [
        None,
        Some(Isolation::ReadCommitted),
        Some(Isolation::Serializable),
    ] {
        let Some(mut fx) = mysql_portable("my_port_dup").await else {
            return;
        };
        if let Some(level) = level {
            fx.store = fx.store.clone().with_isolation(level);
            fx.other = fx.other.clone().with_isolation(level);
        }
        let stats = suite::concurrent_duplicate(fx, false).await;
        assert_eq!(stats.duplicates, 1, "{level:?}: {stats:?}");
    }
    if let Some(fx) = mysql_portable("my_port_dup_rb").await {
        let stats = suite::concurrent_duplicate(fx, true).await;
        assert_eq!(stats.applied, 1, "{stats:?}");
    }
}

/// The MySQL-family claim read of a duplicate is `FOR UPDATE` in portable mode (TiDB ignores
/// `LOCK IN SHARE MODE`): another session's shared read of that inbox row then times out,
/// whereas without portable mode (a shared lock) it does not.
#[tokio::test]
async fn mysql_portable_claim_read_is_for_update() {
    for portable in [false, true] {
        let fx = if portable {
            mysql_portable("my_port_xlock").await
        } else {
            mysql("my_port_xlock").await
        };
        let Some(fx) = fx else {
            return;
        };
        let s = &fx.store;
        let (c, x, h) = (
            ConsumerName::new("c").unwrap(),
            MessageId::new("X").unwrap(),
            PayloadHash::of(b"p"),
        );
        let mut tx = s.begin().await.unwrap();
        assert_eq!(s.claim(&mut tx, &c, &x, h).await.unwrap(), Claim::Fresh);
        s.commit(tx).await.unwrap();
        let mut tx = s.begin().await.unwrap();
        assert_eq!(s.claim(&mut tx, &c, &x, h).await.unwrap(), Claim::Duplicate);
        let mut conn = fx.other.pool().acquire().await.unwrap();
        sqlx::raw_sql("SET SESSION innodb_lock_wait_timeout = 1")
            .execute(&mut *conn)
            .await
            .unwrap();
        let read = format!(
            "SELECT payload_hash FROM {} WHERE consumer = 'c' AND message_id = 'X' LOCK IN SHARE MODE",
            fx.tables().inbox()
        );
        let shared = sqlx::raw_sql(AssertSqlSafe(read)).execute(&mut *conn).await;
        drop(conn);
        s.rollback(tx).await.unwrap();
        // Without forcing, the store may still have detected a distributed engine (a Galera
        // node given as the MariaDB URL): then the claim read is `FOR UPDATE` as well.
        let locked = fx.store.portable();
        assert!(locked || !portable, "forced portable mode is kept");
        if locked {
            let e = shared.expect_err("the claim read holds an exclusive lock");
            assert!(
                e.to_string().contains("1205") || e.to_string().contains("timeout"),
                "{e}"
            );
        } else {
            shared.expect("a shared claim read lets other shared reads through");
        }
    }
}

/// Detection finds no distributed engine on the local servers; forcing stays forced.
#[tokio::test]
async fn detection_is_false_on_local_postgres_mariadb_and_sqlite() {
    let sqlite = SqliteStore::connect("sqlite::memory:").await.unwrap();
    assert!(!sqlite.engine().portable() && sqlite.engine().caches_statements());
    assert!(!sqlite.portable());
    let forced = oncely_sql::ConnectOptions {
        portable: true,
        ..Default::default()
    };
    let sqlite = SqliteStore::connect_with("sqlite::memory:", &forced)
        .await
        .unwrap();
    assert!(sqlite.portable(), "forced at connect");

    for (server, url) in [("PostgreSQL", pg_url()), ("MariaDB", mysql_url())] {
        if let Err(e) = common::probe(&url).await {
            missing(server, "detection_is_false_on_local_servers", &e);
            continue;
        }
        let store = AnyStore::connect(&url).await.unwrap();
        let pool = store.pool();
        assert_eq!(
            pool.engine(),
            store.engine(),
            "{server}: the pool holds the store's facts"
        );
        assert!(
            !store.portable() && !pool.engine().portable(),
            "{server}: connect resolved to not portable"
        );
        assert!(
            store.engine().caches_statements(),
            "{server}: a direct connection"
        );
        let store = AnyStore::connect_with(&url, &forced).await.unwrap();
        assert!(store.portable(), "{server}: forced at connect");
        assert!(store.pool().engine().portable(), "{server}: its pool too");
    }
}

/// Two consumers (separate pools, 4 in flight each) drain one source with 30 % duplicate
/// deliveries, reordering and lost acks, with portable tables: every id's effect exactly
/// once, none lost, no dead letters. On PostgreSQL at SERIALIZABLE the concurrent duplicates
/// fail with 40001 and are retried.
async fn many_concurrent_duplicates<S: TestStore>(fx: common::Fx<S>, label: &str) {
    use oncely_core::{Consumer, RawEnvelope, RetryPolicy};
    let source = FaultySource::new(SourceFaults {
        seed: 16,
        duplicate_rate: 0.3,
        reorder_window: 8,
        lost_ack_rate: 0.05,
    });
    let mut published = std::collections::BTreeMap::new();
    for i in 0..300 {
        let (id, payload) = (format!("n{i:04}"), format!("credit {i}"));
        source.publish(RawEnvelope::new(id.clone(), payload.clone()));
        published.insert(id, payload);
    }
    source.close();
    let name = ConsumerName::new("portable").unwrap();
    let retry = RetryPolicy::default()
        .max_attempts(30)
        .base_delay(Duration::from_millis(5));
    let make = |store: AnyStore, instance| {
        Consumer::new(name.clone(), store, fx.ledger(instance))
            .concurrency(4)
            .retry(retry.clone())
    };
    let (one, two) = (make(fx.any(), "one"), make(fx.any_other(), "two"));
    let stop = tokio_util::sync::CancellationToken::new();
    let (a, b) = tokio::join!(
        one.run(source.clone(), stop.clone()),
        two.run(source.clone(), stop)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let mut counted = std::collections::BTreeMap::new();
    for (id, payload, _) in fx.effects().await {
        assert!(
            counted.insert(id.clone(), payload).is_none(),
            "{label}: double effect for {id}"
        );
    }
    assert_eq!(counted, published, "{label}: 0 double effects, 0 lost");
    assert_eq!(a.applied + b.applied, 300, "{label}: {a:?} {b:?}");
    assert_eq!(a.dead_lettered + b.dead_lettered, 0, "{label}");
    assert!(
        fx.store.dead_letters(None).await.unwrap().is_empty(),
        "{label}"
    );
    assert_eq!(source.unacked(), 0, "{label}");
    eprintln!(
        "{label}: applied {}, duplicates {}, retries {} (deliveries {})",
        a.applied + b.applied,
        a.duplicates + b.duplicates,
        a.retries + b.retries,
        a.received + b.received
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pg_portable_serializable_many_concurrent_duplicates_apply_once() {
    let Some(mut fx) = pg_portable("pg_port_many").await else {
        return;
    };
    fx.store = fx.store.clone().with_isolation(Isolation::Serializable);
    fx.other = fx.other.clone().with_isolation(Isolation::Serializable);
    many_concurrent_duplicates(fx, "PostgreSQL serializable portable").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mysql_portable_many_concurrent_duplicates_apply_once() {
    let Some(fx) = mysql_portable("my_port_many").await else {
        return;
    };
    many_concurrent_duplicates(fx, "MariaDB portable").await;
}
