//! What every mode does before the store: read the body up to the limit, verify it, and
//! refuse what fails (status, reason, counter, rate-limited log; nothing written).

use crate::metrics::Refusals;
use crate::rejection::Rejection;
use crate::response;
use crate::verify::Verifier;
use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, header};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use oncely_core::{ConsumerName, RawEnvelope};
use std::sync::Arc;

/// The default body limit, 1 MiB: Stripe and Standard Webhooks events are far smaller.
/// GitHub caps payloads at 25 MB; raise it for a GitHub source that gets large pushes.
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

/// One source's verification and refusals, shared by its clones.
#[derive(Debug, Clone)]
pub(crate) struct Intake {
    pub(crate) verifier: Arc<Verifier>,
    pub(crate) refusals: Arc<Refusals>,
    pub(crate) body_limit: usize,
}

impl Intake {
    pub(crate) fn new(consumer: ConsumerName, verifier: Verifier) -> Self {
        Self {
            verifier: Arc::new(verifier),
            refusals: Arc::new(Refusals::new(consumer)),
            body_limit: DEFAULT_BODY_LIMIT,
        }
    }

    /// The verified delivery's envelope, or the answer that refuses the request.
    pub(crate) async fn accept(&self, request: Request) -> Result<RawEnvelope, Response> {
        let (parts, body) = request.into_parts();
        let body = self
            .read(&parts.headers, body)
            .await
            .map_err(|r| self.refuse(&r))?;
        let verified = self
            .verifier
            .verify(&parts.headers, &body)
            .map_err(|r| self.refuse(&r))?;
        Ok(verified.into_envelope(body.to_vec()))
    }

    /// The body, or why it cannot be had.
    async fn read(&self, headers: &HeaderMap, body: Body) -> Result<Bytes, Rejection> {
        let too_large = Rejection::TooLarge {
            limit: self.body_limit,
        };
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.body_limit as u64) {
            return Err(too_large);
        }
        match Limited::new(body, self.body_limit).collect().await {
            Ok(collected) => Ok(collected.to_bytes()),
            Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large),
            Err(_) => Err(Rejection::Unreadable),
        }
    }

    fn refuse(&self, rejection: &Rejection) -> Response {
        self.refusals.rejected(rejection);
        response::rejected(rejection)
    }
}
