//! The store conformance suite (`oncely_testkit::exercise`) on [`AnyStore`], the type the
//! quick start uses, for all three databases: a SQLite file, a PostgreSQL schema or a
//! MySQL/MariaDB database per case (the fixture is `common::harness`, its effects written
//! through the [`SqlTx`](oncely_sql::SqlTx) seam the handler's `AnyTx` offers).

mod common;

use common::harness::SqlHarness;
use oncely_sql::{AnyStore, Dialect};
use oncely_testkit::ExerciseOptions;

async fn conformance(test: &str, dialect: Dialect) {
    let options = ExerciseOptions {
        crash_seeds: 4,
        crash_messages: 60,
    };
    SqlHarness::<AnyStore>::new(dialect, false)
        .exercise(test, options)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn any_store_on_sqlite_passes_the_conformance_suite() {
    conformance(
        "any_store_on_sqlite_passes_the_conformance_suite",
        Dialect::Sqlite,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn any_store_on_postgres_passes_the_conformance_suite() {
    conformance(
        "any_store_on_postgres_passes_the_conformance_suite",
        Dialect::Postgres,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn any_store_on_mysql_passes_the_conformance_suite() {
    conformance(
        "any_store_on_mysql_passes_the_conformance_suite",
        Dialect::MySql,
    )
    .await;
}
