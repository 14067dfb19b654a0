//! Credit ledger that emits an event through the transactional outbox. The handler credits
//! the account and enqueues a `credits.granted` event in the same transaction, with an id
//! derived from the incoming id; a relay dispatches committed events to the broker, and a
//! downstream consumer applies each event once.
//!
//! The incoming broker duplicates and loses acks, and the ledger "crashes" before some
//! commits (the handler runs again and enqueues the same ids again: harmless).
//!
//! Run: `cargo run -p oncely-examples --example credit_ledger` (exits non-zero if a balance,
//! an event count or a notification count is off).

use oncely::CancellationToken;
use oncely::effects::{Outbox, Outgoing, Relay, derived_id};
use oncely::sql::sqlx::{self, Sqlite, Transaction};
use oncely::sql::{SqliteStore, Tables};
use oncely::testkit::chaos::{CrashPlan, CrashingHandler, CrashingStore, Step};
use oncely::testkit::{FaultySource, SourceFaults};
use oncely::{
    Consumer, ConsumerName, Envelope, Error, Handled, Handler, MemorySource, MessageId,
    RawEnvelope, RetryPolicy,
};
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

struct CreditLedger {
    outbox: Outbox,
}

impl Handler<Transaction<'static, Sqlite>> for CreditLedger {
    async fn handle(
        &self,
        tx: &mut Transaction<'static, Sqlite>,
        msg: &Envelope,
    ) -> Result<Handled, Error> {
        let grant: serde_json::Value =
            serde_json::from_slice(msg.payload()).map_err(Error::permanent)?;
        let account = grant["account"]
            .as_str()
            .ok_or_else(|| Error::permanent("no account"))?;
        let amount = grant["amount"]
            .as_i64()
            .ok_or_else(|| Error::permanent("no amount"))?;
        sqlx::query("INSERT INTO ledger (message_id, account, amount) VALUES (?1, ?2, ?3)")
            .bind(msg.id().as_str())
            .bind(account)
            .bind(amount)
            .execute(&mut **tx)
            .await
            .map_err(Error::transient)?;
        sqlx::query("INSERT INTO accounts (id, balance) VALUES (?1, ?2) ON CONFLICT (id) DO UPDATE SET balance = balance + excluded.balance")
            .bind(account)
            .bind(amount)
            .execute(&mut **tx)
            .await
            .map_err(Error::transient)?;
        let event = Outgoing::new(
            "credits.granted",
            account,
            serde_json::to_vec(&grant).map_err(Error::permanent)?,
        );
        self.outbox.enqueue(tx, msg.id(), 0, &event).await?;
        Ok(Handled::Applied)
    }
}

/// Downstream: one notification row per applied event (no unique key, so doubles would show).
struct Notifier;

impl Handler<Transaction<'static, Sqlite>> for Notifier {
    async fn handle(
        &self,
        tx: &mut Transaction<'static, Sqlite>,
        msg: &Envelope,
    ) -> Result<Handled, Error> {
        sqlx::query("INSERT INTO notifications (event_id, account) VALUES (?1, ?2)")
            .bind(msg.id().as_str())
            .bind(msg.meta().entity_key.clone())
            .execute(&mut **tx)
            .await
            .map_err(Error::transient)?;
        Ok(Handled::Applied)
    }
}

async fn sqlite(
    dir: &std::path::Path,
    name: &str,
) -> Result<SqliteStore, Box<dyn std::error::Error>> {
    let store = SqliteStore::connect(&format!("sqlite:{}", dir.join(name).display())).await?;
    store
        .migrate_with(&[&oncely::sql::INBOX, &oncely::effects::MIGRATIONS])
        .await?;
    Ok(store)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    run().await
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let ledger = sqlite(dir.path(), "ledger.db").await?;
    sqlx::query("CREATE TABLE ledger (message_id TEXT NOT NULL, account TEXT NOT NULL, amount INTEGER NOT NULL)")
        .execute(ledger.pool())
        .await?;
    sqlx::query("CREATE TABLE accounts (id TEXT PRIMARY KEY, balance INTEGER NOT NULL)")
        .execute(ledger.pool())
        .await?;
    let notifier_db = sqlite(dir.path(), "notifier.db").await?;
    sqlx::query("CREATE TABLE notifications (event_id TEXT NOT NULL, account TEXT)")
        .execute(notifier_db.pool())
        .await?;

    // Incoming grants; the expected balances are computed here, from what is published.
    let grants = 30;
    let incoming = FaultySource::new(SourceFaults {
        seed: 9,
        duplicate_rate: 0.3,
        reorder_window: 4,
        lost_ack_rate: 0.2,
    });
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    for g in 0..grants {
        let account = format!("acct-{}", g % 5);
        let amount = (g % 7 + 1) as i64;
        *expected.entry(account.clone()).or_default() += amount;
        let body = serde_json::json!({ "account": account, "amount": amount }).to_string();
        incoming.publish(RawEnvelope::new(format!("grant-{g}"), body));
    }
    incoming.close();

    // The relay runs beside the consumer and is woken after each commit (on PostgreSQL it
    // would wake itself through LISTEN/NOTIFY).
    let events = MemorySource::new();
    let relay = Relay::new(ledger.any_pool(), Tables::default(), events.clone())
        .poll_interval(Duration::from_millis(50));
    let stop_relay = CancellationToken::new();
    let relay_task = tokio::spawn({
        let (relay, stop) = (relay.clone(), stop_relay.clone());
        async move { relay.run(stop).await }
    });

    let consumer = Consumer::new(
        ConsumerName::new("credit-ledger")?,
        // Crashes before some commits: oncely-testkit's wrappers around the store and handler.
        CrashingStore::new(
            ledger.clone(),
            CrashPlan::new(1, 0.25).only_at(&[Step::Effected]),
        ),
        CrashingHandler(CreditLedger {
            outbox: Outbox::new("credit-ledger", Tables::default()),
        }),
    )
    .retry(RetryPolicy::default().base_delay(Duration::from_millis(2)));
    let stats = consumer.run(incoming, CancellationToken::new()).await?;
    println!("ledger: {stats:?}");
    relay.waker().notify_one();
    while relay.undispatched().await? > 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop_relay.cancel();
    let dispatched = relay_task.await??;
    events.close();
    println!("relay: {dispatched:?}");

    let downstream = Consumer::new(
        ConsumerName::new("notifier")?,
        notifier_db.clone(),
        Notifier,
    );
    let dstats = downstream.run(events, CancellationToken::new()).await?;
    println!("notifier: {dstats:?}");

    // Checks, from the databases against the published grants.
    let balances: BTreeMap<String, i64> = sqlx::query_as("SELECT id, balance FROM accounts")
        .fetch_all(ledger.pool())
        .await?
        .into_iter()
        .collect();
    assert_eq!(balances, expected, "each grant credited once");
    let want_ids: HashSet<String> = (0..grants)
        .map(|g| {
            Ok(derived_id("credit-ledger", &MessageId::new(format!("grant-{g}"))?, 0).to_string())
        })
        .collect::<Result<_, oncely::IdError>>()?;
    let notified: Vec<(String, i64)> =
        sqlx::query_as("SELECT event_id, COUNT(*) FROM notifications GROUP BY event_id")
            .fetch_all(notifier_db.pool())
            .await?;
    let got_ids: HashSet<String> = notified.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(
        got_ids, want_ids,
        "one event per grant, with the derived ids"
    );
    assert!(
        notified.iter().all(|(_, n)| *n == 1),
        "each event applied once downstream"
    );
    println!(
        "ok: {} accounts balanced, {} events emitted and applied once each",
        balances.len(),
        notified.len()
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
