//! Two consumers, `welcome-mailer` and `invoice-mailer`, both handle message X and both send
//! an `email` through the journal to a provider that deduplicates by `Idempotency-Key`: each
//! must send its own email (2 emails), which needs the consumer in the key. The provider
//! counts the emails it really sent.

mod support;

use oncely_core::{
    Consumer, ConsumerName, Envelope, Error, Handled, Handler, MemorySource, RawEnvelope,
};
use oncely_effects::{EffectState, Journal, effect_key};
use oncely_testkit::provider::FakeProvider;
use sqlx::{Sqlite, Transaction};
use tokio_util::sync::CancellationToken;

#[derive(Clone)]
struct Mailer {
    consumer: ConsumerName,
    journal: Journal,
    client: reqwest::Client,
    base: String,
}

impl Handler<Transaction<'static, Sqlite>> for Mailer {
    async fn handle(
        &self,
        _tx: &mut Transaction<'static, Sqlite>,
        msg: &Envelope,
    ) -> oncely_core::Result<Handled> {
        let key = effect_key(&self.consumer, msg.id(), "email");
        let (client, base) = (&self.client, self.base.as_str());
        self.journal
            .perform(&key, "email", msg.payload(), |entry| async move {
                let resp = client
                    .post(format!("{base}/effects"))
                    .header("Idempotency-Key", &entry.key)
                    .body(entry.request)
                    .send()
                    .await
                    .map_err(Error::transient)?;
                let v: serde_json::Value =
                    serde_json::from_str(&resp.text().await.map_err(Error::transient)?)
                        .map_err(Error::transient)?;
                Ok(v["id"].as_str().unwrap_or_default().to_owned())
            })
            .await?;
        Ok(Handled::Applied)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_consumers_one_message_one_email_each() {
    let provider = FakeProvider::start().await.unwrap();
    let (inbox, _d1) = support::sqlite().await;
    // The journal in its own file (SQLite has one writer; see Journal's docs).
    let (journal_db, _d2) = support::sqlite().await;
    let journal = Journal::new(journal_db.pool().clone(), journal_db.tables().clone());
    for name in ["welcome-mailer", "invoice-mailer"] {
        let consumer = ConsumerName::new(name).unwrap();
        let source = MemorySource::new();
        source.publish(RawEnvelope::new("X", br#"{"to":"a@example.com"}"#.to_vec()));
        // A redelivery of the same message: deduplicated by the inbox.
        source.publish(RawEnvelope::new("X", br#"{"to":"a@example.com"}"#.to_vec()));
        source.close();
        let handler = Mailer {
            consumer: consumer.clone(),
            journal: journal.clone(),
            client: reqwest::Client::new(),
            base: provider.url(),
        };
        let stats = Consumer::new(consumer, inbox.clone(), handler)
            .run(source, CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(stats.dead_lettered, 0, "{name}: {stats:?}");
    }
    let per_key = provider.effects_per_key();
    assert_eq!(
        provider.performed().len(),
        2,
        "one email per consumer: {per_key:?}"
    );
    assert_eq!(per_key.len(), 2, "{per_key:?}");
    assert!(per_key.values().all(|&n| n == 1), "{per_key:?}");
    let entries = journal.entries().await.unwrap();
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert!(entries.iter().all(|e| e.state == EffectState::Done));
    assert!(per_key.contains_key("welcome-mailer:X:email"));
    assert!(per_key.contains_key("invoice-mailer:X:email"));
}
