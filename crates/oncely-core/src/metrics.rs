//! Metrics the runtime records through the `metrics` facade (install any recorder, e.g.
//! `metrics-exporter-prometheus`, to export them). All carry the label `consumer`.
//!
//! | name | kind | labels | meaning |
//! |---|---|---|---|
//! | `oncely_deliveries_total` | counter | consumer, outcome | deliveries settled, by outcome (`applied`, `duplicate`, `conflict`, `stale`, `retry`, `dead_lettered`, `abandoned`) |
//! | `oncely_retries_total` | counter | consumer | attempts retried after a transient failure |
//! | `oncely_handler_seconds` | histogram | consumer | time in the handler (inside the transaction) |
//! | `oncely_commit_seconds` | histogram | consumer | time to commit claim and effect |
//! | `oncely_store_healthy` | gauge | consumer | 1 while the store works, 0 while it fails (intake paused, deliveries held) |
//! | `oncely_store_failures_total` | counter | consumer | store calls that failed (and unavailable errors from handlers) |

use crate::id::ConsumerName;
use crate::outcome::Outcome;
use std::time::Duration;

/// Names of the metrics, for dashboards and tests.
pub mod names {
    /// Deliveries settled, labelled by `outcome`.
    pub const DELIVERIES: &str = "oncely_deliveries_total";
    /// Transient failures retried.
    pub const RETRIES: &str = "oncely_retries_total";
    /// Handler latency.
    pub const HANDLER_SECONDS: &str = "oncely_handler_seconds";
    /// Commit latency.
    pub const COMMIT_SECONDS: &str = "oncely_commit_seconds";
    /// Store health: 1 healthy, 0 failing.
    pub const STORE_HEALTHY: &str = "oncely_store_healthy";
    /// Store failures seen.
    pub const STORE_FAILURES: &str = "oncely_store_failures_total";
}

pub(crate) fn outcome(consumer: &ConsumerName, outcome: &Outcome) {
    metrics::counter!(names::DELIVERIES, "consumer" => consumer.as_str().to_owned(), "outcome" => outcome.name())
        .increment(1);
}

pub(crate) fn retry(consumer: &ConsumerName) {
    metrics::counter!(names::RETRIES, "consumer" => consumer.as_str().to_owned()).increment(1);
}

pub(crate) fn handler_time(consumer: &ConsumerName, d: Duration) {
    metrics::histogram!(names::HANDLER_SECONDS, "consumer" => consumer.as_str().to_owned())
        .record(d.as_secs_f64());
}

pub(crate) fn commit_time(consumer: &ConsumerName, d: Duration) {
    metrics::histogram!(names::COMMIT_SECONDS, "consumer" => consumer.as_str().to_owned())
        .record(d.as_secs_f64());
}

pub(crate) fn store_healthy(consumer: &ConsumerName, healthy: bool) {
    metrics::gauge!(names::STORE_HEALTHY, "consumer" => consumer.as_str().to_owned())
        .set(if healthy { 1.0 } else { 0.0 });
}

pub(crate) fn store_failure(consumer: &ConsumerName) {
    metrics::counter!(names::STORE_FAILURES, "consumer" => consumer.as_str().to_owned())
        .increment(1);
}
