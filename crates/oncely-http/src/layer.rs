//! [`IdempotencyLayer`]: the configuration of one route (or method) and the tower `Layer`.

use crate::keys::Keys;
use crate::scope::Scope;
use crate::service::IdempotencyService;
use http::{HeaderName, Method};
use oncely_sql::AnyStore;
use std::sync::Arc;
use std::time::Duration;

/// The settings a layer shares with its services.
#[derive(Clone)]
pub(crate) struct Config {
    pub store: AnyStore,
    pub keys: Keys,
    pub scope: Scope,
    pub require_key: bool,
    pub methods: Vec<Method>,
    pub fingerprint_headers: Vec<HeaderName>,
    pub replay_headers: Vec<HeaderName>,
    pub ttl: Duration,
    pub in_flight_wait: Duration,
    pub retry_after: Duration,
    pub max_request_bytes: usize,
    pub max_response_bytes: usize,
    pub store_body: bool,
}

/// A tower [`Layer`](tower_layer::Layer) answering retried requests from stored responses,
/// keyed by the request's [`Scope`] and its `Idempotency-Key` header; apply it per route or
/// per method (axum: `post(handler).layer(layer)`), each with its own settings.
///
/// Defaults: key optional, methods `POST` and `PATCH` (others pass through untouched), no
/// fingerprinted headers beyond method, path and body, replayed headers `content-type` and
/// `location`, bodies stored, TTL 24 hours, in-flight wait 1 s (then 409), `Retry-After: 1`,
/// request and response bodies up to 1 MiB. The scope has no default: it is an argument of
/// [`IdempotencyLayer::new`].
///
/// ```no_run
/// # async fn f(store: oncely_sql::AnyStore) {
/// use oncely_http::{IdempotencyLayer, Scope};
/// use std::time::Duration;
/// let layer = IdempotencyLayer::new(store, Scope::header("authorization"))
///     .require_key(true)
///     .fingerprint_headers(["content-type"])
///     .replay_headers(["content-type", "location"])
///     .ttl(Duration::from_secs(3600));
/// # }
/// ```
#[derive(Clone)]
pub struct IdempotencyLayer {
    config: Arc<Config>,
}

impl std::fmt::Debug for IdempotencyLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.config;
        f.debug_struct("IdempotencyLayer")
            .field("dialect", &c.store.dialect())
            .field("scope", &c.scope)
            .field("require_key", &c.require_key)
            .field("methods", &c.methods)
            .field("ttl", &c.ttl)
            .finish_non_exhaustive()
    }
}

impl IdempotencyLayer {
    /// A layer storing keys of `scope` in `store`'s `{prefix}http_keys` table (create it
    /// with [`crate::migrate`]). The scope says whose keys they are: a key is only ever
    /// replayed to requests of the scope that stored it ([`Scope`]).
    ///
    /// ```no_run
    /// # async fn f(store: oncely_sql::AnyStore) {
    /// use oncely_http::{IdempotencyLayer, Scope};
    /// # #[derive(Clone)] struct Account { id: String }
    /// // Behind an auth layer that inserts the `Account` into the request extensions:
    /// let layer = IdempotencyLayer::new(store, Scope::extension(|a: &Account| a.id.clone()));
    /// # }
    /// ```
    pub fn new(store: AnyStore, scope: Scope) -> Self {
        let keys = Keys::new(store.tables());
        Self {
            config: Arc::new(Config {
                store,
                keys,
                scope,
                require_key: false,
                methods: vec![Method::POST, Method::PATCH],
                fingerprint_headers: Vec::new(),
                replay_headers: names(["content-type", "location"]),
                ttl: Duration::from_secs(24 * 3600),
                in_flight_wait: Duration::from_secs(1),
                retry_after: Duration::from_secs(1),
                max_request_bytes: 1 << 20,
                max_response_bytes: 1 << 20,
                store_body: true,
            }),
        }
    }

    fn with(mut self, change: impl FnOnce(&mut Config)) -> Self {
        change(Arc::make_mut(&mut self.config));
        self
    }

    /// Whether a request without a key is refused with 400 (true) or runs without
    /// idempotency, still in one transaction (false, the default).
    pub fn require_key(self, required: bool) -> Self {
        self.with(|c| c.require_key = required)
    }

    /// The methods the layer handles; others pass through untouched.
    pub fn methods(self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.with(|c| c.methods = methods.into_iter().collect())
    }

    /// Request headers that are part of the fingerprint (besides method, path and body).
    ///
    /// # Panics
    ///
    /// If a name is not a valid header name.
    pub fn fingerprint_headers<'a>(self, names_: impl IntoIterator<Item = &'a str>) -> Self {
        self.with(|c| c.fingerprint_headers = names(names_))
    }

    /// Response headers stored and replayed (an allow-list: others are not stored).
    ///
    /// # Panics
    ///
    /// If a name is not a valid header name.
    pub fn replay_headers<'a>(self, names_: impl IntoIterator<Item = &'a str>) -> Self {
        self.with(|c| c.replay_headers = names(names_))
    }

    /// How long a completed key is kept: afterwards the key is free again and
    /// [`crate::prune_expired`] deletes the row.
    pub fn ttl(self, ttl: Duration) -> Self {
        self.with(|c| c.ttl = ttl)
    }

    /// How long a request waits for a running request with the same key before the 409
    /// (PostgreSQL: milliseconds; MySQL/MariaDB: whole seconds, at least 1; SQLite: the
    /// pool's busy timeout applies instead).
    pub fn in_flight_wait(self, wait: Duration) -> Self {
        self.with(|c| c.in_flight_wait = wait)
    }

    /// The `Retry-After` of 409 and 503 answers (whole seconds, at least 1).
    pub fn retry_after(self, after: Duration) -> Self {
        self.with(|c| c.retry_after = after)
    }

    /// Largest request body buffered for the fingerprint (larger: 413).
    pub fn max_request_bytes(self, bytes: usize) -> Self {
        self.with(|c| c.max_request_bytes = bytes)
    }

    /// Largest response body stored for replays (larger: rolled back, 500).
    pub fn max_response_bytes(self, bytes: usize) -> Self {
        self.with(|c| c.max_response_bytes = bytes)
    }

    /// Whether response bodies are stored for replays (the default) or only the status and
    /// the [`replay_headers`](Self::replay_headers) (`false`: for routes whose answers carry
    /// secrets, e.g. a created API token). A stored body is data at rest in the key table
    /// until its TTL passes. A replay without its body is empty, without `content-type`, and
    /// says so: `Idempotent-Body: omitted` ([`BODY_OMITTED`](crate::BODY_OMITTED)). One
    /// response can ask for this itself with the [`OmitBody`](crate::OmitBody) extension.
    pub fn store_body(self, store: bool) -> Self {
        self.with(|c| c.store_body = store)
    }
}

fn names<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<HeaderName> {
    names
        .into_iter()
        .map(|n| HeaderName::try_from(n).expect("a valid header name"))
        .collect()
}

impl<S> tower_layer::Layer<S> for IdempotencyLayer {
    type Service = IdempotencyService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotencyService::new(inner, self.config.clone())
    }
}
