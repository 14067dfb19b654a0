//! Order status with versions: status updates arrive reordered and duplicated; each carries the
//! order's version. `apply_if_newer` applies an update only if its version is newer than the
//! stored one, so every order ends at its latest status whatever the arrival order.
//!
//! Run: `cargo run -p oncely-examples --example order_status` (SQLite in a temp dir; exits
//! non-zero if any order ends anywhere but its last status).

use oncely_core::{Consumer, ConsumerName, Envelope, Error, Handled, Handler, RawEnvelope};
use oncely_sql::SqliteStore;
use oncely_testkit::{FaultySource, SourceFaults};
use sqlx::{Sqlite, Transaction};
use tokio_util::sync::CancellationToken;

const STATUSES: [&str; 4] = ["created", "paid", "shipped", "delivered"];

struct OrderStatus;

impl Handler<Transaction<'static, Sqlite>> for OrderStatus {
    async fn handle(
        &self,
        tx: &mut Transaction<'static, Sqlite>,
        msg: &Envelope,
    ) -> Result<Handled, Error> {
        let order = msg
            .meta()
            .entity_key
            .clone()
            .ok_or_else(|| Error::permanent("no order id"))?;
        let version = msg
            .meta()
            .version
            .ok_or_else(|| Error::permanent("no version"))?;
        let status = std::str::from_utf8(msg.payload()).map_err(Error::permanent)?;
        // One atomic statement: record `version` for this order only if it is newer.
        let seen = oncely_effects::apply_if_newer(tx, "order", &order, version).await?;
        if seen.is_applied() {
            // An absolute write keyed by the natural id (not "advance the status by one").
            sqlx::query(
                "INSERT INTO orders (id, status, version) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (id) DO UPDATE SET status = excluded.status, version = excluded.version",
            )
            .bind(&order)
            .bind(status)
            .bind(version)
            .execute(&mut **tx)
            .await
            .map_err(Error::transient)?;
        }
        Ok(seen.handled()) // Stale → acked, nothing written
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    run().await
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::connect(&format!(
        "sqlite:{}",
        dir.path().join("orders.db").display()
    ))
    .await?;
    store.migrate().await?;
    oncely_effects::migrate(store.pool(), store.tables()).await?;
    sqlx::query(
        "CREATE TABLE orders (id TEXT PRIMARY KEY, status TEXT NOT NULL, version INTEGER NOT NULL)",
    )
    .execute(store.pool())
    .await?;

    // A broker that reorders within a window of 12 and duplicates 30% of messages.
    let source = FaultySource::new(SourceFaults {
        seed: 42,
        duplicate_rate: 0.3,
        reorder_window: 12,
        lost_ack_rate: 0.05,
    });
    let orders = 6;
    for o in 0..orders {
        for (v, status) in STATUSES.iter().enumerate() {
            let mut raw = RawEnvelope::new(format!("order-{o}-v{}", v + 1), *status);
            raw.meta.entity_key = Some(format!("order-{o}"));
            raw.meta.version = Some(v as i64 + 1);
            source.publish(raw);
        }
    }
    source.close();

    let consumer = Consumer::new(
        ConsumerName::new("order-status")?,
        store.clone(),
        OrderStatus,
    )
    .concurrency(1);
    let stats = consumer
        .run(source.clone(), CancellationToken::new())
        .await?;
    println!(
        "deliveries {}: applied {}, stale {}, duplicates {}",
        stats.received, stats.applied, stats.stale, stats.duplicates
    );

    // Check from the database, against what was published.
    let rows: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT id, status, version FROM orders ORDER BY id")
            .fetch_all(store.pool())
            .await?;
    assert_eq!(rows.len(), orders, "every order has a row");
    for (id, status, version) in &rows {
        println!("{id}: {status} (v{version})");
        assert_eq!(status, "delivered", "{id} must end at its latest status");
        assert_eq!(*version, 4);
    }
    assert!(
        stats.stale > 0,
        "the reordering delivered some old versions late: {stats:?}"
    );
    assert_eq!(
        stats.applied + stats.stale,
        (orders * STATUSES.len()) as u64,
        "each update applied or stale once"
    );
    println!(
        "ok: every order is delivered despite {} stale (late) updates",
        stats.stale
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
