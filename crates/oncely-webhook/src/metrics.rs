//! What the receiver records besides the runtime's own metrics (`oncely_deliveries_total`
//! and its siblings, labelled by consumer, count every delivery that reached the store), and
//! its rate-limited log of refused requests.
//!
//! | name | kind | labels | meaning |
//! |---|---|---|---|
//! | `oncely_webhook_rejected_total` | counter | consumer, reason | requests refused before the store (4xx): `reason` is [`crate::Rejection::code`] |
//! | `oncely_webhook_unavailable_total` | counter | consumer | requests answered 503 at once because the store is failing and another delivery is probing it |

use crate::rejection::Rejection;
use oncely_core::{ConsumerName, LogThrottle};
use std::time::Duration;
use tracing::warn;

/// Names of the metrics, for dashboards and tests.
pub mod names {
    /// Requests refused before the store, labelled by `reason`.
    pub const REJECTED: &str = "oncely_webhook_rejected_total";
    /// Requests refused with 503 while the store fails.
    pub const UNAVAILABLE: &str = "oncely_webhook_unavailable_total";
}

/// At most one WARN line per source per [`LOG_EVERY`] about refused requests (a flood of
/// forged requests must not flood the log too); the line says how many were not logged.
pub(crate) const LOG_EVERY: Duration = Duration::from_secs(10);

/// Counts and logs the refusals of one source.
#[derive(Debug)]
pub(crate) struct Refusals {
    consumer: ConsumerName,
    logged: LogThrottle,
}

impl Refusals {
    pub(crate) fn new(consumer: ConsumerName) -> Self {
        Self {
            consumer,
            logged: LogThrottle::new(LOG_EVERY),
        }
    }

    /// A request refused with `rejection`.
    pub(crate) fn rejected(&self, rejection: &Rejection) {
        metrics::counter!(names::REJECTED, "consumer" => self.consumer.as_str().to_owned(), "reason" => rejection.code())
            .increment(1);
        if let Some(suppressed) = self.logged.turn() {
            warn!(
                consumer = %self.consumer,
                reason = rejection.code(),
                status = rejection.status().as_u16(),
                suppressed,
                "webhook request refused: {rejection}; nothing stored ({suppressed} more refusals not logged since the last line)"
            );
        }
    }

    /// A request refused with 503 while the store fails.
    pub(crate) fn unavailable(&self) {
        metrics::counter!(names::UNAVAILABLE, "consumer" => self.consumer.as_str().to_owned())
            .increment(1);
        if let Some(suppressed) = self.logged.turn() {
            warn!(
                consumer = %self.consumer,
                suppressed,
                "webhook request answered 503: the store is failing; the sender will retry ({suppressed} more refusals not logged since the last line)"
            );
        }
    }
}
