//! # oncely-http
//!
//! The `Idempotency-Key` header (draft-ietf-httpapi-idempotency-key-header) for tower and
//! axum, stored in oncely's SQL databases (SQLite, PostgreSQL, MySQL/MariaDB): a retried
//! `POST` gets the first response back instead of running twice.
//!
//! The key is reserved **in the same database transaction as the handler's writes**: the
//! layer begins a transaction, inserts the key row, hands the transaction to the handler
//! ([`IdempotentTx`]), buffers the response, stores it in the key row and commits. A crash
//! before the commit leaves neither the writes nor the key; after it, both.
//!
//! Keys belong to a [`Scope`] (the client, from an auth extension or a header, or one global
//! scope), chosen when building the layer: the row is `(scope, key)`, and a stored response
//! is only replayed to its own scope. A key used in another scope is a fresh key there.
//!
//! | request | answer |
//! |---|---|
//! | no key on a route that requires one | 400, `application/problem+json` |
//! | key but no scope (the scope's header missing) | 400, problem (500 if the scope's extension is missing) |
//! | key reused in its scope with another method, path, body or fingerprinted header | 422, problem |
//! | key whose first request is still running | 409 with `Retry-After`, problem |
//! | key whose first request completed | the stored status, allow-listed headers and body, `Idempotent-Replayed: true` |
//! | handler answered 4xx before using its transaction, or marked [`Rejected`] | rolled back, no key kept: the corrected request runs |
//! | handler answered 5xx (or failed) | rolled back, no key kept: the client may retry |
//!
//! ```no_run
//! use axum::{Router, routing::post};
//! use oncely_http::{IdempotencyLayer, IdempotentTx, Scope};
//! use std::time::Duration;
//!
//! async fn create(tx: IdempotentTx, body: String) -> Result<String, oncely_http::TxError> {
//!     let mut tx = tx.lock().await?;
//!     tx.execute("INSERT INTO notes (text) VALUES ($1)", &[body.into()]).await?;
//!     Ok("created".into())
//! }
//!
//! # async fn f() -> oncely_core::Result<()> {
//! let store = oncely_sql::AnyStore::connect("sqlite:app.db").await?;
//! store.migrate_with(&[&oncely_sql::INBOX, &oncely_http::MIGRATIONS]).await?;
//! let layer = IdempotencyLayer::new(store, Scope::header("authorization"))
//!     .require_key(true)
//!     .fingerprint_headers(["content-type"])
//!     .replay_headers(["content-type", "location"])
//!     .ttl(Duration::from_secs(24 * 3600));
//! let app: Router = Router::new().route("/notes", post(create).layer(layer));
//! # Ok(()) }
//! ```
//!
//! Expired keys are deleted by [`prune_expired`] (run by `oncely prune`). See `docs/http.md`.

mod answer;
mod extract;
mod key;
mod keys;
mod layer;
mod migrate;
#[cfg(feature = "orders-app")]
pub mod orders_app;
mod problem;
mod prune;
mod scope;
mod service;

pub use answer::{OmitBody, Rejected};
pub use extract::{IdempotencyKey, IdempotentTx, TxError, TxGuard};
pub use key::{BODY_OMITTED, IDEMPOTENCY_KEY, REPLAYED, fingerprint, parse_key};
pub use layer::IdempotencyLayer;
pub use migrate::MIGRATIONS;
pub use prune::prune_expired;
pub use scope::{MissingScope, Scope, ScopeId};
pub use service::IdempotencyService;
