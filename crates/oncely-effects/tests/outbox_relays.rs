//! Several relays and failures: two relays at once never publish one row concurrently nor
//! twice; failed publishes back off without breaking per-entity order; PostgreSQL NOTIFY
//! wakes a relay that otherwise polls once an hour.

mod support;

use oncely_core::{Error, MemorySource};
use oncely_effects::{Outbox, OutboxMessage, Outgoing, Publisher, Relay, outbox_rows};
use oncely_sql::{SqlDatabase, Tables};
use sqlx::Pool;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

type Log = support::Log;

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

async fn two_relays<DB: SqlDatabase>(pool: Pool<DB>, tables: Tables)
where
    oncely_sql::AnyPool: From<Pool<DB>>,
{
    let ids = support::enqueue_rows(&pool.clone().into(), &tables, 60, 2).await;
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

support::on_each_database!(two_relays: two_relays_never_dispatch_a_row_twice_sqlite, two_relays_never_dispatch_a_row_twice_postgres, two_relays_never_dispatch_a_row_twice_mariadb);

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
    let rows = outbox_rows(&mut pool.acquire().await.unwrap(), &Tables::default())
        .await
        .unwrap();
    assert_eq!(rows[0].attempts, 2);
    assert!(rows.iter().all(|r| r.dispatched_at.is_some()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_notify_wakes_the_relay() {
    let Some((store, _db)) = support::postgres("notify").await else {
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
}
