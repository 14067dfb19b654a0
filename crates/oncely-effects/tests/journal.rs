//! The effect journal against a real HTTP provider on 127.0.0.1 that deduplicates by
//! `Idempotency-Key` and counts the side effects it performs: crashes injected before record,
//! after record, after the call and after done; the provider performs each key's effect once.
//! Rows left pending with no redelivery are resolved by the reconciler.

mod crashing_journal;
mod support;

use crashing_journal::{CrashingJournal, JournalStep};
use oncely_core::{
    Consumer, ConsumerName, Envelope, Error, Handled, Handler, RawEnvelope, RetryPolicy,
};
use oncely_effects::{
    EffectState, Journal, JournalEntry, Performed, Reconciler, Resolution, Resolve, effect_key,
};
use oncely_sql::{SqlDatabase, Tables};
use oncely_testkit::provider::FakeProvider;
use oncely_testkit::{FaultySource, SourceFaults};
use sqlx::{Pool, Sqlite, Transaction};
use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const N: usize = 24;

/// The provider call, as an application would write it: the journal's key as `Idempotency-Key`.
async fn call(
    client: &reqwest::Client,
    base: &str,
    key: &str,
    body: Vec<u8>,
) -> oncely_core::Result<String> {
    let resp = client
        .post(format!("{base}/effects"))
        .header("Idempotency-Key", key)
        .body(body)
        .send()
        .await
        .map_err(|e| Error::transient(format!("provider unreachable: {e}")))?;
    let status = resp.status();
    let text = resp
        .text()
        .await
        .map_err(|e| Error::transient(format!("provider answer lost: {e}")))?;
    if !status.is_success() {
        return Err(Error::transient(format!(
            "provider answered {status}: {text}"
        )));
    }
    let v: serde_json::Value = serde_json::from_str(&text).map_err(Error::transient)?;
    Ok(v["id"].as_str().unwrap_or_default().to_owned())
}

struct Mailer {
    journal: CrashingJournal,
    /// With a resolver: `perform_checked` (ask the provider before calling again).
    checked: Option<HttpResolver>,
    client: reqwest::Client,
    base: String,
}

impl Handler<Transaction<'static, Sqlite>> for Mailer {
    async fn handle(
        &self,
        tx: &mut Transaction<'static, Sqlite>,
        msg: &Envelope,
    ) -> oncely_core::Result<Handled> {
        let key = effect_key(&ConsumerName::new("mailer").unwrap(), msg.id(), "email");
        let (client, base) = (&self.client, self.base.as_str());
        let done = match &self.checked {
            Some(resolver) => {
                self.journal
                    .perform_checked(&key, "email", msg.payload(), resolver)
                    .await?
            }
            None => {
                self.journal
                    .perform(&key, "email", msg.payload(), |entry| async move {
                        call(client, base, &entry.key, entry.request).await
                    })
                    .await?
            }
        };
        sqlx::query("INSERT INTO sent (message_id, provider_ref) VALUES (?1, ?2)")
            .bind(msg.id().as_str())
            .bind(done.provider_ref())
            .execute(&mut **tx)
            .await
            .map_err(Error::transient)?;
        Ok(Handled::Applied)
    }
}

/// Crashes once per (step, key) at each of `steps`.
fn crash_once_at(
    steps: &[JournalStep],
) -> impl Fn(JournalStep, &str) -> bool + Send + Sync + 'static {
    let steps: Vec<JournalStep> = steps.to_vec();
    let seen: Mutex<HashSet<(JournalStep, String)>> = Mutex::default();
    move |step: JournalStep, key: &str| {
        steps.contains(&step) && seen.lock().unwrap().insert((step, key.to_owned()))
    }
}

struct Counted {
    /// Side effects per key, counted by the provider.
    per_key: BTreeMap<String, u32>,
    /// Keys expected, computed from the published ids alone.
    expected: Vec<String>,
    requests: u64,
    journal: Vec<JournalEntry>,
    provider_refs: BTreeMap<String, String>,
    sent_rows: i64,
}

/// N welcome messages through a Consumer (duplicates, reordering, lost acks) whose handler
/// sends through the journal, with crashes injected at `steps` once per key and every 6th
/// key's first provider answer dropped after the effect.
async fn run_mailer(steps: &[JournalStep], provider: FakeProvider) -> Counted {
    let (journal_db, _d1) = support::sqlite().await; // the journal commits on its own file
    run_mailer_on(
        journal_db.pool().clone(),
        Tables::default(),
        steps,
        provider,
        false,
    )
    .await
}

/// [`run_mailer`] with the journal in any database (the inbox stays on SQLite).
async fn run_mailer_on<J: SqlDatabase>(
    journal_pool: Pool<J>,
    tables: Tables,
    steps: &[JournalStep],
    provider: FakeProvider,
    checked: bool,
) -> Counted
where
    oncely_sql::AnyPool: From<Pool<J>>,
{
    let (inbox_db, _d2) = support::sqlite().await;
    sqlx::query("CREATE TABLE sent (message_id TEXT NOT NULL, provider_ref TEXT NOT NULL)")
        .execute(inbox_db.pool())
        .await
        .unwrap();
    let journal = CrashingJournal::new(Journal::new(journal_pool, tables), crash_once_at(steps));
    let ids: Vec<String> = (0..N).map(|i| format!("welcome-{i}")).collect();
    let expected: Vec<String> = ids
        .iter()
        .map(|id| {
            effect_key(
                &ConsumerName::new("mailer").unwrap(),
                &oncely_core::MessageId::new(id).unwrap(),
                "email",
            )
        })
        .collect();
    for key in expected.iter().step_by(6) {
        provider.drop_response_once(key);
    }
    let source = FaultySource::new(SourceFaults {
        seed: 7,
        duplicate_rate: 0.3,
        reorder_window: 4,
        lost_ack_rate: 0.1,
    });
    for (i, id) in ids.iter().enumerate() {
        source.publish(RawEnvelope::new(
            id.clone(),
            format!(r#"{{"to":"user{i}@example.com"}}"#),
        ));
    }
    source.close();
    let handler = Mailer {
        journal: journal.clone(),
        checked: checked.then(|| HttpResolver {
            client: reqwest::Client::new(),
            base: provider.url(),
            rejected: HashSet::new(),
        }),
        client: reqwest::Client::new(),
        base: provider.url(),
    };
    let consumer = Consumer::new(
        ConsumerName::new("mailer").unwrap(),
        inbox_db.clone(),
        handler,
    )
    .concurrency(4)
    .retry(
        RetryPolicy::default()
            .max_attempts(20)
            .base_delay(Duration::from_millis(1))
            .max_delay(Duration::from_millis(5)),
    );
    let stats = consumer
        .run(source.clone(), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(stats.dead_lettered, 0, "{stats:?}");
    let sent_rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM sent")
        .fetch_one(inbox_db.pool())
        .await
        .unwrap();
    let provider_refs = provider
        .performed()
        .into_iter()
        .filter_map(|e| e.key.map(|k| (k, e.reference)))
        .collect();
    Counted {
        per_key: provider.effects_per_key(),
        expected,
        requests: provider.requests(),
        journal: journal.journal().entries().await.unwrap(),
        provider_refs,
        sent_rows,
    }
}

fn assert_once_per_key(c: &Counted) {
    let keys: Vec<&String> = c.per_key.keys().collect();
    let mut expected: Vec<&String> = c.expected.iter().collect();
    expected.sort();
    assert_eq!(keys, expected, "the provider saw exactly the expected keys");
    let doubles: u32 = c.per_key.values().map(|n| n.saturating_sub(1)).sum();
    assert_eq!(doubles, 0, "double side effects: {:?}", c.per_key);
    assert!(c.per_key.values().all(|&n| n == 1));
    assert_eq!(c.journal.len(), N);
    for e in &c.journal {
        assert_eq!(e.state, EffectState::Done, "{e:?}");
        assert_eq!(
            e.provider_ref.as_ref(),
            c.provider_refs.get(&e.key),
            "journal ref of {}",
            e.key
        );
    }
    assert_eq!(c.sent_rows, N as i64, "one app row per message");
    eprintln!(
        "journal: {} keys, {} side effects, {} provider requests",
        c.expected.len(),
        c.per_key.values().sum::<u32>(),
        c.requests
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_before_record_effect_once_per_key() {
    let c = run_mailer(
        &[JournalStep::BeforeRecord],
        FakeProvider::start().await.unwrap(),
    )
    .await;
    assert_once_per_key(&c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_record_effect_once_per_key() {
    let c = run_mailer(
        &[JournalStep::Recorded],
        FakeProvider::start().await.unwrap(),
    )
    .await;
    assert_once_per_key(&c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_call_effect_once_per_key() {
    let c = run_mailer(&[JournalStep::Called], FakeProvider::start().await.unwrap()).await;
    assert_once_per_key(&c);
    // Every key was called at least twice (crash after the first call): the provider replayed.
    assert!(c.requests >= 2 * N as u64, "requests {}", c.requests);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_done_effect_once_per_key() {
    let c = run_mailer(&[JournalStep::Marked], FakeProvider::start().await.unwrap()).await;
    assert_once_per_key(&c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_at_every_step_effect_once_per_key() {
    let steps = [
        JournalStep::BeforeRecord,
        JournalStep::Recorded,
        JournalStep::Called,
        JournalStep::Marked,
    ];
    let c = run_mailer(&steps, FakeProvider::start().await.unwrap()).await;
    assert_once_per_key(&c);
}

const ALL_STEPS: [JournalStep; 4] = [
    JournalStep::BeforeRecord,
    JournalStep::Recorded,
    JournalStep::Called,
    JournalStep::Marked,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_at_every_step_effect_once_per_key_postgres_journal() {
    let Some((store, _db)) = support::postgres("jcrash").await else {
        return;
    };
    let provider = FakeProvider::start().await.unwrap();
    let c = run_mailer_on(
        store.pool().clone(),
        store.tables().clone(),
        &ALL_STEPS,
        provider,
        false,
    )
    .await;
    assert_once_per_key(&c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_at_every_step_effect_once_per_key_mariadb_journal() {
    let Some((store, _db)) = support::mysql("jcrash").await else {
        return;
    };
    let provider = FakeProvider::start().await.unwrap();
    let c = run_mailer_on(
        store.pool().clone(),
        store.tables().clone(),
        &ALL_STEPS,
        provider,
        false,
    )
    .await;
    assert_once_per_key(&c);
}

/// A provider that ignores the key is still called once per key when the journal asks it
/// before calling again (`perform_checked`), with crashes after the call and lost answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_before_recall_protects_a_provider_without_dedup() {
    let (journal_db, _dir) = support::sqlite().await;
    let provider = FakeProvider::without_dedup().await.unwrap();
    let c = run_mailer_on(
        journal_db.pool().clone(),
        Tables::default(),
        &ALL_STEPS,
        provider,
        true,
    )
    .await;
    assert_once_per_key(&c);
}

/// The count can fail: a provider that ignores the key performs twice after a crash after the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_provider_dedup_doubles_are_counted() {
    let c = run_mailer(
        &[JournalStep::Called],
        FakeProvider::without_dedup().await.unwrap(),
    )
    .await;
    let doubles: u32 = c.per_key.values().map(|n| n.saturating_sub(1)).sum();
    assert!(
        doubles >= N as u32,
        "expected ≥{N} doubles, counted {doubles}: {:?}",
        c.per_key
    );
}

/// The user's check: ask the provider about the key; unknown → call again, except keys the
/// "provider" rejects for good.
struct HttpResolver {
    client: reqwest::Client,
    base: String,
    rejected: HashSet<String>,
}

impl Resolve for HttpResolver {
    async fn check(&self, entry: &JournalEntry) -> oncely_core::Result<Resolution> {
        let resp = self
            .client
            .get(format!("{}/effects/{}", self.base, entry.key))
            .send()
            .await
            .map_err(Error::transient)?;
        if resp.status().is_success() {
            let v: serde_json::Value =
                serde_json::from_str(&resp.text().await.map_err(Error::transient)?)
                    .map_err(Error::transient)?;
            return Ok(Resolution::Done(
                v["id"].as_str().unwrap_or_default().to_owned(),
            ));
        }
        Ok(if self.rejected.contains(&entry.key) {
            Resolution::Failed("recipient rejected".into())
        } else {
            Resolution::RetryCall
        })
    }

    async fn call(&self, entry: &JournalEntry) -> oncely_core::Result<String> {
        call(&self.client, &self.base, &entry.key, entry.request.clone()).await
    }
}

/// No redelivery: 5 rows crash after record (never called), 5 after the call (performed, not
/// marked), 1 after record and is rejected, 2 complete. The reconciler resolves the 11 pending.
async fn reconciler_resolves<DB: SqlDatabase>(pool: Pool<DB>, tables: Tables)
where
    oncely_sql::AnyPool: From<Pool<DB>>,
{
    let provider = FakeProvider::start().await.unwrap();
    let client = reqwest::Client::new();
    let base = provider.url();
    let keys: Vec<String> = (0..13).map(|i| format!("msg-r{i}:email")).collect();
    let crash_at: BTreeMap<String, JournalStep> = keys
        .iter()
        .enumerate()
        .filter_map(|(i, k)| match i {
            0..=4 | 12 => Some((k.clone(), JournalStep::Recorded)),
            5..=9 => Some((k.clone(), JournalStep::Called)),
            _ => None,
        })
        .collect();
    let plan = crash_at.clone();
    let journal = CrashingJournal::new(
        Journal::new(pool.clone(), tables.clone()),
        move |step: JournalStep, key: &str| plan.get(key) == Some(&step),
    );
    for key in &keys {
        let result = journal
            .perform(key, "email", key.as_bytes(), |e| {
                let (client, base) = (&client, base.as_str());
                async move { call(client, base, &e.key, e.request).await }
            })
            .await;
        assert_eq!(
            result.is_err(),
            crash_at.contains_key(key),
            "{key}: {result:?}"
        );
    }
    let before = provider.effects_per_key();
    assert_eq!(
        before.len(),
        7,
        "5 called-then-crashed + 2 complete: {before:?}"
    );
    let plain = Journal::new(pool.clone(), tables.clone());
    // Rows pending for less than the timeout are left alone.
    let patient = Reconciler::new(
        plain.clone(),
        HttpResolver {
            client: client.clone(),
            base: base.clone(),
            rejected: HashSet::new(),
        },
    )
    .timeout(Duration::from_secs(3600));
    assert_eq!(patient.run_once().await.unwrap().checked, 0);
    let resolver = HttpResolver {
        client: client.clone(),
        base: base.clone(),
        rejected: HashSet::from([keys[12].clone()]),
    };
    let reconciler = Reconciler::new(plain.clone(), resolver).timeout(Duration::ZERO);
    let report = reconciler.run_once().await.unwrap();
    assert_eq!(
        (
            report.checked,
            report.done,
            report.recalled,
            report.failed,
            report.errors
        ),
        (11, 5, 5, 1, 0),
        "{report:?}"
    );
    assert_eq!(
        reconciler.run_once().await.unwrap().checked,
        0,
        "nothing left pending"
    );
    let per_key = provider.effects_per_key();
    for (i, key) in keys.iter().enumerate() {
        let entry = plain.get(key).await.unwrap().unwrap();
        if i == 12 {
            assert_eq!(entry.state, EffectState::Failed);
            assert_eq!(
                per_key.get(key),
                None,
                "a rejected effect was never performed"
            );
        } else {
            assert_eq!(entry.state, EffectState::Done, "{key}");
            assert_eq!(per_key.get(key), Some(&1), "{key} performed once");
        }
    }
    // Afterwards, a late redelivery calls nothing and learns the outcome.
    let requests = provider.requests();
    let again = plain
        .perform(&keys[3], "email", b"", |_| async {
            panic!("must not call")
        })
        .await
        .unwrap();
    assert!(matches!(again, Performed::AlreadyDone { .. }));
    assert!(
        plain
            .perform(&keys[12], "email", b"", |_| async {
                panic!("must not call")
            })
            .await
            .is_err()
    );
    assert_eq!(provider.requests(), requests);
}

support::on_each_database!(reconciler_resolves: reconciler_resolves_stuck_rows_on_sqlite, reconciler_resolves_stuck_rows_on_postgres, reconciler_resolves_stuck_rows_on_mariadb);
