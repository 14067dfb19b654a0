//! # oncely-nats
//!
//! NATS JetStream for oncely, on [async-nats](https://docs.rs/async-nats):
//!
//! - [`NatsSource`]: a durable pull consumer with explicit acks, sent only after the store's
//!   commit and confirmed: the acks asked for together go out as plain `+ACK`s and one request
//!   the server answers after handling them (on the client's shared reply subscription); an
//!   ack the server does not answer is reported as failed. Unacked messages are
//!   redelivered after `ack_wait` (or at once after a `-NAK`); `attempt` is JetStream's
//!   delivery count. The durable name is [`durable_name`] of the consumer name: the name
//!   itself when NATS allows it, else its readable part plus a short hash (injective).
//! - [`NatsProducer`] / [`publish`]: sets the id in the `Nats-Msg-Id` header (which also
//!   gives broker-side dedup within the stream's duplicate window) and the
//!   `oncely-version`, `oncely-entity`, `oncely-source-time` headers.
//!
//! A message without `Nats-Msg-Id` becomes a delivery whose id is `None`; the runtime
//! dead-letters it with reason `bad_id`.
//!
//! ```no_run
//! # async fn f() -> oncely_core::Result<()> {
//! let url = "nats://127.0.0.1:4222?stream=CREDITS&subject=credits";
//! oncely_nats::publish(url, &[oncely_core::RawEnvelope::new("m-1", r#"{"account":"acct-17","amount":5}"#)]).await?;
//! let source = oncely_nats::connect_source(url, "billing").await?;
//! # let _ = source; Ok(()) }
//! ```

mod acks;
mod durable;
mod mapping;
mod producer;
mod source;

pub use durable::durable_name;
pub use mapping::{
    ENTITY_HEADER, ID_HEADER, SOURCE_TIME_HEADER, VERSION_HEADER, envelope_of, headers_of,
};
pub use producer::{NatsProducer, publish};
pub use source::{DEFAULT_STREAM, DEFAULT_SUBJECT, NatsOptions, NatsSource, connect_source};
