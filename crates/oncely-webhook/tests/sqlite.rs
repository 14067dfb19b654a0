//! The receiver's scenarios on SQLite (a temporary file): a real server on loopback,
//! reqwest, counts from the database.

mod common;

use common::suite;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_each_provider_applies_once() {
    suite::each_provider_applies_once(common::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_failures_are_dead_lettered() {
    suite::failures_are_dead_lettered(common::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_transient_failures_are_503_and_write_nothing() {
    suite::transient_failures_are_503_and_write_nothing(common::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_rejections_write_nothing() {
    suite::rejections_write_nothing(common::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_unreadable_body_writes_nothing() {
    suite::unreadable_body_writes_nothing(common::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_answers_only_after_commit() {
    suite::answers_only_after_commit(common::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_concurrent_retries_apply_once() {
    suite::concurrent_retries_apply_once(common::sqlite().await, 12, 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_old_events_are_quarantined() {
    suite::old_events_are_quarantined(common::sqlite().await).await;
}
