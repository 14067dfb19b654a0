//! Retention: delete dispatched outbox rows and resolved journal rows in bounded batches.

use crate::EffectTables;
use oncely_core::Result;
use oncely_sql::clock::now_ms;
use oncely_sql::{AnyPool, SqlTx, Tables};
use std::time::Duration;

async fn delete_batch(
    pool: &AnyPool,
    table: String,
    key: &str,
    condition: &str,
    older_than: Duration,
    batch: u32,
) -> Result<u64> {
    let d = pool.dialect();
    let (cutoff, limit) = (d.param(1), d.param(2));
    let sql = d.delete_batch(&table, key, &format!("{condition} <= {cutoff}"), &limit);
    let cutoff_ms = now_ms() - older_than.as_millis() as i64;
    let args = [cutoff_ms.into(), i64::from(batch.max(1)).into()];
    Ok(pool.clone().execute(&sql, &args).await?.rows)
}

/// Deletes up to `batch` outbox rows dispatched more than `older_than` ago and returns how
/// many; call it until it returns 0. Undispatched rows are never deleted.
pub async fn prune_outbox(
    pool: &AnyPool,
    tables: &Tables,
    older_than: Duration,
    batch: u32,
) -> Result<u64> {
    let condition = "dispatched_at IS NOT NULL AND dispatched_at";
    delete_batch(pool, tables.outbox(), "id", condition, older_than, batch).await
}

/// Deletes up to `batch` journal rows resolved (`done` or `failed`) more than `older_than` ago
/// and returns how many. Keep them at least as long as the message may be redelivered (the
/// inbox retention window): a redelivery that finds no row would call the provider again,
/// which is then safe only within the provider's own deduplication window. Pending rows are
/// never deleted.
pub async fn prune_journal(
    pool: &AnyPool,
    tables: &Tables,
    older_than: Duration,
    batch: u32,
) -> Result<u64> {
    let condition = "state <> 'pending' AND updated_at";
    let table = tables.effect_journal();
    delete_batch(pool, table, "effect_key", condition, older_than, batch).await
}
