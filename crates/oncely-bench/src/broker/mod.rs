//! Cells through a real broker (RabbitMQ, NATS JetStream, Redis Streams, MQTT): the cell's messages
//! are published to a fresh queue or stream first, then consumed, timed from the consumer's
//! start to its last ack:
//!
//! - `<broker>_bare`: a bare consumer of the same client library oncely uses, consume + ack
//!   and nothing else (the broker's and the client's own ceiling), reading as far ahead as
//!   oncely's defaults ask for;
//! - `<broker>`: oncely as a user runs it: a plain URL (the queue or stream name only), the
//!   library's defaults (group commit, 4 lanes, the read-ahead it sizes), the per-message
//!   handler, into the database.

mod amqp;
mod mqtt;
mod nats;
mod redis;

use crate::bed::Ops;
use crate::group::PerMessage;
use crate::runners::retry_policy;
use anyhow::{Context, Result, bail};
use oncely_core::{
    CancellationToken, Consumer, ConsumerName, DEFAULT_CONCURRENCY, DEFAULT_GROUP_COMMIT, Delivery,
    RawEnvelope, Source,
};
use serde::Serialize;
use std::future::Future;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A broker the cells run through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Broker {
    /// RabbitMQ (lapin), a quorum queue.
    Amqp,
    /// NATS JetStream (async-nats), a durable pull consumer.
    Nats,
    /// Redis Streams (redis-rs), a consumer group.
    Redis,
    /// MQTT 5 (rumqttc, Mosquitto), QoS 1, a persistent session.
    Mqtt,
}

impl Broker {
    /// Every broker, in the order the cells run.
    pub const ALL: [Broker; 4] = [Broker::Amqp, Broker::Nats, Broker::Redis, Broker::Mqtt];

    /// Short name for tables and keys.
    pub fn name(self) -> &'static str {
        match self {
            Self::Amqp => "amqp",
            Self::Nats => "nats",
            Self::Redis => "redis",
            Self::Mqtt => "mqtt",
        }
    }

    /// The bare consumer's cell name.
    pub fn bare_name(self) -> &'static str {
        match self {
            Self::Amqp => "amqp_bare",
            Self::Nats => "nats_bare",
            Self::Redis => "redis_bare",
            Self::Mqtt => "mqtt_bare",
        }
    }

    fn slot(self) -> &'static OnceLock<String> {
        static URLS: [OnceLock<String>; 4] = [const { OnceLock::new() }; 4];
        &URLS[self as usize]
    }

    /// Sets this broker's URL once (after a successful [`Broker::probe`]).
    pub(crate) fn enable(self, url: &str) {
        let _ = self.slot().set(url.to_owned());
    }

    /// Whether this broker's cells run.
    pub(crate) fn enabled(self) -> bool {
        self.slot().get().is_some()
    }

    /// The most messages a cell through this broker holds: MQTT's backlog must stay below
    /// Mosquitto's default `max_queued_messages` (see [`mqtt`]).
    pub(crate) fn cell_messages(self, wanted: usize) -> usize {
        match self {
            Self::Mqtt => wanted.min(mqtt::MAX_BACKLOG),
            _ => wanted,
        }
    }

    fn url(self) -> Result<&'static str> {
        self.slot()
            .get()
            .map(String::as_str)
            .with_context(|| format!("no {} URL for the broker cells", self.name()))
    }

    /// Connects once (5 s at most).
    pub(crate) async fn probe(self, url: &str) -> Result<()> {
        let shown = oncely_sql::redact_url(url);
        let probe = async {
            match self {
                Self::Amqp => amqp::probe(url).await,
                Self::Nats => nats::probe(url).await,
                Self::Redis => redis::probe(url).await,
                Self::Mqtt => mqtt::probe(url).await,
            }
        };
        tokio::time::timeout(Duration::from_secs(5), probe)
            .await
            .with_context(|| format!("{} at {shown} did not answer in 5 s", self.name()))?
            .with_context(|| format!("{} at {shown}", self.name()))
    }

    /// A fresh queue or stream holding `msgs` (published with oncely's producer, confirmed).
    async fn fill(self, tag: &str, msgs: &[RawEnvelope]) -> Result<Filled> {
        let name = format!(
            "oncely-bench-{tag}-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_nanos()
        );
        let base = self.url()?;
        let url = match self {
            Self::Amqp => amqp::source_url(base, &name),
            Self::Nats => nats::source_url(base, &name),
            Self::Redis => redis::source_url(base, &name),
            Self::Mqtt => mqtt::source_url(base, &name),
        };
        if self == Self::Mqtt {
            mqtt::prepare(base, &name, &format!("{name}-{tag}")).await?;
        }
        oncely::brokers::publish(&url, msgs)
            .await
            .with_context(|| format!("publishing the cell's messages to {}", self.name()))?;
        Ok(Filled {
            broker: self,
            session: format!("{name}-{tag}"),
            name,
            url,
        })
    }
}

/// A queue or stream a cell filled, removed again by [`Filled::remove`].
struct Filled {
    broker: Broker,
    /// The queue's or stream's name.
    name: String,
    /// oncely's source URL for it (the name only, no tuning).
    url: String,
    /// The MQTT session (client id) the consumer of this cell resumes.
    session: String,
}

impl Filled {
    async fn remove(self) {
        let Ok(base) = self.broker.url() else { return };
        let removed = match self.broker {
            Broker::Amqp => amqp::remove(base, &self.name).await,
            Broker::Nats => nats::remove(base, &self.name).await,
            Broker::Redis => redis::remove(base, &self.name).await,
            Broker::Mqtt => mqtt::remove(base, &self.session).await,
        };
        if let Err(e) = removed {
            eprintln!("bench: could not remove {}: {e:#}", self.name);
        }
    }
}

/// What oncely's group commit asks the source to read ahead ([`Source::read_ahead`]), given
/// to the bare consumers too, so both read the same distance ahead.
fn default_read_ahead() -> usize {
    2 * DEFAULT_CONCURRENCY * DEFAULT_GROUP_COMMIT
}

/// The bare consumer through `broker`: consume + ack until every message was received.
pub(crate) async fn bare(broker: Broker, msgs: &[RawEnvelope]) -> Result<Duration> {
    let filled = broker.fill("bare", msgs).await?;
    let base = broker.url()?;
    let elapsed = match broker {
        Broker::Amqp => amqp::bare(base, &filled.name, msgs.len()).await,
        Broker::Nats => nats::bare(base, &filled.name, msgs.len()).await,
        Broker::Redis => redis::bare(base, &filled.name, msgs.len()).await,
        Broker::Mqtt => mqtt::bare(base, &filled.session, msgs.len()).await,
    };
    filled.remove().await;
    elapsed
}

/// oncely with its defaults through `broker`, into `bed`'s store.
pub(crate) async fn oncely<B: Ops>(
    broker: Broker,
    bed: &B,
    name: &ConsumerName,
    msgs: &[RawEnvelope],
) -> Result<Duration> {
    let filled = broker.fill("oncely", msgs).await?;
    let elapsed = match oncely::brokers::connect_source(&filled.url, name.as_str()).await {
        Ok(source) => run(bed, name, source, msgs.len()).await,
        Err(e) => Err(e.into()),
    };
    filled.remove().await;
    elapsed
}

/// Runs oncely's consumer at its defaults over `n` deliveries of `source`.
async fn run<B: Ops, S: Source>(
    bed: &B,
    name: &ConsumerName,
    source: S,
    n: usize,
) -> Result<Duration> {
    let consumer =
        Consumer::new(name.clone(), bed.store(), PerMessage(bed.handler())).retry(retry_policy());
    let started = Instant::now();
    let stats = consumer
        .run(Take(source, n), CancellationToken::new())
        .await?;
    let elapsed = started.elapsed();
    if stats.nacked + stats.dead_lettered > 0 {
        bail!("oncely gave up on deliveries through the broker: {stats:?}");
    }
    Ok(elapsed)
}

/// Times `consume` (a bare consumer's loop), failing if it takes longer than a minute.
async fn timed<F: Future<Output = Result<()>>>(consume: F) -> Result<Duration> {
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(60), consume)
        .await
        .context("bare consumer: not done after 60 s")??;
    Ok(started.elapsed())
}

/// Ends after `n` deliveries (the cell knows how many it published; a redelivery would end
/// it early, and the checker would then find the messages missing).
struct Take<S>(S, usize);

impl<S: Source> Source for Take<S> {
    async fn next(&mut self) -> oncely_core::Result<Option<Delivery>> {
        if self.1 == 0 {
            return Ok(None);
        }
        self.1 -= 1;
        self.0.next().await
    }

    fn read_ahead(&mut self, deliveries: usize) {
        self.0.read_ahead(deliveries);
    }
}
