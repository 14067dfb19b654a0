//! # oncely-amqp
//!
//! RabbitMQ (AMQP 0-9-1) for oncely, on [lapin](https://docs.rs/lapin):
//!
//! - [`AmqpSource`]: consumes a durable queue with `basic.qos` prefetch and manual acks;
//!   the ack is sent only after the store's commit, a nack requeues, and a lost
//!   connection is re-opened with backoff (the broker requeues what was unacked, so
//!   committed-but-unacked messages come back and are skipped as `Duplicate`).
//! - [`AmqpProducer`] / [`publish`]: sets the id per oncely's wire mapping — the
//!   `message_id` property; `oncely-version`, `oncely-entity` and `oncely-source-time`
//!   headers; the `timestamp` property; persistent delivery mode.
//!
//! A delivery without a `message_id` becomes a [`oncely_core::Delivery`] whose id is
//! `None`; the runtime dead-letters it with reason `bad_id`.
//!
//! ```no_run
//! # async fn f() -> oncely_core::Result<()> {
//! let url = "amqp://guest:guest@127.0.0.1:5672/%2f?queue=credits";
//! oncely_amqp::publish(url, &[oncely_core::RawEnvelope::new("m-1", r#"{"account":"acct-17","amount":5}"#)]).await?;
//! let source = oncely_amqp::connect_source(url, "billing").await?;
//! # let _ = source; Ok(()) }
//! ```

mod acks;
mod mapping;
mod producer;
mod source;

pub use mapping::{
    ENTITY_HEADER, SOURCE_TIME_HEADER, VERSION_HEADER, attempt_of, envelope_of, properties_of,
};
pub use producer::{AmqpProducer, publish};
pub use source::{AmqpOptions, AmqpSource, DEFAULT_QUEUE, connect_source, prefetch_for};
