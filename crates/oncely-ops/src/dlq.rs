//! Dead letters: list, show, delete, purge. Replay and resolve are in [`crate::replay`].

use crate::db::Ops;
use oncely_core::{Meta, RawEnvelope, Result};
use oncely_sql::sqlx::{self, AssertSqlSafe, Row};
use oncely_sql::{db, from_ms, now_ms, with_pool};
use std::time::Duration;

/// A dead letter without its payload, for listings.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeadLetterSummary {
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
    pub attempts: i64,
    /// When it was stored (unix ms).
    pub dead_lettered_at: i64,
}

/// A dead letter with everything stored.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeadLetterRow {
    /// The summary fields.
    #[serde(flatten)]
    pub summary: DeadLetterSummary,
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
    /// Headers as stored (JSON object).
    pub headers: String,
    #[serde(skip)]
    raw_id: Option<Vec<u8>>,
    #[serde(skip)]
    payload: Vec<u8>,
}

impl DeadLetterRow {
    /// The raw id bytes as delivered, if the message had an id.
    pub fn raw_id(&self) -> Option<&[u8]> {
        self.raw_id.as_deref()
    }

    /// The payload bytes as delivered.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// The message as it was delivered, ready to be delivered again.
    pub fn to_raw(&self) -> RawEnvelope {
        RawEnvelope {
            id: self.raw_id.clone(),
            payload: self.payload.clone(),
            meta: Meta {
                entity_key: self.entity_key.clone(),
                version: self.version,
                source_time: self.source_time.map(from_ms),
                headers: serde_json::from_str(&self.headers).unwrap_or_default(),
            },
        }
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

/// The summary columns (the consumer as text: MySQL may store it as VARBINARY).
fn summary_columns(ops: &Ops) -> String {
    format!(
        "id, {} AS consumer, message_id, reason, detail, attempts, dead_lettered_at",
        ops.dialect().text("consumer")
    )
}

fn summary_of<R: Row>(r: &R) -> std::result::Result<DeadLetterSummary, sqlx::Error>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    i64: for<'a> sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    i32: for<'a> sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    String: for<'a> sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    Option<String>: for<'a> sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    Ok(DeadLetterSummary {
        id: r.try_get("id")?,
        consumer: r.try_get("consumer")?,
        message_id: r.try_get("message_id")?,
        reason: r.try_get("reason")?,
        detail: r.try_get("detail")?,
        attempts: i64::from(r.try_get::<i32, _>("attempts")?),
        dead_lettered_at: r.try_get("dead_lettered_at")?,
    })
}

/// Rows matching `condition` (SQL with at most one placeholder, bound to `value`), oldest first.
pub(crate) async fn summaries_where(
    ops: &Ops,
    condition: &str,
    value: Option<&str>,
    limit: Option<u32>,
) -> Result<Vec<DeadLetterSummary>> {
    let limit = limit.map(|n| format!(" LIMIT {n}")).unwrap_or_default();
    let sql = format!(
        "SELECT {} FROM {} WHERE {condition} ORDER BY id{limit}",
        summary_columns(ops),
        ops.tables().dead_letters()
    );
    with_pool!(ops.pool(), p => {
        let mut q = sqlx::query(AssertSqlSafe(sql));
        if let Some(v) = value {
            q = q.bind(v.to_owned());
        }
        q.fetch_all(p)
            .await
            .map_err(|e| db("reading dead letters", e))?
            .iter()
            .map(summary_of)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| db("decoding dead letters", e))
    })
}

/// The WHERE clause and its string binds for a filter.
fn conditions(ops: &Ops, f: &Filter) -> (String, Vec<String>, Option<i64>) {
    let mut clauses = vec!["1 = 1".to_owned()];
    let mut binds = Vec::new();
    for (column, value) in [("consumer", &f.consumer), ("reason", &f.reason)] {
        if let Some(v) = value {
            binds.push(v.clone());
            clauses.push(format!("{column} = {}", ops.dialect().param(binds.len())));
        }
    }
    if f.before_ms.is_some() {
        clauses.push(format!(
            "dead_lettered_at < {}",
            ops.dialect().param(binds.len() + 1)
        ));
    }
    (clauses.join(" AND "), binds, f.before_ms)
}

/// Lists dead letters matching `filter`, oldest first.
pub async fn list(ops: &Ops, filter: &Filter) -> Result<Vec<DeadLetterSummary>> {
    let (condition, binds, before) = conditions(ops, filter);
    let limit = filter
        .limit
        .map(|n| format!(" LIMIT {n}"))
        .unwrap_or_default();
    let sql = format!(
        "SELECT {} FROM {} WHERE {condition} ORDER BY id{limit}",
        summary_columns(ops),
        ops.tables().dead_letters()
    );
    with_pool!(ops.pool(), p => {
        let mut q = sqlx::query(AssertSqlSafe(sql));
        for b in &binds {
            q = q.bind(b.clone());
        }
        if let Some(ms) = before {
            q = q.bind(ms);
        }
        q.fetch_all(p)
            .await
            .map_err(|e| db("listing dead letters", e))?
            .iter()
            .map(summary_of)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| db("decoding dead letters", e))
    })
}

/// One dead letter with payload and metadata, if the row exists.
pub async fn show(ops: &Ops, id: i64) -> Result<Option<DeadLetterRow>> {
    let sql = format!(
        "SELECT {}, raw_id, payload, payload_hash, stored_hash, entity_key, version, source_time, headers FROM {} WHERE id = {}",
        summary_columns(ops),
        ops.tables().dead_letters(),
        ops.dialect().param(1)
    );
    with_pool!(ops.pool(), p => {
        let Some(r) = sqlx::query(AssertSqlSafe(sql)).bind(id).fetch_optional(p).await
            .map_err(|e| db("reading a dead letter", e))? else { return Ok(None) };
        let decode = || -> std::result::Result<DeadLetterRow, sqlx::Error> {
            let raw_id: Option<Vec<u8>> = r.try_get("raw_id")?;
            let payload: Vec<u8> = r.try_get("payload")?;
            Ok(DeadLetterRow {
                summary: summary_of(&r)?,
                raw_id_hex: raw_id.as_ref().map(hex::encode),
                payload_text: String::from_utf8_lossy(&payload).into_owned(),
                payload_len: payload.len(),
                payload_hash: r.try_get("payload_hash")?,
                stored_hash: r.try_get("stored_hash")?,
                entity_key: r.try_get("entity_key")?,
                version: r.try_get("version")?,
                source_time: r.try_get("source_time")?,
                headers: r.try_get("headers")?,
                raw_id,
                payload,
            })
        };
        decode().map(Some).map_err(|e| db("decoding a dead letter", e))
    })
}

/// Deletes one dead-letter row; returns whether it existed.
pub async fn delete(ops: &Ops, id: i64) -> Result<bool> {
    let sql = format!(
        "DELETE FROM {} WHERE id = {}",
        ops.tables().dead_letters(),
        ops.dialect().param(1)
    );
    let n = with_pool!(ops.pool(), p => sqlx::query(AssertSqlSafe(sql)).bind(id).execute(p).await
        .map_err(|e| db("deleting a dead letter", e))?.rows_affected());
    Ok(n == 1)
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
    let (condition, binds, before) = conditions(ops, &filter);
    let dl = ops.tables().dead_letters();
    let sql = ops.dialect().delete_batch(&dl, "id", &condition, "1000");
    let mut total = 0;
    loop {
        let n = with_pool!(ops.pool(), p => {
            let mut q = sqlx::query(AssertSqlSafe(sql.clone()));
            for b in &binds {
                q = q.bind(b.clone());
            }
            q.bind(before).execute(p).await.map_err(|e| db("purging dead letters", e))?.rows_affected()
        });
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
