//! The one broker fixture: everything a scenario needs to know about a broker, so that each
//! scenario ([`crate::scenarios`]) is written once and runs on every broker.
//!
//! A broker here is the server on this machine and the URL shape of a fresh destination on
//! it (queue, stream, subject, topic); how to publish a workload to it; and how to cut a
//! consumer's connection from the server side.

use crate::brokers::{AnySource, publish};
use crate::faults::{paced_publish, rabbitmq_close_connections, redis_kill_clients};
use crate::ledger::Db;
use crate::services::{AMQP_URL, MQTT_URL, NATS_URL, REDIS_URL, available, unique};
use crate::workload::Workload;
use oncely_core::Result;
use std::time::Duration;

/// A broker under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broker {
    /// RabbitMQ (a classic queue per destination).
    RabbitMq,
    /// NATS JetStream (a stream and a subject per destination).
    Nats,
    /// Redis Streams (a stream per destination).
    Redis,
    /// Mosquitto (a topic and a persistent session per destination).
    Mosquitto,
    /// Kafka (tansu in CI, `scripts/kafka-broker.sh`; a topic per destination).
    Kafka,
}

/// A fresh destination on a broker, with the URL a consumer and a producer use for it.
#[derive(Debug, Clone)]
pub struct Destination {
    /// The destination's name, unique to this run.
    pub name: String,
    /// The source (and publish) URL.
    pub url: String,
}

/// Mosquitto keeps at most `max_queued_messages` (default 1000) unacked QoS 1 messages per
/// client and drops the rest ("Outgoing messages are being dropped" in its log); while a
/// connection is cut or a consumer restarts, the in-flight messages whose acks were lost are
/// queued again on top of the backlog. So a workload goes out in chunks of this many, each
/// once the database is at most [`PACE_BACKLOG`] unique ids behind (400/300 passed 1000 once
/// in CI).
const PACE_CHUNK: usize = 200;
/// See [`PACE_CHUNK`].
const PACE_BACKLOG: i64 = 200;

impl Broker {
    /// The server's name, as a skipped test reports it.
    pub fn name(self) -> &'static str {
        match self {
            Broker::RabbitMq => "RabbitMQ",
            Broker::Nats => "NATS",
            Broker::Redis => "Redis",
            Broker::Mosquitto => "Mosquitto",
            Broker::Kafka => "Kafka (start it with scripts/kafka-broker.sh start)",
        }
    }

    fn addr(self) -> String {
        match self {
            Broker::RabbitMq => "127.0.0.1:5672".to_owned(),
            Broker::Nats => "127.0.0.1:4222".to_owned(),
            Broker::Redis => "127.0.0.1:6379".to_owned(),
            Broker::Mosquitto => "127.0.0.1:1883".to_owned(),
            Broker::Kafka => {
                let brokers = crate::kafka::brokers();
                brokers
                    .split(',')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_owned()
            }
        }
    }

    /// True if the broker answers; else fails under CI (`ONCELY_REQUIRE_SERVICES`), or prints
    /// a loud SKIPPED line for `test` and returns false (`oncely_testkit::services`).
    pub fn up(self, test: &str) -> bool {
        available(test, self.name(), &self.addr())
    }

    /// An id with a control character can be published (not in MQTT strings or NATS headers).
    pub fn carries_control_ids(self) -> bool {
        !matches!(self, Broker::Nats | Broker::Mosquitto)
    }

    /// How many messages without a usable id a workload can carry here: with a control
    /// character in one of them where the broker can carry it ([`Workload::new`]).
    pub fn bad_ids(self, wanted: usize) -> usize {
        if self.carries_control_ids() {
            wanted
        } else {
            wanted.min(1)
        }
    }

    /// A fresh destination at the broker's defaults: the URL a new user writes. Kafka gets a
    /// topic of one partition, created here.
    pub async fn plain_destination(self, prefix: &str) -> Result<Destination> {
        let name = unique(prefix);
        let url = match self {
            Broker::RabbitMq => format!("{AMQP_URL}?queue={name}"),
            Broker::Nats => format!("{NATS_URL}?stream={name}&subject={name}"),
            Broker::Redis => format!("{REDIS_URL}/?stream={name}"),
            Broker::Mosquitto => format!("{MQTT_URL}?topic=oncely-test/{name}"),
            Broker::Kafka => {
                oncely_kafka::create_topic(&crate::kafka::brokers(), &name, 1, &[]).await?;
                // One record per producer batch: see `kafka::url` for the tansu quirk it avoids.
                format!(
                    "kafka://{}/{name}?group={name}&batch.num.messages=1",
                    crate::kafka::brokers()
                )
            }
        };
        Ok(Destination { name, url })
    }

    /// A fresh destination for the fault scenarios, with the few settings their timing needs:
    /// NATS a short `ack_wait` and the smallest dedup window (JetStream would drop the
    /// workload's duplicates otherwise), Redis a short reclaim, Mosquitto a persistent
    /// session, Kafka four partitions, short group sessions and an idle exit.
    pub async fn destination(self, prefix: &str) -> Result<Destination> {
        let name = unique(prefix);
        let url = match self {
            Broker::RabbitMq => format!("{AMQP_URL}?queue={name}"),
            Broker::Nats => format!(
                "{NATS_URL}?stream={}&subject={name}&ack_wait_ms=3000&dup_window_ms=100",
                name.to_uppercase()
            ),
            // A killed member's pending entries are taken over after 2 s idle.
            Broker::Redis => format!("{REDIS_URL}/?stream={name}&reclaim_ms=2000"),
            Broker::Mosquitto => {
                format!("{MQTT_URL}?topic=oncely-test/{name}&client_id={name}&session_expiry=600")
            }
            Broker::Kafka => {
                oncely_kafka::create_topic(&crate::kafka::brokers(), &name, 4, &[]).await?;
                format!("{}&group={name}", crate::kafka::url(&name, 4, 4000))
            }
        };
        Ok(Destination { name, url })
    }

    /// Makes `dest` ready to receive before anything is published: Mosquitto keeps messages
    /// only for a session that subscribed, so one is opened and closed (the others keep
    /// messages for consumers that come later).
    pub async fn prepare(self, dest: &Destination) -> Result<()> {
        if self == Broker::Mosquitto {
            drop(crate::brokers::connect_source(&dest.url, &dest.name).await?);
        }
        Ok(())
    }

    /// Publishes `workload` to `dest` while a consumer writes into `db`. All at once, except
    /// on Mosquitto: there in chunks, each once `db` has caught up (see [`PACE_CHUNK`]).
    /// Await the handle after the consumer is done.
    pub async fn publish(
        self,
        dest: &Destination,
        workload: &Workload,
        db: &Db,
    ) -> tokio::task::JoinHandle<Result<()>> {
        let (url, messages) = (dest.url.clone(), workload.messages.clone());
        if self == Broker::Mosquitto {
            let db = db.clone();
            return tokio::spawn(async move {
                paced_publish(&url, &messages, &db, PACE_CHUNK, PACE_BACKLOG).await
            });
        }
        let done = publish(&url, &messages).await;
        tokio::spawn(async move { done })
    }

    /// How long a run waits without a delivery before it ends when its connection was cut:
    /// long enough for the broker to hand back what was in flight.
    pub fn idle_after_cut(self) -> Duration {
        match self {
            // Still there to cut when a loaded machine makes rabbitmqctl slow.
            Broker::RabbitMq => Duration::from_secs(10),
            // A pull request lost in a cut is noticed after two missed idle heartbeats (2 s,
            // docs/distributed.md), then `ack_wait` (3 s) gives back what was in flight.
            Broker::Nats => Duration::from_secs(8),
            Broker::Redis => Duration::from_secs(8),
            Broker::Mosquitto => Duration::from_secs(5),
            Broker::Kafka => Duration::from_secs(15),
        }
    }

    /// How long a consumer process waits without a delivery before it exits, after another
    /// was killed: what the killed one held comes back after the broker notices (RabbitMQ at
    /// once, NATS after `ack_wait`, Redis after the reclaim, Kafka after the group session).
    pub fn idle_after_kill(self) -> Duration {
        match self {
            Broker::RabbitMq => Duration::from_secs(3),
            Broker::Nats | Broker::Redis | Broker::Mosquitto => Duration::from_secs(5),
            // A backstop only: Kafka's source ends by itself 4 s after its last record once
            // it holds partitions (`idle_exit_ms` in its URL, [`Broker::destination`]); this
            // covers a restarted member's group join, which waits for the killed one's
            // session (6 s) to end.
            Broker::Kafka => Duration::from_secs(15),
        }
    }

    /// A handle that cuts `source`'s connection from the server side (or, on NATS and MQTT,
    /// makes the client drop it), taken before the source moves into a consumer. `None` on
    /// Kafka: the client reconnects inside librdkafka, out of oncely's reach.
    pub fn cutter(source: &AnySource) -> Option<Cutter> {
        match source {
            AnySource::Amqp(s) => Some(Cutter::Amqp(s.options().connection_name.clone())),
            AnySource::Redis(s) => Some(Cutter::Redis(s.options().client_name.clone())),
            AnySource::Nats(s) => Some(Cutter::Nats(s.client().clone())),
            AnySource::Mqtt(s) => Some(Cutter::Mqtt(s.reconnect_handle())),
            _ => None,
        }
    }
}

/// Cuts one consumer's connection ([`Broker::cutter`]).
pub enum Cutter {
    /// `rabbitmqctl close_connection` on the connections of this name.
    Amqp(String),
    /// `CLIENT KILL` on the clients of this name.
    Redis(String),
    /// The client's forced reconnect.
    Nats(async_nats::Client),
    /// The source's reconnect.
    Mqtt(oncely_mqtt::ReconnectHandle),
}

impl Cutter {
    /// Cuts; returns how many connections went (0: none yet, try again).
    pub async fn cut(&self) -> usize {
        match self {
            Cutter::Amqp(name) => rabbitmq_close_connections(name).await,
            Cutter::Redis(name) => redis_kill_clients(name).await,
            Cutter::Nats(client) => usize::from(client.clone().force_reconnect().await.is_ok()),
            Cutter::Mqtt(handle) => {
                handle.reconnect();
                1
            }
        }
    }
}
