//! Welcome email through the effect journal. The email provider is an outside HTTP call that
//! cannot join the transaction, so the handler
//!
//! 1. commits a `pending` journal row keyed by `effect_key(consumer, message_id, "email")`,
//! 2. calls the provider with that key as `Idempotency-Key`,
//! 3. commits `done` with the provider's reference.
//!
//! The broker duplicates and loses acks, and the first attempt for every user "crashes" right
//! after the provider call; the redelivery calls again with the same key and the provider (an
//! in-process fake on 127.0.0.1 that deduplicates by key) sends nothing twice.
//!
//! Run: `cargo run -p oncely-examples --example welcome_email` (exits non-zero if any user got
//! no email or two).

/// Crashes between the journal's steps (test code, kept with oncely-effects' tests).
#[path = "../crates/oncely-effects/tests/crashing_journal/mod.rs"]
mod crashing_journal;

use crashing_journal::{CrashingJournal, JournalStep};
use oncely::CancellationToken;
use oncely::effects::{EffectState, Journal, effect_key};
use oncely::sql::sqlx::{self, Sqlite, Transaction};
use oncely::sql::{SqliteStore, Tables};
use oncely::testkit::provider::FakeProvider;
use oncely::testkit::{FaultySource, SourceFaults};
use oncely::{Consumer, ConsumerName, Envelope, Error, Handled, Handler, RawEnvelope, RetryPolicy};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The provider client: POST the email with the idempotency key, return the provider's id.
async fn send_email(
    client: &reqwest::Client,
    base: &str,
    key: &str,
    body: Vec<u8>,
) -> Result<String, Error> {
    let resp = client
        .post(format!("{base}/effects"))
        .header("Idempotency-Key", key)
        .body(body)
        .send()
        .await
        .map_err(|e| Error::transient(format!("email provider unreachable: {e}")))?;
    if !resp.status().is_success() {
        return Err(Error::transient(format!(
            "email provider answered {}",
            resp.status()
        )));
    }
    let answer: serde_json::Value =
        serde_json::from_str(&resp.text().await.map_err(Error::transient)?)
            .map_err(Error::transient)?;
    Ok(answer["id"].as_str().unwrap_or_default().to_owned())
}

struct Welcome {
    journal: CrashingJournal,
    client: reqwest::Client,
    provider: String,
}

impl Handler<Transaction<'static, Sqlite>> for Welcome {
    async fn handle(
        &self,
        tx: &mut Transaction<'static, Sqlite>,
        msg: &Envelope,
    ) -> Result<Handled, Error> {
        let consumer =
            ConsumerName::new("welcome-email").map_err(|e| Error::config(e.to_string()))?;
        let key = effect_key(&consumer, msg.id(), "email");
        let (client, base) = (&self.client, self.provider.as_str());
        let sent = self
            .journal
            .perform(&key, "email", msg.payload(), |entry| async move {
                send_email(client, base, &entry.key, entry.request).await
            })
            .await?;
        sqlx::query("INSERT INTO users_welcomed (message_id, provider_ref) VALUES (?1, ?2)")
            .bind(msg.id().as_str())
            .bind(sent.provider_ref())
            .execute(&mut **tx)
            .await
            .map_err(Error::transient)?;
        Ok(Handled::Applied)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    run().await
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let app =
        SqliteStore::connect(&format!("sqlite:{}", dir.path().join("app.db").display())).await?;
    app.migrate().await?;
    sqlx::query(
        "CREATE TABLE users_welcomed (message_id TEXT PRIMARY KEY, provider_ref TEXT NOT NULL)",
    )
    .execute(app.pool())
    .await?;
    // SQLite has one writer per file and the handler's transaction holds it: the journal,
    // which must commit on its own before the call, lives in a second file.
    let journal_db = SqliteStore::connect(&format!(
        "sqlite:{}",
        dir.path().join("journal.db").display()
    ))
    .await?;
    journal_db
        .migrate_with(&[&oncely::effects::MIGRATIONS])
        .await?;

    let provider = FakeProvider::start().await?;
    // Crash once per key right after the provider call, before `done` is recorded.
    let crashed: Arc<Mutex<HashSet<String>>> = Arc::default();
    let seen = crashed.clone();
    let journal = CrashingJournal::new(
        Journal::new(journal_db.any_pool(), Tables::default()),
        move |step: JournalStep, key: &str| {
            step == JournalStep::Called && seen.lock().unwrap().insert(key.to_owned())
        },
    );

    let users = 10;
    let source = FaultySource::new(SourceFaults {
        seed: 5,
        duplicate_rate: 0.4,
        reorder_window: 3,
        lost_ack_rate: 0.2,
    });
    for u in 0..users {
        source.publish(RawEnvelope::new(
            format!("user-signed-up-{u}"),
            format!(r#"{{"to":"user{u}@example.com"}}"#),
        ));
    }
    source.close();

    let handler = Welcome {
        journal: journal.clone(),
        client: reqwest::Client::new(),
        provider: provider.url(),
    };
    let consumer = Consumer::new(ConsumerName::new("welcome-email")?, app.clone(), handler).retry(
        RetryPolicy::default()
            .max_attempts(10)
            .base_delay(Duration::from_millis(5)),
    );
    let stats = consumer.run(source, CancellationToken::new()).await?;
    println!("consumer: {stats:?}");
    println!(
        "provider: {} requests, {} emails sent",
        provider.requests(),
        provider.performed().len()
    );

    // Check: the provider's own count, per key, against the users published.
    let per_key = provider.effects_per_key();
    for u in 0..users {
        let key = effect_key(
            &ConsumerName::new("welcome-email")?,
            &oncely::MessageId::new(format!("user-signed-up-{u}"))?,
            "email",
        );
        assert_eq!(
            per_key.get(&key),
            Some(&1),
            "user {u} got exactly one email"
        );
    }
    assert_eq!(provider.performed().len(), users, "no email without a user");
    assert!(
        provider.requests() > users as u64,
        "the crashes made the handler call again"
    );
    for entry in journal.journal().entries().await? {
        assert_eq!(entry.state, EffectState::Done, "{entry:?}");
    }
    let welcomed: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM users_welcomed")
        .fetch_one(app.pool())
        .await?;
    assert_eq!(welcomed, users as i64);
    println!(
        "ok: {users} users, {users} emails, despite {} crashes after the call",
        crashed.lock().unwrap().len()
    );
    Ok(())
}

/// `cargo test -p oncely-examples --examples` (and `cargo test --workspace`) runs the example.
#[cfg(test)]
mod tests {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runs_to_completion() {
        super::run().await.expect("example failed");
    }
}
