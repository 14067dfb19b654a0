//! # oncely-webhook
//!
//! Signed webhooks received once. Webhooks are at-least-once delivery over HTTP: Stripe,
//! Standard Webhooks senders (Svix and the services built on the spec) and GitHub retry for
//! up to 3 days, and retry on a timeout even when the receiver already applied the event.
//! An [`Endpoint`] verifies each request ([`Verifier`]: Standard Webhooks, Stripe, GitHub;
//! several secrets for rotation; a body limit) and runs it through oncely's runtime like any
//! broker delivery:
//!
//! ```text
//! verify → begin tx → claim(source, event id, sha256(body)) → handler(tx) → commit → 2xx
//! ```
//!
//! - **2xx only after the commit**: the response is 2xx only when the runtime acked the
//!   delivery, which needs the `Committed` proof of the commit.
//! - A **retry** of an applied event (same id, same body) is a duplicate: 200, no effect.
//! - A **permanent failure** or a **conflict** (same id, another body) is a dead-letter row
//!   with its reason (`oncely dlq list` shows it, `dlq replay` replays it) and 200, so the
//!   sender stops retrying.
//! - A **transient failure** or a **store outage** is retried within the request until the
//!   deadline, then answered 503 with `Retry-After`: the sender retries, nothing is stored.
//! - A request that fails verification is answered 400/401/413 with a short reason and
//!   writes **nothing**; it is counted (`oncely_webhook_rejected_total`) and logged, at most
//!   one line per source every 10 s.
//!
//! ```no_run
//! use oncely_core::{Envelope, Error, Handled, handler_fn};
//! use oncely_sql::{AnyStore, AnyTx};
//! use oncely_webhook::{Endpoint, Verifier};
//!
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! let store = AnyStore::connect("postgres://localhost/app").await?;
//! store.migrate().await?;
//! let record = handler_fn(|tx: &mut AnyTx, event: &Envelope| {
//!     Box::pin(async move {
//!         let sql = "INSERT INTO events (id, body) VALUES ($1, $2)";
//!         tx.execute(sql, &[event.id().as_str().into(), event.payload().to_vec().into()]).await?;
//!         Ok::<_, Error>(Handled::Applied)
//!     })
//! });
//! let github = Endpoint::new("github", store, record, Verifier::github(["s3cret"])?)
//!     .prune_window(std::time::Duration::from_secs(7 * 86_400));
//! github.check_ready().await?;
//! let app: axum::Router = axum::Router::new().route("/hooks/github", github.into_route());
//! # let _ = app; Ok(()) }
//! ```
//!
//! See `docs/webhooks.md` for each provider's set-up, the status codes and retention.

mod ack;
mod deferred;
mod endpoint;
mod intake;
pub mod metrics;
mod rejection;
mod response;
mod secret;
mod verify;

pub use deferred::{Deferred, Enqueue};
pub use endpoint::{DEFAULT_DEADLINE, DEFAULT_RETRY_AFTER, Endpoint};
pub use intake::DEFAULT_BODY_LIMIT;
pub use rejection::Rejection;
pub use secret::SecretError;
pub use verify::{DEFAULT_TOLERANCE, Provider, RETRY_HORIZON, Verified, Verifier};
