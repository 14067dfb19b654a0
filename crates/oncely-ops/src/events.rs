//! The operations journal `{prefix}ops_events`: what operators did to the tables, kept in
//! the database so that later commands can see it.
//!
//! - `prune` rows carry the cutoff of a prune run (written *before* the first delete, so a
//!   crashed run is still recorded). [`prune_watermark`] is the highest cutoff: any claim
//!   received before it may be gone, so a dead letter first seen before it must not be
//!   replayed blindly ([`crate::replay`]).
//! - `dlq_*` rows record how a dead letter was resolved (kept the stored effect, already
//!   applied, replayed), with the row's consumer, id, hashes and reason as JSON.
//!
//! The table is created on first use (`CREATE TABLE IF NOT EXISTS`), like the SQLite lease
//! table of [`crate::lock`].

use crate::db::Ops;
use oncely_core::Result;
use oncely_sql::sqlx::{self, AssertSqlSafe};
use oncely_sql::with_autocommit;
use oncely_sql::{db, now_ms, with_pool};

/// Creates `{prefix}ops_events` if it does not exist.
pub async fn ensure(ops: &Ops) -> Result<()> {
    let t = ops.tables().ops_events();
    let d = ops.dialect();
    let ddl = format!(
        "CREATE TABLE IF NOT EXISTS {t} (id {}, kind {} NOT NULL, at BIGINT NOT NULL, cutoff BIGINT, \
         detail TEXT NOT NULL){}",
        d.serial_key(),
        d.key_text(32),
        d.table_options()
    );
    with_pool!(ops.pool(), p => sqlx::raw_sql(AssertSqlSafe(ddl)).execute(p).await
        .map(drop)
        .map_err(|e| db("creating the operations journal", e))?);
    Ok(())
}

/// Appends one event of `kind` (`prune`, `dlq_keep_stored`, …) with an optional cutoff (unix
/// ms) and a JSON detail.
pub async fn record(
    ops: &Ops,
    kind: &str,
    cutoff_ms: Option<i64>,
    detail: &serde_json::Value,
) -> Result<()> {
    ensure(ops).await?;
    let sql = format!(
        "INSERT INTO {} (kind, at, cutoff, detail) VALUES ({}, {}, {}, {})",
        ops.tables().ops_events(),
        ops.dialect().param(1),
        ops.dialect().param(2),
        ops.dialect().param(3),
        ops.dialect().param(4)
    );
    with_autocommit!(ops.pool(), c => oncely_sql::query(AssertSqlSafe(sql))
        .bind(kind.to_owned())
        .bind(now_ms())
        .bind(cutoff_ms)
        .bind(detail.to_string())
        .execute(&mut *c)
        .await
        .map(drop)
        .map_err(|e| db("recording an operations event", e))?)?;
    Ok(())
}

/// The highest cutoff any prune run has used (unix ms), or `None` if no prune ever ran.
/// Inbox rows received before it may have been deleted.
pub async fn prune_watermark(ops: &Ops) -> Result<Option<i64>> {
    ensure(ops).await?;
    let sql = format!(
        "SELECT MAX(cutoff) FROM {} WHERE kind = 'prune'",
        ops.tables().ops_events()
    );
    let mark: Option<i64> = with_autocommit!(ops.pool(), c => oncely_sql::query_scalar(AssertSqlSafe(sql))
        .fetch_one(&mut *c)
        .await
        .map_err(|e| db("reading the prune watermark", e))?)?;
    Ok(mark)
}

/// One row of the operations journal.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Event {
    /// Row id.
    pub id: i64,
    /// `prune`, `dlq_replayed`, `dlq_keep_stored`, `console_replay`, …
    pub kind: String,
    /// When (unix ms).
    pub at: i64,
    /// The prune cutoff (unix ms), for `prune` rows.
    pub cutoff: Option<i64>,
    /// The JSON detail, as stored.
    pub detail: String,
}

/// The newest `limit` events with an id below `before_id` (all when `None`), newest first;
/// a keyset page on the journal's primary key.
pub async fn list(ops: &Ops, before_id: Option<i64>, limit: u32) -> Result<Vec<Event>> {
    use oncely_sql::sqlx::Row;
    ensure(ops).await?;
    let d = ops.dialect();
    let sql = format!(
        "SELECT id, {} AS kind, at, cutoff, detail FROM {} WHERE id < {} ORDER BY id DESC LIMIT {limit}",
        d.text("kind"),
        ops.tables().ops_events(),
        d.param(1)
    );
    with_autocommit!(ops.pool(), c => {
        let rows = oncely_sql::query(AssertSqlSafe(sql))
            .bind(before_id.unwrap_or(i64::MAX))
            .fetch_all(&mut *c)
            .await
            .map_err(|e| db("reading the operations journal", e))?;
        rows.iter()
            .map(|r| {
                Ok(Event {
                    id: r.try_get("id")?,
                    kind: r.try_get("kind")?,
                    at: r.try_get("at")?,
                    cutoff: r.try_get("cutoff")?,
                    detail: r.try_get("detail")?,
                })
            })
            .collect::<std::result::Result<Vec<_>, sqlx::Error>>()
            .map_err(|e| db("decoding the operations journal", e))
    })?
}
