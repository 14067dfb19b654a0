//! PostgreSQL's partitioned inbox: the claim keys of the days that are over, in one index.
//!
//! A batch claim on the [`partition`](crate::partition)ed inbox must look for each id in every
//! daily partition (no index spans them): at a week of ids that is eight index lookups per id,
//! most of them outside the shared buffers. [`seal`] makes the days before today *sealed*: a
//! trigger refuses any later insert into their partitions (SQLSTATE 40001, which a claim
//! retries into today's partition), so their rows are final, and their claim keys go into one
//! unlogged table. A claim then probes that table and the partitions from today on.
//!
//! The two key tables are unlogged: a daily rebuild of 10^7 keys writes no WAL, and a crash
//! or a failover empties them, after which claims probe every partition again until the next
//! [`seal`] (`oncely prune` runs it). The migration's SQL holds the details
//! (`migrations/postgres/partitioned_sealed.sql`).

use crate::db::{Ops, doing};
use crate::partition;
use crate::time::DAY_MS;
use oncely_core::Result;
use oncely_sql::{Column, SqlTx, claim_key_sql};
use tracing::{info, warn};

/// What one [`seal`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Sealed {
    /// The sealed bound (unix ms, the start of the database's current UTC day): the keys of
    /// every inbox row below it are in the sealed keys.
    pub below_ms: i64,
    /// The keys indexed.
    pub keys: u64,
}

/// The start (unix ms) of the database clock's current UTC day: `received_at` is the
/// database's clock, so the day that is over is the database's.
pub(crate) async fn db_today_ms(ops: &Ops) -> Result<i64> {
    let sql = "SELECT (extract(epoch from statement_timestamp()) * 1000)::bigint";
    let now = ops.autocommit().fetch_i64(sql, &[]).await;
    let now = now.map_err(doing("reading the database's clock"))?;
    Ok(now.unwrap_or_default().div_euclid(DAY_MS) * DAY_MS)
}

/// Whether the partitioned inbox has the sealed days' keys (the layout's migration 4).
pub(crate) async fn installed(ops: &Ops) -> Result<bool> {
    let sql = "SELECT COUNT(*) FROM pg_class WHERE oid = to_regclass($1)";
    let state = ops.tables().inbox_sealed_state();
    let n = ops.autocommit().fetch_i64(sql, &[state.into()]).await;
    Ok(n.map_err(doing("looking for the sealed days' keys"))?
        .unwrap_or(0)
        > 0)
}

/// The statement that withdraws the sealed days' keys from the claims (they probe every
/// partition until the next [`seal`] rebuilds them).
pub(crate) fn unpublish_sql(ops: &Ops) -> String {
    let state = ops.tables().inbox_sealed_state();
    format!("UPDATE {state} SET below = NULL, sealing = NULL WHERE one")
}

/// The name of the trigger that seals a partition.
fn seal_trigger(ops: &Ops) -> String {
    format!("{}inbox_sealed", ops.tables().prefix())
}

/// The statement that seals partition `name` (the trigger that refuses inserts into it).
fn seal_sql(ops: &Ops, name: &str) -> String {
    format!(
        "CREATE TRIGGER {} BEFORE INSERT ON {name} FOR EACH ROW EXECUTE FUNCTION {}()",
        seal_trigger(ops),
        ops.tables().table("inbox_sealed_refuse")
    )
}

/// The other key table's slot than `slot` (`"a"` or `"b"`).
fn other(slot: &str) -> &'static str {
    if slot == "a" { "b" } else { "a" }
}

/// Seals the daily partitions of the days before the database's today and rebuilds the sealed
/// days' claim keys, when the bound moved (a no-op otherwise: `Ok(None)`). Run it under the
/// pruner's lock, as `oncely prune` does: two builds at once would fill one table twice.
///
/// Each step that takes a lock waits at most 5 s for it (a long transaction makes this run
/// skip with a WARN, not queue the claims behind it); the next run tries again. Claims stay
/// exact meanwhile: without a current build they probe more partitions, not fewer.
///
/// ```no_run
/// # async fn f(ops: &oncely_ops::Ops) -> oncely_core::Result<()> {
/// if let Some(sealed) = oncely_ops::sealed::seal(ops).await? {
///     println!("{} keys below {}", sealed.keys, sealed.below_ms);
/// }
/// # Ok(()) }
/// ```
pub async fn seal(ops: &Ops) -> Result<Option<Sealed>> {
    if !installed(ops).await? {
        warn!(
            "the partitioned inbox lacks the sealed days' keys (the layout's migration 4): \
             upgrade it with `oncely partition install` or `oncely migrate --with partitioned`"
        );
        return Ok(None);
    }
    let tables = ops.tables();
    let state = tables.inbox_sealed_state();
    let below = db_today_ms(ops).await?;
    let mut pool = ops.autocommit();
    let current = pool
        .fetch(
            &format!("SELECT active::text, below FROM {state} WHERE one"),
            &[],
            &[Column::Text, Column::OptI64],
        )
        .await
        .map_err(doing("reading the sealed state"))?;
    let (active, built) = current
        .first()
        .map_or((None, None), |row| (Some(row[0].text()), row[1].opt_i64()));
    if built == Some(below) {
        return Ok(None);
    }
    // The other table than the one claims probe now.
    let next = match (built, active.as_deref()) {
        (Some(_), Some(active)) => other(active),
        _ => "a",
    };
    pool.execute(
        &format!(
            "INSERT INTO {state} (one, sealing) VALUES (true, $1) \
             ON CONFLICT (one) DO UPDATE SET sealing = EXCLUDED.sealing"
        ),
        &[below.into()],
    )
    .await
    .map_err(doing("recording the sealing bound"))?;
    // Sealed partitions and the default one's writers waited for: the rows below the bound
    // are final once these commit.
    let mut locks: Vec<String> = unsealed(ops, below)
        .await?
        .iter()
        .map(|name| seal_sql(ops, name))
        .collect();
    locks.push(format!(
        "LOCK TABLE {} IN SHARE ROW EXCLUSIVE MODE",
        tables.inbox_default()
    ));
    let table = tables.inbox_sealed_keys(next);
    for step in [locks.join("; "), format!("TRUNCATE {table}")] {
        if !locked_step(ops, &step, "seal the inbox's past days").await? {
            return Ok(None);
        }
    }
    let key = claim_key_sql("consumer", "message_id");
    let keys = pool
        .execute(
            &format!(
                "INSERT INTO {table} SELECT {key} FROM {} WHERE received_at < $1 ORDER BY 1",
                tables.inbox()
            ),
            &[below.into()],
        )
        .await
        .map_err(doing("indexing the sealed days' claim keys"))?
        .rows;
    pool.script(&format!("ANALYZE {table}"))
        .await
        .map_err(doing("analyzing the sealed days' claim keys"))?;
    // Not if a partition of a past day was created meanwhile (it withdrew the bound).
    let published = pool
        .execute(
            &format!("UPDATE {state} SET active = '{next}', below = $1 WHERE one AND sealing = $1"),
            &[below.into()],
        )
        .await
        .map_err(doing("publishing the sealed days' claim keys"))?;
    if published.rows == 0 {
        warn!("a partition of a past day was created while sealing; will seal again next run");
        return Ok(None);
    }
    // The previous build, no longer probed, emptied now if the claims in flight let it be
    // (else by the next build).
    let previous = tables.inbox_sealed_keys(other(next));
    locked_step(
        ops,
        &format!("TRUNCATE {previous}"),
        "empty the previous build",
    )
    .await?;
    info!(below_ms = below, keys, "sealed the inbox's past days");
    Ok(Some(Sealed {
        below_ms: below,
        keys,
    }))
}

/// Undoes [`seal`]: claims probe every partition again, and the days that are over take rows
/// again (to copy an older inbox's ids into the layout, say); the next [`seal`] (the next
/// `oncely prune`) seals them and indexes their keys again, the copied ones included.
pub async fn unseal(ops: &Ops) -> Result<()> {
    if !installed(ops).await? {
        return Ok(());
    }
    // Withdrawn from the claims first, so that no claim relies on a seal this removes.
    let withdrawn = ops.autocommit().execute(&unpublish_sql(ops), &[]).await;
    withdrawn.map_err(doing("withdrawing the sealed days' keys"))?;
    let trigger = seal_trigger(ops);
    for p in partition::list(ops).await? {
        let sql = format!(
            "SET LOCAL lock_timeout = '5s'; DROP TRIGGER IF EXISTS {trigger} ON {}",
            p.name
        );
        let mut tx = ops.begin().await?;
        tx.script(&sql)
            .await
            .map_err(doing("unsealing a partition"))?;
        tx.commit().await?;
    }
    Ok(())
}

/// The daily partitions that end at or before `below` and are not sealed yet.
async fn unsealed(ops: &Ops, below: i64) -> Result<Vec<String>> {
    let sql = "SELECT COUNT(*) FROM pg_trigger WHERE tgrelid = to_regclass($1) AND tgname = $2";
    let trigger = seal_trigger(ops);
    let mut unsealed = Vec::new();
    for p in partition::list(ops).await? {
        if p.to_ms > below {
            break;
        }
        let args = [p.name.clone().into(), trigger.clone().into()];
        let n = ops.autocommit().fetch_i64(sql, &args).await;
        if n.map_err(doing("looking for sealed partitions"))?
            .unwrap_or(0)
            == 0
        {
            unsealed.push(p.name);
        }
    }
    Ok(unsealed)
}

/// Runs `sql` in a transaction that waits at most 5 s for its locks. `false` (with a WARN that
/// it could not `what` now) when it waited too long: the caller skips the rest of this run.
async fn locked_step(ops: &Ops, sql: &str, what: &str) -> Result<bool> {
    let mut tx = ops.begin().await?;
    match tx
        .script(&format!("SET LOCAL lock_timeout = '5s'; {sql}"))
        .await
    {
        Ok(()) => {
            tx.commit().await?;
            Ok(true)
        }
        Err(e) if e.is_transient() => {
            warn!(error = %e, "could not {what} now; will retry next run");
            // Rolled back; the error that made it wait too long is reported above.
            let _ = tx.rollback().await;
            Ok(false)
        }
        Err(e) => Err(doing(what)(e)),
    }
}
