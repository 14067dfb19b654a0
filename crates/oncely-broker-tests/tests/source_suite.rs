//! The one source conformance suite (`oncely_testkit::exercise_source`) on every broker, with
//! plain URLs and each broker's default settings: no redelivery tuning in the URLs.

use oncely_broker_tests::brokers::{AnySource, connect_source, publish};
use oncely_broker_tests::services::{AMQP_URL, MQTT_URL, NATS_URL, REDIS_URL, available, unique};
use oncely_core::{RawEnvelope, Result};
use oncely_testkit::{SourceHarness, SourceTraits, exercise_source};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// A broker, addressed by a URL per destination.
struct Broker {
    name: &'static str,
    addr: &'static str,
    /// The URL of a destination (queue, stream, subject, topic) named `dest`.
    url: fn(&str) -> String,
    urls: Mutex<HashMap<String, String>>,
    /// An id with a control character can be published (not in MQTT strings or NATS headers).
    control_ids: bool,
}

impl Broker {
    fn new(name: &'static str, addr: &'static str, url: fn(&str) -> String) -> Self {
        Self {
            name,
            addr,
            url,
            urls: Mutex::default(),
            control_ids: true,
        }
    }

    fn without_control_ids(self) -> Self {
        Self {
            control_ids: false,
            ..self
        }
    }

    fn up(&self) -> bool {
        available(&format!("{}_source_suite", self.name), self.name, self.addr)
    }
}

impl SourceHarness for Broker {
    type Source = AnySource;

    async fn fresh(&self, case: &str) -> Result<AnySource> {
        let dest = unique(&format!("suite_{}", case.replace('-', "_")));
        let url = (self.url)(&dest);
        let source = connect_source(&url, &dest).await?;
        self.urls.lock().unwrap().insert(case.to_owned(), url);
        Ok(source)
    }

    async fn publish(&self, case: &str, messages: Vec<RawEnvelope>) -> Result<()> {
        let url = self.urls.lock().unwrap()[case].clone();
        publish(&url, &messages).await
    }

    fn traits(&self) -> SourceTraits {
        SourceTraits {
            // Each adapter gives a dropped or nacked delivery back at once in-process; the
            // broker-side timeouts (NATS ack_wait, Redis reclaim) stay at their 30 s defaults.
            redelivery_within: Duration::from_secs(10),
            quiet: Duration::from_secs(1),
            carries_control_ids: self.control_ids,
            ..SourceTraits::default()
        }
    }
}

async fn run(broker: Broker) {
    if broker.up() {
        exercise_source(&broker).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_source_suite() {
    run(Broker::new("RabbitMQ", "127.0.0.1:5672", |q| {
        format!("{AMQP_URL}?queue={q}")
    }))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_source_suite() {
    run(Broker::new("NATS", "127.0.0.1:4222", |s| {
        format!("{NATS_URL}?stream={s}&subject={s}")
    })
    .without_control_ids())
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_source_suite() {
    run(Broker::new("Redis", "127.0.0.1:6379", |s| {
        format!("{REDIS_URL}/?stream={s}")
    }))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_source_suite() {
    run(Broker::new("Mosquitto", "127.0.0.1:1883", |t| {
        format!("{MQTT_URL}?topic=oncely-test/{t}")
    })
    .without_control_ids())
    .await;
}
