//! Where one message id is: claimed by which consumers and when, dead letters, and — when
//! oncely-effects' tables exist — effect-journal and outbox rows.

use crate::db::Ops;
use crate::dlq::{self, serialize_rows};
use oncely_core::{ConsumerName, MessageId};
use oncely_core::{Result, StoredDeadLetter};
use oncely_effects::EffectTables;
use oncely_sql::sqlx::{self, AssertSqlSafe, Row};
use oncely_sql::with_autocommit;
use oncely_sql::{db, is_missing_table};

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
    /// The effect key (`{consumer}:{id}:{effect}`, or the legacy `msg-{id}:{effect}`).
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
    let claimed = with_autocommit!(ops.pool(), c => oncely_sql::query(AssertSqlSafe(inbox_sql))
        .bind(message_id)
        .fetch_all(&mut *c)
        .await
        .map_err(|e| db("reading the inbox", e))?
        .iter()
        .map(|r| Ok(Claimed {
            consumer: r.try_get("consumer")?,
            payload_hash: r.try_get("payload_hash")?,
            received_at: r.try_get("received_at")?,
        }))
        .collect::<std::result::Result<Vec<_>, sqlx::Error>>()
        .map_err(|e| db("decoding inbox rows", e))?)?;
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

/// The key prefixes oncely-effects gives this id: one per consumer (`<consumer>:<id>:`), and
/// the legacy form without consumer (`msg-<id>:` / `msgh-<hash>:`).
fn key_prefixes(id: &str, consumers: &[String]) -> Vec<String> {
    let Ok(id) = MessageId::new(id) else {
        return Vec::new();
    };
    let mut prefixes = vec![oncely_effects::legacy_effect_key_prefix(&id)];
    for c in consumers {
        if let Ok(name) = ConsumerName::new(c) {
            prefixes.push(oncely_effects::effect_key_prefix(&name, &id));
        }
    }
    prefixes.sort();
    prefixes.dedup();
    prefixes
}

async fn journal(ops: &Ops, id: &str, consumers: &[String]) -> Result<Option<Vec<JournalRow>>> {
    let prefixes = key_prefixes(id, consumers);
    if prefixes.is_empty() {
        return Ok(Some(Vec::new()));
    }
    // Ranges instead of LIKE: no escaping of % and _ in ids; ';' sorts right after ':'.
    let ranges: Vec<String> = (0..prefixes.len())
        .map(|i| {
            format!(
                "(effect_key >= {} AND effect_key < {})",
                ops.dialect().param(2 * i + 1),
                ops.dialect().param(2 * i + 2)
            )
        })
        .collect();
    let sql = format!(
        "SELECT {ek} AS effect_key, {kind} AS kind, {state} AS state, updated_at FROM {} WHERE {} ORDER BY effect_key",
        ops.tables().effect_journal(),
        ranges.join(" OR "),
        ek = ops.dialect().text("effect_key"),
        kind = ops.dialect().text("kind"),
        state = ops.dialect().text("state"),
    );
    let end = |p: &str| format!("{};", &p[..p.len() - 1]);
    let rows = with_autocommit!(ops.pool(), c => {
        let mut q = oncely_sql::query(AssertSqlSafe(sql));
        for prefix in &prefixes {
            q = q.bind(prefix.clone()).bind(end(prefix));
        }
        q.fetch_all(&mut *c)
        .await
        .map(|rows| rows.iter().map(|r| Ok(JournalRow {
            effect_key: r.try_get("effect_key")?,
            kind: r.try_get("kind")?,
            state: r.try_get("state")?,
            updated_at: r.try_get("updated_at")?,
        })).collect::<std::result::Result<Vec<_>, sqlx::Error>>())
    })?;
    match rows {
        Ok(decoded) => decoded
            .map(Some)
            .map_err(|e| db("decoding journal rows", e)),
        Err(e) if is_missing_table(&e) => Ok(None),
        Err(e) => Err(db("reading the effect journal", e)),
    }
}

async fn outbox(ops: &Ops, id: &str) -> Result<Option<Vec<OutboxRow>>> {
    let sql = format!(
        "SELECT id, {} AS destination, created_at, dispatched_at FROM {} WHERE message_id = {} ORDER BY id",
        ops.dialect().text("destination"),
        ops.tables().outbox(),
        ops.dialect().param(1)
    );
    let rows = with_autocommit!(ops.pool(), c => oncely_sql::query(AssertSqlSafe(sql))
        .bind(id)
        .fetch_all(&mut *c)
        .await
        .map(|rows| rows.iter().map(|r| Ok(OutboxRow {
            id: r.try_get("id")?,
            destination: r.try_get("destination")?,
            created_at: r.try_get("created_at")?,
            dispatched_at: r.try_get("dispatched_at")?,
        })).collect::<std::result::Result<Vec<_>, sqlx::Error>>()))?;
    match rows {
        Ok(decoded) => decoded.map(Some).map_err(|e| db("decoding outbox rows", e)),
        Err(e) if is_missing_table(&e) => Ok(None),
        Err(e) => Err(db("reading the outbox", e)),
    }
}
