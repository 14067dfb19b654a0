//! The reference implementations run their own suites: the in-memory store through the store
//! suite, the in-process broker through the source suite.

use oncely_core::{MemorySource, RawEnvelope, Result};
use oncely_testkit::{MemoryHarness, SourceHarness, SourceTraits, exercise, exercise_source};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread")]
async fn memory_store_passes_the_store_suite() {
    exercise(&MemoryHarness).await;
}

/// One [`MemorySource`] per case.
#[derive(Default)]
struct MemorySources(Mutex<HashMap<String, MemorySource>>);

impl SourceHarness for MemorySources {
    type Source = MemorySource;

    async fn fresh(&self, case: &str) -> Result<MemorySource> {
        let source = MemorySource::new();
        self.0
            .lock()
            .unwrap()
            .insert(case.to_owned(), source.clone());
        Ok(source)
    }

    async fn publish(&self, case: &str, messages: Vec<RawEnvelope>) -> Result<()> {
        let source = self.0.lock().unwrap()[case].clone();
        for m in messages {
            source.publish(m);
        }
        Ok(())
    }

    fn traits(&self) -> SourceTraits {
        SourceTraits {
            redelivery_within: Duration::from_secs(2),
            quiet: Duration::from_millis(200),
            ..SourceTraits::default()
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn memory_source_passes_the_source_suite() {
    exercise_source(&MemorySources::default()).await;
}

/// A broken broker for the suite's negative test: it acks every message as it hands it out
/// (at-most-once), so a crashed or nacked delivery is lost.
struct AtMostOnce(MemorySources);

struct NoAck;

impl oncely_core::Acker for NoAck {
    fn ack(self: Box<Self>) -> futures::future::BoxFuture<'static, Result<()>> {
        Box::pin(async { Ok(()) })
    }
    fn nack(self: Box<Self>) -> futures::future::BoxFuture<'static, Result<()>> {
        Box::pin(async { Ok(()) })
    }
}

struct Lossy(MemorySource);

impl oncely_core::Source for Lossy {
    async fn next(&mut self) -> Result<Option<oncely_core::Delivery>> {
        let Some(d) = self.0.next().await? else {
            return Ok(None);
        };
        let (message, attempt) = (d.message().clone(), d.attempt());
        d.discard().await?;
        Ok(Some(oncely_core::Delivery::new(
            message,
            attempt,
            Box::new(NoAck),
        )))
    }
}

impl SourceHarness for AtMostOnce {
    type Source = Lossy;

    async fn fresh(&self, case: &str) -> Result<Lossy> {
        Ok(Lossy(self.0.fresh(case).await?))
    }

    async fn publish(&self, case: &str, messages: Vec<RawEnvelope>) -> Result<()> {
        self.0.publish(case, messages).await
    }

    fn traits(&self) -> SourceTraits {
        self.0.traits()
    }
}

#[tokio::test(flavor = "multi_thread")]
#[should_panic(expected = "unsettled_comes_back: no delivery")]
async fn the_source_suite_catches_an_at_most_once_source() {
    exercise_source(&AtMostOnce(MemorySources::default())).await;
}

/// A broken broker for the suite's negative test: it silently drops a message whose id holds
/// a control character, where it should deliver it for the runtime to dead-letter.
struct DropsControlIds(MemorySources);

impl SourceHarness for DropsControlIds {
    type Source = MemorySource;

    async fn fresh(&self, case: &str) -> Result<MemorySource> {
        self.0.fresh(case).await
    }

    async fn publish(&self, case: &str, messages: Vec<RawEnvelope>) -> Result<()> {
        let carried = messages
            .into_iter()
            .filter(|m| !m.id.iter().flatten().any(u8::is_ascii_control))
            .collect();
        self.0.publish(case, carried).await
    }

    fn traits(&self) -> SourceTraits {
        self.0.traits()
    }
}

#[tokio::test(flavor = "multi_thread")]
#[should_panic(expected = "control_id_is_delivered: a message did not arrive")]
async fn the_source_suite_catches_a_source_dropping_control_ids() {
    exercise_source(&DropsControlIds(MemorySources::default())).await;
}
