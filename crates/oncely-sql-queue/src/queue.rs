//! The queue table, its source and the dequeuing handler wrapper.

use futures::future::BoxFuture;
use oncely_core::wire::{meta_headers, read_header};
use oncely_core::{
    Acker, Delivery, Envelope, Error, Handled, Handler, Meta, RawEnvelope, Result, Source,
};
use oncely_sql::clock::now_ms;
use oncely_sql::migrate::Adopt;
use oncely_sql::pooler::Autocommit;
use oncely_sql::sqlx::{self, AssertSqlSafe, PgPool, Postgres, Row, Transaction};
use oncely_sql::{AnyPool, AnyTx, Dialect, Engine, MigrationSet, PgStore, Tables};
use std::collections::BTreeMap;
use std::time::Duration;

/// Header through which a delivery carries its queue row id to [`Dequeue`].
pub const QUEUE_ROW_HEADER: &str = "oncely-queue-row";

/// The `headers` column as string headers: a JSON object's string values as they are,
/// other values as their JSON text. Anything else (a producer writing the table by hand) is
/// dropped with a warning; the row is still delivered.
fn headers_of(column: &str) -> BTreeMap<String, String> {
    match serde_json::from_str::<serde_json::Value>(column) {
        Ok(serde_json::Value::Object(map)) => map
            .into_iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => (k, s),
                other => (k, other.to_string()),
            })
            .collect(),
        _ => {
            oncely_core::wire::dropped("headers", column.as_bytes(), "not a JSON object");
            BTreeMap::new()
        }
    }
}

/// A queue-table error, classified by oncely-sql's one classifier.
fn db(what: &str, e: sqlx::Error) -> Error {
    oncely_sql::error::db(&format!("queue table: {what}"), e)
}

/// The `headers` column as the message's [`Meta`]: `oncely-entity`, `oncely-version` and
/// `oncely-source-time` set their fields (as on every broker, `oncely_core::wire`), the
/// rest are headers.
fn meta_of(column: &str) -> Meta {
    let mut meta = Meta::default();
    for (name, value) in headers_of(column) {
        read_header(&mut meta, &name, value.as_bytes());
    }
    meta
}

/// A queue table in PostgreSQL.
#[derive(Clone, Debug)]
pub struct SqlQueue {
    pool: PgPool,
    /// The facts of the pool's connection (a transaction pooler: unnamed statements).
    engine: Engine,
    table: String,
}

/// The `queue` migration set (PostgreSQL only) of oncely-sql's one registry, applied by the
/// store's one runner: `store.migrate_with(&[&MIGRATIONS])` (creating the table, and its
/// schema, if missing; a no-op when up to date). A queue table created before the shared
/// ledger (which kept no ledger) is adopted at version 1.
///
/// Message ids are kept byte-exact in `raw_id` (BYTEA; added to older tables by migration 2);
/// `message_id` holds the id as text for people reading the table (invalid UTF-8 shown
/// lossily) and is only read for rows enqueued before `raw_id` existed.
///
/// ```
/// use oncely_sql::{Dialect, Tables};
/// let sql = oncely_sql_queue::MIGRATIONS.print(Dialect::Postgres, &Tables::default()).unwrap();
/// assert!(sql.contains("CREATE TABLE IF NOT EXISTS oncely_queue"));
/// ```
pub static MIGRATIONS: MigrationSet = oncely_sql::migration_set!("queue", [postgres], [
    1, "queue", "0001_queue.sql";
    2, "raw_id", "0002_raw_id.sql";
])
    .adopt(&[Adopt::Probe {
        dialect: Dialect::Postgres,
        sql: "SELECT COUNT(*) FROM pg_catalog.pg_class WHERE oid = to_regclass('{schema}{prefix}queue')",
        through: 1,
    }]);

impl SqlQueue {
    /// The queue `{schema}.{prefix}queue` of a store's tables, on the store's pool.
    pub fn of(store: &PgStore) -> Self {
        Self {
            pool: store.pool().clone(),
            engine: store.engine(),
            table: store.tables().table("queue"),
        }
    }

    /// The queue `{schema}.{prefix}queue` on `pool` (a pool oncely did not open: its facts
    /// are [`Engine::assumed`]; prefer [`SqlQueue::of`] a store).
    pub fn new(pool: PgPool, tables: &Tables) -> Self {
        Self {
            engine: AnyPool::from(pool.clone()).engine(),
            pool,
            table: tables.table("queue"),
        }
    }

    /// Enqueues a message inside the caller's transaction (commit it with the business change).
    /// A message without a `traceparent` header gets the current span's
    /// ([`oncely_core::trace::traced`]) in the `headers` column.
    pub async fn enqueue_tx(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        m: &RawEnvelope,
    ) -> Result<()> {
        self.insert(m)
            .execute(&mut **tx)
            .await
            .map_err(|e| db("enqueue", e))?;
        Ok(())
    }

    /// Enqueues messages in one transaction.
    pub async fn enqueue(&self, messages: &[RawEnvelope]) -> Result<()> {
        let mut tx = self.pool.begin().await.map_err(|e| db("begin", e))?;
        for m in messages {
            self.enqueue_tx(&mut tx, m).await?;
        }
        tx.commit().await.map_err(|e| db("commit", e))
    }

    fn insert<'q>(
        &self,
        m: &'q RawEnvelope,
    ) -> sqlx::query::Query<'q, Postgres, <Postgres as sqlx::Database>::Arguments> {
        let traced = oncely_core::trace::traced(m); // the current trace, unless `m` names one
        let headers: BTreeMap<&str, String> = meta_headers(&traced.meta).into_iter().collect();
        let headers = serde_json::to_string(&headers).unwrap_or_else(|_| "{}".into());
        self.engine.query(AssertSqlSafe(format!(
            "INSERT INTO {} (message_id, raw_id, payload, headers, enqueued_at) VALUES ($1, $2, $3, $4, $5)",
            self.table
        )))
        .bind(
            m.id.as_ref()
                .map(|id| String::from_utf8_lossy(id).into_owned()),
        )
        .bind(m.id.clone())
        .bind(m.payload.clone())
        .bind(headers)
        .bind(now_ms())
    }

    /// Rows in the table (delivered or not).
    pub async fn len(&self) -> Result<i64> {
        let mut conn = Autocommit::begin(&self.pool, self.engine)
            .await
            .map_err(|e| db("count", e))?;
        let n = self
            .engine
            .query_scalar(AssertSqlSafe(format!(
                "SELECT COUNT(*) FROM {}",
                self.table
            )))
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| db("count", e))?;
        conn.commit().await.map_err(|e| db("count", e))?;
        Ok(n)
    }

    /// A source leasing rows for `lease` at a time (redelivered when it expires).
    pub fn source(&self, lease: Duration) -> SqlQueueSource {
        SqlQueueSource {
            queue: self.clone(),
            lease,
            poll: Duration::from_millis(100),
            stop_when_empty: false,
            batch: 1,
            leased: std::collections::VecDeque::new(),
            lease_ends: std::time::Instant::now(),
            leasing: None,
        }
    }
}

/// Leases rows with `FOR UPDATE SKIP LOCKED`, so concurrent consumers never get the same
/// row while its lease runs. Polls when the table has nothing visible.
///
/// One statement leases up to the consumer's read-ahead ([`Source::read_ahead`], at most
/// [`MAX_LEASE_BATCH`]; one row when it is not told) and hands the rows out one by one: a
/// group-committing consumer then pays one lease per group, not one per row. A row leased
/// but not yet handed out when the consumer stops waits out its lease.
pub struct SqlQueueSource {
    queue: SqlQueue,
    lease: Duration,
    poll: Duration,
    stop_when_empty: bool,
    batch: usize,
    /// Leased rows not handed out yet, oldest first, and when their lease ends.
    leased: std::collections::VecDeque<sqlx::postgres::PgRow>,
    lease_ends: std::time::Instant,
    /// The lease `next` started and has not seen the end of: a `next` dropped while it commits
    /// leaves it here for the next call (a row leased but never returned would wait out its
    /// lease).
    leasing: Option<BoxFuture<'static, Result<Vec<sqlx::postgres::PgRow>>>>,
}

/// The most rows one lease statement takes.
pub const MAX_LEASE_BATCH: usize = 256;

/// Leases the `batch` oldest visible rows (1..=[`MAX_LEASE_BATCH`], as `read_ahead` keeps it)
/// for `lease` (one statement in its own transaction),
/// oldest first.
fn lease_batch(
    queue: SqlQueue,
    lease: Duration,
    batch: usize,
) -> BoxFuture<'static, Result<Vec<sqlx::postgres::PgRow>>> {
    Box::pin(async move {
        let t = &queue.table;
        let now = now_ms();
        let mut conn = Autocommit::begin(&queue.pool, queue.engine)
            .await
            .map_err(|e| db("lease", e))?;
        let mut rows = queue.engine.query(AssertSqlSafe(format!(
            "UPDATE {t} SET leased_until = $1, deliveries = deliveries + 1
             WHERE id IN (SELECT id FROM {t} WHERE leased_until IS NULL OR leased_until < $2
                          ORDER BY id FOR UPDATE SKIP LOCKED LIMIT $3)
             RETURNING id, COALESCE(raw_id, convert_to(message_id, 'UTF8')) AS raw_id, payload, headers, deliveries"
        )))
        .bind(now + lease.as_millis() as i64)
        .bind(now)
        .bind(batch as i64)
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| db("lease", e))?;
        conn.commit().await.map_err(|e| db("lease", e))?;
        // RETURNING keeps no order: hand the rows out in the table's.
        rows.sort_by_key(|row| row.try_get::<i64, _>("id").unwrap_or(i64::MAX));
        Ok(rows)
    })
}

impl SqlQueueSource {
    /// Ends the stream (`Ok(None)`) once the table is empty: for batch jobs and tests.
    pub fn stop_when_empty(mut self) -> Self {
        self.stop_when_empty = true;
        self
    }
}

impl Source for SqlQueueSource {
    fn read_ahead(&mut self, deliveries: usize) {
        self.batch = deliveries.clamp(1, MAX_LEASE_BATCH);
    }

    async fn next(&mut self) -> Result<Option<Delivery>> {
        loop {
            // Rows whose lease ran out while they waited here are anyone's again: not handed
            // out (the next lease takes them, here or in another consumer).
            if std::time::Instant::now() >= self.lease_ends {
                self.leased.clear();
            }
            if self.leased.is_empty() {
                let leasing = self
                    .leasing
                    .get_or_insert_with(|| lease_batch(self.queue.clone(), self.lease, self.batch));
                let started = std::time::Instant::now();
                let rows = leasing.await;
                self.leasing = None;
                self.leased.extend(rows?);
                self.lease_ends = started + self.lease;
            }
            if let Some(row) = self.leased.pop_front() {
                let get = |e| db("decode", e);
                let id: i64 = row.try_get("id").map_err(get)?;
                let raw_id: Option<Vec<u8>> = row.try_get("raw_id").map_err(get)?;
                let headers: String = row.try_get("headers").map_err(get)?;
                let deliveries: i32 = row.try_get("deliveries").map_err(get)?;
                let mut meta = meta_of(&headers);
                meta.headers
                    .insert(QUEUE_ROW_HEADER.to_owned(), id.to_string());
                let raw = RawEnvelope {
                    id: raw_id,
                    payload: row.try_get("payload").map_err(get)?,
                    meta,
                };
                let acker = QueueAcker {
                    queue: self.queue.clone(),
                    row: id,
                };
                return Ok(Some(Delivery::new(
                    raw,
                    deliveries.max(1) as u32,
                    Box::new(acker),
                )));
            }
            if self.stop_when_empty && self.queue.len().await? == 0 {
                return Ok(None);
            }
            tokio::time::sleep(self.poll).await;
        }
    }
}

struct QueueAcker {
    queue: SqlQueue,
    row: i64,
}

impl QueueAcker {
    /// Runs `statement` (`{table}` and the row id as `$1`) for this delivery's row.
    async fn settle(self, statement: &str, doing: &str) -> Result<()> {
        let sql = statement.replace("{table}", &self.queue.table);
        let mut conn = Autocommit::begin(&self.queue.pool, self.queue.engine)
            .await
            .map_err(|e| db(doing, e))?;
        self.queue
            .engine
            .query(AssertSqlSafe(sql))
            .bind(self.row)
            .execute(&mut *conn)
            .await
            .map_err(|e| db(doing, e))?;
        conn.commit().await.map_err(|e| db(doing, e))
    }
}

impl Acker for QueueAcker {
    /// Deletes the row (a no-op when [`Dequeue`] already deleted it in the commit).
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        Box::pin(self.settle("DELETE FROM {table} WHERE id = $1", "delete"))
    }

    /// Ends the lease so the row is delivered again.
    fn nack(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        Box::pin(self.settle(
            "UPDATE {table} SET leased_until = NULL WHERE id = $1",
            "release",
        ))
    }
}

/// Wraps a handler so that the queue row is deleted in the handler's transaction, together
/// with the claim and the effect.
#[derive(Debug, Clone)]
pub struct Dequeue<H> {
    inner: H,
    delete: String,
    engine: Engine,
}

impl<H> Dequeue<H> {
    /// Wraps `inner` for rows of `queue`.
    pub fn new(queue: &SqlQueue, inner: H) -> Self {
        Self {
            inner,
            delete: format!("DELETE FROM {} WHERE id = $1", queue.table),
            engine: queue.engine,
        }
    }
}

impl<H: Handler<Transaction<'static, Postgres>>> Handler<Transaction<'static, Postgres>>
    for Dequeue<H>
{
    async fn handle(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        message: &Envelope,
    ) -> Result<Handled> {
        if let Some(row) = queue_row(message) {
            self.engine
                .query(AssertSqlSafe(self.delete.clone()))
                .bind(row)
                .execute(&mut **tx)
                .await
                .map_err(|e| db("dequeue in the effect's transaction", e))?;
        }
        self.inner.handle(tx, message).await
    }

    fn lock_key(&self, message: &oncely_core::RawEnvelope) -> Option<String> {
        self.inner.lock_key(message)
    }
}

/// The same for a handler written once for any database ([`AnyTx`]); the store must be the
/// queue's PostgreSQL (an [`oncely_sql::AnyStore::Postgres`]).
///
/// ```no_run
/// # async fn f<H: oncely_core::Handler<oncely_sql::AnyTx>>(queue: oncely_sql_queue::SqlQueue, store: oncely_sql::PgStore, handler: H) {
/// let consumer = oncely_core::Consumer::new(
///     oncely_core::ConsumerName::new("queue").unwrap(),
///     oncely_sql::AnyStore::from(store),
///     oncely_sql_queue::Dequeue::new(&queue, handler),
/// );
/// # }
/// ```
impl<H: Handler<AnyTx>> Handler<AnyTx> for Dequeue<H> {
    async fn handle(&self, tx: &mut AnyTx, message: &Envelope) -> Result<Handled> {
        if let Some(row) = queue_row(message) {
            tx.execute(&self.delete, &[row.into()]).await?;
        }
        self.inner.handle(tx, message).await
    }

    fn lock_key(&self, message: &oncely_core::RawEnvelope) -> Option<String> {
        self.inner.lock_key(message)
    }
}

/// The queue row a message came from, if it came from the queue.
fn queue_row(message: &Envelope) -> Option<i64> {
    message
        .meta()
        .headers
        .get(QUEUE_ROW_HEADER)
        .and_then(|r| r.parse::<i64>().ok())
}

#[cfg(test)]
mod tests {
    use super::{headers_of, meta_of};
    use oncely_core::Meta;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn headers_column_is_mapped_totally() {
        assert_eq!(
            headers_of(r#"{"a":"x","n":1}"#)
                .get("n")
                .map(String::as_str),
            Some("1")
        );
        assert_eq!(headers_of(r#"{"a":"x","n":1}"#)["a"], "x");
        assert!(headers_of("[1,2]").is_empty());
        assert!(headers_of("not json").is_empty());
    }

    #[test]
    fn meta_travels_in_the_headers_column() {
        let mut meta = Meta {
            entity_key: Some("acct-1".into()),
            version: Some(4),
            source_time: Some(UNIX_EPOCH + Duration::from_millis(1_700_000_000_123)),
            ..Meta::default()
        };
        meta.headers.insert("trace".into(), "t-1".into());
        meta.headers.insert(
            "traceparent".into(),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
        );
        let column: std::collections::BTreeMap<&str, String> =
            oncely_core::wire::meta_headers(&meta).into_iter().collect();
        let column = serde_json::to_string(&column).unwrap();
        assert_eq!(meta_of(&column), meta);
        // Rows written before meta travelled: plain headers only.
        assert_eq!(meta_of(r#"{"trace":"t-1"}"#).headers["trace"], "t-1");
    }
}
