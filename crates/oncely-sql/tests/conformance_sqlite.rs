//! The store conformance suite on SQLite (a temporary file per case).

mod common;

use oncely_core::{Error, Result};
use oncely_sql::SqliteStore;
use oncely_sql::sqlx::{self, Sqlite, Transaction};
use oncely_testkit::{ExerciseOptions, StoreHarness};
use std::sync::atomic::{AtomicUsize, Ordering};

struct SqliteHarness {
    dir: tempfile::TempDir,
    next: AtomicUsize,
}

fn db(e: sqlx::Error) -> Error {
    Error::transient("ledger query failed").with_source(e)
}

impl StoreHarness for SqliteHarness {
    type Store = SqliteStore;

    async fn fresh(&self) -> Result<SqliteStore> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.path().join(format!("case-{n}.db"));
        let store = SqliteStore::connect(&format!("sqlite:{}", path.display())).await?;
        store.migrate().await?;
        sqlx::query(
            "CREATE TABLE ledger (seq INTEGER PRIMARY KEY AUTOINCREMENT, message_id TEXT NOT NULL, amount INTEGER NOT NULL)",
        )
        .execute(store.pool())
        .await
        .map_err(db)?;
        Ok(store)
    }

    async fn add_effect(
        tx: &mut Transaction<'static, Sqlite>,
        message_id: &str,
        amount: i64,
    ) -> Result<()> {
        sqlx::query("INSERT INTO ledger (message_id, amount) VALUES (?1, ?2)")
            .bind(message_id)
            .bind(amount)
            .execute(&mut **tx)
            .await
            .map_err(db)?;
        Ok(())
    }

    async fn clock(store: &SqliteStore) -> Result<std::time::SystemTime> {
        common::db_clock(store).await
    }

    fn dead_letter_limits(&self) -> oncely_testkit::DeadLetterLimits {
        common::sql_limits(oncely_sql::Dialect::Sqlite)
    }

    async fn effects(store: &SqliteStore) -> Result<Vec<(String, i64)>> {
        sqlx::query_as("SELECT message_id, amount FROM ledger ORDER BY seq")
            .fetch_all(store.pool())
            .await
            .map_err(db)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_passes_the_conformance_suite() {
    let harness = SqliteHarness {
        dir: tempfile::tempdir().expect("temp dir"),
        next: AtomicUsize::new(0),
    };
    oncely_testkit::exercise_with(
        &harness,
        ExerciseOptions {
            crash_seeds: 8,
            crash_messages: 100,
        },
    )
    .await;
}

#[tokio::test]
async fn migrate_twice_is_a_no_op_and_prints() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("m.db").display());
    let store = SqliteStore::connect(&url).await.unwrap();
    let all = oncely_sql::INBOX
        .migrations(oncely_sql::Dialect::Sqlite)
        .len();
    assert_eq!(store.migrate().await.unwrap(), all);
    assert_eq!(store.migrate().await.unwrap(), 0);
    let sql = oncely_sql::INBOX
        .print(oncely_sql::Dialect::Sqlite, store.tables())
        .unwrap();
    assert!(sql.contains("CREATE TABLE IF NOT EXISTS oncely_inbox"));
    assert!(sql.contains("CREATE UNIQUE INDEX IF NOT EXISTS oncely_dead_letters_key"));
}
