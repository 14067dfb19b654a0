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
//! By default ([`IdFrom::Header`]) the id is the producer's `message-id` header: the
//! inbox row in the effect's transaction catches Kafka's redeliveries *and* the copies a
//! producer wrote twice; the Kafka offset commit only decides where a restart resumes.
//!
//! Kafka's own advice for exactly-once into a database is to store the offset *in the
//! database, in the same transaction* as the effect. With [`IdFrom::Offset`] (`?id=offset`)
//! the id is `TOPIC/PARTITION/OFFSET`, so the inbox row *is* that stored offset — one row
//! per offset, which stays correct under concurrent processing where a single
//! "next offset" per partition would not. Use it when producers set no ids; it cannot
//! catch a record the producer wrote twice (two offsets). See `docs/kafka.md`.

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
    offset_id, record_headers,
};
pub use options::{DEFAULT_TOPIC, IdFrom, KafkaOptions};
pub use producer::{KafkaProducer, create_topic, publish};
pub use source::{KafkaSource, connect_source};
