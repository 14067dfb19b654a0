//! One URL-driven entry over the broker crates: `amqp://`, `nats://`, `redis://`, `mqtt://`.

use oncely_core::{Delivery, Error, RawEnvelope, Result, Source};

/// Any of the broker sources, chosen by URL scheme (boxed: they differ much in size).
pub enum AnySource {
    /// RabbitMQ.
    Amqp(Box<oncely_amqp::AmqpSource>),
    /// NATS JetStream.
    Nats(Box<oncely_nats::NatsSource>),
    /// Redis Streams.
    Redis(Box<oncely_redis::RedisSource>),
    /// MQTT.
    Mqtt(Box<oncely_mqtt::MqttSource>),
}

impl Source for AnySource {
    async fn next(&mut self) -> Result<Option<Delivery>> {
        match self {
            Self::Amqp(s) => s.next().await,
            Self::Nats(s) => s.next().await,
            Self::Redis(s) => s.next().await,
            Self::Mqtt(s) => s.next().await,
        }
    }
}

fn scheme(url: &str) -> &str {
    url.split_once("://").map_or("", |(s, _)| s)
}

/// Connects the source a URL names, for consumer `consumer`.
pub async fn connect_source(url: &str, consumer: &str) -> Result<AnySource> {
    Ok(match scheme(url) {
        "amqp" | "amqps" => {
            AnySource::Amqp(Box::new(oncely_amqp::connect_source(url, consumer).await?))
        }
        "nats" => AnySource::Nats(Box::new(oncely_nats::connect_source(url, consumer).await?)),
        "redis" | "rediss" => {
            AnySource::Redis(Box::new(oncely_redis::connect_source(url, consumer).await?))
        }
        "mqtt" | "tcp" => {
            AnySource::Mqtt(Box::new(oncely_mqtt::connect_source(url, consumer).await?))
        }
        other => {
            return Err(Error::config(format!(
                "unknown source scheme {other:?} in {url}"
            )));
        }
    })
}

/// Publishes `messages` to the broker a URL names.
pub async fn publish(url: &str, messages: &[RawEnvelope]) -> Result<()> {
    match scheme(url) {
        "amqp" | "amqps" => oncely_amqp::publish(url, messages).await,
        "nats" => oncely_nats::publish(url, messages).await.map(|_| ()),
        "redis" | "rediss" => oncely_redis::publish(url, messages).await,
        "mqtt" | "tcp" => oncely_mqtt::publish(url, messages).await,
        other => Err(Error::config(format!(
            "unknown source scheme {other:?} in {url}"
        ))),
    }
}
