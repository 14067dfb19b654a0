//! The oncely-http scenarios on sqlite: a real server on loopback, reqwest, counts from the database.

mod common;

use common::suite;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_retries_make_one_order() {
    let db = common::sqlite().await;
    suite::retries_make_one_order(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_concurrent_requests_make_one_order() {
    let db = common::sqlite().await;
    suite::concurrent_requests_make_one_order(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_in_flight_key_is_409() {
    let db = common::sqlite().await;
    suite::in_flight_key_is_409(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_reuse_is_422_and_missing_key_is_400() {
    let db = common::sqlite().await;
    suite::reuse_is_422_and_missing_key_is_400(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_server_error_keeps_no_key() {
    let db = common::sqlite().await;
    suite::server_error_keeps_no_key(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_expired_keys_are_free_and_pruned() {
    let db = common::sqlite().await;
    suite::expired_keys_are_free_and_pruned(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_two_clients_one_key_two_orders() {
    let db = common::sqlite().await;
    suite::two_clients_one_key_two_orders(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_no_response_crosses_scopes() {
    let db = common::sqlite().await;
    suite::no_response_crosses_scopes(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_rejections_leave_the_key_free() {
    let db = common::sqlite().await;
    suite::rejections_leave_the_key_free(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_which_answers_are_stored() {
    let db = common::sqlite().await;
    suite::which_answers_are_stored(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_migration_keeps_old_keys_global() {
    let db = common::sqlite().await;
    suite::migration_keeps_old_keys_global(db).await;
}
