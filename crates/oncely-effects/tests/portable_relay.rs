//! Portable mode (issue 16): the relay dispatches by polling only. `listen_notify()` is a
//! no-op (no LISTEN session), `Outbox::enqueue` sends no NOTIFY, and every row is still
//! published exactly once. Forced at connect (`ConnectOptions::portable`), whose engine the
//! outbox and the relay read from the pool and transactions they are given.

mod support;

use oncely_effects::EffectTables;
use oncely_effects::{OutboxMessage, Publisher, Relay, outbox_rows};
use oncely_sql::{AnyPool, Tables};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Records every published id.
#[derive(Default, Clone)]
struct Recorder(Arc<Mutex<Vec<String>>>);

impl Publisher for Recorder {
    async fn publish(&self, m: &OutboxMessage) -> oncely_core::Result<()> {
        self.0.lock().unwrap().push(m.id.to_string());
        Ok(())
    }
}

const ROWS: usize = 50;

/// Enqueues `ROWS` rows with portable tables and runs a polling relay until all are out;
/// returns how many each id was published.
async fn dispatch_by_polling(pool: &AnyPool, tables: &Tables) -> HashMap<String, u32> {
    assert!(pool.engine().portable(), "a portable pool");
    let outbox = oncely_effects::Outbox::new("test", tables.clone());
    let ids = support::enqueue_rows_in(pool, &outbox, ROWS, 5).await;
    assert_eq!(ids.len(), ROWS);
    let recorder = Recorder::default();
    let relay = Relay::new(pool.clone(), tables.clone(), recorder.clone())
        .batch(7)
        .poll_interval(Duration::from_millis(50));
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (relay, stop) = (relay.clone(), stop.clone());
        async move { relay.run(stop).await }
    });
    tokio::time::timeout(Duration::from_secs(60), async {
        while relay.undispatched().await.unwrap() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the polling relay dispatched every row (hang guard)");
    stop.cancel();
    let report = task.await.unwrap().unwrap();
    assert_eq!(report.dispatched, ROWS as u64, "{report:?}");
    let rows = outbox_rows(&mut pool.clone(), tables).await.unwrap();
    assert_eq!(rows.len(), ROWS);
    assert!(rows.iter().all(|r| r.dispatched_at.is_some()));
    let mut per_id: HashMap<String, u32> = HashMap::new();
    for id in recorder.0.lock().unwrap().iter() {
        *per_id.entry(id.clone()).or_default() += 1;
    }
    assert_eq!(
        per_id
            .keys()
            .cloned()
            .collect::<std::collections::HashSet<_>>(),
        ids
    );
    per_id
}

/// The NOTIFY channel of an outbox table (as `oncely_effects` names it).
fn channel(tables: &Tables) -> String {
    let digest = Sha256::digest(tables.outbox().as_bytes());
    format!("oncely_outbox_{}", &hex::encode(digest)[..16])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_portable_relay_polls_without_notify() {
    let Some((store, db)) = support::postgres("portable_relay").await else {
        return;
    };
    let tables = store.tables().clone();
    let pool = store.pool().clone();
    let channel = channel(&tables);
    let mut listener = sqlx::postgres::PgListener::connect_with(&pool)
        .await
        .unwrap();
    listener.listen(&channel).await.unwrap();

    // listen_notify() is a no-op in portable mode: no relay session LISTENs on the channel;
    // without portable mode (the control) the relay's listener shows up beside ours.
    let listening = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'LISTEN%' AND position($1 in query) > 0",
        )
        .bind(&channel)
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    for (portable, expected) in [(true, 1), (false, 2)] {
        let relay_pool = match portable {
            true => support::portable_pool(&db).await,
            false => store.any_pool(),
        };
        let relay = Relay::new(relay_pool, tables.clone(), Recorder::default())
            .poll_interval(Duration::from_millis(50))
            .listen_notify();
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let stop = stop.clone();
            async move { relay.run(stop).await }
        });
        let mut seen = 0;
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            seen = listening().await;
            if seen >= 2 {
                break;
            }
        }
        assert_eq!(seen, expected, "sessions LISTENing (portable: {portable})");
        stop.cancel();
        task.await.unwrap().unwrap();
    }

    let per_id = dispatch_by_polling(&support::portable_pool(&db).await, &tables).await;
    assert!(
        per_id.values().all(|&n| n == 1),
        "each row published once: {per_id:?}"
    );
    // No NOTIFY was sent for the 50 portable enqueues...
    let heard = tokio::time::timeout(Duration::from_millis(500), listener.recv()).await;
    assert!(heard.is_err(), "portable enqueue sent a NOTIFY: {heard:?}");
    // ...while a non-portable enqueue on the same table notifies this very listener.
    support::enqueue_rows(&store.any_pool(), store.tables(), 1, 1).await;
    let heard = tokio::time::timeout(Duration::from_secs(10), listener.recv()).await;
    assert!(
        matches!(heard, Ok(Ok(_))),
        "control: NOTIFY is heard without portable mode"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_portable_relay_dispatches_every_row() {
    let Some((store, db)) = support::mysql("portable_relay").await else {
        return;
    };
    let tables = store.tables().clone();
    let per_id = dispatch_by_polling(&support::portable_pool(&db).await, &tables).await;
    assert!(
        per_id.values().all(|&n| n == 1),
        "each row published once: {per_id:?}"
    );
}
