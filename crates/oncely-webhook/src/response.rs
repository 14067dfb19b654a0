//! The answer to the sender, from how the runtime settled the delivery. The rule: 2xx only
//! when the runtime acked, and it acks only with a `Committed` proof; everything else is a
//! 5xx with `Retry-After`, so the sender retries.
//!
//! | runtime | status | body `outcome` |
//! |---|---|---|
//! | acked: applied, duplicate, stale | 200 | `applied`, `duplicate`, `stale` |
//! | acked after a dead letter: conflict, permanent failure, panic, late | 200 | `conflict`, `dead_lettered` (+ `reason`) |
//! | handed back (transient failure or store outage past the deadline) | 503 | `retry` |
//! | not settled (a panic outside the handler) | 500 | `abandoned` |
//! | deferred mode: stored in the queue | 202 | `queued` |

use crate::ack::Settled;
use crate::rejection::Rejection;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use oncely_core::Outcome;
use std::time::Duration;

/// The answer to a settled delivery.
pub(crate) fn settled(outcome: &Outcome, settled: Settled, retry_after: Duration) -> Response {
    match (settled, outcome) {
        (Settled::Acked, Outcome::DeadLettered(reason)) => json(
            StatusCode::OK,
            serde_json::json!({"outcome": outcome.name(), "reason": reason.code()}),
        ),
        (
            Settled::Acked,
            Outcome::Applied | Outcome::Duplicate | Outcome::Stale | Outcome::Conflict { .. },
        ) => json(
            StatusCode::OK,
            serde_json::json!({"outcome": outcome.name()}),
        ),
        (Settled::Nacked, _) | (_, Outcome::Retry(_)) => {
            retry(StatusCode::SERVICE_UNAVAILABLE, "retry", retry_after)
        }
        _ => retry(StatusCode::INTERNAL_SERVER_ERROR, "abandoned", retry_after),
    }
}

/// 202: stored in the queue (deferred mode), to be applied by its consumer.
pub(crate) fn queued() -> Response {
    json(
        StatusCode::ACCEPTED,
        serde_json::json!({"outcome": "queued"}),
    )
}

/// 503 at once: the store is failing and another delivery is probing it.
pub(crate) fn unavailable(retry_after: Duration) -> Response {
    retry(
        StatusCode::SERVICE_UNAVAILABLE,
        "store_unavailable",
        retry_after,
    )
}

/// The answer to a refused request.
pub(crate) fn rejected(rejection: &Rejection) -> Response {
    json(
        rejection.status(),
        serde_json::json!({"error": rejection.code(), "detail": rejection.to_string()}),
    )
}

fn retry(status: StatusCode, outcome: &str, after: Duration) -> Response {
    let mut response = json(status, serde_json::json!({"outcome": outcome}));
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(after.as_secs().max(1)),
    );
    response
}

fn json(status: StatusCode, body: serde_json::Value) -> Response {
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncely_core::{DeadLetterReason, Error};

    #[test]
    fn two_hundred_only_when_acked() {
        let wait = Duration::from_secs(5);
        assert_eq!(
            settled(&Outcome::Applied, Settled::Acked, wait).status(),
            200
        );
        assert_eq!(
            settled(&Outcome::Duplicate, Settled::Acked, wait).status(),
            200
        );
        let dead = Outcome::DeadLettered(DeadLetterReason::Permanent("no".into()));
        assert_eq!(settled(&dead, Settled::Acked, wait).status(), 200);
        // An outcome the runtime did not ack is never a 2xx.
        assert_eq!(
            settled(&Outcome::Applied, Settled::Unsettled, wait).status(),
            500
        );
        let retry = settled(
            &Outcome::Retry(Error::transient("x")),
            Settled::Nacked,
            wait,
        );
        assert_eq!(retry.status(), 503);
        assert_eq!(retry.headers()[header::RETRY_AFTER], "5");
        assert_eq!(
            settled(&Outcome::Abandoned, Settled::Unsettled, wait).status(),
            500
        );
    }
}
