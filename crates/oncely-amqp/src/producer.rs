//! [`AmqpProducer`]: publishes [`RawEnvelope`]s with the id in the `message_id` property.

use crate::mapping::properties_of;
use crate::source::{AmqpOptions, amqp_err, declare_queue};
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::{Channel, Connection, ConnectionProperties};
use oncely_core::{Error, RawEnvelope, Result};

/// Publishes to one queue through the default exchange, with publisher confirms, so a
/// successful [`AmqpProducer::send`] means the broker took the message (persistent).
pub struct AmqpProducer {
    _connection: Connection,
    channel: Channel,
    queue: String,
}

impl AmqpProducer {
    /// Connects and attaches to `queue`, declaring it (durable, `x-queue-type` = `queue_type`,
    /// normally `quorum`) only when it does not exist yet.
    pub async fn connect(url: &str, queue: &str, queue_type: &str) -> Result<Self> {
        let connection = Connection::connect(
            url,
            ConnectionProperties::default().with_connection_name("oncely:producer".into()),
        )
        .await
        .map_err(|e| amqp_err("connect", e))?;
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| amqp_err("open channel", e))?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| amqp_err("confirm.select", e))?;
        declare_queue(&connection, &channel, queue, queue_type).await?;
        Ok(Self {
            _connection: connection,
            channel,
            queue: queue.to_owned(),
        })
    }

    /// Publishes one message and waits for the broker's confirm.
    pub async fn send(&self, message: &RawEnvelope) -> Result<()> {
        self.send_all(std::slice::from_ref(message)).await
    }

    /// Publishes messages in order, then waits for all confirms. A message without a
    /// `traceparent` header gets the current span's ([`oncely_core::trace::traced`]).
    pub async fn send_all(&self, messages: &[RawEnvelope]) -> Result<()> {
        let mut confirms = Vec::with_capacity(messages.len());
        for m in messages {
            let confirm = self
                .channel
                .basic_publish(
                    "".into(),
                    self.queue.as_str().into(),
                    BasicPublishOptions::default(),
                    &m.payload,
                    properties_of(&oncely_core::trace::traced(m))?,
                )
                .await
                .map_err(|e| amqp_err("basic.publish", e))?;
            confirms.push(confirm);
        }
        for confirm in confirms {
            let confirmation = confirm
                .await
                .map_err(|e| amqp_err("publisher confirm", e))?;
            if confirmation.is_nack() {
                return Err(Error::transient(
                    "RabbitMQ: broker nacked a published message",
                ));
            }
        }
        Ok(())
    }
}

/// Publishes `messages` to the queue named by the URL's `?queue=` (default `oncely`; declared
/// with `?queue_type=`, default `quorum`),
/// e.g. `amqp://guest:guest@127.0.0.1:5672/%2f?queue=credits`.
pub async fn publish(url: &str, messages: &[RawEnvelope]) -> Result<()> {
    let (url, options) = AmqpOptions::from_url(url, "producer")?;
    let producer = AmqpProducer::connect(&url, &options.queue, &options.queue_type).await?;
    for chunk in messages.chunks(1000) {
        producer.send_all(chunk).await?;
    }
    Ok(())
}
