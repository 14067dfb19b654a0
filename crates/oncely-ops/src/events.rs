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
use oncely_sql::Column;
use oncely_sql::clock::now_ms;

/// The qualified name of the operations journal (`{schema}.{prefix}ops_events`).
///
/// ```
/// let t = oncely_sql::Tables::default().with_prefix("app_").unwrap();
/// assert_eq!(oncely_ops::events::table(&t), "app_ops_events");
/// ```
pub fn table(tables: &oncely_sql::Tables) -> String {
    tables.table("ops_events")
}

/// Creates `{prefix}ops_events` if it does not exist.
pub async fn ensure(ops: &Ops) -> Result<()> {
    let t = table(ops.tables());
    let d = ops.dialect();
    let ddl = format!(
        "CREATE TABLE IF NOT EXISTS {t} (id {}, kind {} NOT NULL, at BIGINT NOT NULL, cutoff BIGINT, \
         detail TEXT NOT NULL){}",
        d.serial_key(),
        d.key_text(32),
        d.table_options()
    );
    let mut tx = ops.begin().await?;
    tx.script(&ddl).await?;
    tx.commit().await
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
        "INSERT INTO {} (kind, at, cutoff, detail) VALUES ($1, $2, $3, $4)",
        table(ops.tables())
    );
    let args = [
        kind.into(),
        now_ms().into(),
        cutoff_ms.into(),
        detail.to_string().into(),
    ];
    let mut tx = ops.begin().await?;
    tx.execute(&sql, &args).await?;
    tx.commit().await
}

/// The highest cutoff any prune run has used (unix ms), or `None` if no prune ever ran.
/// Inbox rows received before it may have been deleted.
pub async fn prune_watermark(ops: &Ops) -> Result<Option<i64>> {
    ensure(ops).await?;
    let sql = format!(
        "SELECT MAX(cutoff) FROM {} WHERE kind = 'prune'",
        table(ops.tables())
    );
    let mut tx = ops.begin().await?;
    let mark = tx.fetch_i64(&sql, &[]).await?;
    tx.commit().await?;
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
    ensure(ops).await?;
    let sql = format!(
        "SELECT id, kind, at, cutoff, detail FROM {} WHERE id < $1 ORDER BY id DESC LIMIT {limit}",
        table(ops.tables()),
    );
    let cols = [
        Column::I64,
        Column::Text,
        Column::I64,
        Column::OptI64,
        Column::Text,
    ];
    let mut tx = ops.begin().await?;
    let rows = tx
        .fetch(&sql, &[before_id.unwrap_or(i64::MAX).into()], &cols)
        .await?;
    tx.commit().await?;
    Ok(rows
        .iter()
        .map(|r| Event {
            id: r[0].i64(),
            kind: r[1].text(),
            at: r[2].i64(),
            cutoff: r[3].opt_i64(),
            detail: r[4].text(),
        })
        .collect())
}
