//! Shared helpers: databases for the tests (SKIPPED loudly when a server is missing, failing
//! under CI: `oncely_testkit::services`).
#![allow(dead_code)]

use oncely_ops::Ops;
use oncely_sql::{ConnectOptions, MySqlStore, PgStore, SqlTx, SqliteStore, Tables};
use oncely_testkit::services;

/// A unique schema name for this test.
pub fn unique(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{tag}_{}_{nanos:x}", std::process::id())
}

/// A migrated SQLite store in `dir`.
pub async fn sqlite(dir: &tempfile::TempDir) -> (SqliteStore, Ops) {
    let url = format!("sqlite:{}", dir.path().join("ops.db").display());
    let store = SqliteStore::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let ops = Ops::from(&store);
    (store, ops)
}

/// A PostgreSQL store in a fresh schema (not migrated), or None when the server is missing.
pub async fn postgres(test: &str, tag: &str) -> Option<(PgStore, Ops, String)> {
    let url = services::pg_url();
    if let Err(why) = services::probe(&url).await {
        services::unavailable(test, "PostgreSQL", &why);
        return None;
    }
    let schema = unique(tag);
    let options = ConnectOptions {
        tables: Tables::default().with_schema(&schema).unwrap(),
        ..Default::default()
    };
    match PgStore::connect_with(&url, &options).await {
        Ok(store) => {
            let ops = Ops::from(&store);
            Some((store, ops, schema))
        }
        Err(e) => {
            services::unavailable(test, "PostgreSQL", &e);
            None
        }
    }
}

/// A migrated MariaDB store in a fresh database, or None when the server is missing.
pub async fn mysql(test: &str, tag: &str) -> Option<(MySqlStore, Ops, String)> {
    let url = services::mysql_url();
    if let Err(why) = services::probe(&url).await {
        services::unavailable(test, "MariaDB", &why);
        return None;
    }
    let schema = unique(tag);
    let options = ConnectOptions {
        tables: Tables::default().with_schema(&schema).unwrap(),
        ..Default::default()
    };
    match MySqlStore::connect_with(&url, &options).await {
        Ok(store) => {
            store.migrate().await.unwrap();
            let ops = Ops::from(&store);
            Some((store, ops, schema))
        }
        Err(e) => {
            services::unavailable(test, "MariaDB", &e);
            None
        }
    }
}

/// Inserts `count` ids received `age_ms` ago into the inbox of `ops`.
pub async fn fill(ops: &Ops, tag: &str, count: usize, age_ms: i64) {
    let at = oncely_sql::now_ms() - age_ms;
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
