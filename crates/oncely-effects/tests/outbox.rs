//! The transactional outbox under relay crashes: ids derived from the incoming id survive
//! reprocessing, and relays killed after publishing and before marking re-dispatch with the
//! same ids, so the downstream consumer applies each message exactly once (SQLite, PostgreSQL,
//! MariaDB). Several relays, backoff and NOTIFY: `outbox_relays.rs`.

mod support;

use oncely_core::{
    Consumer, ConsumerName, Envelope, Error, Handled, Handler, MemorySource, RawEnvelope,
    RetryPolicy,
};
use oncely_effects::{Outbox, OutboxMessage, Outgoing, Publisher, Relay, derived_id, outbox_rows};
use oncely_sql::{SqlDatabase, Tables};
use oncely_testkit::chaos::{CrashPlan, CrashingHandler, CrashingStore, Step};
use oncely_testkit::{FaultySource, SourceFaults};
use sqlx::{Pool, Sqlite, Transaction};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Upstream handler: each incoming message emits two events through the outbox.
struct Emitter {
    outbox: Outbox,
}

impl Handler<Transaction<'static, Sqlite>> for Emitter {
    async fn handle(
        &self,
        tx: &mut Transaction<'static, Sqlite>,
        msg: &Envelope,
    ) -> oncely_core::Result<Handled> {
        let account = msg.meta().entity_key.clone().unwrap_or_default();
        for seq in 0..2 {
            let event = Outgoing::new("credits", account.clone(), format!("{}#{seq}", msg.id()));
            self.outbox.enqueue(tx, msg.id(), seq, &event).await?;
        }
        Ok(Handled::Applied)
    }
}

/// Downstream handler: one ledger row per applied message, no unique constraint, so a double
/// application would show as two rows.
struct Ledger;

impl Handler<Transaction<'static, Sqlite>> for Ledger {
    async fn handle(
        &self,
        tx: &mut Transaction<'static, Sqlite>,
        msg: &Envelope,
    ) -> oncely_core::Result<Handled> {
        sqlx::query("INSERT INTO applied (message_id, entity_key) VALUES (?1, ?2)")
            .bind(msg.id().as_str())
            .bind(msg.meta().entity_key.clone())
            .execute(&mut **tx)
            .await
            .map_err(Error::transient)?;
        Ok(Handled::Applied)
    }
}

type Log = Arc<Mutex<Vec<(String, String, i64)>>>;

/// Publishes to the downstream broker and logs; after its `kill_after`-th publish it signals
/// and never returns, so the test can kill the relay between publish and mark.
struct Killable {
    downstream: MemorySource,
    log: Log,
    kill_after: Option<usize>,
    published: AtomicUsize,
    killed: Arc<Notify>,
}

impl Publisher for Killable {
    async fn publish(&self, m: &OutboxMessage) -> oncely_core::Result<()> {
        self.downstream.publish(m.to_raw());
        self.log
            .lock()
            .unwrap()
            .push((m.id.to_string(), m.entity_key.clone(), m.seq));
        let n = self.published.fetch_add(1, Ordering::SeqCst) + 1;
        if Some(n) == self.kill_after {
            self.killed.notify_one();
            futures::future::pending::<()>().await;
        }
        Ok(())
    }
}

fn seqs_non_decreasing_per_entity(log: &[(String, String, i64)]) {
    let mut last: HashMap<&str, i64> = HashMap::new();
    for (id, entity, seq) in log {
        let prev = last.insert(entity, *seq).unwrap_or(i64::MIN);
        assert!(
            *seq >= prev,
            "{entity}: row {seq} ({id}) published after row {prev}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_killed_mid_dispatch_downstream_applies_each_once() {
    const INCOMING: usize = 20;
    let (up, _d1) = support::sqlite().await;
    // Upstream: duplicates, reordering, lost acks and crashes after the effect (before commit),
    // so handlers re-run and re-enqueue: the derived ids must make that harmless.
    let incoming = FaultySource::new(SourceFaults {
        seed: 11,
        duplicate_rate: 0.3,
        reorder_window: 4,
        lost_ack_rate: 0.2,
    });
    for i in 0..INCOMING {
        let mut raw = RawEnvelope::new(format!("grant-{i}"), "5");
        raw.meta.entity_key = Some(format!("acct-{}", i % 4));
        incoming.publish(raw);
    }
    incoming.close();
    let emitter = Emitter {
        outbox: Outbox::new("ledger", Tables::default()),
    };
    let plan = CrashPlan::new(3, 0.3).only_at(&[Step::Effected, Step::Committed]);
    let upstream = Consumer::new(
        ConsumerName::new("ledger").unwrap(),
        CrashingStore::new(up.clone(), plan.clone()),
        CrashingHandler(emitter),
    )
    .retry(RetryPolicy::default().base_delay(Duration::from_millis(1)));
    let stats = upstream
        .run(incoming, CancellationToken::new())
        .await
        .unwrap();
    assert!(plan.fired() > 0 && stats.abandoned > 0, "{stats:?}");

    let rows = outbox_rows(&mut up.pool().acquire().await.unwrap(), &Tables::default())
        .await
        .unwrap();
    let expected: HashSet<String> = (0..INCOMING)
        .flat_map(|i| {
            let id = oncely_core::MessageId::new(format!("grant-{i}")).unwrap();
            (0..2).map(move |s| derived_id("ledger", &id, s).to_string())
        })
        .collect();
    let got: HashSet<String> = rows.iter().map(|r| r.id.to_string()).collect();
    assert_eq!(
        rows.len(),
        2 * INCOMING,
        "one row per (incoming, seq), whatever the retries"
    );
    assert_eq!(got, expected);

    kill_relays_then_check(up.pool().clone(), Tables::default(), expected).await;
}

/// Kills five relays between publish and mark, lets a survivor finish, then runs the
/// downstream consumer (SQLite, ledger without unique key) and counts applications per id.
async fn kill_relays_then_check<DB: SqlDatabase>(
    pool: Pool<DB>,
    tables: Tables,
    expected: HashSet<String>,
) where
    oncely_sql::AnyPool: From<Pool<DB>>,
{
    // Relays killed after the k-th publish of each incarnation, before the mark.
    let downstream = MemorySource::new();
    let log: Log = Log::default();
    let mut kills = 0;
    for kill_after in [3, 1, 5, 2, 4] {
        let killed = Arc::new(Notify::new());
        let publisher = Killable {
            downstream: downstream.clone(),
            log: log.clone(),
            kill_after: Some(kill_after),
            published: AtomicUsize::new(0),
            killed: killed.clone(),
        };
        let relay = Relay::new(pool.clone(), tables.clone(), publisher)
            .batch(4)
            .poll_interval(Duration::from_millis(5));
        let task = tokio::spawn(async move { relay.run(CancellationToken::new()).await });
        tokio::time::timeout(Duration::from_secs(120), killed.notified())
            .await
            .expect("the relay reached its kill point (hang guard)");
        task.abort(); // the process dies: its transaction is dropped, nothing is marked
        assert!(task.await.unwrap_err().is_cancelled());
        kills += 1;
    }
    let survivor = Killable {
        downstream: downstream.clone(),
        log: log.clone(),
        kill_after: None,
        published: AtomicUsize::new(0),
        killed: Arc::default(),
    };
    let relay = Relay::new(pool.clone(), tables.clone(), survivor).batch(4);
    while relay.undispatched().await.unwrap() > 0 {
        relay.dispatch_once().await.unwrap();
    }
    downstream.close();
    let log = log.lock().unwrap().clone();
    assert!(
        log.len() >= expected.len() + kills,
        "re-dispatches happened: {} publishes for {} rows",
        log.len(),
        expected.len()
    );
    seqs_non_decreasing_per_entity(&log);

    // Downstream: an oncely consumer with a ledger.
    let (down, _d2) = support::sqlite().await;
    sqlx::query("CREATE TABLE applied (message_id TEXT NOT NULL, entity_key TEXT)")
        .execute(down.pool())
        .await
        .unwrap();
    let consumer = Consumer::new(
        ConsumerName::new("downstream").unwrap(),
        down.clone(),
        Ledger,
    );
    let dstats = consumer
        .run(downstream.clone(), CancellationToken::new())
        .await
        .unwrap();
    let applied: Vec<(String, i64)> =
        sqlx::query_as("SELECT message_id, COUNT(*) FROM applied GROUP BY message_id")
            .fetch_all(down.pool())
            .await
            .unwrap();
    let applied_ids: HashSet<String> = applied.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(
        applied_ids, expected,
        "every outgoing message applied, nothing else"
    );
    assert!(
        applied.iter().all(|(_, n)| *n == 1),
        "double application: {applied:?}"
    );
    assert_eq!(
        dstats.duplicates as usize,
        log.len() - expected.len(),
        "the re-dispatched copies were duplicates"
    );
    eprintln!(
        "outbox kill test: {} rows, {} kills, {} publishes, downstream applied {} ids once each, {} duplicates skipped",
        expected.len(),
        kills,
        log.len(),
        applied.len(),
        dstats.duplicates
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_killed_mid_dispatch_postgres() {
    let Some((store, _db)) = support::postgres("kill").await else {
        return;
    };
    let ids = support::enqueue_rows(&store.any_pool(), store.tables(), 40, 4).await;
    kill_relays_then_check(store.pool().clone(), store.tables().clone(), ids).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_killed_mid_dispatch_mariadb() {
    let Some((store, _db)) = support::mysql("kill").await else {
        return;
    };
    let ids = support::enqueue_rows(&store.any_pool(), store.tables(), 40, 4).await;
    kill_relays_then_check(store.pool().clone(), store.tables().clone(), ids).await;
}
