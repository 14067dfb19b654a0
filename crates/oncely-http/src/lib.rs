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
//! | request | answer |
//! |---|---|
//! | no key on a route that requires one | 400, `application/problem+json` |
//! | key reused with another method, path, body or fingerprinted header | 422, problem |
//! | key whose first request is still running | 409 with `Retry-After`, problem |
//! | key whose first request completed | the stored status, allow-listed headers and body, `Idempotent-Replayed: true` |
//! | handler answered 5xx (or failed) | rolled back, no key kept: the client may retry |
//!
//! ```no_run
//! use axum::{Router, routing::post};
//! use oncely_http::{IdempotencyLayer, IdempotentTx};
//! use std::time::Duration;
//!
//! async fn create(tx: IdempotentTx, body: String) -> Result<String, oncely_http::TxError> {
//!     let mut tx = tx.lock().await?;
//!     tx.execute("INSERT INTO notes (text) VALUES ($1)", &[body.into()]).await?;
//!     Ok("created".into())
//! }
//!
//! # async fn f() -> oncely_core::Result<()> {
//! let store = oncely_sql::AnyStore::connect("sqlite:app.db", &Default::default()).await?;
//! store.migrate().await?;
//! oncely_http::migrate(&store).await?;
//! let layer = IdempotencyLayer::new(store)
//!     .require_key(true)
//!     .fingerprint_headers(["content-type"])
//!     .replay_headers(["content-type", "location"])
//!     .ttl(Duration::from_secs(24 * 3600));
//! let app: Router = Router::new().route("/notes", post(create).layer(layer));
//! # Ok(()) }
//! ```
//!
//! Expired keys are deleted by [`prune_expired`] (run by `oncely prune`). See `docs/http.md`.

pub mod demo;
mod extract;
mod key;
mod keys;
mod layer;
mod migrate;
mod problem;
mod prune;
mod service;

pub use extract::{IdempotencyKey, IdempotentTx, TxError, TxGuard};
pub use key::{IDEMPOTENCY_KEY, REPLAYED, fingerprint, parse_key};
pub use layer::IdempotencyLayer;
pub use migrate::{MIGRATIONS, migrate, print_migrations};
pub use prune::prune_expired;
pub use service::IdempotencyService;
