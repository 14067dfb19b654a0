//! Order status with versions: status updates arrive reordered and duplicated; each carries the
//! order's version. `apply_if_newer` applies an update only if its version is newer than the
//! stored one, so every order ends at its latest status whatever the arrival order.
//!
//! Run: `cargo run -p oncely-examples --example order_status` (SQLite in a temp dir; exits
//! non-zero if any order ends anywhere but its last status).

use oncely::effects::{MIGRATIONS, apply_if_newer};
use oncely::sql::INBOX;
use oncely::{
    AnyStore, AnyTx, Column, Consumer, Envelope, Error, Handled, Handler, MemorySource,
    RawEnvelope, Store,
};

const STATUSES: [&str; 4] = ["created", "paid", "shipped", "delivered"];

struct OrderStatus;

impl Handler<AnyTx> for OrderStatus {
    async fn handle(&self, tx: &mut AnyTx, msg: &Envelope) -> Result<Handled, Error> {
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
        let seen = apply_if_newer(tx, "order", &order, version).await?;
        if seen.is_applied() {
            // An absolute write keyed by the natural id (not "advance the status by one").
            let upsert = format!(
                "INSERT INTO orders (id, status, version) VALUES ($1, $2, $3) {}",
                tx.dialect()
                    .on_conflict_update("id", &["status", "version"])
            );
            let args = [order.into(), status.into(), version.into()];
            tx.execute(&upsert, &args).await?;
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
    let url = format!("sqlite:{}", dir.path().join("orders.db").display());
    let store = AnyStore::connect(&url).await?; // postgres:// or mysql:// work the same
    store.migrate_with(&[&INBOX, &MIGRATIONS]).await?;
    let mut tx = store.begin().await?;
    tx.script(
        "CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY, status VARCHAR(16) NOT NULL, version BIGINT NOT NULL)",
    )
    .await?;
    store.commit(tx).await?;

    // What a broker does under redelivery: every update arrives, some twice, and the orders'
    // updates out of order (newest first for every other order).
    let source = MemorySource::new();
    let orders = 6;
    for o in 0..orders {
        let mut versions: Vec<usize> = (0..STATUSES.len()).collect();
        if o % 2 == 1 {
            versions.reverse();
        }
        for v in versions {
            let mut raw = RawEnvelope::new(format!("order-{o}-v{}", v + 1), STATUSES[v]);
            raw.meta.entity_key = Some(format!("order-{o}"));
            raw.meta.version = Some(v as i64 + 1);
            if v % 2 == 0 {
                source.publish(raw.clone()); // delivered twice
            }
            source.publish(raw);
        }
    }
    source.close();

    let consumer = Consumer::new("order-status", store.clone(), OrderStatus).concurrency(1);
    let stats = consumer.run_until_signal(source.clone()).await?;
    println!(
        "deliveries {}: applied {}, stale {}, duplicates {}",
        stats.received, stats.applied, stats.stale, stats.duplicates
    );

    // Check from the database, against what was published.
    let mut tx = store.begin().await?;
    let cols = [Column::Text, Column::Text, Column::I64];
    let rows = tx
        .fetch(
            "SELECT id, status, version FROM orders ORDER BY id",
            &[],
            &cols,
        )
        .await?;
    store.rollback(tx).await?;
    assert_eq!(rows.len(), orders, "every order has a row");
    for row in &rows {
        let (id, status, version) = (row[0].text(), row[1].text(), row[2].i64());
        println!("{id}: {status} (v{version})");
        assert_eq!(status, "delivered", "{id} must end at its latest status");
        assert_eq!(version, 4);
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
