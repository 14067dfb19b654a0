//! Shared helpers: a database per test (the testkit's `TestDb`: SKIPPED loudly when a server
//! is missing, failing under CI), and inbox rows to prune.
#![allow(dead_code)]

use oncely_ops::Ops;
use oncely_sql::{MySqlStore, PgStore, SqlTx, SqliteStore};
use oncely_testkit::test_db::TestDb;

/// A migrated SQLite store in `dir`.
pub async fn sqlite(dir: &tempfile::TempDir) -> (SqliteStore, Ops) {
    let url = format!("sqlite:{}", dir.path().join("ops.db").display());
    let store = SqliteStore::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let ops = Ops::from(&store);
    (store, ops)
}

/// A PostgreSQL store in a fresh schema (not migrated; dropped with the [`TestDb`]), or None
/// when the server is missing.
pub async fn postgres(test: &str) -> Option<(PgStore, Ops, TestDb)> {
    let db = TestDb::postgres(test).await?;
    let store = PgStore::connect_with(db.url(), &db.options())
        .await
        .expect("connecting to the test schema");
    let ops = Ops::from(&store);
    Some((store, ops, db))
}

/// A migrated MariaDB store in a fresh database (dropped with the [`TestDb`]), or None when
/// the server is missing.
pub async fn mysql(test: &str) -> Option<(MySqlStore, Ops, TestDb)> {
    let db = TestDb::mysql(test).await?;
    let store = MySqlStore::connect_with(db.url(), &db.options())
        .await
        .expect("connecting to the test database");
    store.migrate().await.unwrap();
    let ops = Ops::from(&store);
    Some((store, ops, db))
}

/// Ops on a store at `url` with `tables`, portable mode forced at connect
/// (`ConnectOptions::portable`, the one way to force it).
pub async fn portable(url: &str, tables: &oncely_sql::Tables) -> Ops {
    let options = oncely_sql::ConnectOptions {
        portable: true,
        tables: tables.clone(),
        ..Default::default()
    };
    let store = oncely_sql::AnyStore::connect_with(url, &options)
        .await
        .unwrap();
    assert!(store.portable(), "forced at connect");
    Ops::from(&store)
}

/// Inserts `count` ids received `age_ms` ago into the inbox of `ops`.
pub async fn fill(ops: &Ops, tag: &str, count: usize, age_ms: i64) {
    let at = oncely_sql::clock::now_ms() - age_ms;
    let inbox = ops.tables().inbox();
    for chunk in (0..count).collect::<Vec<_>>().chunks(500) {
        let values: Vec<String> = chunk
            .iter()
            .map(|i| format!("('c', '{tag}-{i}', 'h', {at})"))
            .collect();
        let sql = format!(
            "INSERT INTO {inbox} (consumer, message_id, payload_hash, received_at) VALUES {}",
            values.join(", ")
        );
        ops.pool().clone().script(&sql).await.unwrap();
    }
}
