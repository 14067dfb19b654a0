//! Test support: databases per test (SQLite temp file, a PostgreSQL schema, a MariaDB
//! database), skipping loudly when a server is missing unless `CI` / `ONCELY_REQUIRE_SERVICES`
//! (the rule and the URLs of `oncely_testkit::services`).
#![allow(dead_code)]

use oncely_sql::{INBOX, MySqlStore, PgStore, SqliteStore, Tables};
use std::time::Duration;

pub use oncely_testkit::services::{mysql_url, pg_url};

/// The testkit's rule ([`oncely_testkit::services::unavailable`]), as the `None` to return.
fn missing<T>(what: &str, test: &str, error: &dyn std::fmt::Display) -> Option<T> {
    oncely_testkit::services::unavailable(test, what, error);
    None
}

/// A unique lower-case suffix for schema / database names.
pub fn unique(test: &str) -> String {
    format!(
        "t_{}_{}_{:06x}",
        test,
        std::process::id(),
        rand_u32() & 0xff_ffff
    )
}

fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    );
    h.finish() as u32
}

/// A SQLite store in a temp dir, with oncely's and the effects tables.
pub async fn sqlite() -> (SqliteStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("test.db").display());
    let store = SqliteStore::connect(&url).await.unwrap();
    store
        .migrate_with(&[&INBOX, &oncely_effects::MIGRATIONS])
        .await
        .unwrap();
    (store, dir)
}

/// A PostgreSQL store in a fresh schema, or `None` (SKIPPED) without a server.
pub async fn postgres(test: &str) -> Option<PgStore> {
    postgres_at(test, &pg_url(), "PostgreSQL").await
}

/// [`postgres`] through the server at `url` (named `server` in messages), e.g. the test
/// PgBouncer.
pub async fn postgres_at(test: &str, url: &str, server: &str) -> Option<PgStore> {
    let tables = Tables::default().with_schema(&unique(test)).unwrap();
    let options = oncely_sql::ConnectOptions {
        tables,
        max_connections: 12,
        ..Default::default()
    };
    if let Err(why) = oncely_testkit::services::probe(url).await {
        return missing(server, test, &why);
    }
    let store = match tokio::time::timeout(
        Duration::from_secs(10),
        PgStore::connect_with(url, &options),
    )
    .await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return missing(server, test, &e),
        Err(e) => return missing(server, test, &e),
    };
    store
        .migrate_with(&[&INBOX, &oncely_effects::MIGRATIONS])
        .await
        .unwrap();
    Some(store)
}

/// A MySQL/MariaDB store in a fresh database, or `None` (SKIPPED) without a server.
pub async fn mysql(test: &str) -> Option<MySqlStore> {
    let tables = Tables::default().with_schema(&unique(test)).unwrap();
    let options = oncely_sql::ConnectOptions {
        tables,
        max_connections: 12,
        ..Default::default()
    };
    if let Err(why) = oncely_testkit::services::probe(&mysql_url()).await {
        return missing("MariaDB/MySQL", test, &why);
    }
    let store = match tokio::time::timeout(
        Duration::from_secs(10),
        MySqlStore::connect_with(&mysql_url(), &options),
    )
    .await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return missing("MariaDB/MySQL", test, &e),
        Err(e) => return missing("MariaDB/MySQL", test, &e),
    };
    store
        .migrate_with(&[&INBOX, &oncely_effects::MIGRATIONS])
        .await
        .unwrap();
    Some(store)
}

/// Drops a test's PostgreSQL schema (best effort).
pub async fn drop_pg(store: &PgStore) {
    if let Some(schema) = store.tables().schema() {
        let sql = format!("DROP SCHEMA IF EXISTS {schema} CASCADE");
        let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(store.pool())
            .await;
    }
}

/// Drops a test's MySQL database (best effort).
pub async fn drop_mysql(store: &MySqlStore) {
    if let Some(schema) = store.tables().schema() {
        let sql = format!("DROP DATABASE IF EXISTS {schema}");
        let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(store.pool())
            .await;
    }
}

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
