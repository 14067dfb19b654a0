//! [`IdempotencyService`]: one request through the key, the transaction and the handler.

use crate::answer::{OmitBody, Rejected};
use crate::extract::{IdempotencyKey, IdempotentTx};
use crate::key::{BODY_OMITTED, REPLAYED, fingerprint, parse_key};
use crate::keys::{Reserved, Row, Stored};
use crate::layer::Config;
use crate::problem::Problem;
use bytes::Bytes;
use futures::future::BoxFuture;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use oncely_core::{ErrorKind, Store};
use oncely_sql::AnyTx;
use std::sync::Arc;
use std::task::{Context, Poll};
use tracing::{Instrument, field};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The service [`IdempotencyLayer`](crate::IdempotencyLayer) wraps around a handler. The
/// request body is buffered (for the fingerprint) and handed on as `B::from(bytes)`; the
/// response body is buffered (to store it) and returned as `ResB::from(bytes)`: axum's `Body`
/// and `http_body_util::Full<Bytes>` both qualify.
#[derive(Clone)]
pub struct IdempotencyService<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> std::fmt::Debug for IdempotencyService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IdempotencyService")
    }
}

impl<S> IdempotencyService<S> {
    pub(crate) fn new(inner: S, config: Arc<Config>) -> Self {
        Self { inner, config }
    }
}

impl<S, B, ResB> tower_service::Service<Request<B>> for IdempotencyService<S>
where
    S: tower_service::Service<Request<B>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    B: Body + From<Bytes> + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    ResB: Body + From<Bytes> + Send + 'static,
    ResB::Data: Send,
    ResB::Error: Into<BoxError>,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Response<ResB>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // The clone that was made ready is the one that serves this request.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let config = self.config.clone();
        if !config.methods.contains(req.method()) {
            let mut inner = inner;
            return Box::pin(inner.call(req));
        }
        let span = tracing::info_span!(
            "idempotency",
            method = %req.method(),
            path = %req.uri().path(),
            key = field::Empty,
            outcome = field::Empty,
        );
        // The request's W3C trace context (if valid) parents the span, so an outbox message
        // the handler enqueues carries the caller's trace; otherwise nothing changes.
        oncely_core::trace::continue_trace(&span, |name| req.headers().get(name)?.to_str().ok());
        Box::pin(handle(config, inner, req).instrument(span))
    }
}

fn outcome(name: &str) {
    tracing::Span::current().record("outcome", name);
}

fn problem<B: From<Bytes>>(config: &Config, p: Problem, detail: &str) -> Response<B> {
    outcome(p.outcome());
    p.response(detail, config.retry_after)
}

async fn handle<S, B, ResB>(
    config: Arc<Config>,
    mut inner: S,
    req: Request<B>,
) -> Result<Response<ResB>, S::Error>
where
    S: tower_service::Service<Request<B>, Response = Response<ResB>>,
    B: Body + From<Bytes>,
    B::Error: Into<BoxError>,
    ResB: Body + From<Bytes>,
    ResB::Error: Into<BoxError>,
{
    let key = match parse_key(req.headers()) {
        Ok(Some(key)) => Some(key),
        Ok(None) if config.require_key => {
            let detail = "this route requires an Idempotency-Key header";
            return Ok(problem(&config, Problem::MissingKey, detail));
        }
        Ok(None) => None,
        Err(e) => return Ok(problem(&config, Problem::InvalidKey, &e.to_string())),
    };
    if let Some(key) = &key {
        tracing::Span::current().record("key", key.as_str());
    }
    let (mut parts, body) = req.into_parts();
    // Whose key it is: without a scope a keyed request is refused, never served globally.
    let scope = match key
        .as_ref()
        .map(|_| config.scope.resolve(&parts))
        .transpose()
    {
        Ok(scope) => scope,
        Err(missing) => {
            let p = if missing.server_side {
                tracing::error!(scope = ?config.scope, "{missing}");
                Problem::ScopeUnavailable
            } else {
                Problem::MissingScope
            };
            return Ok(problem(&config, p, &missing.detail));
        }
    };
    let bytes = match Limited::new(body, config.max_request_bytes).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            let detail = format!("reading the request body: {e}");
            return Ok(problem(&config, Problem::RequestTooLarge, &detail));
        }
    };
    let print = fingerprint(
        &parts.method,
        &parts.uri,
        &parts.headers,
        &config.fingerprint_headers,
        &bytes,
    );
    let owner = uuid::Uuid::new_v4().to_string();
    let mut tx = match config.store.begin().await {
        Ok(tx) => tx,
        Err(e) => return Ok(store_failed(&config, None, e).await),
    };
    if let (Some(key), Some(scope)) = (&key, &scope) {
        let reserved = config
            .keys
            .reserve(
                &mut tx,
                Row {
                    scope: scope.as_str(),
                    key: key.as_str(),
                    owner: &owner,
                },
                &print,
                config.ttl,
                config.in_flight_wait,
            )
            .await;
        match reserved {
            Ok(Reserved::Fresh) => {}
            Ok(Reserved::Replay(stored)) => {
                rollback(&config, tx).await;
                outcome("replayed");
                return Ok(replay(&stored));
            }
            Ok(Reserved::Mismatch) => {
                rollback(&config, tx).await;
                let detail = "the key was used in this scope with a different method, path, body or fingerprinted header";
                return Ok(problem(&config, Problem::KeyReused, detail));
            }
            Err(e) if e.kind() == ErrorKind::Transient => {
                rollback(&config, tx).await;
                tracing::debug!(error = %e, "key in flight");
                let detail = "retry after the first request with this key completes";
                return Ok(problem(&config, Problem::InFlight, detail));
            }
            Err(e) => return Ok(store_failed(&config, Some(tx), e).await),
        }
    }
    let handle = IdempotentTx::new(tx);
    parts.extensions.insert(handle.clone());
    if let Some(key) = &key {
        parts.extensions.insert(IdempotencyKey(key.clone()));
    }
    let result = inner.call(Request::from_parts(parts, B::from(bytes))).await;
    let tx = handle.take().await;
    let response = match result {
        Ok(response) => response,
        Err(e) => {
            if let Some(tx) = tx {
                rollback(&config, tx).await;
            }
            outcome("handler_error");
            return Err(e);
        }
    };
    let Some(mut tx) = tx else {
        // Unreachable: only the layer takes the transaction.
        return Ok(problem(&config, Problem::Store, "the transaction was lost"));
    };
    let (rparts, rbody) = response.into_parts();
    let body = match Limited::new(rbody, config.max_response_bytes)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            rollback(&config, tx).await;
            let detail = format!("buffering the response: {e}");
            return Ok(problem(&config, Problem::ResponseTooLarge, &detail));
        }
    };
    if rparts.status.is_server_error() {
        rollback(&config, tx).await;
        outcome("rolled_back");
        return Ok(Response::from_parts(rparts, ResB::from(body)));
    }
    // A rejection leaves the key free: marked by the handler, or a 4xx answered before the
    // handler ever took its transaction (an extractor's rejection, early validation), which
    // therefore wrote nothing. The client corrects the request and retries with the same key.
    let marked = rparts.extensions.get::<Rejected>().is_some();
    if marked || (rparts.status.is_client_error() && !handle.used()) {
        rollback(&config, tx).await;
        outcome("rejected");
        return Ok(Response::from_parts(rparts, ResB::from(body)));
    }
    if let (Some(key), Some(scope)) = (&key, &scope) {
        let omit = !config.store_body || rparts.extensions.get::<OmitBody>().is_some();
        let mut headers = allowed(&rparts.headers, &config.replay_headers);
        let body = if omit {
            // Nothing of the body at rest; the replay says it has none.
            headers.retain(|(name, _)| name != "content-type");
            headers.push((BODY_OMITTED.to_owned(), "omitted".to_owned()));
            Vec::new()
        } else {
            body.to_vec()
        };
        let stored = Stored {
            status: rparts.status.as_u16(),
            headers,
            body,
        };
        let completed = config
            .keys
            .complete(
                &mut tx,
                Row {
                    scope: scope.as_str(),
                    key: key.as_str(),
                    owner: &owner,
                },
                &stored,
            )
            .await;
        if let Err(e) = completed {
            return Ok(store_failed(&config, Some(tx), e).await);
        }
    }
    if let Err(e) = config.store.commit(tx).await {
        return Ok(store_failed(&config, None, e).await);
    }
    outcome(if key.is_some() { "stored" } else { "no_key" });
    Ok(Response::from_parts(rparts, ResB::from(body)))
}

/// The stored response with the replay marker.
fn replay<B: From<Bytes>>(stored: &Stored) -> Response<B> {
    let mut response = Response::new(B::from(Bytes::from(stored.body.clone())));
    *response.status_mut() = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    let headers = response.headers_mut();
    for (name, value) in &stored.headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::try_from(name.as_str()),
            HeaderValue::try_from(value.as_str()),
        ) {
            headers.append(n, v);
        }
    }
    headers.insert(REPLAYED, HeaderValue::from_static("true"));
    response
}

/// The response headers on the allow-list, as text.
fn allowed(headers: &http::HeaderMap, names: &[HeaderName]) -> Vec<(String, String)> {
    names
        .iter()
        .flat_map(|name| {
            headers.get_all(name).iter().filter_map(move |v| {
                v.to_str()
                    .ok()
                    .map(|v| (name.as_str().to_owned(), v.to_owned()))
            })
        })
        .collect()
}

async fn rollback(config: &Config, tx: AnyTx) {
    if let Err(e) = config.store.rollback(tx).await {
        tracing::warn!(error = %e, "rolling back the idempotent transaction failed");
    }
}

/// 503: the database failed, the transaction (if any) is rolled back, nothing was kept.
async fn store_failed<B: From<Bytes>>(
    config: &Config,
    tx: Option<AnyTx>,
    e: oncely_core::Error,
) -> Response<B> {
    tracing::warn!(error = %e, "idempotency store failed");
    if let Some(tx) = tx {
        rollback(config, tx).await;
    }
    problem(config, Problem::Store, &e.to_string())
}
