//! The outbox through PgBouncer in transaction pooling mode (`scripts/pgbouncer.sh`), with
//! the plain URL: the store finds the pooler, the relay polls (a `LISTEN` cannot live
//! through a transaction pooler) and sends no `NOTIFY`, two relays at once publish every row
//! exactly once, in order per entity. The outbox and the relays read the pooler from the
//! store's engine (no flag is handed to them).

mod support;

use oncely_effects::{OutboxMessage, Publisher, Relay};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Records (relay, id, entity, seq) of every publish; counts overlapping publishes of one id.
#[derive(Default, Clone)]
struct Recorder {
    log: Arc<Mutex<Vec<(String, String, i64)>>>,
    in_flight: Arc<Mutex<HashSet<String>>>,
    overlaps: Arc<Mutex<u64>>,
}

impl Publisher for Recorder {
    async fn publish(&self, m: &OutboxMessage) -> oncely_core::Result<()> {
        if !self.in_flight.lock().unwrap().insert(m.id.to_string()) {
            *self.overlaps.lock().unwrap() += 1;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        self.in_flight.lock().unwrap().remove(m.id.as_str());
        self.log
            .lock()
            .unwrap()
            .push((m.id.to_string(), m.entity_key.clone(), m.seq));
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_dispatch_each_row_once_through_pgbouncer() {
    let url = oncely_testkit::services::pgbouncer_url();
    let Some((store, _db)) = support::postgres_at("relay_bouncer", &url, "PgBouncer").await else {
        return;
    };
    assert!(store.engine().behind_transaction_pooler());
    assert!(store.portable(), "portable mode: polling, lease locks");
    let (pool, tables) = (store.any_pool(), store.tables().clone());
    assert!(!pool.engine().notifies(), "no NOTIFY through the pooler");
    let outbox = oncely_effects::Outbox::new("test", tables.clone());
    let ids = support::enqueue_rows_in(&pool, &outbox, 80, 4).await;
    let recorder = Recorder::default();
    let stop = CancellationToken::new();
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let relay = Relay::new(pool.clone(), tables.clone(), recorder.clone())
            .batch(5)
            .poll_interval(Duration::from_millis(20))
            .listen_notify(); // asks for LISTEN: behind the pooler it must poll instead
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move { relay.run(stop).await }));
    }
    let watcher = Relay::new(pool.clone(), tables.clone(), Recorder::default());
    tokio::time::timeout(Duration::from_secs(60), async {
        while watcher.undispatched().await.unwrap() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the relays dispatched every row (hang guard)");
    stop.cancel();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let log = recorder.log.lock().unwrap().clone();
    let mut per_id: HashMap<&str, u32> = HashMap::new();
    for (id, _, _) in &log {
        *per_id.entry(id).or_default() += 1;
    }
    assert_eq!(
        *recorder.overlaps.lock().unwrap(),
        0,
        "published by two relays at once"
    );
    assert_eq!(
        per_id.keys().map(|k| k.to_string()).collect::<HashSet<_>>(),
        ids
    );
    assert!(
        per_id.values().all(|&n| n == 1),
        "a row was published twice: {per_id:?}"
    );
    let mut last: HashMap<&str, i64> = HashMap::new();
    for (_, entity, seq) in &log {
        assert!(
            *seq > last.insert(entity, *seq).unwrap_or(i64::MIN),
            "order broken for {entity}"
        );
    }
}
