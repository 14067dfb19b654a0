//! The transactional outbox: ids derived from the incoming id survive reprocessing; a relay
//! killed after publishing and before marking re-dispatches with the same ids and the
//! downstream consumer applies each message once; two relays never publish one row at once;
//! failures back off without breaking per-entity order; PostgreSQL NOTIFY wakes the relay.

mod support;

use oncely_core::{
    Consumer, ConsumerName, CrashPlan, Envelope, Error, Handled, Handler, MemorySource,
    RawEnvelope, RetryPolicy, SourceFaults, Step,
};
use oncely_effects::{
    EffectsDb, Outbox, OutboxMessage, Outgoing, Publisher, Relay, derived_id, outbox_rows,
};
use oncely_sql::Tables;
use sqlx::{Pool, Sqlite, Transaction};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
    let incoming = MemorySource::with_faults(SourceFaults {
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
    let upstream = Consumer::new(ConsumerName::new("ledger").unwrap(), up.clone(), emitter)
        .chaos(Arc::new(
            CrashPlan::new(3, 0.3).only_at(&[Step::Effected, Step::Committed]),
        ))
        .retry(RetryPolicy::default().base_delay(Duration::from_millis(1)));
    let stats = upstream
        .run(incoming, CancellationToken::new())
        .await
        .unwrap();
    assert!(stats.crashes > 0, "{stats:?}");

    let rows = outbox_rows::<Sqlite>(&mut up.pool().acquire().await.unwrap(), &Tables::default())
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
        let relay = Relay::new(up.pool().clone(), Tables::default(), publisher)
            .batch(4)
            .poll_interval(Duration::from_millis(5));
        let task = tokio::spawn(async move { relay.run(CancellationToken::new()).await });
        killed.notified().await;
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
    let relay = Relay::new(up.pool().clone(), Tables::default(), survivor).batch(4);
    while relay.undispatched().await.unwrap() > 0 {
        relay.dispatch_once().await.unwrap();
    }
    downstream.close();
    let log = log.lock().unwrap().clone();
    assert!(
        log.len() >= rows.len() + kills,
        "re-dispatches happened: {} publishes for {} rows",
        log.len(),
        rows.len()
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
        log.len() - rows.len(),
        "the re-dispatched copies were duplicates"
    );
    eprintln!(
        "outbox kill test: {} rows, {} kills, {} publishes, downstream applied {} ids once each, {} duplicates skipped",
        rows.len(),
        kills,
        log.len(),
        applied.len(),
        dstats.duplicates
    );
}

/// Detects two publishes of one row at the same time.
#[derive(Default)]
struct Exclusive {
    in_flight: Mutex<HashSet<String>>,
    overlaps: AtomicU64,
    log: Log,
    by_relay: Mutex<BTreeMap<&'static str, u64>>,
}

struct Tagged(&'static str, Arc<Exclusive>);

impl Publisher for Tagged {
    async fn publish(&self, m: &OutboxMessage) -> oncely_core::Result<()> {
        let x = &self.1;
        if !x.in_flight.lock().unwrap().insert(m.id.to_string()) {
            x.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        tokio::time::sleep(Duration::from_millis(1)).await; // widen the window
        x.in_flight.lock().unwrap().remove(m.id.as_str());
        x.log
            .lock()
            .unwrap()
            .push((m.id.to_string(), m.entity_key.clone(), m.seq));
        *x.by_relay.lock().unwrap().entry(self.0).or_default() += 1;
        Ok(())
    }
}

async fn enqueue_rows<DB: EffectsDb>(
    pool: &Pool<DB>,
    tables: &Tables,
    n: usize,
    entities: usize,
) -> HashSet<String> {
    let outbox = Outbox::new("test", tables.clone());
    let mut ids = HashSet::new();
    for i in 0..n {
        let mut tx = pool.begin_with(DB::BEGIN).await.unwrap();
        let incoming = oncely_core::MessageId::new(format!("in-{i}")).unwrap();
        let msg = Outgoing::new("topic", format!("e{}", i % entities), format!("p{i}"));
        ids.insert(
            outbox
                .enqueue(&mut tx, &incoming, 0, &msg)
                .await
                .unwrap()
                .to_string(),
        );
        tx.commit().await.unwrap();
    }
    ids
}

async fn two_relays<DB: EffectsDb>(pool: Pool<DB>, tables: Tables) {
    let ids = enqueue_rows(&pool, &tables, 60, 6).await;
    let shared = Arc::new(Exclusive::default());
    let stop = CancellationToken::new();
    let mut tasks = Vec::new();
    for name in ["relay-a", "relay-b"] {
        let relay = Relay::new(pool.clone(), tables.clone(), Tagged(name, shared.clone()))
            .batch(3)
            .poll_interval(Duration::from_millis(2));
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move { relay.run(stop).await }));
    }
    let watcher = Relay::new(pool.clone(), tables.clone(), MemorySource::new());
    tokio::time::timeout(Duration::from_secs(120), async {
        while watcher.undispatched().await.unwrap() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("relays finished (hang guard)");
    stop.cancel();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let log = shared.log.lock().unwrap().clone();
    assert_eq!(
        shared.overlaps.load(Ordering::SeqCst),
        0,
        "a row was published by two relays at once"
    );
    let mut per_id: HashMap<&str, u32> = HashMap::new();
    for (id, _, _) in &log {
        *per_id.entry(id).or_default() += 1;
    }
    assert_eq!(per_id.len(), ids.len());
    assert!(
        per_id.values().all(|&n| n == 1),
        "a row was dispatched twice: {per_id:?}"
    );
    // Strictly increasing per entity: order kept, no repeats.
    let mut last: HashMap<&str, i64> = HashMap::new();
    for (_, entity, seq) in &log {
        assert!(
            *seq > last.insert(entity, *seq).unwrap_or(i64::MIN),
            "order broken for {entity}"
        );
    }
    eprintln!(
        "{:?}: publishes per relay {:?}",
        DB::DIALECT,
        shared.by_relay.lock().unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_never_dispatch_a_row_twice_sqlite() {
    let (store, _dir) = support::sqlite().await;
    two_relays(store.pool().clone(), store.tables().clone()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_never_dispatch_a_row_twice_postgres() {
    let Some(store) = support::postgres("relays").await else {
        return;
    };
    two_relays(store.pool().clone(), store.tables().clone()).await;
    support::drop_pg(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_never_dispatch_a_row_twice_mariadb() {
    let Some(store) = support::mysql("relays").await else {
        return;
    };
    two_relays(store.pool().clone(), store.tables().clone()).await;
    support::drop_mysql(&store).await;
}

/// Fails the first `failures` publishes of ids in `flaky`.
struct Flaky {
    flaky: HashSet<String>,
    failures: u32,
    tries: Mutex<HashMap<String, u32>>,
    ok: Log,
}

impl Publisher for Flaky {
    async fn publish(&self, m: &OutboxMessage) -> oncely_core::Result<()> {
        let n = {
            let mut tries = self.tries.lock().unwrap();
            let n = tries.entry(m.id.to_string()).or_default();
            *n += 1;
            *n
        };
        if self.flaky.contains(m.id.as_str()) && n <= self.failures {
            return Err(Error::transient("broker unavailable"));
        }
        self.ok
            .lock()
            .unwrap()
            .push((m.id.to_string(), m.entity_key.clone(), m.seq));
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_publishes_back_off_and_keep_entity_order() {
    let (store, _dir) = support::sqlite().await;
    let pool = store.pool().clone();
    let outbox = Outbox::new("test", Tables::default());
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.unwrap();
    let incoming = oncely_core::MessageId::new("order-1").unwrap();
    let mut ids = Vec::new();
    for (seq, entity) in ["a", "a", "b", "a", "b"].iter().enumerate() {
        ids.push(
            outbox
                .enqueue(
                    &mut tx,
                    &incoming,
                    seq as u32,
                    &Outgoing::new("t", *entity, "x"),
                )
                .await
                .unwrap()
                .to_string(),
        );
    }
    tx.commit().await.unwrap();
    let ok = Log::default();
    let publisher = Flaky {
        flaky: HashSet::from([ids[0].clone()]),
        failures: 2,
        tries: Mutex::default(),
        ok: ok.clone(),
    };
    let relay = Relay::new(pool.clone(), Tables::default(), publisher)
        .backoff(Duration::from_millis(1), Duration::from_millis(4));
    let mut failed = 0;
    while relay.undispatched().await.unwrap() > 0 {
        failed += relay.dispatch_once().await.unwrap().failed;
        tokio::task::yield_now().await;
    }
    assert_eq!(failed, 2);
    let ok = ok.lock().unwrap().clone();
    let order: Vec<&str> = ok.iter().map(|(id, _, _)| id.as_str()).collect();
    let pos = |i: usize| order.iter().position(|x| *x == ids[i]).unwrap();
    assert_eq!(order.len(), 5);
    assert!(
        pos(0) < pos(1) && pos(1) < pos(3),
        "entity a in order: {order:?}"
    );
    assert!(pos(2) < pos(4), "entity b in order");
    assert!(
        pos(2) < pos(0),
        "entity b was not held up by a's failing row"
    );
    let rows = outbox_rows::<Sqlite>(&mut pool.acquire().await.unwrap(), &Tables::default())
        .await
        .unwrap();
    assert_eq!(rows[0].attempts, 2);
    assert!(rows.iter().all(|r| r.dispatched_at.is_some()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_notify_wakes_the_relay() {
    let Some(store) = support::postgres("notify").await else {
        return;
    };
    let tables = store.tables().clone();
    let downstream = MemorySource::new();
    // Polling once an hour: only LISTEN/NOTIFY can deliver promptly.
    let relay = Relay::new(store.pool().clone(), tables.clone(), downstream.clone())
        .poll_interval(Duration::from_secs(3600))
        .listen_notify();
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let stop = stop.clone();
        async move { relay.run(stop).await }
    });
    let outbox = Outbox::new("test", tables.clone());
    for n in 1..=3u64 {
        let mut tx = store.pool().begin().await.unwrap();
        let incoming = oncely_core::MessageId::new(format!("wake-{n}")).unwrap();
        outbox
            .enqueue(&mut tx, &incoming, 0, &Outgoing::new("t", "e", "x"))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        tokio::time::timeout(Duration::from_secs(60), async {
            while downstream.stats().published < n {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("NOTIFY woke the relay (hang guard)");
    }
    stop.cancel();
    assert_eq!(task.await.unwrap().unwrap().dispatched, 3);
    support::drop_pg(&store).await;
}
