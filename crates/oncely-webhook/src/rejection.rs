//! Why a request was refused before it reached the store: [`Rejection`], its status code
//! and its short, stable reason code (the metric label and the response body).

use http::StatusCode;

/// A request that is not a verified delivery. Nothing of it is written anywhere: it is
/// answered with [`Rejection::status`], counted in `oncely_webhook_rejected_total` and logged
/// (rate-limited).
///
/// ```
/// use oncely_webhook::Rejection;
/// assert_eq!(Rejection::BadSignature.status().as_u16(), 401);
/// assert_eq!(Rejection::BadSignature.code(), "bad_signature");
/// assert_eq!(Rejection::MissingHeader("webhook-id").status().as_u16(), 400);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// The signature header is absent.
    #[error("missing signature header {0}")]
    MissingSignature(&'static str),
    /// A header the provider always sends is absent.
    #[error("missing header {0}")]
    MissingHeader(&'static str),
    /// A header is there but cannot be read (not text, not a number, wrong shape).
    #[error("malformed header {0}")]
    MalformedHeader(&'static str),
    /// No signature in the request is the HMAC of the content under any of the source's
    /// secrets.
    #[error("no signature matches")]
    BadSignature,
    /// The signed timestamp is older than the tolerance.
    #[error("timestamp older than the tolerance")]
    Stale,
    /// The signed timestamp is further ahead than the tolerance.
    #[error("timestamp in the future beyond the tolerance")]
    Future,
    /// The request is signed but carries no usable event id (missing, empty, too long).
    #[error("no usable event id: {0}")]
    BadId(String),
    /// The body is larger than the source's limit.
    #[error("body larger than {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The body could not be read to its end.
    #[error("body could not be read")]
    Unreadable,
}

impl Rejection {
    /// The answer: 401 for a missing or wrong signature and a timestamp outside the
    /// tolerance, 413 for a body over the limit, 400 for the rest. Every sender retries a
    /// 4xx as it does a 5xx; what matters is that nothing was applied or stored.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::MissingSignature(_) | Self::BadSignature | Self::Stale | Self::Future => {
                StatusCode::UNAUTHORIZED
            }
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::MissingHeader(_)
            | Self::MalformedHeader(_)
            | Self::BadId(_)
            | Self::Unreadable => StatusCode::BAD_REQUEST,
        }
    }

    /// A short, stable code: the `reason` label of `oncely_webhook_rejected_total` and the
    /// `error` field of the response.
    pub fn code(&self) -> &'static str {
        match self {
            Self::MissingSignature(_) => "missing_signature",
            Self::MissingHeader(_) => "missing_header",
            Self::MalformedHeader(_) => "malformed_header",
            Self::BadSignature => "bad_signature",
            Self::Stale => "stale_timestamp",
            Self::Future => "future_timestamp",
            Self::BadId(_) => "bad_id",
            Self::TooLarge { .. } => "body_too_large",
            Self::Unreadable => "body_unreadable",
        }
    }
}
