//! The store conformance suite (`oncely_testkit::exercise`) on the real PostgreSQL server,
//! through `PgStore` (a schema per case; the fixture is `common::harness`).

mod common;

use common::harness::SqlHarness;
use oncely_sql::{Dialect, PgStore};
use oncely_testkit::ExerciseOptions;

const OPTIONS: ExerciseOptions = ExerciseOptions {
    crash_seeds: 8,
    crash_messages: 100,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_passes_the_conformance_suite() {
    SqlHarness::<PgStore>::new(Dialect::Postgres, false)
        .exercise("postgres_passes_the_conformance_suite", OPTIONS)
        .await;
}

/// The same suite with portable mode forced (issue 16: CockroachDB, YugabyteDB, Citus).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_portable_passes_the_conformance_suite() {
    SqlHarness::<PgStore>::new(Dialect::Postgres, true)
        .exercise("postgres_portable_passes_the_conformance_suite", OPTIONS)
        .await;
}
