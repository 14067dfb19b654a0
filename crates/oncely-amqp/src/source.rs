//! [`AmqpSource`]: a RabbitMQ queue as an oncely [`Source`], with manual acks after commit.

use crate::acks::{ChannelAcks, room_in};
use crate::mapping::{attempt_of, envelope_of};
use futures::StreamExt;
use lapin::options::{BasicConsumeOptions, BasicQosOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties};
use oncely_core::wire::UrlParams;
use oncely_core::{Delivery, Error, Result, Source};
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

/// Default queue name when the URL has no `?queue=`.
pub const DEFAULT_QUEUE: &str = "oncely";

/// The prefetch of a source that neither its URL nor its consumer sized.
pub const DEFAULT_PREFETCH: u16 = 32;

/// Settings of an [`AmqpSource`].
#[derive(Debug, Clone)]
pub struct AmqpOptions {
    /// The queue to consume (declared durable if missing).
    pub queue: String,
    /// Unacked deliveries the broker may push at once (`basic.qos` prefetch). Unset (the
    /// default): what the consumer keeps in hand ([`Source::read_ahead`]: its groups in flight
    /// and the next ones ready) and twice as much again for acks held to go out together
    /// ([`prefetch_for`]), or [`DEFAULT_PREFETCH`] when not told.
    pub prefetch: Option<u16>,
    /// Declare the queue (durable, not exclusive, not auto-delete) on connect (default true).
    pub declare: bool,
    /// `x-queue-type` used when declaring: `quorum` (default; the broker counts deliveries
    /// in `x-delivery-count`, so `attempt` is exact) or `classic` (only a redelivered flag:
    /// attempt is 1 or 2). Must match how the queue was declared before.
    pub queue_type: String,
    /// Name shown in the broker's connection list (client property `connection_name`).
    pub connection_name: String,
    /// Longest wait between reconnect attempts (default 5 s).
    pub max_backoff: Duration,
}

impl Default for AmqpOptions {
    fn default() -> Self {
        Self {
            queue: DEFAULT_QUEUE.to_owned(),
            prefetch: None,
            declare: true,
            queue_type: "quorum".to_owned(),
            connection_name: "oncely".to_owned(),
            max_backoff: Duration::from_secs(5),
        }
    }
}

impl AmqpOptions {
    /// Options for `consumer` from a URL: `?queue=` (default `oncely`), `?prefetch=`
    /// (default: the consumer's read-ahead) and `?queue_type=` (default `quorum`) are taken off the URL; the rest
    /// is passed to lapin.
    pub fn from_url(url: &str, consumer: &str) -> Result<(String, Self)> {
        let params = UrlParams::new(url);
        let defaults = Self::default();
        let options = Self {
            queue: params.text_or("queue", &defaults.queue),
            prefetch: params.number("prefetch")?.or(defaults.prefetch),
            queue_type: params.text_or("queue_type", &defaults.queue_type),
            connection_name: format!("oncely:{consumer}"),
            ..defaults
        };
        Ok((params.rest(), options))
    }
}

pub(crate) fn amqp_err(what: &str, e: lapin::Error) -> Error {
    Error::transient(format!("RabbitMQ: {what}")).with_source(e)
}

/// A RabbitMQ queue as a [`Source`]. Deliveries are acked (`basic.ack`) only after the
/// commit; a nack requeues; a delivery dropped unsettled is requeued too. When the
/// connection is lost, the source reconnects with backoff; the broker requeues every
/// unacked delivery, and those already committed come back as `Duplicate`.
pub struct AmqpSource {
    url: String,
    options: AmqpOptions,
    /// What the consumer said it keeps in hand ([`Source::read_ahead`]), in deliveries.
    read_ahead: Option<usize>,
    live: Option<Live>,
}

struct Live {
    connection: Connection,
    channel: Channel,
    /// Started at the first `next` (so a prefetch the consumer asks for applies: RabbitMQ
    /// fixes a consumer's prefetch when it starts).
    consumer: Option<lapin::Consumer>,
    /// The channel's acks, coalesced (see [`crate::acks`]).
    acks: Arc<ChannelAcks>,
}

impl Live {
    fn healthy(&self) -> bool {
        self.connection.status().connected() && self.channel.status().connected()
    }
}

impl AmqpSource {
    /// Connects and declares the queue; consuming starts at the first [`Source::next`].
    /// Fails if the first connection fails (so a wrong URL is reported at once).
    pub async fn connect(url: &str, options: AmqpOptions) -> Result<Self> {
        let live = open(url, &options).await?;
        Ok(Self {
            url: url.to_owned(),
            options,
            read_ahead: None,
            live: Some(live),
        })
    }

    /// The prefetch in effect: the URL's, else the consumer's read-ahead, else 32.
    pub fn prefetch(&self) -> u16 {
        self.options
            .prefetch
            .or(self.read_ahead.map(prefetch_for))
            .unwrap_or(DEFAULT_PREFETCH)
    }

    /// The options in use.
    pub fn options(&self) -> &AmqpOptions {
        &self.options
    }

    /// Closes the connection (testing connection loss from the client side); the next
    /// call to [`Source::next`] reconnects.
    pub async fn close_connection(&mut self) {
        if let Some(live) = self.live.take() {
            let _ = live.connection.close(200, "oncely: closed".into()).await;
        }
    }

    async fn reconnect(&mut self) -> Live {
        let mut delay = Duration::from_millis(100);
        loop {
            match open(&self.url, &self.options).await {
                Ok(live) => {
                    info!(queue = %self.options.queue, "RabbitMQ: reconnected");
                    return live;
                }
                Err(e) => {
                    warn!(error = %e, ?delay, "RabbitMQ: reconnect failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(self.options.max_backoff);
                }
            }
        }
    }
}

/// How long opening a connection may take (TCP, the AMQP handshake, the channel, the queue's
/// declare) before it counts as failed: a host that accepts and then says nothing (a
/// firewall, a connection the network strands mid-handshake) would otherwise hold the source,
/// at start or in a reconnect, forever and without a word.
pub(crate) const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens a connection and its channel within [`OPEN_TIMEOUT`].
async fn open(url: &str, options: &AmqpOptions) -> Result<Live> {
    tokio::time::timeout(OPEN_TIMEOUT, open_unbounded(url, options))
        .await
        .map_err(|_| {
            Error::transient(format!(
                "RabbitMQ: no answer within {OPEN_TIMEOUT:?} while connecting (a firewall \
                 dropping packets, a wrong host or port, or a connection the network stranded?)"
            ))
        })?
}

async fn open_unbounded(url: &str, options: &AmqpOptions) -> Result<Live> {
    let props = ConnectionProperties::default()
        .with_connection_name(options.connection_name.as_str().into());
    let connection = Connection::connect(url, props)
        .await
        .map_err(|e| amqp_err("connect", e))?;
    let channel = connection
        .create_channel()
        .await
        .map_err(|e| amqp_err("open channel", e))?;
    if options.declare {
        declare_queue(&connection, &channel, &options.queue, &options.queue_type).await?;
    }
    Ok(Live {
        connection,
        channel,
        consumer: None,
        acks: ChannelAcks::start(),
    })
}

/// Sets the channel's prefetch and starts consuming `queue`.
async fn consume(channel: &Channel, queue: &str, prefetch: u16) -> Result<lapin::Consumer> {
    channel
        .basic_qos(prefetch, BasicQosOptions::default())
        .await
        .map_err(|e| amqp_err("basic.qos", e))?;
    channel
        .basic_consume(
            queue.into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(|e| amqp_err("basic.consume", e))
}

/// Attaches to `queue` if it exists, whatever its arguments (a passive `queue.declare` on a
/// channel of its own: the broker closes a channel whose passive declare finds nothing);
/// otherwise declares it durable with `x-queue-type` = `queue_type`. A queue someone else
/// declared (classic, other arguments) is used as it is, never redeclared.
pub(crate) async fn declare_queue(
    connection: &Connection,
    channel: &Channel,
    queue: &str,
    queue_type: &str,
) -> Result<()> {
    let probe = connection
        .create_channel()
        .await
        .map_err(|e| amqp_err("open channel", e))?;
    let passive = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    match probe
        .queue_declare(queue.into(), passive, FieldTable::default())
        .await
    {
        Ok(_) => {
            let _ = probe.close(200, "OK".into()).await;
            info!(queue, "RabbitMQ: queue exists; attached to it as declared");
            return Ok(());
        }
        Err(e) if not_found(&e) => {}
        Err(e) => return Err(amqp_err("queue.declare (passive)", e)),
    }
    let mut args = FieldTable::default();
    args.insert(
        "x-queue-type".into(),
        lapin::types::AMQPValue::LongString(queue_type.into()),
    );
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            args,
        )
        .await
        .map_err(|e| amqp_err("queue.declare", e))?;
    info!(queue, queue_type, "RabbitMQ: declared the queue (durable)");
    Ok(())
}

/// Whether the broker answered 404 NOT_FOUND (the passive declare found no queue).
fn not_found(e: &lapin::Error) -> bool {
    e.to_string().contains("NOT_FOUND")
}

impl Source for AmqpSource {
    async fn next(&mut self) -> Result<Option<Delivery>> {
        let prefetch = self.prefetch();
        loop {
            let live = match self.live.as_mut() {
                Some(live) => live,
                None => {
                    let live = self.reconnect().await;
                    self.live.insert(live)
                }
            };
            let consumer = match &mut live.consumer {
                Some(consumer) => consumer,
                None => match consume(&live.channel, &self.options.queue, prefetch).await {
                    Ok(consumer) => {
                        live.acks.set_room(room_in(prefetch, self.read_ahead));
                        live.consumer.insert(consumer)
                    }
                    Err(e) => {
                        warn!(error = %e, "RabbitMQ: could not start consuming; reconnecting");
                        self.live = None;
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                },
            };
            // The consumer stream does not always end when the broker closes the connection:
            // check the connection's state while waiting.
            let next = tokio::select! {
                next = consumer.next() => Some(next),
                _ = tokio::time::sleep(Duration::from_secs(1)) => None,
            };
            let next = match next {
                Some(next) => next,
                None if live.healthy() => continue,
                None => {
                    warn!("RabbitMQ: connection or channel closed; reconnecting");
                    self.live = None;
                    continue;
                }
            };
            match next {
                Some(Ok(d)) => {
                    let attempt = attempt_of(&d.properties, d.redelivered);
                    let acker = live.acks.acker(d.delivery_tag, d.acker);
                    // Mapped without the payload: if the mapping panics, the payload is
                    // still there to dead-letter.
                    let payload = d.data;
                    let mapped =
                        oncely_core::map_envelope(|| envelope_of(&d.properties, Vec::new()));
                    return Ok(Some(match mapped {
                        Ok(raw) => Delivery::new(
                            oncely_core::RawEnvelope { payload, ..raw },
                            attempt,
                            acker,
                        ),
                        Err(why) => Delivery::undecodable(
                            oncely_core::RawEnvelope {
                                id: None,
                                payload,
                                meta: Default::default(),
                            },
                            attempt,
                            acker,
                            why,
                        ),
                    }));
                }
                Some(Err(e)) => {
                    warn!(error = %e, "RabbitMQ: consumer failed; reconnecting");
                }
                None => warn!("RabbitMQ: consumer ended; reconnecting"),
            }
            if let Some(live) = self.live.take() {
                let _ = live
                    .connection
                    .close(200, "oncely: reconnecting".into())
                    .await;
            }
        }
    }

    /// Sizes the prefetch with [`prefetch_for`] unless the URL set `?prefetch=`: settled
    /// deliveries whose ack is held for the ones before them (see [`crate::acks`]) still count
    /// against the broker's window, and without the room the broker would pause while the
    /// consumer's hands are empty. Takes effect when consuming starts (the first `next`, and
    /// after each reconnect).
    fn read_ahead(&mut self, deliveries: usize) {
        self.read_ahead = Some(deliveries);
    }
}

/// The prefetch of a source whose consumer keeps `deliveries` in hand: that and twice as many
/// again, at most 65,535. The two thirds beyond the hand are the room of settled deliveries
/// whose acks are held to go out together (one `basic.ack` for a run): on a quorum queue each
/// ack frame is a command in the queue's log, so fewer, larger acks leave the broker's CPU to
/// delivering.
///
/// ```
/// assert_eq!(oncely_amqp::prefetch_for(512), 1536);
/// ```
pub fn prefetch_for(deliveries: usize) -> u16 {
    let window = deliveries.max(1).saturating_mul(3);
    u16::try_from(window).unwrap_or(u16::MAX)
}

/// Connects a source for consumer `consumer` from a URL such as
/// `amqp://guest:guest@127.0.0.1:5672/%2f?queue=credits&prefetch=32&queue_type=quorum`.
pub async fn connect_source(url: &str, consumer: &str) -> Result<AmqpSource> {
    let (url, options) = AmqpOptions::from_url(url, consumer)?;
    AmqpSource::connect(&url, options).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_parameters() {
        let (rest, o) = AmqpOptions::from_url(
            "amqp://guest:guest@127.0.0.1:5672/%2f?heartbeat=10&queue=jobs&prefetch=8",
            "billing",
        )
        .unwrap();
        assert_eq!(rest, "amqp://guest:guest@127.0.0.1:5672/%2f?heartbeat=10");
        assert_eq!((o.queue.as_str(), o.prefetch), ("jobs", Some(8)));
        assert_eq!(o.queue_type, "quorum");
        assert_eq!(o.connection_name, "oncely:billing");
        let e = AmqpOptions::from_url("amqp://h/?prefetch=abc", "c").unwrap_err();
        assert!(e.to_string().contains("prefetch"), "{e}");
    }
}
