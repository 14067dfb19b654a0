//! Metrics the runtime records through the `metrics` facade (install any recorder, e.g.
//! `metrics-exporter-prometheus`, to export them). All carry the label `consumer`.
//!
//! | name | kind | labels | meaning |
//! |---|---|---|---|
//! | `oncely_deliveries_total` | counter | consumer, outcome | deliveries settled, by outcome (`applied`, `duplicate`, `conflict`, `stale`, `retry`, `dead_lettered`, `crashed`) |
//! | `oncely_retries_total` | counter | consumer | attempts retried after a transient failure |
//! | `oncely_handler_seconds` | histogram | consumer | time in the handler (inside the transaction) |
//! | `oncely_commit_seconds` | histogram | consumer | time to commit claim and effect |

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
