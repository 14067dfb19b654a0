//! Cells through a real broker (RabbitMQ, NATS JetStream, Redis Streams, MQTT, Kafka): the
//! cell's messages are published to a fresh queue, stream or topic first, then consumed, timed
//! from the consumer's start to its last ack (Kafka: from the first record, see [`kafka`]):
//!
//! - `<broker>_in_process`: oncely at its defaults fed by the in-process source, run beside
//!   the broker's two cells in every round (the ceiling the database sets, measured at the
//!   same moment);
//! - `<broker>_bare`: a bare consumer of the same client library oncely uses, consume + ack
//!   and nothing else (the broker's and the client's own ceiling), reading as far ahead as
//!   oncely's defaults ask for;
//! - `<broker>`: oncely as a user runs it: a plain URL (the queue or stream name only), the
//!   library's defaults (group commit, 4 lanes, the read-ahead it sizes), the per-message
//!   handler, into the database.
//!
//! The three run back to back in each round, in reverse order every other round, and the
//! key `<broker>_<db>_vs_bare_consumer` is the median over rounds of each round's ratio
//! (see `report.rs`). oncely's two cells also record where the time went ([`watch`]).
//!
//! RabbitMQ has one more pair, on PostgreSQL ([`demo`]): the `oncely` binary's
//! `demo --consume-only` on a full quorum queue as a user runs it (`amqp_demo`), beside a
//! bare lapin consumer of an equally full queue (`amqp_existing_bare`), for the key
//! `amqp_pg_demo_vs_bare_consumer`.

mod amqp;
mod cpu;
pub(crate) mod demo;
#[cfg(feature = "kafka")]
mod kafka;
#[cfg(not(feature = "kafka"))]
mod kafka {
    //! Built without the `kafka` feature: the Kafka cells are skipped (the probe says why).
    use anyhow::{Result, bail};
    use std::time::Duration;

    pub(super) async fn probe(_: &str) -> Result<()> {
        bail!("oncely-bench was built without its `kafka` feature")
    }
    pub(super) fn source_url(addr: &str, name: &str) -> String {
        format!("kafka://{addr}/{name}")
    }
    pub(super) async fn bare(_: &str, _: &str, _: usize) -> Result<Duration> {
        bail!("oncely-bench was built without its `kafka` feature")
    }
    pub(super) async fn remove(_: &str, _: &str) -> Result<()> {
        Ok(())
    }
}
mod mqtt;
mod nats;
mod redis;
mod watch;

pub use cpu::CpuUse;
pub use watch::PathStats;
use watch::Watch;

use crate::bed::Ops;
use crate::group::PerMessage;
use crate::runners::retry_policy;
use anyhow::{Context, Result, bail};
use oncely_core::{
    CancellationToken, Consumer, ConsumerName, DEFAULT_CONCURRENCY, DEFAULT_GROUP_COMMIT, Delivery,
    MemorySource, RawEnvelope, Source,
};
use serde::Serialize;
use std::future::Future;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A broker the cells run through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
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
    /// Kafka (rdkafka), a topic of one partition, a consumer group.
    Kafka,
}

impl Broker {
    /// Every broker, in the order the cells run.
    pub const ALL: [Broker; 5] = [
        Broker::Amqp,
        Broker::Nats,
        Broker::Redis,
        Broker::Mqtt,
        Broker::Kafka,
    ];

    /// Short name for tables and keys.
    pub fn name(self) -> &'static str {
        match self {
            Self::Amqp => "amqp",
            Self::Nats => "nats",
            Self::Redis => "redis",
            Self::Mqtt => "mqtt",
            Self::Kafka => "kafka",
        }
    }

    /// The client library of the bare consumer, for the keys' descriptions.
    pub fn client(self) -> &'static str {
        match self {
            Self::Amqp => "lapin",
            Self::Nats => "async-nats",
            Self::Redis => "redis-rs",
            Self::Mqtt => "rumqttc",
            Self::Kafka => "rdkafka",
        }
    }

    /// The key, description and target of oncely's ratio to this broker's bare consumer, into
    /// PostgreSQL (see [`crate::report::Report::targets`]).
    pub fn bare_target(self) -> (&'static str, &'static str, f64) {
        match self {
            Self::Amqp => (
                "amqp_pg_vs_bare_consumer",
                "RabbitMQ into PostgreSQL, defaults and a plain URL: oncely / min(bare lapin consumer, oncely in process), median of the rounds' ratios",
                0.9,
            ),
            Self::Nats => (
                "nats_pg_vs_bare_consumer",
                "NATS JetStream into PostgreSQL, defaults and a plain URL: oncely / min(bare async-nats consumer, oncely in process), median of the rounds' ratios",
                0.8,
            ),
            Self::Redis => (
                "redis_pg_vs_bare_consumer",
                "Redis Streams into PostgreSQL, defaults and a plain URL: oncely / min(bare redis-rs consumer, oncely in process), median of the rounds' ratios",
                0.8,
            ),
            Self::Mqtt => (
                "mqtt_pg_vs_bare_consumer",
                "MQTT (Mosquitto) into PostgreSQL, defaults and a plain URL, a 900-message backlog: oncely / min(bare rumqttc consumer, oncely in process), median of the rounds' ratios",
                0.8,
            ),
            Self::Kafka => (
                "kafka_pg_vs_bare_consumer",
                "Kafka into PostgreSQL, defaults and a plain URL (a group of its own), timed from the first record: oncely / min(bare rdkafka consumer, oncely in process), median of the rounds' ratios",
                0.8,
            ),
        }
    }

    /// The name of the broker's server process (as `/proc/<pid>/comm` shows it).
    fn process(self) -> &'static str {
        match self {
            Self::Amqp => "beam.smp",
            Self::Nats => "nats-server",
            Self::Redis => "redis-server",
            Self::Mqtt => "mosquitto",
            Self::Kafka => "tansu",
        }
    }

    /// The bare consumer's cell name.
    pub fn bare_name(self) -> &'static str {
        match self {
            Self::Amqp => "amqp_bare",
            Self::Nats => "nats_bare",
            Self::Redis => "redis_bare",
            Self::Mqtt => "mqtt_bare",
            Self::Kafka => "kafka_bare",
        }
    }

    /// The name of oncely's in-process cell run beside this broker's cells.
    pub fn in_process_name(self) -> &'static str {
        match self {
            Self::Amqp => "amqp_in_process",
            Self::Nats => "nats_in_process",
            Self::Redis => "redis_in_process",
            Self::Mqtt => "mqtt_in_process",
            Self::Kafka => "kafka_in_process",
        }
    }

    /// Whether both consumers are timed from their first delivery rather than from their
    /// start: Kafka's group join takes seconds before the first record, for either consumer.
    fn timed_from_first_delivery(self) -> bool {
        self == Self::Kafka
    }

    fn slot(self) -> &'static OnceLock<String> {
        static URLS: [OnceLock<String>; 5] = [const { OnceLock::new() }; 5];
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
                Self::Kafka => kafka::probe(url).await,
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
            Self::Kafka => kafka::source_url(base, &name),
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
            Broker::Kafka => kafka::remove(base, &self.name).await,
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

/// The name of the database server's process for a cell's backend (SQLite: none).
pub(crate) fn database_process(backend: &str) -> Option<&'static str> {
    match backend {
        "postgres" => Some("postgres"),
        "mariadb" => Some("mariadbd"),
        _ => None,
    }
}

/// The bare consumer through `broker`: consume + ack until every message was received.
pub(crate) async fn bare(
    broker: Broker,
    database: Option<&'static str>,
    msgs: &[RawEnvelope],
) -> Result<(Duration, Option<CpuUse>)> {
    let filled = broker.fill("bare", msgs).await?;
    let base = broker.url()?;
    let meter = cpu::Meter::start(broker.process(), database);
    let elapsed = match broker {
        Broker::Amqp => amqp::bare(base, &filled.name, msgs.len()).await,
        Broker::Nats => nats::bare(base, &filled.name, msgs.len()).await,
        Broker::Redis => redis::bare(base, &filled.name, msgs.len()).await,
        Broker::Mqtt => mqtt::bare(base, &filled.session, msgs.len()).await,
        Broker::Kafka => kafka::bare(base, &filled.name, msgs.len()).await,
    };
    let cpu = meter.stop(msgs.len());
    filled.remove().await;
    Ok((elapsed?, cpu))
}

/// What one of oncely's cells measured: its time, where the time went, and the CPU it took.
pub(crate) type Measured = (Duration, PathStats, Option<CpuUse>);

/// oncely with its defaults through `broker`, into `bed`'s store: the time, and where it went.
pub(crate) async fn oncely<B: Ops>(
    broker: Broker,
    bed: &B,
    database: Option<&'static str>,
    name: &ConsumerName,
    msgs: &[RawEnvelope],
) -> Result<Measured> {
    let filled = broker.fill("oncely", msgs).await?;
    let from_first = broker.timed_from_first_delivery();
    let ran = match oncely::brokers::connect_source(&filled.url, name.as_str()).await {
        Ok(source) => {
            let meter = cpu::Meter::start(broker.process(), database);
            let ran = run(bed, name, source, msgs.len(), from_first).await;
            ran.map(|(t, path)| (t, path, meter.stop(msgs.len())))
        }
        Err(e) => Err(e.into()),
    };
    filled.remove().await;
    ran
}

/// oncely with its defaults fed by the in-process source (the cell run beside a broker's).
pub(crate) async fn in_process<B: Ops>(
    broker: Broker,
    bed: &B,
    database: Option<&'static str>,
    name: &ConsumerName,
    msgs: &[RawEnvelope],
) -> Result<Measured> {
    let source = MemorySource::new();
    for m in msgs {
        source.publish(m.clone());
    }
    source.close();
    let meter = cpu::Meter::start(broker.process(), database);
    let (t, path) = run(bed, name, source, msgs.len(), false).await?;
    Ok((t, path, meter.stop(msgs.len())))
}

/// Runs oncely's consumer at its defaults over `n` deliveries of `source`, timed from its
/// start (or from its first delivery) to its last ack (not to the source's close after it).
async fn run<B: Ops, S: Source>(
    bed: &B,
    name: &ConsumerName,
    source: S,
    n: usize,
    from_first_delivery: bool,
) -> Result<(Duration, PathStats)> {
    let consumer =
        Consumer::new(name.clone(), bed.store(), PerMessage(bed.handler())).retry(retry_policy());
    let watch = Watch::start();
    let source = watch.source(Take(source, n));
    let first = source.first_delivery();
    let started = Instant::now();
    let stats = consumer.run(source, CancellationToken::new()).await;
    let ended = watch.last_ack().unwrap_or_else(Instant::now);
    let started = match first.get() {
        Some(first) if from_first_delivery => *first,
        _ => started,
    };
    let elapsed = ended.duration_since(started);
    let path = watch.finish(n, elapsed);
    let stats = stats?;
    if stats.nacked + stats.dead_lettered > 0 {
        bail!("oncely gave up on deliveries: {stats:?}");
    }
    Ok((elapsed, path))
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
