//! [`KafkaProducer`]: publishes [`RawEnvelope`]s with the id in the `message-id` header.

use crate::mapping::{headers_of, key_of};
use crate::options::KafkaOptions;
use crate::shared::kafka_err;
use oncely_core::{Error, RawEnvelope, Result};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use std::time::Duration;

/// Publishes to one topic with `acks=all`, so a successful [`KafkaProducer::send`] means
/// the broker stored the record. Sets the `message-id` header (and the `oncely-*`
/// headers from the envelope's meta); the record key is the entity key, else the id.
pub struct KafkaProducer {
    producer: FutureProducer,
    topic: String,
}

impl KafkaProducer {
    /// A producer for `topic` on `brokers` (`bootstrap.servers`), with extra librdkafka
    /// settings `client` applied last.
    pub fn new(brokers: &str, topic: &str, client: &[(String, String)]) -> Result<Self> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", brokers)
            .set("client.id", "oncely:producer")
            .set("acks", "all")
            .set("linger.ms", "5")
            .set("message.timeout.ms", "60000");
        for (k, v) in client {
            config.set(k, v);
        }
        let producer = config
            .create()
            .map_err(|e| Error::config("Kafka: creating the producer").with_source(e))?;
        Ok(Self {
            producer,
            topic: topic.to_owned(),
        })
    }

    /// The topic records go to.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Publishes one message and waits until the broker stored it.
    pub async fn send(&self, message: &RawEnvelope) -> Result<()> {
        self.send_all(std::slice::from_ref(message)).await
    }

    /// Publishes messages (in order per partition), then waits until the broker stored
    /// all of them. A message without a `traceparent` header gets the current span's
    /// ([`oncely_core::trace::traced`]).
    pub async fn send_all(&self, messages: &[RawEnvelope]) -> Result<()> {
        let sends = messages.iter().map(|m| self.send_one(m));
        futures::future::try_join_all(sends).await.map(|_| ())
    }

    async fn send_one(&self, message: &RawEnvelope) -> Result<()> {
        let headers_list = headers_of(&oncely_core::trace::traced(message));
        let mut headers = OwnedHeaders::new_with_capacity(headers_list.len());
        for (key, value) in &headers_list {
            headers = headers.insert(Header {
                key: key.as_str(),
                value: Some(value.as_slice()),
            });
        }
        let key = key_of(message);
        let mut record = FutureRecord::to(&self.topic)
            .payload(&message.payload)
            .headers(headers);
        if let Some(k) = &key {
            record = record.key(k.as_slice());
        }
        self.producer
            .send(record, Duration::from_secs(30))
            .await
            .map(|_| ())
            .map_err(|(e, _)| kafka_err("produce", e))
    }
}

/// Creates `topic` with `partitions` partitions (replication factor 1) unless it exists.
pub async fn create_topic(
    brokers: &str,
    topic: &str,
    partitions: i32,
    client: &[(String, String)],
) -> Result<()> {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers);
    for (k, v) in client {
        config.set(k, v);
    }
    let admin: AdminClient<DefaultClientContext> = config
        .create()
        .map_err(|e| Error::config("Kafka: creating the admin client").with_source(e))?;
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = admin
        .create_topics([&new], &options)
        .await
        .map_err(|e| kafka_err("create topic", e))?;
    for result in results {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => {
                return Err(Error::transient(format!(
                    "Kafka: creating topic {name} failed: {code}"
                )));
            }
        }
    }
    Ok(())
}

/// Publishes `messages` to the first topic of a `kafka://` URL (created with
/// `?partitions=N` partitions if missing; default 1), e.g.
/// `kafka://127.0.0.1:9092/credits?partitions=4`.
pub async fn publish(url: &str, messages: &[RawEnvelope]) -> Result<()> {
    let options = KafkaOptions::from_url(url, "producer")?;
    let topic = &options.topics[0];
    create_topic(&options.brokers, topic, options.partitions, &options.client).await?;
    let producer = KafkaProducer::new(&options.brokers, topic, &options.client)?;
    for chunk in messages.chunks(1000) {
        producer.send_all(chunk).await?;
    }
    Ok(())
}
