//! Batch mode on SQLite, PostgreSQL and MariaDB (the servers' tests follow
//! `oncely_testkit::services`: a loud SKIPPED line when the server is missing, a failure under
//! CI / ONCELY_REQUIRE_SERVICES). The `claim_batch` rules
//! themselves are a case of the testkit's store suite (`claim_batch_rules`), run by the
//! conformance tests.

mod common;

use common::{batch_suite, mysql, pg, sqlite};

macro_rules! batch_tests {
    ($($setup:ident => $isolate:ident, $once:ident, $two:ident, $late:ident, $wait:ident, $wait_rb:ident, $isolate_multi:ident, $once_multi:ident;)*) => {$(
        #[tokio::test]
        async fn $isolate_multi() {
            let Some(fx) = $setup(stringify!($isolate_multi)).await else { return };
            batch_suite::batch_isolates_failure(fx, true).await;
        }

        #[tokio::test]
        async fn $once_multi() {
            let Some(fx) = $setup(stringify!($once_multi)).await else { return };
            batch_suite::batch_commits_once(fx, true).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $wait() {
            let Some(fx) = $setup(stringify!($wait)).await else { return };
            batch_suite::batch_waits_for_concurrent_claim(fx, false).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $wait_rb() {
            let Some(fx) = $setup(stringify!($wait_rb)).await else { return };
            batch_suite::batch_waits_for_concurrent_claim(fx, true).await;
        }

        #[tokio::test]
        async fn $late() {
            let Some(fx) = $setup(stringify!($late)).await else { return };
            batch_suite::batch_quarantines_late(fx).await;
        }

        #[tokio::test]
        async fn $isolate() {
            let Some(fx) = $setup(stringify!($isolate)).await else { return };
            batch_suite::batch_isolates_failure(fx, false).await;
        }

        #[tokio::test]
        async fn $once() {
            let Some(fx) = $setup(stringify!($once)).await else { return };
            batch_suite::batch_commits_once(fx, false).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $two() {
            let Some(fx) = $setup(stringify!($two)).await else { return };
            batch_suite::two_batch_consumers(fx).await;
        }
    )*};
}

batch_tests! {
    sqlite => sqlite_batch_isolates_failure, sqlite_batch_commits_once, sqlite_two_batch_consumers, sqlite_batch_quarantines_late, sqlite_batch_waits_for_concurrent_claim, sqlite_batch_after_concurrent_rollback, sqlite_batch_multi_row_isolates_failure, sqlite_batch_multi_row_commits_once;
    pg => pg_batch_isolates_failure, pg_batch_commits_once, pg_two_batch_consumers, pg_batch_quarantines_late, pg_batch_waits_for_concurrent_claim, pg_batch_after_concurrent_rollback, pg_batch_multi_row_isolates_failure, pg_batch_multi_row_commits_once;
    mysql => mysql_batch_isolates_failure, mysql_batch_commits_once, mysql_two_batch_consumers, mysql_batch_quarantines_late, mysql_batch_waits_for_concurrent_claim, mysql_batch_after_concurrent_rollback, mysql_batch_multi_row_isolates_failure, mysql_batch_multi_row_commits_once;
}
