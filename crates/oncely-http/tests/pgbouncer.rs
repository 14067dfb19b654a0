//! The oncely-http scenarios through PgBouncer in transaction pooling mode in front of the
//! machine's PostgreSQL (`scripts/pgbouncer.sh`), with the plain URL: the store finds the
//! pooler; keys, responses, lock timeouts (`set_config(…, true)`) and prune all run in
//! transactions with unnamed statements. Its own test binary: the pooler mode is
//! process-wide.

mod common;

use common::suite;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pgbouncer_retries_make_one_order() {
    let db = match common::pgbouncer("pgbouncer_retries_make_one_order").await {
        Some(db) => db,
        None => return,
    };
    suite::retries_make_one_order(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pgbouncer_concurrent_requests_make_one_order() {
    let db = match common::pgbouncer("pgbouncer_concurrent_requests_make_one_order").await {
        Some(db) => db,
        None => return,
    };
    suite::concurrent_requests_make_one_order(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pgbouncer_in_flight_key_is_409() {
    let db = match common::pgbouncer("pgbouncer_in_flight_key_is_409").await {
        Some(db) => db,
        None => return,
    };
    suite::in_flight_key_is_409(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pgbouncer_reuse_is_422_and_missing_key_is_400() {
    let db = match common::pgbouncer("pgbouncer_reuse_is_422_and_missing_key_is_400").await {
        Some(db) => db,
        None => return,
    };
    suite::reuse_is_422_and_missing_key_is_400(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pgbouncer_server_error_keeps_no_key() {
    let db = match common::pgbouncer("pgbouncer_server_error_keeps_no_key").await {
        Some(db) => db,
        None => return,
    };
    suite::server_error_keeps_no_key(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pgbouncer_expired_keys_are_free_and_pruned() {
    let db = match common::pgbouncer("pgbouncer_expired_keys_are_free_and_pruned").await {
        Some(db) => db,
        None => return,
    };
    suite::expired_keys_are_free_and_pruned(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pgbouncer_two_clients_one_key_two_orders() {
    let db = match common::pgbouncer("pgbouncer_two_clients_one_key_two_orders").await {
        Some(db) => db,
        None => return,
    };
    suite::two_clients_one_key_two_orders(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pgbouncer_no_response_crosses_scopes() {
    let db = match common::pgbouncer("pgbouncer_no_response_crosses_scopes").await {
        Some(db) => db,
        None => return,
    };
    suite::no_response_crosses_scopes(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pgbouncer_rejections_leave_the_key_free() {
    let db = match common::pgbouncer("pgbouncer_rejections_leave_the_key_free").await {
        Some(db) => db,
        None => return,
    };
    suite::rejections_leave_the_key_free(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pgbouncer_which_answers_are_stored() {
    let db = match common::pgbouncer("pgbouncer_which_answers_are_stored").await {
        Some(db) => db,
        None => return,
    };
    suite::which_answers_are_stored(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pgbouncer_migration_keeps_old_keys_global() {
    let db = match common::pgbouncer("pgbouncer_migration_keeps_old_keys_global").await {
        Some(db) => db,
        None => return,
    };
    suite::migration_keeps_old_keys_global(db).await;
}
