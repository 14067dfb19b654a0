//! Test support: databases per test (SQLite temp file, a PostgreSQL schema, a MariaDB
//! database), skipping loudly when a server is missing unless `CI` / `ONCELY_REQUIRE_SERVICES`
//! (the rule and the URLs of `oncely_testkit::services`).
#![allow(dead_code)]

use oncely_sql::{ConnectOptions, INBOX, MySqlStore, PgStore, SqliteStore, Tables};
use oncely_testkit::test_db::TestDb;
use std::time::Duration;

/// The store's options in `db`: its tables, 12 connections.
fn options(db: &TestDb) -> ConnectOptions {
    ConnectOptions {
        max_connections: 12,
        ..db.options()
    }
}

/// A SQLite store in a temp dir, with oncely's and the effects tables (the [`TestDb`] keeps
/// the file).
pub async fn sqlite() -> (SqliteStore, TestDb) {
    let db = TestDb::sqlite();
    let store = SqliteStore::connect(db.url()).await.unwrap();
    store
        .migrate_with(&[&INBOX, &oncely_effects::MIGRATIONS])
        .await
        .unwrap();
    (store, db)
}

/// A PostgreSQL store in a fresh schema (dropped with the [`TestDb`]), or `None` (SKIPPED)
/// without a server.
pub async fn postgres(test: &str) -> Option<(PgStore, TestDb)> {
    postgres_in(TestDb::postgres(test).await?).await
}

/// [`postgres`] through the server at `url` (named `server` in messages), e.g. the test
/// PgBouncer.
pub async fn postgres_at(test: &str, url: &str, server: &str) -> Option<(PgStore, TestDb)> {
    postgres_in(TestDb::on_server(test, url, server).await?).await
}

async fn postgres_in(db: TestDb) -> Option<(PgStore, TestDb)> {
    let options = options(&db);
    let connect = PgStore::connect_with(db.url(), &options);
    let store = tokio::time::timeout(Duration::from_secs(10), connect)
        .await
        .expect("connecting in 10 s")
        .expect("connecting to the test schema");
    store
        .migrate_with(&[&INBOX, &oncely_effects::MIGRATIONS])
        .await
        .unwrap();
    Some((store, db))
}

/// A MySQL/MariaDB store in a fresh database (dropped with the [`TestDb`]), or `None`
/// (SKIPPED) without a server.
pub async fn mysql(test: &str) -> Option<(MySqlStore, TestDb)> {
    let db = TestDb::mysql(test).await?;
    let options = options(&db);
    let connect = MySqlStore::connect_with(db.url(), &options);
    let store = tokio::time::timeout(Duration::from_secs(10), connect)
        .await
        .expect("connecting in 10 s")
        .expect("connecting to the test database");
    store
        .migrate_with(&[&INBOX, &oncely_effects::MIGRATIONS])
        .await
        .unwrap();
    Some((store, db))
}

/// A pool on `db` with portable mode forced at connect (`ConnectOptions::portable`, the one
/// way to force it), beside the store [`postgres`] or [`mysql`] opened there.
pub async fn portable_pool(db: &TestDb) -> oncely_sql::AnyPool {
    let options = ConnectOptions {
        portable: true,
        ..options(db)
    };
    let store = oncely_sql::AnyStore::connect_with(db.url(), &options)
        .await
        .unwrap();
    assert!(store.portable(), "forced at connect");
    store.pool()
}

/// The tests `$sqlite`, `$postgres` and `$mariadb`, each running
/// `$scenario(pool, tables)` on a database of its own with oncely's and the effects tables (a
/// server's test is SKIPPED loudly, or fails under CI, without it):
///
/// ```ignore
/// support::on_each_database!(two_relays: relays_on_sqlite, relays_on_postgres, relays_on_mariadb);
/// ```
#[allow(unused_macros)] // not every test file of the crate uses it
macro_rules! on_each_database {
    ($scenario:ident: $sqlite:ident, $postgres:ident, $mariadb:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $sqlite() {
            let (store, _db) = $crate::support::sqlite().await;
            $scenario(store.pool().clone(), store.tables().clone()).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $postgres() {
            if let Some((store, _db)) = $crate::support::postgres(stringify!($postgres)).await {
                $scenario(store.pool().clone(), store.tables().clone()).await;
            }
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $mariadb() {
            if let Some((store, _db)) = $crate::support::mysql(stringify!($mariadb)).await {
                $scenario(store.pool().clone(), store.tables().clone()).await;
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use on_each_database;

/// Published (id, entity key, outbox row id), in publish order.
pub type Log = std::sync::Arc<std::sync::Mutex<Vec<(String, String, i64)>>>;

/// Enqueues `n` outbox rows (one per incoming id `in-{i}`) over `entities` entity keys, each in
/// its own committed transaction; returns their ids.
/// The transactions come from `pool`, so the outbox reads its engine there (a store's
/// `any_pool()` carries the store's facts).
pub async fn enqueue_rows(
    pool: &oncely_sql::AnyPool,
    tables: &Tables,
    n: usize,
    entities: usize,
) -> std::collections::HashSet<String> {
    let outbox = oncely_effects::Outbox::new("test", tables.clone());
    enqueue_rows_in(pool, &outbox, n, entities).await
}

/// [`enqueue_rows`] through `outbox`.
pub async fn enqueue_rows_in(
    pool: &oncely_sql::AnyPool,
    outbox: &oncely_effects::Outbox,
    n: usize,
    entities: usize,
) -> std::collections::HashSet<String> {
    let mut ids = std::collections::HashSet::new();
    for i in 0..n {
        let mut tx = pool.begin().await.unwrap();
        let incoming = oncely_core::MessageId::new(format!("in-{i}")).unwrap();
        let msg =
            oncely_effects::Outgoing::new("topic", format!("e{}", i % entities), format!("p{i}"));
        ids.insert(
            outbox
                .enqueue(&mut tx, &incoming, 0, &msg)
                .await
                .unwrap()
                .to_string(),
        );
        tx.commit().await.unwrap();
    }
    ids
}
