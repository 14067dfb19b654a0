//! [`Verifier`]: one source's signature scheme and secrets; it turns a request's headers and
//! body into a [`Verified`] delivery (its event id, the headers the handler may read) or a
//! [`Rejection`]. Each provider's scheme is a file of its own, with its signer beside its
//! check.

mod github;
mod standard;
mod stripe;

use crate::rejection::Rejection;
use crate::secret::{Keys, SecretError};
use http::HeaderMap;
use oncely_core::{MessageId, Meta, RawEnvelope};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long every provider here retries a delivery that was not answered 2xx: Stripe up to 3
/// days, Standard Webhooks senders (Svix) about 3 days, GitHub keeps deliveries for
/// redelivery 3 days. The inbox must hold an event's id at least this long
/// ([`crate::Endpoint::prune_window`]).
pub const RETRY_HORIZON: Duration = Duration::from_secs(3 * 24 * 3600);

/// The signature tolerance of Standard Webhooks and Stripe: 5 minutes either way.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

/// The webhook schemes a [`Verifier`] knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// [Standard Webhooks](https://www.standardwebhooks.com/) (Svix and the services built
    /// on the spec): `webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64>`.
    StandardWebhooks,
    /// Stripe: `Stripe-Signature: t=<unix>,v1=<hex>`; the event id is the body's `id`.
    Stripe,
    /// GitHub: `X-Hub-Signature-256: sha256=<hex>`; the id is `X-GitHub-Delivery`.
    GitHub,
}

impl Provider {
    /// A short name for logs and docs.
    pub fn name(&self) -> &'static str {
        match self {
            Self::StandardWebhooks => "standard-webhooks",
            Self::Stripe => "stripe",
            Self::GitHub => "github",
        }
    }

    /// How long the sender retries (see [`RETRY_HORIZON`]): the shortest inbox window that
    /// keeps every retry a duplicate.
    pub fn retry_horizon(&self) -> Duration {
        RETRY_HORIZON
    }
}

/// Checks one source's requests: its [`Provider`], its secrets (several while one is
/// rotated: a request signed with any of them passes) and the timestamp tolerance.
///
/// ```
/// use oncely_webhook::{Provider, Verifier};
/// let stripe = Verifier::stripe(["whsec_old", "whsec_new"]).unwrap();
/// assert_eq!(stripe.provider(), Provider::Stripe);
/// let standard = Verifier::standard_webhooks(["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]).unwrap();
/// let github = Verifier::github(["It's a Secret to Everybody"]).unwrap();
/// assert!(Verifier::standard_webhooks(["whsec_not base64!"]).is_err());
/// # let _ = (standard, github);
/// ```
#[derive(Debug, Clone)]
pub struct Verifier {
    provider: Provider,
    keys: Keys,
    tolerance: Duration,
}

impl Verifier {
    /// Standard Webhooks with `secrets` of the form `whsec_<base64>` (the prefix is optional):
    /// the HMAC key is the decoded bytes.
    pub fn standard_webhooks<I, S>(secrets: I) -> Result<Self, SecretError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::new(Provider::StandardWebhooks, standard::keys(secrets)?)
    }

    /// Stripe with endpoint signing secrets (`whsec_…`, used as given: Stripe's key is the
    /// whole text).
    pub fn stripe<I, S>(secrets: I) -> Result<Self, SecretError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::new(Provider::Stripe, text_keys(secrets)?)
    }

    /// GitHub with the webhook's secret(s), used as given.
    pub fn github<I, S>(secrets: I) -> Result<Self, SecretError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::new(Provider::GitHub, text_keys(secrets)?)
    }

    fn new(provider: Provider, keys: Keys) -> Result<Self, SecretError> {
        Ok(Self {
            provider,
            keys,
            tolerance: DEFAULT_TOLERANCE,
        })
    }

    /// How far a signed timestamp may be from this host's clock, either way (default
    /// [`DEFAULT_TOLERANCE`], 5 minutes). GitHub signs no timestamp, so it has none.
    pub fn tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// The scheme.
    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// Verifies a request against this host's clock.
    pub fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<Verified, Rejection> {
        self.verify_at(headers, body, SystemTime::now())
    }

    /// Verifies a request as of `now`: the signature, the timestamp's distance from `now`,
    /// then the event id.
    pub fn verify_at(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<Verified, Rejection> {
        let check = Check {
            keys: &self.keys,
            headers,
            body,
            now,
            tolerance: self.tolerance,
        };
        match self.provider {
            Provider::StandardWebhooks => standard::verify(&check),
            Provider::Stripe => stripe::verify(&check),
            Provider::GitHub => github::verify(&check),
        }
    }

    /// The headers a sender holding this source's first secret would send with `body` for
    /// event `id` at `at` (Stripe takes the id from the body; GitHub signs no time). For
    /// tests and simulators: the receiver's own signer, checked against the providers'
    /// libraries in this crate's tests.
    ///
    /// ```
    /// use oncely_webhook::Verifier;
    /// let github = Verifier::github(["It's a Secret to Everybody"]).unwrap();
    /// let headers = github.sign("d-1", b"Hello, World!", std::time::SystemTime::now());
    /// assert_eq!(
    ///     headers.get("x-hub-signature-256").unwrap(),
    ///     "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    /// );
    /// assert!(github.verify(&headers, b"Hello, World!").is_ok());
    /// ```
    pub fn sign(&self, id: &str, body: &[u8], at: SystemTime) -> HeaderMap {
        let secs = unix_seconds(at);
        match self.provider {
            Provider::StandardWebhooks => standard::sign(&self.keys, id, secs, body),
            Provider::Stripe => stripe::sign(&self.keys, secs, body),
            Provider::GitHub => github::sign(&self.keys, id, body),
        }
    }
}

/// A request whose signature and timestamp passed: the event id and what the handler may
/// read besides the body.
#[derive(Debug, Clone)]
pub struct Verified {
    id: MessageId,
    source_time: Option<SystemTime>,
    headers: BTreeMap<String, String>,
}

impl Verified {
    /// The event id: the inbox key's second half (the first is the source's consumer name).
    pub fn id(&self) -> &MessageId {
        &self.id
    }

    /// When the event happened at the sender, where the body says (Stripe's `created`).
    pub fn source_time(&self) -> Option<SystemTime> {
        self.source_time
    }

    /// The provider's headers handed to the handler in [`oncely_core::Meta::headers`]
    /// (lower-case names, e.g. `x-github-event`), and `traceparent`/`tracestate`.
    pub fn headers(&self) -> &BTreeMap<String, String> {
        &self.headers
    }

    /// The delivery's envelope: this id, `body` as the payload (its SHA-256 is the inbox's
    /// payload hash), the source time and the headers.
    pub(crate) fn into_envelope(self, body: Vec<u8>) -> RawEnvelope {
        let mut raw = RawEnvelope::new(self.id.as_str(), body);
        raw.meta = Meta {
            source_time: self.source_time,
            headers: self.headers,
            ..Meta::default()
        };
        raw
    }
}

/// What one provider's check reads.
pub(crate) struct Check<'a> {
    keys: &'a Keys,
    headers: &'a HeaderMap,
    body: &'a [u8],
    now: SystemTime,
    tolerance: Duration,
}

impl Check<'_> {
    /// The header `name` as text; `None` when absent.
    fn header(&self, name: &'static str) -> Result<Option<&str>, Rejection> {
        match self.headers.get(name) {
            None => Ok(None),
            Some(value) => value
                .to_str()
                .map(|text| Some(text.trim()))
                .map_err(|_| Rejection::MalformedHeader(name)),
        }
    }

    /// The header `name`, which must be there.
    fn required(&self, name: &'static str) -> Result<&str, Rejection> {
        self.header(name)?.ok_or(Rejection::MissingHeader(name))
    }

    /// Whether the signed timestamp `secs` is within the tolerance of `now`.
    fn timely(&self, secs: i64) -> Result<(), Rejection> {
        let now = i128::from(unix_seconds(self.now));
        let tolerance = i128::from(self.tolerance.as_secs());
        let secs = i128::from(secs);
        if now - secs > tolerance {
            Err(Rejection::Stale)
        } else if secs - now > tolerance {
            Err(Rejection::Future)
        } else {
            Ok(())
        }
    }

    /// The verified delivery of event `id`, with the headers `pass` names (plus the trace
    /// context), each cut to [`HEADER_VALUE_MAX`] bytes.
    fn verified(
        &self,
        id: &str,
        source_time: Option<SystemTime>,
        pass: &[&str],
    ) -> Result<Verified, Rejection> {
        let id = MessageId::new(id).map_err(|e| Rejection::BadId(e.to_string()))?;
        let mut headers = BTreeMap::new();
        for name in pass.iter().chain(&["traceparent", "tracestate"]) {
            if let Some(Ok(value)) = self.headers.get(*name).map(|v| v.to_str())
                && value.len() <= HEADER_VALUE_MAX
            {
                headers.insert((*name).to_owned(), value.to_owned());
            }
        }
        Ok(Verified {
            id,
            source_time,
            headers,
        })
    }
}

/// The longest header value passed on to the handler; a longer one is left out.
const HEADER_VALUE_MAX: usize = 1024;

/// Secrets used as given (Stripe, GitHub).
fn text_keys<I, S>(secrets: I) -> Result<Keys, SecretError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    Keys::new(
        secrets
            .into_iter()
            .map(|s| s.as_ref().as_bytes().to_vec())
            .collect(),
    )
}

fn unix_seconds(at: SystemTime) -> i64 {
    match at.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_secs()).unwrap_or(i64::MAX),
    }
}
