//! # oncely
//!
//! Idempotent consumers: with at-least-once delivery every message may arrive more than once;
//! oncely makes the second processing a no-op, so each message's effect happens once.
//!
//! ```text
//! receive → begin tx → claim(consumer, message_id, payload_hash) → effect(tx) → commit → ack
//! ```
//!
//! This facade re-exports [`oncely_core`] at the root and the other crates as modules,
//! behind features: `sql` (default: SQLite, PostgreSQL, MySQL/MariaDB stores), `effects`,
//! `amqp`, `nats`, `redis`, `mqtt`, `kafka`, `testkit`, `cli` (the admin commands as a
//! library: `oncely::cli::Admin`, from `oncely-ops`). See the README and `docs/` for the contract.
//!
//! ```
//! use oncely::{ConsumerName, MessageId};
//! assert!(MessageId::new("order-42").is_ok());
//! assert!(ConsumerName::new("").is_err());
//! ```

pub use oncely_core::*;

#[cfg(feature = "sql")]
pub use oncely_sql as sql;

/// What a handler written once for any database needs (the README's quick start):
/// [`AnyStore`] picks SQLite, PostgreSQL or MySQL/MariaDB from a URL and hands the handler an
/// [`AnyTx`], which runs statements with `$1, $2, …` placeholders and [`Value`] arguments.
///
/// ```no_run
/// # async fn f() -> oncely::Result<()> {
/// use oncely::{AnyStore, Store};
/// let store = AnyStore::connect("sqlite:app.db").await?;
/// store.migrate().await?;
/// let mut tx = store.begin().await?;
/// tx.execute("UPDATE accounts SET credits = credits + $1 WHERE id = $2", &[5.into(), "a".into()])
///     .await?;
/// store.commit(tx).await?;
/// # Ok(()) }
/// ```
#[cfg(feature = "sql")]
pub use oncely_sql::{AnyStore, AnyTx, Column, ConnectOptions, Value};

#[cfg(feature = "effects")]
pub use oncely_effects as effects;

#[cfg(feature = "http")]
pub use oncely_http as http;

#[cfg(feature = "cli")]
pub use oncely_ops as ops;

#[cfg(feature = "cli")]
pub use oncely_ops::cli;

#[cfg(feature = "amqp")]
pub use oncely_amqp as amqp;

#[cfg(feature = "nats")]
pub use oncely_nats as nats;

#[cfg(feature = "redis")]
pub use oncely_redis as redis;

#[cfg(feature = "mqtt")]
pub use oncely_mqtt as mqtt;

#[cfg(feature = "kafka")]
pub use oncely_kafka as kafka;

#[cfg(feature = "testkit")]
pub use oncely_testkit as testkit;

/// Always present; with no broker feature on, [`brokers::AnySource`] has no variant and
/// every URL is refused with the feature to enable.
pub mod brokers;
