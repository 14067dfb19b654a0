//! A batch claim waits on the row lock of an id another transaction claimed and has not
//! committed, on SQLite, PostgreSQL and MariaDB (the servers' tests follow
//! `oncely_testkit::services`: a loud SKIPPED line when the server is missing, a failure under
//! CI / ONCELY_REQUIRE_SERVICES). Group commit itself (outcomes, failure isolation, late
//! messages, two consumers) and the `claim_batch` rules are cases of the testkit's store suite,
//! run on every store by the conformance tests.

mod common;

use common::{batch_suite, mysql, pg, sqlite};

macro_rules! batch_tests {
    ($($setup:ident => $wait:ident, $wait_rb:ident;)*) => {$(
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
    )*};
}

batch_tests! {
    sqlite => sqlite_batch_waits_for_concurrent_claim, sqlite_batch_after_concurrent_rollback;
    pg => pg_batch_waits_for_concurrent_claim, pg_batch_after_concurrent_rollback;
    mysql => mysql_batch_waits_for_concurrent_claim, mysql_batch_after_concurrent_rollback;
}
