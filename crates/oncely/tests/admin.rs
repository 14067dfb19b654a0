//! `oncely::cli::Admin`: `dlq replay` runs a handler the caller registered, the effect lands
//! once in the database however often the dead letter is replayed, and a replay without a
//! registered handler says which names there are.

use oncely::cli::Admin;
use oncely::{AnyStore, AnyTx, ConsumerName, DeadLetter, DeadLetterReason};
use oncely::{Envelope, Error, Handled, Handler, Inspect, RawEnvelope, Store};

/// The test's own handler: one row per message in `orders`.
#[derive(Clone)]
struct Orders;

impl Handler<AnyTx> for Orders {
    async fn handle(&self, tx: &mut AnyTx, msg: &Envelope) -> Result<Handled, Error> {
        let amount: i64 = std::str::from_utf8(msg.payload())
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| Error::permanent("payload is not an amount"))?;
        tx.execute(
            "INSERT INTO orders (id, amount) VALUES ($1, $2)",
            &[msg.id().as_str().into(), amount.into()],
        )
        .await?;
        Ok(Handled::Applied)
    }
}

async fn setup() -> (tempfile::TempDir, String, AnyStore) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("admin.db").display());
    let store = AnyStore::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let mut tx = store.begin().await.unwrap();
    tx.execute(
        "CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY, amount BIGINT NOT NULL)",
        &[],
    )
    .await
    .unwrap();
    store.commit(tx).await.unwrap();
    (dir, url, store)
}

async fn dead_letter(store: &AnyStore, reason: DeadLetterReason) {
    let letter = DeadLetter {
        consumer: ConsumerName::new("orders").unwrap(),
        message: RawEnvelope::new("order-1", "5"),
        reason,
        attempts: 1,
    };
    store.dead_letter(&letter).await.unwrap();
}

async fn orders(store: &AnyStore) -> (i64, i64) {
    let mut tx = store.begin().await.unwrap();
    let mut one = async |sql: &str| tx.fetch_i64(sql, &[]).await.unwrap().unwrap_or(0);
    let n = one("SELECT COUNT(*) FROM orders").await;
    let sum = one("SELECT COALESCE(SUM(amount), 0) FROM orders").await;
    store.commit(tx).await.unwrap();
    (n, sum)
}

async fn ids(store: &AnyStore) -> Vec<i64> {
    store
        .dead_letters(None)
        .await
        .unwrap()
        .iter()
        .map(|d| d.id)
        .collect()
}

#[tokio::test]
async fn replay_runs_the_registered_handler_once() {
    let (_dir, url, store) = setup().await;
    dead_letter(
        &store,
        DeadLetterReason::Permanent("orders was down".into()),
    )
    .await;
    let id = ids(&store).await[0].to_string();
    let admin = Admin::new().handler("orders", Orders);

    let replay = ["admin", "dlq", "replay", &id, "--database", &url, "--json"];
    assert!(admin.run_from(replay).await.unwrap());
    assert_eq!(orders(&store).await, (1, 5), "one effect");
    assert!(ids(&store).await.is_empty(), "the replayed row is gone");

    // Replaying it again: the row is gone, nothing runs.
    let again = admin.run_from(replay).await.unwrap_err().to_string();
    assert!(
        again.contains(&format!("no dead letter with id {id}")),
        "{again}"
    );
    // The same message dead-lettered again (another reason: another row), replayed with
    // --all: the inbox holds it, so it is resolved without running the handler.
    dead_letter(
        &store,
        DeadLetterReason::AttemptsExhausted {
            attempts: 3,
            last_error: "timeout".into(),
        },
    )
    .await;
    let all = [
        "admin",
        "dlq",
        "replay",
        "--all",
        "--database",
        &url,
        "--json",
    ];
    assert!(admin.run_from(all).await.unwrap());
    assert_eq!(orders(&store).await, (1, 5), "still one effect");
    assert!(ids(&store).await.is_empty());
}

#[tokio::test]
async fn replay_without_a_registered_handler_names_the_registered_ones() {
    let (_dir, url, store) = setup().await;
    dead_letter(&store, DeadLetterReason::Permanent("down".into())).await;
    let id = ids(&store).await[0].to_string();
    let replay = ["admin", "dlq", "replay", &id, "--database", &url];

    let none = Admin::new().run_from(replay).await.unwrap_err().to_string();
    assert!(none.contains("no handler is registered"), "{none}");

    let two = Admin::new()
        .handler("orders", Orders)
        .handler("refunds", Orders);
    let which = two.run_from(replay).await.unwrap_err().to_string();
    assert!(which.contains("registered: orders, refunds"), "{which}");
    let unknown = [
        "admin",
        "dlq",
        "replay",
        &id,
        "--handler",
        "invoices",
        "--database",
        &url,
    ];
    let unknown = two.run_from(unknown).await.unwrap_err().to_string();
    assert!(
        unknown.contains("no handler \"invoices\"") && unknown.contains("orders, refunds"),
        "{unknown}"
    );
    assert_eq!(orders(&store).await, (0, 0), "nothing ran");
    assert_eq!(ids(&store).await.len(), 1, "the row is kept");
}
