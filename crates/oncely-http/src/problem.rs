//! `application/problem+json` answers (RFC 9457) of the layer itself.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use std::time::Duration;

/// What went wrong, as the layer reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Problem {
    /// 400: the route requires a key and the request has none.
    MissingKey,
    /// 400: the key is repeated or not a valid id.
    InvalidKey,
    /// 400: the route scopes keys by something the request does not carry.
    MissingScope,
    /// 500: the scope's extension is missing (the layer runs outside the auth layer).
    ScopeUnavailable,
    /// 422: the key was used for a different request.
    KeyReused,
    /// 409: the first request with this key is still running.
    InFlight,
    /// 413: the request body is larger than the layer buffers.
    RequestTooLarge,
    /// 500: the response body is larger than the layer stores.
    ResponseTooLarge,
    /// 503: the database failed; nothing was kept.
    Store,
}

impl Problem {
    fn parts(self) -> (StatusCode, &'static str, &'static str) {
        match self {
            Self::MissingKey => (
                StatusCode::BAD_REQUEST,
                "idempotency-key-missing",
                "Idempotency-Key is missing",
            ),
            Self::InvalidKey => (
                StatusCode::BAD_REQUEST,
                "idempotency-key-invalid",
                "Idempotency-Key is invalid",
            ),
            Self::MissingScope => (
                StatusCode::BAD_REQUEST,
                "idempotency-scope-missing",
                "The request has no scope for its Idempotency-Key",
            ),
            Self::ScopeUnavailable => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "idempotency-scope-unavailable",
                "The server cannot tell whose Idempotency-Key this is",
            ),
            Self::KeyReused => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency-key-reused",
                "Idempotency-Key is already used for a different request",
            ),
            Self::InFlight => (
                StatusCode::CONFLICT,
                "idempotency-key-in-flight",
                "A request with this Idempotency-Key is being processed",
            ),
            Self::RequestTooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "request-too-large",
                "The request body is too large",
            ),
            Self::ResponseTooLarge => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "response-too-large",
                "The response is too large to store for replays",
            ),
            Self::Store => (
                StatusCode::SERVICE_UNAVAILABLE,
                "idempotency-store-unavailable",
                "The idempotency store is unavailable; nothing was applied",
            ),
        }
    }

    /// The outcome name recorded on the request's span.
    pub(crate) fn outcome(self) -> &'static str {
        self.parts().1
    }

    /// The response: status, `application/problem+json` body with `detail`, and
    /// `Retry-After` when the client should try again later.
    pub(crate) fn response<B: From<Bytes>>(
        self,
        detail: &str,
        retry_after: Duration,
    ) -> Response<B> {
        let (status, slug, title) = self.parts();
        let body = serde_json::json!({
            "type": format!("urn:oncely:http:{slug}"),
            "title": title,
            "status": status.as_u16(),
            "detail": detail,
        });
        let mut response = Response::new(B::from(Bytes::from(body.to_string())));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if matches!(self, Self::InFlight | Self::Store) {
            let secs = retry_after.as_secs().max(1);
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}
