//! Browsing dead letters the way a console does: a richer filter than [`crate::dlq::Filter`]
//! (time range, exact id, text), pages read by keyset, the total matching a filter, and
//! groups by consumer, reason and error class.
//!
//! Listing reads no payloads (only their length) and cuts message ids and details to
//! [`CUT`] characters, so a page stays small whatever producers stored. A page is
//! `WHERE … AND id < $last ORDER BY id DESC LIMIT n`: a backward range scan of the primary key
//! (SQLite's rowid, PostgreSQL's `{prefix}dead_letters_pkey`, MySQL's `PRIMARY`), so page
//! 1,000 costs what page 1 costs, at any table size. Totals and groups are one `COUNT(*)` /
//! `GROUP BY` over the rows matching the filter.

use crate::db::{Ops, doing};
use oncely_core::Result;
use oncely_sql::{Column, SqlTx, Value};

/// How many characters of a message id or detail a listing returns.
pub const CUT: usize = 200;

/// Which dead letters a console page or bulk action covers. Empty fields match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Query {
    /// Only this consumer's.
    pub consumer: Option<String>,
    /// Only this reason code.
    pub reason: Option<String>,
    /// Only rows first seen at or after this time (unix ms).
    pub from_ms: Option<i64>,
    /// Only rows first seen before this time (unix ms).
    pub to_ms: Option<i64>,
    /// Only this exact message id.
    pub message_id: Option<String>,
    /// Only rows whose message id or detail contains this text (`%` and `_` are wildcards).
    pub text: Option<String>,
}

/// One row of a listing: no payload, message id and detail cut to [`CUT`] characters.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    /// Row id.
    pub id: i64,
    /// Consumer.
    pub consumer: String,
    /// Message id (cut), if the message had one.
    pub message_id: Option<String>,
    /// Reason code.
    pub reason: String,
    /// Detail (cut).
    pub detail: String,
    /// Attempts made.
    pub attempts: i64,
    /// First seen (unix ms).
    pub dead_lettered_at: i64,
    /// Last seen (unix ms).
    pub last_seen: i64,
    /// Times dead-lettered.
    pub deliveries: i64,
    /// Payload length in bytes.
    pub payload_len: i64,
}

/// Dead letters of one consumer, reason and error class.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Group {
    /// Consumer.
    pub consumer: String,
    /// Reason code.
    pub reason: String,
    /// The error class (see [`error_class_sql`]): `""` for `conflict` and `late`.
    pub error_class: String,
    /// Rows.
    pub rows: i64,
    /// Deliveries, summed over the rows.
    pub deliveries: i64,
    /// Earliest first-seen time (unix ms).
    pub first_seen: i64,
    /// Latest last-seen time (unix ms).
    pub last_seen: i64,
}

/// The WHERE clause of `q` and its binds, in order (placeholders numbered from 1, so the
/// positional `?` of MySQL lines up too).
fn condition(ops: &Ops, q: &Query) -> (String, Vec<Value>) {
    let d = ops.dialect();
    let mut clauses = vec!["1 = 1".to_owned()];
    let mut binds: Vec<Value> = Vec::new();
    let mut param = |value: Value| {
        binds.push(value);
        d.param(binds.len())
    };
    if let Some(c) = &q.consumer {
        clauses.push(format!("consumer = {}", param(c.into())));
    }
    if let Some(r) = &q.reason {
        clauses.push(format!("reason = {}", param(r.into())));
    }
    if let Some(ms) = q.from_ms {
        clauses.push(format!("dead_lettered_at >= {}", param(ms.into())));
    }
    if let Some(ms) = q.to_ms {
        clauses.push(format!("dead_lettered_at < {}", param(ms.into())));
    }
    if let Some(m) = &q.message_id {
        clauses.push(format!("message_id = {}", param(m.into())));
    }
    if let Some(t) = &q.text {
        let pattern = format!("%{t}%");
        let (a, b) = (param((&pattern).into()), param(pattern.into()));
        clauses.push(format!("(message_id LIKE {a} OR detail LIKE {b})"));
    }
    (clauses.join(" AND "), binds)
}

/// One page of rows matching `q`, newest first: the `limit` rows with an id below `before_id`
/// (all rows when `None`). The next page starts before the last row's id.
pub async fn page(
    ops: &Ops,
    q: &Query,
    before_id: Option<i64>,
    limit: u32,
) -> Result<Vec<Summary>> {
    let d = ops.dialect();
    let (mut cond, mut binds) = condition(ops, q);
    if let Some(id) = before_id {
        binds.push(id.into());
        cond.push_str(&format!(" AND id < {}", d.param(binds.len())));
    }
    let sql = format!(
        "SELECT id, {consumer} AS consumer, SUBSTR(message_id, 1, {CUT}) AS message_id, reason, \
         SUBSTR(detail, 1, {CUT}) AS detail, {attempts} AS attempts, dead_lettered_at, last_seen, \
         {deliveries} AS deliveries, {len} AS payload_len FROM {table} WHERE {cond} \
         ORDER BY id DESC LIMIT {limit}",
        consumer = d.text("consumer"),
        attempts = d.cast_i64("attempts"),
        deliveries = d.cast_i64("deliveries"),
        len = d.cast_i64("LENGTH(payload)"),
        table = ops.tables().dead_letters(),
    );
    use Column::{I64, OptText, Text};
    let cols = [I64, Text, OptText, Text, Text, I64, I64, I64, I64, I64];
    ops.rows("listing dead letters", &sql, &binds, &cols, |r| Summary {
        id: r[0].i64(),
        consumer: r[1].text(),
        message_id: r[2].opt_text(),
        reason: r[3].text(),
        detail: r[4].text(),
        attempts: r[5].i64(),
        dead_lettered_at: r[6].i64(),
        last_seen: r[7].i64(),
        deliveries: r[8].i64(),
        payload_len: r[9].i64(),
    })
    .await
}

/// How many rows match `q`.
pub async fn count(ops: &Ops, q: &Query) -> Result<i64> {
    let (cond, binds) = condition(ops, q);
    let sql = format!(
        "SELECT {} FROM {} WHERE {cond}",
        ops.dialect().cast_i64("COUNT(*)"),
        ops.tables().dead_letters()
    );
    let n = ops.autocommit().fetch_i64(&sql, &binds).await;
    Ok(n.map_err(doing("counting dead letters"))?.unwrap_or(0))
}

/// The ids of the rows matching `q`, oldest first, at most `limit`.
pub async fn ids(ops: &Ops, q: &Query, limit: u32) -> Result<Vec<i64>> {
    let (cond, binds) = condition(ops, q);
    let sql = format!(
        "SELECT id FROM {} WHERE {cond} ORDER BY id LIMIT {limit}",
        ops.tables().dead_letters()
    );
    ops.rows("listing dead letters", &sql, &binds, &[Column::I64], |r| {
        r[0].i64()
    })
    .await
}

/// Longest error class [`groups`] returns, in characters.
pub const CLASS_LEN: usize = 100;

/// The SQL expression of a dead letter's error class: what its `detail` says after the
/// reason's own wording, up to the next `:` — `handler failed permanently: insufficient funds:
/// account 42` is `insufficient funds`, `gave up after 5 attempts: connection refused` is
/// `connection refused` — cut to [`CLASS_LEN`] characters; the whole detail (cut) when it has
/// no `": "`; `""` for `conflict` and `late`, whose details differ only by hashes and ages.
/// No column stores a class: it is computed from the detail, the same on every dialect.
pub fn error_class_sql(d: oncely_sql::Dialect) -> String {
    let rest = format!("SUBSTR(detail, {} + 2)", d.position("detail", "': '"));
    let colon = d.position(&rest, "':'");
    format!(
        "CASE WHEN reason IN ('conflict', 'late') THEN '' \
         WHEN {p} = 0 THEN SUBSTR(detail, 1, {CLASS_LEN}) \
         WHEN {colon} = 0 THEN SUBSTR({rest}, 1, {CLASS_LEN}) \
         ELSE SUBSTR(SUBSTR({rest}, 1, {colon} - 1), 1, {CLASS_LEN}) END",
        p = d.position("detail", "': '"),
    )
}

/// The rows matching `q` grouped by consumer, reason and error class ([`error_class_sql`]),
/// largest group first.
pub async fn groups(ops: &Ops, q: &Query) -> Result<Vec<Group>> {
    let d = ops.dialect();
    let (cond, binds) = condition(ops, q);
    let sql = format!(
        "SELECT {consumer} AS consumer, reason, {class} AS error_class, {rows} AS n, \
         {deliveries} AS deliveries, {first} AS first_seen, {last} AS last_seen FROM {table} \
         WHERE {cond} GROUP BY consumer, reason, error_class ORDER BY n DESC, consumer, reason, error_class",
        consumer = d.text("consumer"),
        class = d.text(&error_class_sql(d)),
        rows = d.cast_i64("COUNT(*)"),
        deliveries = d.cast_i64("SUM(deliveries)"),
        first = d.cast_i64("MIN(dead_lettered_at)"),
        last = d.cast_i64("MAX(last_seen)"),
        table = ops.tables().dead_letters(),
    );
    use Column::{I64, Text};
    let cols = [Text, Text, Text, I64, I64, I64, I64];
    ops.rows("grouping dead letters", &sql, &binds, &cols, |r| Group {
        consumer: r[0].text(),
        reason: r[1].text(),
        error_class: r[2].text(),
        rows: r[3].i64(),
        deliveries: r[4].i64(),
        first_seen: r[5].i64(),
        last_seen: r[6].i64(),
    })
    .await
}

/// Rows per hour since `since_ms` ([`per_bucket`] with hours).
pub async fn per_hour(ops: &Ops, table: Timeline, since_ms: i64) -> Result<Vec<(i64, i64)>> {
    per_bucket(ops, table, since_ms, 3_600_000).await
}

/// Rows per `bucket_ms` (a minute, an hour) of a table's timestamp column since `since_ms`:
/// `(bucket start in unix ms, rows)`, oldest first, buckets without rows left out. What the
/// console charts, from the tables' own timestamps, without a metrics system: see
/// [`Timeline`]. Duplicates are not among them: no table records a duplicate delivery (the
/// inbox keeps the first copy only; `oncely_deliveries_total{outcome="duplicate"}` counts them).
pub async fn per_bucket(
    ops: &Ops,
    table: Timeline,
    since_ms: i64,
    bucket_ms: i64,
) -> Result<Vec<(i64, i64)>> {
    let d = ops.dialect();
    let (name, column, only) = match table {
        Timeline::Claims => (ops.tables().inbox(), "received_at", ""),
        Timeline::DeadLetters => (ops.tables().dead_letters(), "dead_lettered_at", ""),
        Timeline::Conflicts => (
            ops.tables().dead_letters(),
            "dead_lettered_at",
            " AND reason = 'conflict'",
        ),
    };
    let bucket_ms = bucket_ms.max(1);
    let sql = format!(
        "SELECT {bucket} AS bucket, {n} AS n FROM {name} WHERE {column} >= {p}{only} GROUP BY 1 ORDER BY 1",
        bucket = d.cast_i64(&format!("{column} - {column} % {bucket_ms}")),
        n = d.cast_i64("COUNT(*)"),
        p = d.param(1),
    );
    let rows = ops
        .autocommit()
        .fetch(&sql, &[since_ms.into()], &[Column::I64, Column::I64])
        .await;
    Ok(rows
        .map_err(doing("counting rows over time"))?
        .iter()
        .map(|r| (r[0].i64(), r[1].i64()))
        .collect())
}

/// Which timestamps [`per_bucket`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timeline {
    /// Inbox claims by `received_at`: messages applied (first deliveries).
    Claims,
    /// Dead letters by `dead_lettered_at` (first seen).
    DeadLetters,
    /// Dead letters with reason `conflict` (same id, other payload) by `dead_lettered_at`.
    Conflicts,
}
