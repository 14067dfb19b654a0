//! A consumer over tables that were never migrated (or are older than this oncely) refuses to
//! start, at once, with an error that says what to do, instead of holding every delivery as
//! a store outage with a growing backoff (issue 27: the demo's second run hung that way).

use oncely_core::{
    Consumer, ConsumerName, Envelope, ErrorKind, Handled, Handler, MemorySource, RawEnvelope, Store,
};
use oncely_sql::sqlx::{self, Sqlite, Transaction};
use oncely_sql::{ConnectOptions, SqliteStore};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

struct Nothing;

impl Handler<Transaction<'static, Sqlite>> for Nothing {
    async fn handle(
        &self,
        _tx: &mut Transaction<'static, Sqlite>,
        _message: &Envelope,
    ) -> oncely_core::Result<Handled> {
        Ok(Handled::Applied)
    }
}

async fn store(dir: &tempfile::TempDir) -> SqliteStore {
    let url = format!("sqlite:{}", dir.path().join("x.db").display());
    SqliteStore::connect_with(&url, &ConnectOptions::default())
        .await
        .expect("open SQLite")
}

fn source() -> MemorySource {
    let source = MemorySource::new();
    source.publish(RawEnvelope::new("m-1", "x"));
    source.close();
    source
}

/// Runs a consumer over `store` and returns what `run` returned, within 10 s.
async fn run(store: &SqliteStore) -> oncely_core::Result<oncely_core::StatsSnapshot> {
    let consumer = Consumer::new(
        ConsumerName::new("billing").unwrap(),
        store.clone(),
        Nothing,
    );
    let started = Instant::now();
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        consumer.run(source(), CancellationToken::new()),
    )
    .await
    .expect("Consumer::run must return at once on unmigrated tables, not hold deliveries");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    result
}

fn assert_refused(e: &oncely_core::Error, table: &str) {
    let text = e.to_string();
    assert_eq!(e.kind(), ErrorKind::Config, "{text}");
    assert!(text.contains("oncely migrate"), "{text}");
    assert!(text.contains(table), "{text}");
    assert!(text.contains("billing not started"), "{text}");
}

#[tokio::test]
async fn a_consumer_over_tables_never_migrated_refuses_to_start_naming_oncely_migrate() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let e = run(&store).await.expect_err("no tables: must not start");
    assert_refused(&e, "oncely_inbox");
    // The store's own errors on those tables are configuration errors, not outages.
    let e = store.check_ready().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config, "{e}");
    let mut tx = store.begin().await.unwrap();
    let id = oncely_core::MessageId::new("m-1").unwrap();
    let claim = store
        .claim(
            &mut tx,
            &ConsumerName::new("billing").unwrap(),
            &id,
            oncely_core::PayloadHash::of(b"x"),
        )
        .await
        .unwrap_err();
    assert_eq!(claim.kind(), ErrorKind::Config, "{claim}");
}

#[tokio::test]
async fn a_consumer_over_tables_of_an_older_version_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    // Version 1 of the inbox set only: dead_letters lacks id_hash, last_seen, deliveries.
    let v1 = oncely_sql::INBOX.migrations(oncely_sql::Dialect::Sqlite)[0].sql(store.tables());
    sqlx::raw_sql(sqlx::AssertSqlSafe(v1))
        .execute(store.pool())
        .await
        .unwrap();
    let e = run(&store).await.expect_err("old tables: must not start");
    assert_refused(&e, "oncely_dead_letters");
}

#[tokio::test]
async fn after_oncely_migrate_the_same_consumer_runs() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    assert!(run(&store).await.is_err());
    store.migrate().await.unwrap();
    let stats = run(&store).await.expect("migrated: runs");
    assert_eq!(stats.applied, 1, "{stats:?}");
}
