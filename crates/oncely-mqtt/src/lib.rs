//! # oncely-mqtt
//!
//! MQTT for oncely, on [rumqttc](https://docs.rs/rumqttc) (MQTT 5 client):
//!
//! - [`MqttSource`]: QoS 1 subscription in a persistent session with manual acks; the
//!   PUBACK is sent only after the store's commit. A nack is held in-process and retried
//!   after a backoff (the broker never sees it); after a lost connection the source
//!   reconnects with backoff and the broker redelivers what was unacked.
//! - [`MqttProducer`] / [`publish`]: QoS 1, the id in the MQTT 5 user property
//!   `message-id`; `oncely-version`, `oncely-entity`, `oncely-source-time` user properties.
//!
//! Producers speaking MQTT 3.1.1 (no properties) put the id in the JSON payload's
//! `message_id` field instead. A publish with neither becomes a delivery whose id is `None`;
//! the runtime dead-letters it with reason `bad_id`.
//!
//! ```no_run
//! # async fn f() -> oncely_core::Result<()> {
//! let url = "mqtt://127.0.0.1:1883?topic=credits";
//! let source = oncely_mqtt::connect_source(url, "billing").await?; // subscribe first
//! oncely_mqtt::publish(url, &[oncely_core::RawEnvelope::new("m-1", r#"{"account":"acct-17","amount":5}"#)]).await?;
//! # let _ = source; Ok(()) }
//! ```

mod hold;
mod mapping;
mod producer;
mod source;

pub use mapping::{
    ENTITY_PROPERTY, ID_JSON_FIELD, ID_PROPERTY, SOURCE_TIME_PROPERTY, VERSION_PROPERTY,
    envelope_of, properties_of,
};
pub use producer::{MqttProducer, PACING_WINDOW, publish, publish_paced};
pub use source::{
    Count, DEFAULT_INFLIGHT, DEFAULT_TOPIC, MqttOptions5, MqttSource, ReconnectHandle,
    connect_source,
};
