//! What the handler takes from the request: the transaction the key was reserved in
//! ([`IdempotentTx`]) and the key itself ([`IdempotencyKey`]).

use axum::extract::FromRequestParts;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::request::Parts;
use oncely_core::MessageId;
use oncely_sql::AnyTx;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::{Mutex, OwnedMutexGuard};

/// The transaction in which the layer reserved the request's key: write the request's effects
/// (and its outbox messages) through it, and they commit together with the stored response.
/// The layer commits after the handler returns (or rolls back on a 5xx / error): never commit
/// it yourself.
///
/// An axum extractor (rejected with 500 when the route has no
/// [`IdempotencyLayer`](crate::IdempotencyLayer)); for other tower stacks it is a request
/// extension.
///
/// ```no_run
/// use oncely_http::{IdempotentTx, TxError};
/// async fn handler(tx: IdempotentTx) -> Result<&'static str, TxError> {
///     let mut tx = tx.lock().await?;
///     tx.execute("UPDATE stock SET n = n - 1 WHERE sku = $1", &["sku-1".into()]).await?;
///     Ok("reserved")
/// }
/// ```
///
/// Whether the handler locked it matters: a 4xx answered without ever locking the transaction
/// (an extractor rejection, validation before any write) is not stored, so the key stays free
/// for the corrected request ([`Rejected`](crate::Rejected) for 4xx answered later).
#[derive(Clone)]
pub struct IdempotentTx {
    tx: Arc<Mutex<Option<AnyTx>>>,
    used: Arc<AtomicBool>,
}

impl std::fmt::Debug for IdempotentTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IdempotentTx")
    }
}

/// Exclusive use of the request's transaction (derefs to [`AnyTx`]); drop it before the
/// handler returns.
pub struct TxGuard(OwnedMutexGuard<Option<AnyTx>>);

impl Deref for TxGuard {
    type Target = AnyTx;
    fn deref(&self) -> &AnyTx {
        self.0.as_ref().expect("checked in IdempotentTx::lock")
    }
}

impl DerefMut for TxGuard {
    fn deref_mut(&mut self) -> &mut AnyTx {
        self.0.as_mut().expect("checked in IdempotentTx::lock")
    }
}

/// A failure a handler using [`IdempotentTx`] reports: a database error (answered 503 when
/// the store is unavailable or the failure transient, 500 otherwise) or a transaction already
/// finished. Any 5xx rolls the transaction back, so the key stays free for a retry.
///
/// ```
/// use axum::response::IntoResponse;
/// let e = oncely_http::TxError::from(oncely_core::Error::transient("deadlock"));
/// assert_eq!(e.into_response().status(), 503);
/// ```
#[derive(Debug)]
pub struct TxError(pub oncely_core::Error);

impl From<oncely_core::Error> for TxError {
    fn from(e: oncely_core::Error) -> Self {
        Self(e)
    }
}

impl IntoResponse for TxError {
    fn into_response(self) -> Response {
        use oncely_core::ErrorKind::{Transient, Unavailable};
        let status = match self.0.kind() {
            Transient | Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        tracing::warn!(error = %self.0, "idempotent handler failed; rolling back");
        (status, "the request failed; nothing was applied\n").into_response()
    }
}

impl IdempotentTx {
    pub(crate) fn new(tx: AnyTx) -> Self {
        Self {
            tx: Arc::new(Mutex::new(Some(tx))),
            used: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Waits for the transaction (one user at a time) and returns it; an error once the layer
    /// took it back (the response was already produced).
    pub async fn lock(&self) -> Result<TxGuard, TxError> {
        self.used.store(true, Ordering::SeqCst);
        let guard = self.tx.clone().lock_owned().await;
        if guard.is_none() {
            return Err(TxError(oncely_core::Error::permanent(
                "the idempotent transaction is finished: the response was already produced",
            )));
        }
        Ok(TxGuard(guard))
    }

    /// Takes the transaction back for the commit or the rollback.
    pub(crate) async fn take(&self) -> Option<AnyTx> {
        self.tx.lock().await.take()
    }

    /// Whether the handler ever locked the transaction (it may have written).
    pub(crate) fn used(&self) -> bool {
        self.used.load(Ordering::SeqCst)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for IdempotentTx {
    type Rejection = (StatusCode, &'static str);

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Self>().cloned().ok_or((
            StatusCode::INTERNAL_SERVER_ERROR,
            "IdempotentTx needs an IdempotencyLayer on this route\n",
        ))
    }
}

/// The request's validated `Idempotency-Key`, e.g. to derive outbox message ids from it
/// (`oncely_effects::derived_id`), so a retried request emits the same ids.
///
/// Rejected with 400 when the request has no key (on a route where the key is optional).
///
/// ```no_run
/// use oncely_http::IdempotencyKey;
/// async fn handler(IdempotencyKey(key): IdempotencyKey) -> String {
///     format!("key {key}")
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(pub MessageId);

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = (StatusCode, &'static str);

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Self>().cloned().ok_or((
            StatusCode::BAD_REQUEST,
            "this request needs an Idempotency-Key header\n",
        ))
    }
}
