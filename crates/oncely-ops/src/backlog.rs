//! Work oncely-effects has not finished yet: outbox rows not dispatched, and effect-journal
//! rows still `pending`, per consumer. Both tables exist only where oncely-effects is
//! installed; without them the answer says so (`None`), it is not an error.

use crate::db::{Ops, doing, unless_missing};
use oncely_core::{ConsumerName, MessageId, Result};
use oncely_effects::EffectTables;
use oncely_sql::{Column, SqlTx};

/// Outbox rows not dispatched yet, for one destination.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OutboxBacklog {
    /// Destination (topic, queue, …).
    pub destination: String,
    /// Rows written and not dispatched.
    pub rows: i64,
    /// `created_at` of the oldest of them (unix ms).
    pub oldest_ms: i64,
}

/// Effect-journal rows in state `pending` of one consumer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct JournalPending {
    /// The consumer, or `None` when the keys name none known here (a consumer with no inbox
    /// rows or dead letters in this store).
    pub consumer: Option<String>,
    /// The consumer part of the keys (`<consumer>` or `h-<hash>`).
    pub key_part: String,
    /// Pending rows.
    pub rows: i64,
    /// `updated_at` of the oldest of them (unix ms).
    pub oldest_ms: i64,
}

/// The outbox and journal backlog; a `None` field: that table is not installed.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Backlog {
    /// Undispatched outbox rows by destination (the outbox has no consumer column).
    pub outbox: Option<Vec<OutboxBacklog>>,
    /// Pending journal rows by consumer.
    pub journal_pending: Option<Vec<JournalPending>>,
}

/// Reads the backlog; `consumers` (e.g. from [`crate::stats::stats`]) names the journal's
/// key parts.
pub async fn backlog(ops: &Ops, consumers: &[String]) -> Result<Backlog> {
    Ok(Backlog {
        outbox: outbox(ops).await?,
        journal_pending: journal(ops, consumers).await?,
    })
}

async fn outbox(ops: &Ops) -> Result<Option<Vec<OutboxBacklog>>> {
    let d = ops.dialect();
    let sql = format!(
        "SELECT {dest} AS destination, {n} AS n, {oldest} AS oldest FROM {} \
         WHERE dispatched_at IS NULL GROUP BY destination ORDER BY n DESC",
        ops.tables().outbox(),
        dest = d.text("destination"),
        n = d.cast_i64("COUNT(*)"),
        oldest = d.cast_i64("MIN(created_at)"),
    );
    let rows = ops
        .autocommit()
        .fetch(&sql, &[], &[Column::Text, Column::I64, Column::I64])
        .await
        .map_err(doing("reading the outbox backlog"));
    Ok(unless_missing(rows)?.map(|rows| {
        rows.iter()
            .map(|r| OutboxBacklog {
                destination: r[0].text(),
                rows: r[1].i64(),
                oldest_ms: r[2].i64(),
            })
            .collect()
    }))
}

/// The consumer part oncely-effects writes at the start of `consumer`'s keys.
fn key_part(consumer: &str) -> Option<String> {
    let name = ConsumerName::new(consumer).ok()?;
    let id = MessageId::new("x").ok()?;
    let prefix = oncely_effects::effect_key_prefix(&name, &id);
    prefix.split(':').next().map(str::to_owned)
}

async fn journal(ops: &Ops, consumers: &[String]) -> Result<Option<Vec<JournalPending>>> {
    let d = ops.dialect();
    // No key part contains ':', so the text before the first one is the consumer's part.
    let part = format!(
        "SUBSTR(effect_key, 1, {} - 1)",
        d.position("effect_key", "':'")
    );
    let sql = format!(
        "SELECT {part} AS part, {n} AS n, {oldest} AS oldest FROM {} \
         WHERE state = 'pending' GROUP BY part ORDER BY n DESC",
        ops.tables().effect_journal(),
        part = d.text(&part),
        n = d.cast_i64("COUNT(*)"),
        oldest = d.cast_i64("MIN(updated_at)"),
    );
    let rows = ops
        .autocommit()
        .fetch(&sql, &[], &[Column::Text, Column::I64, Column::I64])
        .await
        .map_err(doing("reading the journal backlog"));
    let Some(rows) = unless_missing(rows)? else {
        return Ok(None);
    };
    let names: Vec<(String, &String)> = consumers
        .iter()
        .filter_map(|c| Some((key_part(c)?, c)))
        .collect();
    Ok(Some(
        rows.into_iter()
            .map(|r| {
                let part = r[0].text();
                JournalPending {
                    consumer: names
                        .iter()
                        .find(|(p, _)| *p == part)
                        .map(|(_, c)| (*c).clone()),
                    key_part: part,
                    rows: r[1].i64(),
                    oldest_ms: r[2].i64(),
                }
            })
            .collect(),
    ))
}
