//! # oncely-core
//!
//! The contract of oncely, without I/O: for each delivery of a message,
//!
//! ```text
//! receive → begin tx → claim(consumer, message_id, payload_hash) → effect(tx) → commit → ack
//! ```
//!
//! - [`MessageId`], [`ConsumerName`], [`Envelope`], [`PayloadHash`]: the validated model.
//! - [`Store`]: the transaction the claim and the effect share. After its commit returns
//!   `Ok`, the runtime makes the [`Committed`] proof that [`Delivery::ack`] requires; only
//!   oncely-core can make one, so no processed delivery is acked before its commit.
//!   [`Delivery::discard`] drops a message on purpose, without a proof.
//! - [`Source`] and [`Delivery`]: what brokers deliver.
//! - [`Consumer`]: the runtime (concurrency, retries with backoff, dead-lettering, shutdown),
//!   with a per-consumer [`StoreHealth`] circuit breaker that holds deliveries while the store fails.
//! - [`MemorySource`]: an in-process broker with duplicate, reorder and lost-ack faults
//!   (crash injection lives in `oncely-testkit`, as wrappers around a store and a source).
//! - [`trace`]: W3C trace context (`traceparent`) from message headers to the delivery span
//!   and from the current span into outgoing messages (OpenTelemetry).

mod consumer;
mod envelope;
mod error;
mod handler;
mod handler_fn;
mod health;
mod id;
mod log_throttle;
mod memory;
pub mod metrics;
mod outcome;
mod retry;
mod signal;
mod source;
mod stats;
mod store;
pub mod trace;
pub mod wire;

pub(crate) use consumer::panic_message;
pub use consumer::{
    Consumer, DEFAULT_ATTEMPT_TIMEOUT, DEFAULT_CONCURRENCY, DEFAULT_GROUP_COMMIT,
    DEFAULT_RETENTION, GroupCommitStats, LatePolicy,
};
pub use envelope::{Envelope, Meta, PayloadHash, RawEnvelope};
pub use error::{BoxError, Error, ErrorKind, Result};
pub use handler::{Handler, Json, JsonHandler};
pub use handler_fn::{HandlerFn, handler_fn};
pub use health::StoreHealth;
pub use id::{
    ConsumerName, IdError, IntoConsumerName, MAX_CONSUMER_NAME_BYTES, MAX_MESSAGE_ID_BYTES,
    MessageId,
};
pub use log_throttle::LogThrottle;
pub use memory::{MemorySource, MemoryStats};
pub use outcome::{DeadLetterReason, Handled, Outcome};
pub use retry::RetryPolicy;
pub use signal::shutdown_signal;
pub use source::{Acker, Delivery, Source, StopWhenIdle, map_envelope};
pub use stats::{Stats, StatsSnapshot};
pub use store::{Claim, Committed, DeadLetter, Inspect, Store, StoredDeadLetter};
/// The shutdown signal [`Consumer::run`] takes (re-exported from `tokio-util`, so users need
/// no extra dependency).
pub use tokio_util::sync::CancellationToken;
