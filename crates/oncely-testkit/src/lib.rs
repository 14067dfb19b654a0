//! # oncely-testkit
//!
//! The conformance suites, as River's `Exercise()`: every oncely store must pass
//! [`exercise`] (implement [`StoreHarness`]), every source [`exercise_source`] (implement
//! [`SourceHarness`]). [`MemoryStore`] is the reference store: it passes the store suite and
//! is what the source suite consumes into.
//!
//! ```ignore
//! #[tokio::test(flavor = "multi_thread")]
//! async fn conformance() {
//!     oncely_testkit::exercise(&MyHarness::new()).await;
//! }
//! ```
//!
//! Every check counts effects independently, from the ledger rows the harness reads back,
//! never from the consumer's own counters.
//!
//! [`FaultySource`] wraps the in-process broker (`MemorySource`) with the faults real
//! brokers have: duplicates, reordering, lost acks, seeded.
//!
//! [`provider`] is a fake outside provider (an email or payment API over HTTP that
//! deduplicates by `Idempotency-Key` and counts what it performed), for the effect journal's
//! tests and examples.
//!
//! [`redis_server`] starts `redis-server` processes of a test's own (AOF, replicas).
//!
//! [`credits`] is the workload the demo, the benchmark and the broker tests run ("add N
//! credits to account A": a ledger row and a balance per applied message), on SQL tables
//! (feature `sql`) and on the Redis store (feature `redis`).
//!
//! `test_db` (feature `sql`) makes one test's own database: a SQLite file, a PostgreSQL
//! schema or a MariaDB database, dropped after the test.
//!
//! [`services`] holds the one rule for tests that need a server (fail under `CI` /
//! `ONCELY_REQUIRE_SERVICES`, a loud SKIPPED banner otherwise) and the test database URLs.

pub mod chaos;
mod check;
pub mod cluster;
pub mod credits;
pub mod dead_letter_cases;
mod fault_proxy;
mod faulty_source;
mod harness;
mod ledger;
mod memory_store;
#[cfg(feature = "otel")]
pub mod otel;
pub mod provider;
pub mod redis_server;
pub mod services;
pub mod source_suite;
pub mod store_cases;
pub mod store_suite;
#[cfg(feature = "sql")]
pub mod test_db;

pub use check::{Tally, tally};
pub use fault_proxy::{Fault, FaultProxy, ProxyStats};
pub use faulty_source::{FaultStats, FaultySource, SourceFaults};
pub use harness::{DEAD_LETTER_PAYLOAD, DeadLetterLimits, StoreHarness};
pub use ledger::{LedgerHandler, Script};
pub use memory_store::{MemoryHarness, MemoryStore, MemoryTx};
pub use source_suite::{SourceHarness, SourceTraits, exercise_source};

use std::future::Future;
use std::pin::Pin;

/// How big the crash matrix is.
#[derive(Debug, Clone, Copy)]
pub struct ExerciseOptions {
    /// Seeds per crash step.
    pub crash_seeds: u64,
    /// Messages per crash run.
    pub crash_messages: usize,
}

impl Default for ExerciseOptions {
    fn default() -> Self {
        Self {
            crash_seeds: 5,
            crash_messages: 100,
        }
    }
}

/// Runs every store conformance case against fresh stores from `harness`, printing one line
/// per case, and panics listing the cases that failed.
pub async fn exercise<H: StoreHarness>(harness: &H) {
    exercise_with(harness, ExerciseOptions::default()).await
}

type Case<'a> = (
    &'static str,
    Pin<Box<dyn Future<Output = store_suite::CaseResult> + 'a>>,
);

/// [`exercise`] with a custom crash matrix size.
pub async fn exercise_with<H: StoreHarness>(harness: &H, options: ExerciseOptions) {
    use dead_letter_cases::*;
    use store_cases::*;
    use store_suite::*;
    let cases: Vec<Case<'_>> = vec![
        (
            "claims_in_transactions",
            Box::pin(claims_in_transactions(harness)),
        ),
        (
            "fresh_then_duplicate",
            Box::pin(fresh_then_duplicate(harness)),
        ),
        (
            "conflict_is_dead_lettered",
            Box::pin(conflict_is_dead_lettered(harness)),
        ),
        ("inbox_check_first", Box::pin(inbox_check_first(harness))),
        ("group_commit", Box::pin(group_commit(harness))),
        (
            "consumers_are_independent",
            Box::pin(consumers_are_independent(harness)),
        ),
        ("failures_roll_back", Box::pin(failures_roll_back(harness))),
        (
            "bad_ids_are_dead_lettered",
            Box::pin(bad_ids_are_dead_lettered(harness)),
        ),
        (
            "dead_letters_are_deduplicated",
            Box::pin(dead_letters_are_deduplicated(harness)),
        ),
        (
            "worst_dead_letters_are_stored",
            Box::pin(worst_dead_letters_are_stored(harness)),
        ),
        (
            "repeated_dead_letter_is_one_row",
            Box::pin(repeated_dead_letter_is_one_row(harness)),
        ),
        ("claim_batch_rules", Box::pin(claim_batch_rules(harness))),
        (
            "concurrent_duplicates",
            Box::pin(concurrent_duplicates(harness)),
        ),
        (
            "concurrent_duplicate_after_rollback",
            Box::pin(concurrent_duplicate_after_rollback(harness)),
        ),
        (
            "group_commit_outcomes",
            Box::pin(group_commit_outcomes(harness)),
        ),
        (
            "group_commit_isolates_a_failure",
            Box::pin(group_commit_isolates_a_failure(harness)),
        ),
        (
            "group_commit_quarantines_late",
            Box::pin(group_commit_quarantines_late(harness)),
        ),
        (
            "two_group_commit_consumers",
            Box::pin(two_group_commit_consumers(harness)),
        ),
        (
            "late_messages_are_quarantined",
            Box::pin(late_messages_are_quarantined(harness)),
        ),
        (
            "shutdown_then_resume",
            Box::pin(shutdown_then_resume(harness)),
        ),
        (
            "checker_catches_ack_before_commit",
            Box::pin(checker_catches_ack_before_commit(harness)),
        ),
        (
            "crash_at_every_step",
            Box::pin(crash_at_every_step(
                harness,
                options.crash_seeds,
                options.crash_messages,
            )),
        ),
    ];
    let mut failures = Vec::new();
    for (name, case) in cases {
        match case.await {
            Ok(()) => println!("conformance {name} ... ok"),
            Err(why) => {
                println!("conformance {name} ... FAILED: {why}");
                failures.push(format!("{name}: {why}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "conformance failures:\n{}",
        failures.join("\n")
    );
}
