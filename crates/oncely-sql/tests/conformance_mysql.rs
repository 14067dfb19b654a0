//! The store conformance suite (`oncely_testkit::exercise`) on the real MariaDB / MySQL
//! server, through `MySqlStore` (a database per case; the fixture is `common::harness`).

mod common;

use common::harness::SqlHarness;
use common::with_database;
use oncely_sql::{Dialect, MySqlStore};
use oncely_testkit::ExerciseOptions;

const OPTIONS: ExerciseOptions = ExerciseOptions {
    crash_seeds: 8,
    crash_messages: 100,
};

#[test]
fn with_database_replaces_the_database() {
    assert_eq!(
        with_database("mysql://root@127.0.0.1:3306/test", "x"),
        "mysql://root@127.0.0.1:3306/x"
    );
    assert_eq!(with_database("mysql://root@h", "x"), "mysql://root@h/x");
    assert_eq!(
        with_database("mysql://u:p@h/t?ssl-mode=disabled", "x"),
        "mysql://u:p@h/x?ssl-mode=disabled"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mysql_passes_the_conformance_suite() {
    SqlHarness::<MySqlStore>::new(Dialect::MySql, false)
        .exercise("mysql_passes_the_conformance_suite", OPTIONS)
        .await;
}

/// The same suite with portable mode forced (issue 16: TiDB, MariaDB Galera): lease-table
/// migration lock, `FOR UPDATE` claim read.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mysql_portable_passes_the_conformance_suite() {
    SqlHarness::<MySqlStore>::new(Dialect::MySql, true)
        .exercise("mysql_portable_passes_the_conformance_suite", OPTIONS)
        .await;
}
