//! Dead letters: list, show, delete, purge. Replay and resolve are in [`crate::replay`].
//!
//! A dead-letter row has one type everywhere: [`oncely_core::StoredDeadLetter`] (what
//! [`oncely_core::Inspect::dead_letters`] returns, with its row id). [`DeadLetterJson`] is how
//! it is printed (`oncely dlq list/show --json`, `oncely inspect --json`).

use crate::db::{Ops, doing};
use oncely_core::{RawEnvelope, Result, StoredDeadLetter};
use oncely_sql::clock::{now_ms, to_ms};
use oncely_sql::letter::DEAD_LETTER_TYPES;
use oncely_sql::letter::{dead_letter_columns, decode_dead_letter};
use oncely_sql::{Column, SqlTx, Value};
use std::time::Duration;

/// A [`StoredDeadLetter`] as JSON: times in unix ms, the raw id in hex, the payload as
/// (lossy) UTF-8 text and the headers as their stored JSON text.
///
/// ```
/// use oncely_core::{Meta, StoredDeadLetter};
/// use std::time::{Duration, UNIX_EPOCH};
/// let at = UNIX_EPOCH + Duration::from_millis(1_000);
/// let row = StoredDeadLetter {
///     id: 7, consumer: "billing".into(), message_id: Some("m-1".into()),
///     raw_id: Some(b"m-1".to_vec()), payload: b"5".to_vec(), payload_hash: "ab".into(),
///     stored_hash: None, reason: "permanent".into(), detail: "bad".into(), attempts: 1,
///     dead_lettered_at: at, last_seen: at, deliveries: 1, meta: Meta::default(),
/// };
/// let json = serde_json::to_value(oncely_ops::dlq::DeadLetterJson::from(&row)).unwrap();
/// assert_eq!(json["id"], 7);
/// assert_eq!(json["raw_id_hex"], "6d2d31");
/// assert_eq!(json["dead_lettered_at"], 1_000);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeadLetterJson {
    /// Row id (what `show`, `replay` take).
    pub id: i64,
    /// Consumer that gave up on the message.
    pub consumer: String,
    /// The message id as shown for humans, if it had one.
    pub message_id: Option<String>,
    /// Reason code (`conflict`, `permanent`, `late`, `bad_id`, …).
    pub reason: String,
    /// Human-readable detail.
    pub detail: String,
    /// Attempts made.
    pub attempts: u32,
    /// First seen (unix ms).
    pub dead_lettered_at: i64,
    /// Last seen (unix ms).
    pub last_seen: i64,
    /// How many times it was dead-lettered.
    pub deliveries: u32,
    /// Raw id bytes, hex (the id may not be valid UTF-8).
    pub raw_id_hex: Option<String>,
    /// Payload as (lossy) UTF-8 text.
    pub payload_text: String,
    /// Payload length in bytes.
    pub payload_len: usize,
    /// SHA-256 of the payload.
    pub payload_hash: String,
    /// For conflicts: the hash the inbox holds.
    pub stored_hash: Option<String>,
    /// Entity key.
    pub entity_key: Option<String>,
    /// Entity version.
    pub version: Option<i64>,
    /// Source time (unix ms).
    pub source_time: Option<i64>,
    /// Headers (a JSON object, as text).
    pub headers: String,
}

impl From<&StoredDeadLetter> for DeadLetterJson {
    fn from(d: &StoredDeadLetter) -> Self {
        Self {
            id: d.id,
            consumer: d.consumer.clone(),
            message_id: d.message_id.clone(),
            reason: d.reason.clone(),
            detail: d.detail.clone(),
            attempts: d.attempts,
            dead_lettered_at: to_ms(d.dead_lettered_at),
            last_seen: to_ms(d.last_seen),
            deliveries: d.deliveries,
            raw_id_hex: d.raw_id.as_ref().map(hex::encode),
            payload_text: String::from_utf8_lossy(&d.payload).into_owned(),
            payload_len: d.payload.len(),
            payload_hash: d.payload_hash.clone(),
            stored_hash: d.stored_hash.clone(),
            entity_key: d.meta.entity_key.clone(),
            version: d.meta.version,
            source_time: d.meta.source_time.map(to_ms),
            headers: serde_json::to_string(&d.meta.headers).unwrap_or_else(|_| "{}".into()),
        }
    }
}

/// Serializes rows as [`DeadLetterJson`] (for `#[serde(serialize_with)]`).
pub fn serialize_rows<S: serde::Serializer>(
    rows: &[StoredDeadLetter],
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    serializer.collect_seq(rows.iter().map(DeadLetterJson::from))
}

/// The message of a dead letter as it was delivered, ready to be delivered again.
///
/// ```
/// use oncely_core::{Meta, StoredDeadLetter};
/// use std::time::UNIX_EPOCH;
/// let row = StoredDeadLetter {
///     id: 1, consumer: "billing".into(), message_id: Some("m-1".into()),
///     raw_id: Some(b"m-1".to_vec()), payload: b"5".to_vec(), payload_hash: String::new(),
///     stored_hash: None, reason: "permanent".into(), detail: String::new(), attempts: 1,
///     dead_lettered_at: UNIX_EPOCH, last_seen: UNIX_EPOCH, deliveries: 1, meta: Meta::default(),
/// };
/// assert_eq!(oncely_ops::dlq::envelope(&row).payload, b"5");
/// ```
pub fn envelope(row: &StoredDeadLetter) -> RawEnvelope {
    RawEnvelope {
        id: row.raw_id.clone(),
        payload: row.payload.clone(),
        meta: row.meta.clone(),
    }
}

/// Which dead letters a listing, replay or purge covers.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only this consumer's.
    pub consumer: Option<String>,
    /// Only this reason code.
    pub reason: Option<String>,
    /// Only rows stored before this time (unix ms).
    pub before_ms: Option<i64>,
    /// At most this many rows (listing only).
    pub limit: Option<u32>,
}

/// Rows matching a condition from [`conditions`], oldest first.
async fn select(
    ops: &Ops,
    what: &str,
    (condition, args): (String, Vec<Value>),
    limit: Option<u32>,
) -> Result<Vec<StoredDeadLetter>> {
    let limit = limit.map(|n| format!(" LIMIT {n}")).unwrap_or_default();
    let sql = format!(
        "SELECT {} FROM {} WHERE {condition} ORDER BY id{limit}",
        dead_letter_columns(ops.dialect()),
        ops.tables().dead_letters()
    );
    ops.rows(what, &sql, &args, DEAD_LETTER_TYPES, decode_dead_letter)
        .await
}

/// The ids of the rows matching `filter`, oldest first (no payloads read).
pub async fn ids(ops: &Ops, filter: &Filter) -> Result<Vec<i64>> {
    let (condition, args) = conditions(ops, filter);
    let sql = format!(
        "SELECT id FROM {} WHERE {condition} ORDER BY id",
        ops.tables().dead_letters()
    );
    ops.rows("listing dead letters", &sql, &args, &[Column::I64], |r| {
        r[0].i64()
    })
    .await
}

/// The WHERE clause of a filter and its arguments, in placeholder order.
fn conditions(ops: &Ops, f: &Filter) -> (String, Vec<Value>) {
    let mut clauses = vec!["1 = 1".to_owned()];
    let mut args: Vec<Value> = Vec::new();
    let mut param = |value: Value| {
        args.push(value);
        ops.dialect().param(args.len())
    };
    for (column, value) in [("consumer", &f.consumer), ("reason", &f.reason)] {
        if let Some(v) = value {
            clauses.push(format!("{column} = {}", param(v.into())));
        }
    }
    if let Some(ms) = f.before_ms {
        clauses.push(format!("dead_lettered_at < {}", param(ms.into())));
    }
    (clauses.join(" AND "), args)
}

/// Lists dead letters matching `filter`, oldest first, at most `filter.limit`.
pub async fn list(ops: &Ops, filter: &Filter) -> Result<Vec<StoredDeadLetter>> {
    select(
        ops,
        "listing dead letters",
        conditions(ops, filter),
        filter.limit,
    )
    .await
}

/// The dead letters of one message id (any consumer), oldest first.
pub async fn of_message(ops: &Ops, message_id: &str) -> Result<Vec<StoredDeadLetter>> {
    let condition = format!("message_id = {}", ops.dialect().param(1));
    let args = vec![message_id.into()];
    select(ops, "reading dead letters", (condition, args), None).await
}

/// One dead letter, if the row exists.
pub async fn show(ops: &Ops, id: i64) -> Result<Option<StoredDeadLetter>> {
    let condition = format!("id = {}", ops.dialect().param(1));
    let rows = select(
        ops,
        "reading a dead letter",
        (condition, vec![id.into()]),
        None,
    )
    .await?;
    Ok(rows.into_iter().next())
}

/// Deletes one dead-letter row; returns whether it existed.
pub async fn delete(ops: &Ops, id: i64) -> Result<bool> {
    let sql = format!(
        "DELETE FROM {} WHERE id = {}",
        ops.tables().dead_letters(),
        ops.dialect().param(1)
    );
    let done = ops.autocommit().execute(&sql, &[id.into()]).await;
    Ok(done.map_err(doing("deleting a dead letter"))?.rows == 1)
}

/// Deletes dead letters stored longer ago than `older_than` (and matching `filter`'s consumer
/// and reason), 1,000 rows per statement. Calls `progress` with the running total.
pub async fn purge(
    ops: &Ops,
    older_than: Duration,
    filter: &Filter,
    progress: &mut (dyn FnMut(u64) + Send),
) -> Result<u64> {
    let filter = Filter {
        before_ms: Some(now_ms() - older_than.as_millis() as i64),
        ..filter.clone()
    };
    let (condition, args) = conditions(ops, &filter);
    let dl = ops.tables().dead_letters();
    let sql = ops.dialect().delete_batch(&dl, "id", &condition, "1000");
    let mut total = 0;
    let mut pool = ops.autocommit();
    loop {
        let done = pool.execute(&sql, &args).await;
        let n = done.map_err(doing("purging dead letters"))?.rows;
        total += n;
        progress(total);
        if n < 1000 {
            return Ok(total);
        }
    }
}

/// Age of a dead letter in whole seconds (for display).
pub fn age_secs(dead_lettered_at_ms: i64) -> i64 {
    (now_ms() - dead_lettered_at_ms).max(0) / 1000
}
