//! The store conformance suite (`oncely_testkit::exercise`) on SQLite, through `SqliteStore`
//! (a temporary file per case; the fixture is `common::harness`), and SQLite's migrations.

mod common;

use common::harness::SqlHarness;
use oncely_sql::{Dialect, SqliteStore};
use oncely_testkit::ExerciseOptions;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_passes_the_conformance_suite() {
    let options = ExerciseOptions {
        crash_seeds: 8,
        crash_messages: 100,
    };
    SqlHarness::<SqliteStore>::new(Dialect::Sqlite, false)
        .exercise("sqlite_passes_the_conformance_suite", options)
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
