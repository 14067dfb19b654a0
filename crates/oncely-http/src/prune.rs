//! Retention: expired keys deleted in bounded batches, one short statement each.

use oncely_core::Result;
use oncely_sql::sqlx::Pool;
use oncely_sql::{AnyPool, SqlDatabase, Tables, Value, db, is_missing_table, now_ms, with_pool};

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
    with_pool!(pool, p => delete_batch(p, &table, batch).await)
}

async fn delete_batch<DB: SqlDatabase>(pool: &Pool<DB>, table: &str, batch: u32) -> Result<u64> {
    let d = DB::DIALECT;
    let condition = format!("expires_at <= {}", d.param(1));
    let sql = d.delete_batch(table, "scope, idem_key", &condition, &d.param(2));
    let args = [Value::I64(now_ms()), Value::I64(i64::from(batch.max(1)))];
    let mut conn = pool
        .acquire()
        .await
        .map_err(|e| db("pruning http keys", e))?;
    match DB::execute(&mut conn, &sql, &args).await {
        Ok(done) => Ok(done.rows),
        Err(e) if is_missing_table(&e) => Ok(0),
        Err(e) => Err(db("pruning http keys", e)),
    }
}
