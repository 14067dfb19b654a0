//! Where one message id is: claimed by which consumers and when, dead letters, and — when
//! oncely-effects' tables exist — effect-journal and outbox rows.

use crate::db::{Ops, doing, unless_missing};
use crate::dlq::{self, serialize_rows};
use oncely_core::{ConsumerName, MessageId};
use oncely_core::{Result, StoredDeadLetter};
use oncely_effects::EffectTables;
use oncely_sql::{Column, SqlTx, Value};

/// One inbox row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Claimed {
    /// Consumer that processed the id.
    pub consumer: String,
    /// SHA-256 of the payload it applied.
    pub payload_hash: String,
    /// When (unix ms).
    pub received_at: i64,
}

/// One effect-journal row (oncely-effects).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct JournalRow {
    /// The effect key (`{consumer}:{id}:{effect}`).
    pub effect_key: String,
    /// Effect kind.
    pub kind: String,
    /// `pending`, `done` or `failed`.
    pub state: String,
    /// Last update (unix ms).
    pub updated_at: i64,
}

/// One outbox row (oncely-effects) whose outgoing id is the inspected id.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OutboxRow {
    /// Row id.
    pub id: i64,
    /// Destination.
    pub destination: String,
    /// When it was written (unix ms).
    pub created_at: i64,
    /// When it was dispatched, if it was.
    pub dispatched_at: Option<i64>,
}

/// Everything known about one message id.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Inspection {
    /// The id.
    pub message_id: String,
    /// Inbox rows (one per consumer that processed it).
    pub claimed: Vec<Claimed>,
    /// Dead letters with this id (printed as [`dlq::DeadLetterJson`]).
    #[serde(serialize_with = "serialize_rows")]
    pub dead_letters: Vec<StoredDeadLetter>,
    /// Effect-journal rows; `None` when the journal table does not exist.
    pub effect_journal: Option<Vec<JournalRow>>,
    /// Outbox rows with this outgoing id; `None` when the outbox table does not exist.
    pub outbox: Option<Vec<OutboxRow>>,
}

/// Looks up `message_id` everywhere.
pub async fn inspect(ops: &Ops, message_id: &str) -> Result<Inspection> {
    let inbox_sql = format!(
        "SELECT {} AS consumer, payload_hash, received_at FROM {} WHERE message_id = {} ORDER BY received_at",
        ops.dialect().text("consumer"),
        ops.tables().inbox(),
        ops.dialect().param(1)
    );
    let claimed: Vec<Claimed> = ops
        .autocommit()
        .fetch(
            &inbox_sql,
            &[message_id.into()],
            &[Column::Text, Column::Text, Column::I64],
        )
        .await
        .map_err(doing("reading the inbox"))?
        .iter()
        .map(|r| Claimed {
            consumer: r[0].text(),
            payload_hash: r[1].text(),
            received_at: r[2].i64(),
        })
        .collect();
    let dead_letters = dlq::of_message(ops, message_id).await?;
    let consumers: Vec<String> = claimed
        .iter()
        .map(|c| c.consumer.clone())
        .chain(dead_letters.iter().map(|d| d.consumer.clone()))
        .collect();
    Ok(Inspection {
        message_id: message_id.to_owned(),
        claimed,
        dead_letters,
        effect_journal: journal(ops, message_id, &consumers).await?,
        outbox: outbox(ops, message_id).await?,
    })
}

/// The key prefixes oncely-effects gives this id: one per consumer (`<consumer>:<id>:`).
fn key_prefixes(id: &str, consumers: &[String]) -> Vec<String> {
    let Ok(id) = MessageId::new(id) else {
        return Vec::new();
    };
    let mut prefixes: Vec<String> = consumers
        .iter()
        .filter_map(|c| ConsumerName::new(c).ok())
        .map(|name| oncely_effects::effect_key_prefix(&name, &id))
        .collect();
    prefixes.sort();
    prefixes.dedup();
    prefixes
}

async fn journal(ops: &Ops, id: &str, consumers: &[String]) -> Result<Option<Vec<JournalRow>>> {
    let prefixes = key_prefixes(id, consumers);
    // Ranges instead of LIKE: no escaping of % and _ in ids; ';' sorts right after ':'. With
    // no consumer to look under, the query still runs (`1 = 0`): a missing table says so.
    let mut ranges: Vec<String> = (0..prefixes.len())
        .map(|i| {
            format!(
                "(effect_key >= {} AND effect_key < {})",
                ops.dialect().param(2 * i + 1),
                ops.dialect().param(2 * i + 2)
            )
        })
        .collect();
    if ranges.is_empty() {
        ranges.push("1 = 0".to_owned());
    }
    let sql = format!(
        "SELECT {ek} AS effect_key, {kind} AS kind, {state} AS state, updated_at FROM {} WHERE {} ORDER BY effect_key",
        ops.tables().effect_journal(),
        ranges.join(" OR "),
        ek = ops.dialect().text("effect_key"),
        kind = ops.dialect().text("kind"),
        state = ops.dialect().text("state"),
    );
    let end = |p: &str| format!("{};", &p[..p.len() - 1]);
    let args: Vec<Value> = prefixes
        .iter()
        .flat_map(|p| [p.into(), end(p).into()])
        .collect();
    let cols = [Column::Text, Column::Text, Column::Text, Column::I64];
    let rows = ops.rows("reading the effect journal", &sql, &args, &cols, |r| {
        JournalRow {
            effect_key: r[0].text(),
            kind: r[1].text(),
            state: r[2].text(),
            updated_at: r[3].i64(),
        }
    });
    unless_missing(rows.await)
}

async fn outbox(ops: &Ops, id: &str) -> Result<Option<Vec<OutboxRow>>> {
    let sql = format!(
        "SELECT id, {} AS destination, created_at, dispatched_at FROM {} WHERE message_id = {} ORDER BY id",
        ops.dialect().text("destination"),
        ops.tables().outbox(),
        ops.dialect().param(1)
    );
    let cols = [Column::I64, Column::Text, Column::I64, Column::OptI64];
    let args = [id.into()];
    let rows = ops.rows("reading the outbox", &sql, &args, &cols, |r| OutboxRow {
        id: r[0].i64(),
        destination: r[1].text(),
        created_at: r[2].i64(),
        dispatched_at: r[3].opt_i64(),
    });
    unless_missing(rows.await)
}
