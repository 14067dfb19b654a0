//! One URL-driven entry over the broker crates enabled by features:
//! `amqp://`, `nats://`, `redis://`, `mqtt://`, `kafka://`.

// With no broker feature on, `AnySource` has no variant: the code after its matches is dead.
#![cfg_attr(
    not(any(
        feature = "amqp",
        feature = "nats",
        feature = "redis",
        feature = "mqtt",
        feature = "kafka"
    )),
    allow(unreachable_code, unused_variables)
)]

use oncely_core::{Consumer, Delivery, Error, Handler, RawEnvelope, Result, Source, Store};

/// Any enabled broker source, chosen by URL scheme.
#[non_exhaustive]
pub enum AnySource {
    /// RabbitMQ.
    #[cfg(feature = "amqp")]
    Amqp(Box<oncely_amqp::AmqpSource>),
    /// NATS JetStream.
    #[cfg(feature = "nats")]
    Nats(Box<oncely_nats::NatsSource>),
    /// Redis Streams.
    #[cfg(feature = "redis")]
    Redis(Box<oncely_redis::RedisSource>),
    /// MQTT.
    #[cfg(feature = "mqtt")]
    Mqtt(Box<oncely_mqtt::MqttSource>),
    /// Kafka.
    #[cfg(feature = "kafka")]
    Kafka(Box<oncely_kafka::KafkaSource>),
}

impl Source for AnySource {
    async fn next(&mut self) -> Result<Option<Delivery>> {
        match self {
            #[cfg(feature = "amqp")]
            Self::Amqp(s) => s.next().await,
            #[cfg(feature = "nats")]
            Self::Nats(s) => s.next().await,
            #[cfg(feature = "redis")]
            Self::Redis(s) => s.next().await,
            #[cfg(feature = "mqtt")]
            Self::Mqtt(s) => s.next().await,
            #[cfg(feature = "kafka")]
            Self::Kafka(s) => s.next().await,
            #[allow(unreachable_patterns)]
            _ => Err(Error::config("no broker feature enabled")),
        }
    }

    fn read_ahead(&mut self, deliveries: usize) {
        match self {
            #[cfg(feature = "amqp")]
            Self::Amqp(s) => s.read_ahead(deliveries),
            #[cfg(feature = "nats")]
            Self::Nats(s) => s.read_ahead(deliveries),
            #[cfg(feature = "redis")]
            Self::Redis(s) => s.read_ahead(deliveries),
            #[cfg(feature = "mqtt")]
            Self::Mqtt(s) => s.read_ahead(deliveries),
            #[cfg(feature = "kafka")]
            Self::Kafka(s) => s.read_ahead(deliveries),
            #[allow(unreachable_patterns)]
            _ => {}
        }
    }
}

/// The scheme of a URL (`amqp` in `amqp://…`).
pub fn scheme(url: &str) -> &str {
    url.split_once("://").map_or("", |(s, _)| s)
}

fn unknown(url: &str) -> Error {
    let feature = match scheme(url) {
        "amqp" | "amqps" => "amqp",
        "nats" => "nats",
        "redis" | "rediss" => "redis",
        "mqtt" | "tcp" => "mqtt",
        "kafka" => "kafka",
        _ => "",
    };
    if !feature.is_empty() {
        return Error::config(format!(
            "{}:// is not built in: enable the `{feature}` feature (of the oncely crate, or of \
             the oncely binary: cargo run --bin oncely --features {feature} -- …)",
            scheme(url)
        ));
    }
    Error::config(format!(
        "unsupported source {:?}: use amqp://, nats://, redis://, mqtt:// or kafka:// (with the matching oncely feature)",
        scheme(url)
    ))
}

/// Connects the source a URL names, for consumer `consumer` (queue / durable / group name).
pub async fn connect_source(url: &str, consumer: &str) -> Result<AnySource> {
    Ok(match scheme(url) {
        #[cfg(feature = "amqp")]
        "amqp" | "amqps" => {
            AnySource::Amqp(Box::new(oncely_amqp::connect_source(url, consumer).await?))
        }
        #[cfg(feature = "nats")]
        "nats" => AnySource::Nats(Box::new(oncely_nats::connect_source(url, consumer).await?)),
        #[cfg(feature = "redis")]
        "redis" | "rediss" => {
            AnySource::Redis(Box::new(oncely_redis::connect_source(url, consumer).await?))
        }
        #[cfg(feature = "mqtt")]
        "mqtt" | "tcp" => {
            AnySource::Mqtt(Box::new(oncely_mqtt::connect_source(url, consumer).await?))
        }
        #[cfg(feature = "kafka")]
        "kafka" => AnySource::Kafka(Box::new(oncely_kafka::connect_source(url, consumer).await?)),
        _ => {
            let _ = consumer;
            return Err(unknown(url));
        }
    })
}

/// Connects the source a URL names for `consumer`: the queue / durable / group name is the
/// consumer's name, so the name is given once (to [`Consumer::new`]).
///
/// ```no_run
/// # async fn f(store: oncely::AnyStore, handler: impl oncely::Handler<oncely::AnyTx>) -> oncely::Result<()> {
/// use oncely::{CancellationToken, Consumer, ConsumerName};
/// let consumer = Consumer::new(ConsumerName::new("billing")?, store, handler);
/// let source = oncely::brokers::source_for("amqp://guest:guest@127.0.0.1:5672/%2f?queue=credits", &consumer).await?;
/// consumer.run(source, CancellationToken::new()).await?;
/// # Ok(()) }
/// ```
pub async fn source_for<S, H>(url: &str, consumer: &Consumer<S, H>) -> Result<AnySource>
where
    S: Store,
    H: Handler<S::Tx>,
{
    connect_source(url, consumer.name().as_str()).await
}

/// Publishes `messages` to the broker a URL names, with ids set per the wire mapping.
pub async fn publish(url: &str, messages: &[RawEnvelope]) -> Result<()> {
    match scheme(url) {
        #[cfg(feature = "amqp")]
        "amqp" | "amqps" => oncely_amqp::publish(url, messages).await,
        #[cfg(feature = "nats")]
        "nats" => oncely_nats::publish(url, messages).await.map(|_| ()),
        #[cfg(feature = "redis")]
        "redis" | "rediss" => oncely_redis::publish(url, messages).await,
        #[cfg(feature = "mqtt")]
        "mqtt" | "tcp" => oncely_mqtt::publish(url, messages).await,
        #[cfg(feature = "kafka")]
        "kafka" => oncely_kafka::publish(url, messages).await,
        _ => {
            let _ = messages;
            Err(unknown(url))
        }
    }
}
