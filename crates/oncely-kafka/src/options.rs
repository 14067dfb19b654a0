//! [`KafkaOptions`] and the `kafka://` URL.

use oncely_core::wire::UrlParams;
use oncely_core::{Error, Result};
use std::time::Duration;

/// Topic used when the URL names none.
pub const DEFAULT_TOPIC: &str = "oncely";

/// Where a record's message id comes from (URL parameter `id=header|offset`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum IdFrom {
    /// The `message-id` header the producer set (default). Catches every duplicate with
    /// that id: Kafka's redeliveries and the copies a producer wrote twice.
    #[default]
    Header,
    /// The record's position, `TOPIC/PARTITION/OFFSET`, for producers that set no id. The
    /// inbox then stores offsets in the effect's transaction (Kafka's advice for
    /// exactly-once into a database). It catches Kafka's redeliveries only: a record the
    /// producer wrote twice has two offsets and is applied twice, and a topic deleted and
    /// re-created starts its offsets at 0 again (use a new consumer name for it).
    Offset,
}

/// Settings of a [`KafkaSource`](crate::KafkaSource) (and of the producer, which uses
/// `brokers`, `topics[0]` and `client`).
#[derive(Debug, Clone)]
pub struct KafkaOptions {
    /// `bootstrap.servers`, e.g. `127.0.0.1:9092`.
    pub brokers: String,
    /// Topics to subscribe to (the producer sends to the first).
    pub topics: Vec<String>,
    /// Consumer group (`group.id`). Consumers of one group share the partitions.
    pub group: String,
    /// How long acks are gathered before their offsets are committed (default 50 ms).
    /// Shorter means fewer redeliveries after a crash, longer means fewer commit requests;
    /// correctness does not depend on it.
    pub commit_interval: Duration,
    /// On a rebalance, how long to wait for in-flight deliveries of revoked partitions to
    /// finish before committing and letting the partitions go (default 30 s). Deliveries
    /// that finish later are redelivered to the new owner (and skipped there as
    /// `Duplicate` if they committed).
    pub revoke_wait: Duration,
    /// End the source (`next()` returns `Ok(None)`) once partitions were assigned, no record
    /// arrived for this long and nothing is in flight (default: never).
    pub idle_exit: Option<Duration>,
    /// Where message ids come from (default: the `message-id` header).
    pub id_from: IdFrom,
    /// Partitions for topics the producer creates (default 1).
    pub partitions: i32,
    /// Further librdkafka settings (e.g. `session.timeout.ms`), applied last.
    pub client: Vec<(String, String)>,
}

impl Default for KafkaOptions {
    fn default() -> Self {
        Self {
            brokers: "127.0.0.1:9092".to_owned(),
            topics: vec![DEFAULT_TOPIC.to_owned()],
            group: "oncely".to_owned(),
            commit_interval: Duration::from_millis(50),
            revoke_wait: Duration::from_secs(30),
            idle_exit: None,
            id_from: IdFrom::Header,
            partitions: 1,
            client: Vec::new(),
        }
    }
}

impl KafkaOptions {
    /// Options for consumer `consumer` from a URL:
    ///
    /// `kafka://HOST:PORT[,HOST:PORT…]/TOPIC[,TOPIC…]?group=G&partitions=N&commit_interval_ms=50&revoke_wait_ms=30000&idle_exit_ms=3000&id=header&session.timeout.ms=6000`
    ///
    /// The group defaults to the consumer name and the topic to `oncely`. Parameters with a
    /// dot in their name are librdkafka settings, passed through.
    pub fn from_url(url: &str, consumer: &str) -> Result<Self> {
        let params = UrlParams::new(url);
        let rest = params
            .base()
            .strip_prefix("kafka://")
            .ok_or_else(|| Error::config(format!("not a kafka:// URL: {url}")))?;
        let (hosts, topics) = rest.split_once('/').unwrap_or((rest, ""));
        if hosts.is_empty() {
            return Err(Error::config(format!("no broker address in {url}")));
        }
        let defaults = Self::default();
        let topics: Vec<String> = topics
            .split(',')
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect();
        let mut options = Self {
            brokers: hosts.to_owned(),
            topics: if topics.is_empty() {
                defaults.topics
            } else {
                topics
            },
            group: params.text_or("group", consumer),
            commit_interval: params
                .millis("commit_interval_ms")?
                .unwrap_or(defaults.commit_interval),
            revoke_wait: params
                .millis("revoke_wait_ms")?
                .unwrap_or(defaults.revoke_wait),
            idle_exit: params.millis("idle_exit_ms")?,
            id_from: match params.text("id") {
                None | Some("header") => IdFrom::Header,
                Some("offset") => IdFrom::Offset,
                Some(v) => {
                    return Err(Error::config(format!(
                        "id={v:?}: use id=header (the message-id header) or id=offset"
                    )));
                }
            },
            partitions: params.number("partitions")?.unwrap_or(defaults.partitions),
            client: Vec::new(),
        };
        for (key, value) in params.others() {
            if !key.contains('.') {
                return Err(Error::config(format!(
                    "unknown kafka URL parameter {key:?} (librdkafka settings contain a dot)"
                )));
            }
            options.client.push((key.to_owned(), value.to_owned()));
        }
        Ok(options)
    }

    /// Sets a librdkafka setting (applied after oncely's own).
    pub fn set(mut self, key: &str, value: &str) -> Self {
        self.client.push((key.to_owned(), value.to_owned()));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_url() {
        let o = KafkaOptions::from_url(
            "kafka://127.0.0.1:9092,127.0.0.1:9093/credits,refunds?partitions=4&idle_exit_ms=3000&session.timeout.ms=6000",
            "billing",
        )
        .unwrap();
        assert_eq!(o.brokers, "127.0.0.1:9092,127.0.0.1:9093");
        assert_eq!(o.topics, ["credits", "refunds"]);
        assert_eq!(o.group, "billing");
        assert_eq!(o.partitions, 4);
        assert_eq!(o.idle_exit, Some(Duration::from_secs(3)));
        assert_eq!(
            o.client,
            [("session.timeout.ms".to_owned(), "6000".to_owned())]
        );
        let o = KafkaOptions::from_url("kafka://h:1?group=g", "c").unwrap();
        assert_eq!(
            (o.group.as_str(), o.topics[0].as_str()),
            ("g", DEFAULT_TOPIC)
        );
        assert!(KafkaOptions::from_url("kafka://h:1/t?nope=1", "c").is_err());
        assert_eq!(o.id_from, IdFrom::Header);
        let o = KafkaOptions::from_url("kafka://h:1/t?id=offset", "c").unwrap();
        assert_eq!(o.id_from, IdFrom::Offset);
        assert!(KafkaOptions::from_url("kafka://h:1/t?id=key", "c").is_err());
        assert!(KafkaOptions::from_url("amqp://h", "c").is_err());
    }
}
