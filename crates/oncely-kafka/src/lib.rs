//! # oncely-kafka
//!
//! Kafka for oncely, on [rdkafka](https://docs.rs/rdkafka) (librdkafka built from the
//! bundled sources):
//!
//! - [`KafkaSource`]: a consumer in a consumer group with `enable.auto.commit=false`. The
//!   offset of a record is committed only after its database transaction committed, and
//!   per partition only contiguously — a later offset is never committed while an
//!   earlier record of the same partition is still in flight. On a rebalance the revoked
//!   partitions' in-flight deliveries are finished and their offsets committed before the
//!   partitions are released.
//! - [`KafkaProducer`] / [`publish`]: sets the `message-id` header (plus `oncely-version`,
//!   `oncely-entity`, `oncely-source-time`); the record key is the entity key, else the id.
//!
//! A record without a usable `message-id` header becomes a [`oncely_core::Delivery`] whose
//! id is missing or invalid; the runtime dead-letters it with reason `bad_id` (and the
//! offset then moves on like any other).
//!
//! ```no_run
//! # async fn f() -> oncely_core::Result<()> {
//! let url = "kafka://127.0.0.1:9092/credits?partitions=4";
//! oncely_kafka::publish(url, &[oncely_core::RawEnvelope::new("m-1", r#"{"account":"acct-17","amount":5}"#)]).await?;
//! let source = oncely_kafka::connect_source(url, "billing").await?;
//! # let _ = source; Ok(()) }
//! ```
//!
//! ## Offsets in Kafka, or offsets in the database?
//!
//! This crate keeps the offsets in Kafka and relies on the inbox: the database commit
//! (claim + effect) comes first, the offset commit second. A crash between the two
//! redelivers records whose effect is already committed; their claim finds the id and
//! they are skipped as `Duplicate`. That is at-least-once delivery made exactly-once in
//! effect, and it needs nothing but the inbox table.
//!
//! Kafka's own advice for exactly-once into a database is the other way: store the
//! offset *in the database, in the same transaction* as the effect, and on assignment
//! seek each partition to the stored offset (ignoring Kafka's committed offsets). Then
//! no record is ever redelivered after its transaction committed, and no inbox is needed
//! for Kafka-internal redelivery. Use it when
//!
//! - one topic partition maps to one consumer and you want no redelivery at all (e.g. a
//!   very high rate where inbox lookups matter), or
//! - the producer cannot set stable ids (then the offset *is* the only stable identity —
//!   but note that a producer retry that writes a record twice gives two offsets, which
//!   the offset table cannot catch; only a producer id catches that).
//!
//! Keep the inbox (this crate's default) when producers set ids: it also catches
//! duplicates the *producer* created (retries, replays, re-published topics, a second
//! source), which offsets cannot, and the offset commit is then only an optimisation of
//! how much is redelivered. Both can be combined: the inbox for correctness, offsets in
//! Kafka for progress. See `docs/kafka.md` for the table layout of the alternative.

mod acker;
mod context;
mod mapping;
mod options;
mod producer;
mod shared;
mod source;
mod tracker;

pub use context::KafkaContext;
pub use mapping::{
    ENTITY_HEADER, ID_HEADER, SOURCE_TIME_HEADER, VERSION_HEADER, envelope_of, headers_of, key_of,
};
pub use options::{DEFAULT_TOPIC, KafkaOptions};
pub use producer::{KafkaProducer, create_topic, publish};
pub use source::{KafkaSource, connect_source};
