//! The one source conformance suite (`oncely_testkit::exercise_source`) on Kafka (tansu in
//! CI), as on every other broker: round trip, unsettled deliveries coming back, missing ids,
//! exactly once under crashes.

use oncely_broker_tests::kafka::{brokers, up};
use oncely_broker_tests::services::unique;
use oncely_core::{RawEnvelope, Result};
use oncely_kafka::{KafkaSource, create_topic};
use oncely_testkit::{SourceHarness, SourceTraits, exercise_source};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// One topic and consumer group per case.
#[derive(Default)]
struct Kafka {
    urls: Mutex<HashMap<String, String>>,
}

impl SourceHarness for Kafka {
    type Source = KafkaSource;

    async fn fresh(&self, case: &str) -> Result<KafkaSource> {
        let topic = unique(&format!("suite_{}", case.replace('-', "_")));
        create_topic(&brokers(), &topic, 1, &[]).await?;
        // One record per producer batch: see `common::url` for the tansu quirk it avoids.
        let url = format!(
            "kafka://{}/{topic}?group={topic}&batch.num.messages=1",
            brokers()
        );
        let source = oncely_kafka::connect_source(&url, &topic).await?;
        self.urls.lock().unwrap().insert(case.to_owned(), url);
        Ok(source)
    }

    async fn publish(&self, case: &str, messages: Vec<RawEnvelope>) -> Result<()> {
        let url = self.urls.lock().unwrap()[case].clone();
        oncely_kafka::publish(&url, &messages).await
    }

    fn traits(&self) -> SourceTraits {
        SourceTraits {
            // A dropped or nacked record is handed back in-process; the first delivery
            // waits for the consumer group to form.
            redelivery_within: Duration::from_secs(20),
            quiet: Duration::from_secs(2),
            ..SourceTraits::default()
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_source_suite() {
    if up("kafka_source_suite") {
        exercise_source(&Kafka::default()).await;
    }
}
