//! PostgreSQL: a prune vacuums the inbox itself when autovacuum will not.
//!
//! A batched prune leaves its deleted rows as dead tuples until a vacuum removes them. With
//! autovacuum off (server-wide, or `autovacuum_enabled = false` on the inbox) nothing does:
//! the table and its indexes grow by every row ever claimed, and every claim probes past the
//! dead entries. So after a prune that deleted rows on such a server, it runs
//! `VACUUM (SKIP_LOCKED)` on the table it pruned and says so once per process at WARN.
//! With autovacuum on (the PostgreSQL default) it leaves vacuuming to autovacuum.

use crate::db::{Ops, doing};
use oncely_core::Result;
use oncely_sql::{Dialect, SqlTx};
use std::sync::atomic::{AtomicBool, Ordering};
use tracing::{info, warn};

/// Whether this process has already warned that it vacuums in autovacuum's place.
static WARNED: AtomicBool = AtomicBool::new(false);

/// Whether autovacuum is off for `table` (PostgreSQL; `false` elsewhere).
pub async fn autovacuum_off(ops: &Ops, table: &str) -> Result<bool> {
    if ops.dialect() != Dialect::Postgres {
        return Ok(false);
    }
    let sql = "SELECT COUNT(*) FROM pg_class c WHERE c.oid = to_regclass($1) AND \
               (current_setting('autovacuum') = 'off' OR EXISTS (SELECT 1 FROM \
               pg_options_to_table(c.reloptions) WHERE option_name = 'autovacuum_enabled' \
               AND option_value IN ('false', 'off', 'no', '0')))";
    let n = ops.autocommit().fetch_i64(sql, &[table.into()]).await;
    Ok(n.map_err(doing("reading the autovacuum setting"))?
        .unwrap_or(0)
        > 0)
}

/// Vacuums `table` after a prune deleted rows from it, when autovacuum is off for it.
/// Returns whether it vacuumed. A table another session holds a conflicting lock on is
/// skipped (the next prune tries again).
pub async fn after_prune(ops: &Ops, table: &str, deleted: u64) -> Result<bool> {
    if deleted == 0 || !autovacuum_off(ops, table).await? {
        return Ok(false);
    }
    if !WARNED.swap(true, Ordering::Relaxed) {
        warn!(
            table,
            "autovacuum is off for the inbox: prune vacuums it after deleting rows (turn \
             autovacuum on, or keep running prune, or dead rows will grow the inbox)"
        );
    }
    let vacuum = ops
        .autocommit()
        .script(&format!("VACUUM (SKIP_LOCKED) {table}"))
        .await;
    vacuum.map_err(doing("vacuuming the inbox after a prune"))?;
    info!(table, deleted, "inbox vacuumed after the prune");
    Ok(true)
}
