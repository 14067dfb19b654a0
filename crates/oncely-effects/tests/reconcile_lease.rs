//! Two reconcilers running at once over the same stuck journal rows, against a provider that
//! does NOT deduplicate by key: each row must be called exactly once (the lease), on SQLite,
//! PostgreSQL and MariaDB. The provider counts the calls it performed, per key.

mod crashing_journal;
mod support;

use crashing_journal::{CrashingJournal, JournalStep};
use oncely_core::Error;
use oncely_effects::{EffectState, Journal, JournalEntry, Reconciler, Resolution, Resolve};
use oncely_sql::{SqlDatabase, Tables};
use oncely_testkit::provider::FakeProvider;
use sqlx::Pool;
use std::time::Duration;

const ROWS: usize = 40;

/// The user's check and call over HTTP; the check is slow, so that without a lease the two
/// reconcilers both see "unknown" for the same row and both call.
struct Http {
    client: reqwest::Client,
    base: String,
}

impl Resolve for Http {
    async fn check(&self, entry: &JournalEntry) -> oncely_core::Result<Resolution> {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let resp = self
            .client
            .get(format!("{}/effects/{}", self.base, entry.key))
            .send()
            .await
            .map_err(Error::transient)?;
        Ok(if resp.status().is_success() {
            Resolution::Done("found".into())
        } else {
            Resolution::RetryCall
        })
    }

    async fn call(&self, entry: &JournalEntry) -> oncely_core::Result<String> {
        let resp = self
            .client
            .post(format!("{}/effects", self.base))
            .header("Idempotency-Key", &entry.key)
            .body(entry.request.clone())
            .send()
            .await
            .map_err(Error::transient)?;
        let v: serde_json::Value =
            serde_json::from_str(&resp.text().await.map_err(Error::transient)?)
                .map_err(Error::transient)?;
        Ok(v["id"].as_str().unwrap_or_default().to_owned())
    }
}

async fn two_reconcilers_call_once<DB: SqlDatabase>(pool: Pool<DB>, tables: Tables)
where
    oncely_sql::AnyPool: From<Pool<DB>>,
{
    let provider = FakeProvider::without_dedup().await.unwrap();
    // Stuck rows: `pending` committed, then the process "died" before the call.
    let crashing = CrashingJournal::new(
        Journal::new(pool.clone(), tables.clone()),
        |step: JournalStep, _: &str| step == JournalStep::Recorded,
    );
    let keys: Vec<String> = (0..ROWS).map(|i| format!("c:stuck-{i}:email")).collect();
    for key in &keys {
        let r = crashing
            .perform(key, "email", key.as_bytes(), |_| async {
                panic!("crashed before the call")
            })
            .await;
        assert!(r.is_err());
    }
    let journal = Journal::new(pool.clone(), tables.clone());
    let reconciler = |batch| {
        Reconciler::new(
            journal.clone(),
            Http {
                client: reqwest::Client::new(),
                base: provider.url(),
            },
        )
        .timeout(Duration::ZERO)
        .batch(batch)
    };
    let (a, b) = (reconciler(ROWS as u32), reconciler(ROWS as u32));
    let (ra, rb) = tokio::join!(
        tokio::spawn(async move { a.run_once().await }),
        tokio::spawn(async move { b.run_once().await })
    );
    let (ra, rb) = (ra.unwrap().unwrap(), rb.unwrap().unwrap());
    let per_key = provider.effects_per_key();
    let doubles: u32 = per_key.values().map(|n| n.saturating_sub(1)).sum();
    assert_eq!(doubles, 0, "a stuck row was called twice: {per_key:?}");
    assert_eq!(
        per_key.len(),
        ROWS,
        "every stuck row was called: {per_key:?}"
    );
    assert!(keys.iter().all(|k| per_key.get(k) == Some(&1)));
    assert_eq!(
        ra.recalled + rb.recalled,
        ROWS as u64,
        "each row handled by exactly one reconciler: {ra:?} {rb:?}"
    );
    for key in &keys {
        assert_eq!(
            journal.get(key).await.unwrap().unwrap().state,
            EffectState::Done
        );
    }
    eprintln!(
        "two reconcilers: {} + {} rows, {} provider calls for {ROWS} stuck rows",
        ra.recalled,
        rb.recalled,
        provider.performed().len()
    );
}

support::on_each_database!(two_reconcilers_call_once: two_reconcilers_call_each_stuck_row_once_on_sqlite, two_reconcilers_call_each_stuck_row_once_on_postgres, two_reconcilers_call_each_stuck_row_once_on_mariadb);
