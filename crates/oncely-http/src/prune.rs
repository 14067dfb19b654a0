//! Retention: expired keys deleted in bounded batches, one short statement each.

use oncely_core::Result;
use oncely_sql::clock::now_ms;
use oncely_sql::error::is_missing_table;
use oncely_sql::{AnyPool, Tables, Value};

/// Deletes up to `batch` key rows whose TTL has passed and returns how many; call it until it
/// returns 0 (`oncely prune` does). Keys not expired are never deleted; an expired key that
/// is not deleted yet is free anyway (the layer replaces it). Without the table (the `http`
/// migrations never ran) there is nothing to delete: 0.
///
/// ```no_run
/// # async fn f(store: oncely_sql::AnyStore) -> oncely_core::Result<()> {
/// while oncely_http::prune_expired(&store.pool(), store.tables(), 5_000).await? > 0 {}
/// # Ok(()) }
/// ```
pub async fn prune_expired(pool: &AnyPool, tables: &Tables, batch: u32) -> Result<u64> {
    let table = tables.table("http_keys");
    let mut tx = pool.begin().await?;
    let d = tx.dialect();
    let condition = format!("expires_at <= {}", d.param(1));
    let sql = d.delete_batch(&table, "scope, idem_key", &condition, &d.param(2));
    let args = [Value::I64(now_ms()), Value::I64(i64::from(batch.max(1)))];
    match tx.execute(&sql, &args).await {
        Ok(done) => {
            tx.commit().await?;
            Ok(done.rows)
        }
        Err(e) if is_missing_table(&e) => {
            tx.rollback().await?;
            Ok(0)
        }
        Err(e) => Err(e),
    }
}
