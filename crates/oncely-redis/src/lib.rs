//! # oncely-redis
//!
//! Redis Streams for oncely, on [redis](https://docs.rs/redis):
//!
//! - [`RedisSource`]: a consumer group member — `XREADGROUP`, `XACK` only after the
//!   store's commit, its own pending entries re-read after a (re)connect, and entries left
//!   pending by a dead member taken over with `XAUTOCLAIM` after an idle time. A lost
//!   connection is re-opened with backoff.
//! - [`RedisProducer`] / [`publish`]: `XADD` with fields `message_id` (the producer's id;
//!   the entry id is the broker's), `payload`, and optional `oncely-version`,
//!   `oncely-entity`, `oncely-source-time`.
//!
//! - With the feature `store`: [`RedisStore`](store::RedisStore), a store whose claims and
//!   effects live in Redis and commit in one Lua script (docs/redis-store.md).
//!
//! An entry without a `message_id` field becomes a delivery whose id is `None`; the
//! runtime dead-letters it with reason `bad_id`.
//!
//! ```no_run
//! # async fn f() -> oncely_core::Result<()> {
//! let url = "redis://127.0.0.1:6379/?stream=credits";
//! oncely_redis::publish(url, &[oncely_core::RawEnvelope::new("m-1", r#"{"account":"acct-17","amount":5}"#)]).await?;
//! let source = oncely_redis::connect_source(url, "billing").await?;
//! # let _ = source; Ok(()) }
//! ```

mod acks;
mod mapping;
mod producer;
mod read;
mod source;
#[cfg(feature = "store")]
pub mod store;

pub use mapping::{
    ENTITY_FIELD, ID_FIELD, PAYLOAD_FIELD, SOURCE_TIME_FIELD, VERSION_FIELD, envelope_of, fields_of,
};
pub use producer::{RedisProducer, publish};
/// The redis crate this store is built on, for reads outside a transaction
/// ([`RedisStore::connection`]).
#[cfg(feature = "store")]
pub use redis;
pub use source::{DEFAULT_STREAM, RedisOptions, RedisSource, connect_source};
#[cfg(feature = "store")]
pub use store::{Durability, RedisStore, RedisStoreOptions, RedisTx};
