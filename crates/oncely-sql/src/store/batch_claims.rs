//! The per-database batch claim of [`SqlStore`] (how each database claims many ids in one
//! statement per chunk: see [`crate::batch`], which holds the helpers these share).

use super::SqlStore;
use crate::batch::{CLAIM_LOCK_SEED, CLAIM_LOCKED, Found, list};
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
        let (inbox, now) = (self.tables().inbox(), Dialect::Postgres.now_ms_sql());
        let ids: Vec<String> = chunk.iter().map(|(id, _)| (*id).to_owned()).collect();
        let hashes: Vec<String> = chunk.iter().map(|(_, h)| h.to_hex()).collect();
        let partitioned = self.partitioned_inbox(tx).await?;
        let (unclaimed, plan_mode) = if partitioned {
            let plan_mode = self.lock_claims(tx, consumer, &ids).await?;
            let check = format!(
                "WHERE m.id NOT IN (SELECT message_id FROM {inbox} WHERE consumer = $1 AND message_id = ANY($2))"
            );
            (check, Some(plan_mode))
        } else {
            (String::new(), None)
        };
        let inserted: Vec<String> = self.engine().query_scalar(AssertSqlSafe(format!(
            "INSERT INTO {inbox} (consumer, message_id, payload_hash, received_at) \
             SELECT $1, m.id, m.hash, {now} FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS m(id, hash, n) \
             {unclaimed} ORDER BY m.n ON CONFLICT DO NOTHING RETURNING message_id"
        )))
        .bind(consumer.as_str())
        .bind(&ids)
        .bind(&hashes)
        .fetch_all(&mut **tx)
        .await
        .map_err(|e| db("batch claim", e))?;
        found.fresh.extend(inserted);
        let rest: Vec<String> = ids
            .into_iter()
            .filter(|id| !found.fresh.contains(id))
            .collect();
        let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
        if !rest.is_empty() {
            for (id, hash) in self.stored_hashes(&mut **tx, consumer, &rest).await? {
                found.store_hash(id, &hash)?;
            }
        }
        if let Some(plan_mode) = plan_mode {
            // The handler's statements after the claim plan as the user configured.
            self.engine()
                .query("SELECT set_config('plan_cache_mode', $1, true)")
                .bind(plan_mode)
                .execute(&mut **tx)
                .await
                .map_err(|e| db("restoring plan_cache_mode after a claim", e))?;
        }
        Ok(())
    }

    /// Whether the inbox is the time-partitioned layout (asked once per store, on `conn`).
    pub(crate) async fn partitioned_inbox(&self, conn: &mut sqlx::PgConnection) -> Result<bool> {
        let sql =
            "SELECT EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass($1))";
        let found = self.partitioned.get_or_try_init(|| async move {
            self.engine()
                .query_scalar::<_, bool>(sql)
                .bind(self.tables().inbox())
                .fetch_one(conn)
                .await
                .map_err(|e| db("reading the inbox layout", e))
        });
        Ok(*found.await?)
    }

    /// Takes the partitioned inbox's advisory lock of each id, in key order, and tells the
    /// guard trigger that the next insert's ids are locked and checked ([`CLAIM_LOCKED`]).
    /// Refuses isolation levels above `READ COMMITTED`, as the guard trigger does: the insert's
    /// check must see what the lock holders before it committed.
    ///
    /// Also plans the claim's statements for their own ids (`plan_cache_mode =
    /// force_custom_plan`) until the claim's end, and returns the setting's value to restore.
    /// A prepared statement's generic plan is made once, after its fifth run: made while
    /// today's partition is nearly empty (after midnight, in a fresh installation) it probes
    /// that partition by `consumer` alone and filters the ids, reading every row of the
    /// consumer on every claim as the partition fills. Measured with pgbench on a fresh
    /// partitioned inbox, groups of 64 random UUIDs, 4 connections: 57 groups/s in the first
    /// 10 s, 13 after 60 s with the generic plan (`enable_seqscan` off, the earlier remedy,
    /// does not prevent it); 400 to 480 groups/s up to 10^6 rows with custom plans.
    async fn lock_claims(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        consumer: &ConsumerName,
        ids: &[String],
    ) -> Result<String> {
        // OFFSET 0 keeps the sorted subquery whole, so the locks are taken in key order.
        let sql = format!(
            "SELECT current_setting('transaction_isolation'), prev.mode, \
             set_config('{CLAIM_LOCKED}', 'on', true), \
             set_config('plan_cache_mode', 'force_custom_plan', true) \
             FROM (SELECT current_setting('plan_cache_mode') AS mode) AS prev, \
             (SELECT count(pg_advisory_xact_lock(k)) \
             FROM (SELECT DISTINCT hashtextextended($1 || E'\\x1f' || id, {CLAIM_LOCK_SEED}) AS k \
             FROM unnest($2::text[]) AS id ORDER BY k OFFSET 0) AS keys) AS locked"
        );
        let (isolation, plan_mode, _, _): (String, String, String, String) = self
            .engine()
            .query_as(AssertSqlSafe(sql))
            .bind(consumer.as_str())
            .bind(ids)
            .fetch_one(&mut **tx)
            .await
            .map_err(|e| db("locking the claims of a partitioned inbox", e))?;
        if isolation != "read committed" {
            return Err(Error::config(format!(
                "the partitioned oncely inbox needs READ COMMITTED transactions (got {isolation})"
            )));
        }
        Ok(plan_mode)
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
        let inbox = self.tables().inbox();
        let row = format!("(?, ?, ?, {})", Dialect::MySql.now_ms_sql());
        let mut insert = self.engine().query(AssertSqlSafe(format!(
            "INSERT IGNORE INTO {inbox} (consumer, message_id, payload_hash, received_at) VALUES {}",
            vec![row.as_str(); rest.len()].join(", ")
        )));
        for (id, hash) in &rest {
            insert = insert.bind(consumer.as_str()).bind(*id).bind(hash.to_hex());
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
        let inbox = self.tables().inbox();
        let sql = format!(
            "SELECT message_id, payload_hash FROM {inbox} WHERE consumer = $1 AND message_id IN ({})",
            list(2, ids.len(), true)
        );
        let id = |id: &str| match DB::DIALECT {
            Dialect::MySql => Value::Bytes(id.as_bytes().to_vec()),
            _ => Value::from(id),
        };
        let args: Vec<Value> = std::iter::once(consumer.as_str().into())
            .chain(ids.iter().map(|i| id(i)))
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
