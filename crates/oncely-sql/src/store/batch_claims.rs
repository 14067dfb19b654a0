//! The per-database batch claim of [`SqlStore`] (how each database claims many ids in one
//! statement per chunk: see [`crate::batch`], which holds the helpers these share).

use super::SqlStore;
use crate::batch::{Found, list, padded, shape_len};
use crate::dialect::Dialect;
use crate::error::db;
use crate::query::{Column, SqlDatabase, Value};
use oncely_core::{Claim, ConsumerName, Error, MessageId, PayloadHash, Result, Store};
#[cfg(feature = "mysql")]
use sqlx::MySql;
#[cfg(feature = "postgres")]
use sqlx::Postgres;
#[cfg(feature = "sqlite")]
use sqlx::Sqlite;
use sqlx::{AssertSqlSafe, Transaction};

#[cfg(feature = "postgres")]
impl SqlStore<Postgres> {
    pub(crate) async fn claim_chunk(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        consumer: &ConsumerName,
        chunk: &[(&str, PayloadHash)],
        found: &mut Found,
    ) -> Result<()> {
        if self.partitioned_inbox(tx).await? {
            return self
                .claim_chunk_partitioned(tx, consumer, chunk, found)
                .await;
        }
        let (inbox, now) = (self.tables().inbox(), Dialect::Postgres.now_ms_sql());
        let (ids, hashes) = columns(chunk);
        let inserted: Vec<String> = self
            .engine()
            .query_scalar(AssertSqlSafe(format!(
                "INSERT INTO {inbox} (consumer, message_id, payload_hash, received_at) \
                 SELECT $1, m.id, m.hash, {now} FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS m(id, hash, n) \
                 ORDER BY m.n ON CONFLICT DO NOTHING RETURNING message_id"
            )))
            .bind(consumer.as_str())
            .bind(&ids)
            .bind(&hashes)
            .fetch_all(&mut **tx)
            .await
            .map_err(|e| db("batch claim", e))?;
        found.fresh.extend(inserted);
        let rest: Vec<&str> = ids
            .into_iter()
            .filter(|id| !found.fresh.contains(*id))
            .collect();
        if !rest.is_empty() {
            for (id, hash) in self.stored_hashes(&mut **tx, consumer, &rest).await? {
                found.store_hash(id, &hash)?;
            }
        }
        Ok(())
    }

    /// The time-partitioned inbox's group claim: one call of the layout's `inbox_claim`
    /// function (oncely-ops, migration 5), which locks the ids, probes the partitions and the
    /// sealed days' keys, inserts the ids nothing holds and returns them (no hash) with the
    /// stored hash of each id already held.
    async fn claim_chunk_partitioned(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        consumer: &ConsumerName,
        chunk: &[(&str, PayloadHash)],
        found: &mut Found,
    ) -> Result<()> {
        let (claim, now) = (self.tables().inbox_claim(), Dialect::Postgres.now_ms_sql());
        let (ids, hashes) = columns(chunk);
        let rows: Vec<(String, Option<String>)> = self
            .engine()
            .query_as(AssertSqlSafe(format!(
                "SELECT claimed_id, stored_hash FROM {claim}($1, $2::text[], $3::text[], {now})"
            )))
            .bind(consumer.as_str())
            .bind(&ids)
            .bind(&hashes)
            .fetch_all(&mut **tx)
            .await
            .map_err(|e| match e.as_database_error() {
                // Raised by the function under an isolation level above READ COMMITTED.
                Some(d) if d.code().as_deref() == Some("0A000") => Error::config(d.message()),
                _ => db("batch claim", e),
            })?;
        for (id, stored) in rows {
            match stored {
                None => {
                    found.fresh.insert(id);
                }
                Some(hash) => found.store_hash(id, &hash)?,
            }
        }
        Ok(())
    }

    /// Whether the inbox is the time-partitioned layout (asked once per store, on `conn`). A
    /// partitioned inbox without its claim-key index (the layout's migration 3) or its claim
    /// function (migration 5) is a configuration error that says how to upgrade it.
    pub(crate) async fn partitioned_inbox(&self, conn: &mut sqlx::PgConnection) -> Result<bool> {
        let sql = "SELECT EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass($1)), \
                   EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
                           WHERE i.indrelid = to_regclass($1) AND c.relname = $2), \
                   to_regprocedure($3 || '(text, text[], text[], bigint)') IS NOT NULL";
        let found = self.partitioned.get_or_try_init(|| async move {
            let inbox = self.tables().inbox();
            let (partitioned, keyed, callable): (bool, bool, bool) = self
                .engine()
                .query_as(sql)
                .bind(&inbox)
                .bind(format!("{}inbox_claim_key", self.tables().prefix()))
                .bind(self.tables().inbox_claim())
                .fetch_one(conn)
                .await
                .map_err(|e| db("reading the inbox layout", e))?;
            let missing = match (keyed, callable) {
                _ if !partitioned => None,
                (false, _) => {
                    Some("its claim-key index (the layout's migration 3, partitioned_key)")
                }
                (_, false) => {
                    Some("its claim function (the layout's migration 5, partitioned_claim_fn)")
                }
                _ => None,
            };
            if let Some(missing) = missing {
                return Err(Error::config(format!(
                    "the partitioned inbox {inbox} lacks {missing}: upgrade it with \
                     `oncely partition install` or `oncely migrate --with partitioned` \
                     (docs/retention.md)"
                )));
            }
            Ok(partitioned)
        });
        Ok(*found.await?)
    }

    /// `(message_id, payload_hash)` of the ids the inbox holds for `consumer`.
    pub(crate) async fn stored_hashes<'e>(
        &self,
        executor: impl sqlx::PgExecutor<'e>,
        consumer: &ConsumerName,
        ids: &[&str],
    ) -> Result<Vec<(String, String)>> {
        let inbox = self.tables().inbox();
        self.engine().query_as(AssertSqlSafe(format!(
            "SELECT message_id, payload_hash FROM {inbox} WHERE consumer = $1 AND message_id = ANY($2)"
        )))
        .bind(consumer.as_str())
        .bind(ids)
        .fetch_all(executor)
        .await
        .map_err(|e| db("reading claimed payload hashes", e))
    }
}

/// The ids and the hex payload hashes of `chunk`, as two arrays to bind.
#[cfg(feature = "postgres")]
fn columns<'a>(chunk: &[(&'a str, PayloadHash)]) -> (Vec<&'a str>, Vec<String>) {
    chunk.iter().map(|(id, hash)| (*id, hash.to_hex())).unzip()
}

#[cfg(feature = "sqlite")]
impl SqlStore<Sqlite> {
    pub(crate) async fn claim_chunk(
        &self,
        tx: &mut Transaction<'static, Sqlite>,
        consumer: &ConsumerName,
        chunk: &[(&str, PayloadHash)],
        found: &mut Found,
    ) -> Result<()> {
        let inbox = self.tables().inbox();
        // One `julianday('now')` for the whole statement (SQLite fixes 'now' per statement).
        let now = Dialect::Sqlite.now_ms_sql();
        let rows: Vec<String> = (0..chunk.len())
            .map(|i| format!("(?1, ?{}, ?{}, {now})", 2 + 2 * i, 3 + 2 * i))
            .collect();
        let mut insert = self
            .engine()
            .query_scalar(AssertSqlSafe(format!(
                "INSERT INTO {inbox} (consumer, message_id, payload_hash, received_at) VALUES {} \
             ON CONFLICT DO NOTHING RETURNING message_id",
                rows.join(", ")
            )))
            .bind(consumer.as_str());
        for (id, hash) in chunk {
            insert = insert.bind(*id).bind(hash.to_hex());
        }
        let inserted: Vec<String> = insert
            .fetch_all(&mut **tx)
            .await
            .map_err(|e| db("batch claim", e))?;
        found.fresh.extend(inserted);
        let rest: Vec<&str> = chunk
            .iter()
            .map(|(id, _)| *id)
            .filter(|id| !found.fresh.contains(*id))
            .collect();
        if rest.is_empty() {
            return Ok(());
        }
        for (id, hash) in self.stored_hashes(tx, consumer, &rest).await? {
            found.store_hash(id, &hash)?;
        }
        Ok(())
    }

    /// `(message_id, payload_hash)` of the ids the inbox holds for `consumer`.
    pub(crate) async fn stored_hashes(
        &self,
        conn: &mut sqlx::SqliteConnection,
        consumer: &ConsumerName,
        ids: &[&str],
    ) -> Result<Vec<(String, String)>> {
        self.stored_hashes_listed(conn, consumer, ids).await
    }
}

#[cfg(feature = "mysql")]
impl SqlStore<MySql> {
    pub(crate) async fn claim_chunk(
        &self,
        tx: &mut Transaction<'static, MySql>,
        consumer: &ConsumerName,
        chunk: &[(&str, PayloadHash)],
        found: &mut Found,
    ) -> Result<()> {
        // 1. Ids already claimed (a plain read: no gap locks).
        let ids: Vec<&str> = chunk.iter().map(|(id, _)| *id).collect();
        for (id, hash) in self.stored_hashes(tx, consumer, &ids).await? {
            found.store_hash(id, &hash)?;
        }
        let rest: Vec<(&str, PayloadHash)> = chunk
            .iter()
            .filter(|(id, _)| !found.stored.contains_key(*id))
            .copied()
            .collect();
        if rest.is_empty() {
            return Ok(());
        }
        if self.portable() {
            return self.claim_each(tx, consumer, rest, found).await;
        }
        // 2. Claim the rest with one statement; all inserted means all fresh.
        let run = |sql: &'static str| sqlx::raw_sql(sql);
        run("SAVEPOINT oncely_batch")
            .execute(&mut **tx)
            .await
            .map_err(|e| db("batch savepoint", e))?;
        let (inbox, places) = (self.tables().inbox(), shape_len(rest.len()));
        let row = format!("(?, ?, ?, {})", Dialect::MySql.now_ms_sql());
        let mut insert = self.engine().query(AssertSqlSafe(format!(
            "INSERT IGNORE INTO {inbox} (consumer, message_id, payload_hash, received_at) VALUES {}",
            vec![row.as_str(); places].join(", ")
        )));
        // The places beyond `rest` repeat its last claim, which the statement then ignores as
        // a duplicate key: `inserted` counts `rest`'s fresh ids only.
        for (id, hash) in padded(&rest) {
            insert = insert.bind(consumer.as_str()).bind(id).bind(hash.to_hex());
        }
        let inserted = insert
            .execute(&mut **tx)
            .await
            .map_err(|e| db("batch claim", e))?
            .rows_affected();
        if inserted == rest.len() as u64 {
            run("RELEASE SAVEPOINT oncely_batch")
                .execute(&mut **tx)
                .await
                .map_err(|e| db("batch savepoint", e))?;
            found
                .fresh
                .extend(rest.iter().map(|(id, _)| (*id).to_owned()));
            return Ok(());
        }
        // 3. Someone claimed one of them meanwhile: undo and claim one at a time.
        run("ROLLBACK TO SAVEPOINT oncely_batch")
            .execute(&mut **tx)
            .await
            .map_err(|e| db("batch savepoint", e))?;
        self.claim_each(tx, consumer, rest, found).await
    }

    /// Claims `rest` one at a time, which tells exactly which ones are fresh.
    async fn claim_each(
        &self,
        tx: &mut Transaction<'static, MySql>,
        consumer: &ConsumerName,
        rest: Vec<(&str, PayloadHash)>,
        found: &mut Found,
    ) -> Result<()> {
        for (id, hash) in rest {
            let message = MessageId::new(id).map_err(|e| Error::permanent(e.to_string()))?;
            match self.claim(tx, consumer, &message, hash).await? {
                Claim::Fresh => {
                    found.fresh.insert(id.to_owned());
                }
                Claim::Duplicate => {
                    found.stored.insert(id.to_owned(), hash);
                }
                Claim::Conflict { stored } => {
                    found.stored.insert(id.to_owned(), stored);
                }
            }
        }
        Ok(())
    }

    /// `(message_id, payload_hash)` of the ids the inbox holds for `consumer`.
    pub(crate) async fn stored_hashes(
        &self,
        conn: &mut sqlx::MySqlConnection,
        consumer: &ConsumerName,
        ids: &[&str],
    ) -> Result<Vec<(String, String)>> {
        self.stored_hashes_listed(conn, consumer, ids).await
    }
}

impl<DB: SqlDatabase> SqlStore<DB> {
    /// `(message_id, payload_hash)` of the ids the inbox holds for `consumer`, the ids bound
    /// one by one in an `IN` list (SQLite and MySQL; PostgreSQL binds them as one array).
    /// MySQL's ids are bytes (`VARBINARY`), SQLite's text.
    async fn stored_hashes_listed(
        &self,
        conn: &mut DB::Connection,
        consumer: &ConsumerName,
        ids: &[&str],
    ) -> Result<Vec<(String, String)>> {
        let (inbox, places) = (self.tables().inbox(), shape_len(ids.len()));
        let sql = format!(
            "SELECT message_id, payload_hash FROM {inbox} WHERE consumer = $1 AND message_id IN ({})",
            list(2, places, true)
        );
        let id = |id: &str| match DB::DIALECT {
            Dialect::MySql => Value::Bytes(id.as_bytes().to_vec()),
            _ => Value::from(id),
        };
        let args: Vec<Value> = std::iter::once(consumer.as_str().into())
            .chain(padded(ids).map(id))
            .collect();
        let rows = DB::fetch(
            conn,
            self.engine(),
            &sql,
            &args,
            &[Column::Text, Column::Text],
        )
        .await
        .map_err(|e| db("reading claimed payload hashes", e))?;
        Ok(rows
            .iter()
            .map(|row| (row[0].text(), row[1].text()))
            .collect())
    }
}
