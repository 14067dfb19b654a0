//! [`SqlStore`]: the inbox and dead-letter tables in SQLite, PostgreSQL or MySQL/MariaDB.

mod batch_claims;
mod queries;
mod warm;

use crate::deploy::failover::Failover;
use crate::deploy::pooler::Autocommit;
use crate::deploy::replication::Replication;
use crate::dialect::Isolation;
use crate::engine::Engine;
use crate::error::db;
use crate::letter::LetterRow;
use crate::query::SqlDatabase;
use crate::tables::Tables;
use oncely_core::{
    Claim, ConsumerName, DeadLetter, Error, Inspect, MessageId, PayloadHash, Result, Store,
    StoredDeadLetter,
};
use queries::Queries;
#[cfg(feature = "mysql")]
use sqlx::MySql;
#[cfg(feature = "postgres")]
use sqlx::Postgres;
#[cfg(feature = "sqlite")]
use sqlx::Sqlite;
use sqlx::{AssertSqlSafe, Database, Pool, SqlSafeStr, SqlStr};
use std::sync::Arc;
use warm::Warm;

/// A store backed by a sqlx pool. The handler receives a `sqlx::Transaction<'static, DB>`
/// and writes its effect through it; the claim is in the same transaction.
///
/// Use the aliases [`SqliteStore`], [`PgStore`] and [`MySqlStore`].
pub struct SqlStore<DB: Database> {
    pool: Pool<DB>,
    tables: Tables,
    queries: Arc<Statements>,
    isolation: Option<Isolation>,
    /// MySQL's `max_allowed_packet`, read on the first dead letter.
    packet_limit: Arc<tokio::sync::OnceCell<usize>>,
    /// PostgreSQL: whether the inbox is the time-partitioned layout, read on the first claim
    /// (see [`crate::batch`]).
    pub(crate) partitioned: Arc<tokio::sync::OnceCell<bool>>,
    /// The hosts of a multi-host URL (see [`crate::deploy::failover`]).
    failover: Option<Arc<Failover<DB>>>,
    /// What a commit waits for (see [`crate::deploy::replication`]).
    replication: Replication,
    /// The facts of the connection, decided at connect ([`SqlStore::engine`]).
    engine: Engine,
    /// Transactions opened by the last commits, for the next `begin` (see [`warm`]).
    warm: Arc<Warm<DB>>,
}

impl<DB: Database> Clone for SqlStore<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            tables: self.tables.clone(),
            queries: self.queries.clone(),
            isolation: self.isolation,
            packet_limit: self.packet_limit.clone(),
            partitioned: self.partitioned.clone(),
            failover: self.failover.clone(),
            replication: self.replication,
            engine: self.engine,
            warm: self.warm.clone(),
        }
    }
}

/// The embedded default store.
#[cfg(feature = "sqlite")]
pub type SqliteStore = SqlStore<Sqlite>;
/// The PostgreSQL store.
#[cfg(feature = "postgres")]
pub type PgStore = SqlStore<Postgres>;
/// The MySQL / MariaDB store.
#[cfg(feature = "mysql")]
pub type MySqlStore = SqlStore<MySql>;

pub(crate) struct Statements {
    claim: SqlStr,
    claim_hash: SqlStr,
    stored_hash: SqlStr,
    upsert_dead_letter: SqlStr,
    dead_letters: SqlStr,
    dead_letters_of: SqlStr,
}

impl Statements {
    fn new(engine: Engine, tables: &Tables) -> Self {
        let q = Queries::new(engine.dialect(), tables, engine.portable());
        let s = |text: String| AssertSqlSafe(text).into_sql_str();
        Self {
            claim: s(q.claim),
            claim_hash: s(q.claim_hash),
            stored_hash: s(q.stored_hash),
            upsert_dead_letter: s(q.upsert_dead_letter),
            dead_letters: s(q.dead_letters),
            dead_letters_of: s(q.dead_letters_of),
        }
    }
}

/// Milliseconds since the Unix epoch.
fn stored_hash_of(text: &str) -> Result<PayloadHash> {
    PayloadHash::from_hex(text)
        .ok_or_else(|| Error::permanent(format!("inbox holds a malformed payload hash {text:?}")))
}

/// Commits a PostgreSQL transaction, refusing one that had aborted, in one round trip, and
/// opens the next one on the same connection.
///
/// PostgreSQL answers `COMMIT` with `ROLLBACK`, and no error, when a statement of the
/// transaction failed (a handler that caught the error and returned `Ok`): claim and effect
/// would be gone while the runtime acks. Any statement in such a transaction fails with
/// SQLSTATE 25P02, so a check statement before the `COMMIT` tells. sqlx keeps the server's
/// transaction status (`ReadyForQuery`) private and reports `COMMIT`'s `ROLLBACK` tag as
/// success, so the check is a statement; it travels in the same simple-protocol message as
/// the commit: `SELECT 1; COMMIT; BEGIN`. The server runs the statements in order and stops
/// at the first error, so a failed check leaves `COMMIT` unrun and the aborted transaction is
/// rolled back when `tx` drops. After a good commit the trailing `BEGIN` (`begin`: the
/// store's, with its isolation level) leaves `tx` holding an open, empty transaction, which
/// the store keeps for its next `begin` ([`warm`]): no `BEGIN` round trip for the next
/// message, and no `ROLLBACK` for this one. Per-statement timings: docs/perf/history.md
/// (issue 24).
///
/// Under [`Replication::Replicated`] the check is `SET LOCAL synchronous_commit = on`: it
/// fails the same way in an aborted transaction, and makes the commit wait for a
/// synchronous standby.
#[cfg(feature = "postgres")]
async fn commit_checked(
    tx: &mut sqlx::Transaction<'static, Postgres>,
    replication: Replication,
    begin: &str,
) -> Result<()> {
    let sql = AssertSqlSafe(format!(
        "{}; COMMIT; {begin}",
        replication.before_commit_sql()
    ));
    match sqlx::raw_sql(sql).execute(&mut **tx).await {
        Ok(_) => Ok(()),
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("25P02") => {
            Err(Error::transient(
                "the transaction had already aborted: a statement failed inside the handler and the \
                 error was not returned (PostgreSQL rolls the whole transaction back); nothing was \
                 committed, so the attempt is retried",
            )
            .with_source(sqlx::Error::Database(e)))
        }
        Err(e) => Err(db("commit", e)),
    }
}

impl<DB: SqlDatabase> SqlStore<DB> {
    /// A store over an existing pool, with the default table names.
    pub fn from_pool(pool: Pool<DB>) -> Self {
        Self::with_tables(pool, Tables::default())
    }

    /// A store over an existing pool, with custom table names. Its [`Engine`] is
    /// [`Engine::assumed`] (the store did not connect, so it checked nothing): on PostgreSQL
    /// statements are unnamed, as behind a transaction pooler. Stores opened from a URL
    /// (`connect`, `connect_with`) know their engine; set a known one with
    /// [`SqlStore::with_engine`].
    pub fn with_tables(pool: Pool<DB>, tables: Tables) -> Self {
        Self::with_engine_and_tables(pool, tables, Engine::assumed(DB::DIALECT))
    }

    pub(crate) fn with_engine_and_tables(pool: Pool<DB>, tables: Tables, engine: Engine) -> Self {
        let queries = Arc::new(Statements::new(engine, &tables));
        Self {
            pool,
            tables,
            queries,
            isolation: None,
            packet_limit: Arc::default(),
            partitioned: Arc::default(),
            failover: None,
            replication: Replication::AsConfigured,
            engine,
            warm: Arc::default(),
        }
    }

    /// The same store with the facts of its connection set to `engine` (of the same
    /// database): for a store made from a pool known to be direct, or known to be behind a
    /// transaction pooler or on a distributed engine.
    ///
    /// ```
    /// use oncely_sql::{Dialect, Engine};
    /// # async fn f(pool: oncely_sql::sqlx::PgPool) {
    /// let store = oncely_sql::PgStore::from_pool(pool).with_engine(Engine::direct(Dialect::Postgres));
    /// assert!(store.engine().caches_statements());
    /// # }
    /// ```
    pub fn with_engine(mut self, engine: Engine) -> Self {
        debug_assert_eq!(
            engine.dialect(),
            DB::DIALECT,
            "an engine of another database"
        );
        self.engine = engine;
        self.queries = Arc::new(Statements::new(engine, &self.tables));
        self
    }

    /// The store with portable mode on (the crate's tests; users force it with
    /// [`ConnectOptions::portable`](crate::ConnectOptions::portable), the one way).
    #[cfg(test)]
    pub(crate) fn with_portable(self, portable: bool) -> Self {
        let engine = self.engine.with_portable(portable);
        self.with_engine(engine)
    }

    /// The facts of the store's connection, decided when it connected: the database, portable
    /// mode, a transaction pooler in between ([`Engine`]).
    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// Whether the store runs in portable mode ([`Engine::portable`]).
    pub fn portable(&self) -> bool {
        self.engine.portable()
    }

    pub(crate) fn with_failover(mut self, failover: Option<Failover<DB>>) -> Self {
        self.failover = failover.map(Arc::new);
        self
    }

    pub(crate) fn with_replication(mut self, replication: Replication) -> Self {
        self.replication = replication;
        self
    }

    /// What the store's commits wait for ([`Replication`]).
    pub fn replication(&self) -> Replication {
        self.replication
    }

    /// The host in use, for [`SqlStore::failed_on`] (multi-host URLs only).
    fn host(&self) -> Option<usize> {
        self.failover.as_ref().map(|f| f.current())
    }

    /// An operation begun on `host` failed with `e`: an unavailable host is left for the next.
    fn failed_on(&self, host: Option<usize>, e: Error) -> Error {
        if e.is_unavailable() {
            self.warm.clear();
            if let (Some(failover), Some(host)) = (&self.failover, host) {
                failover.failed(&self.pool, host);
            }
        }
        e
    }

    /// The statement that begins this store's transactions, at its isolation level, or `None`
    /// for sqlx's `BEGIN` (a checked commit ends with it too, see `commit_checked`).
    fn begin_sql(&self) -> Option<&'static str> {
        Isolation::begin_sql(self.isolation, DB::DIALECT)
    }

    /// Runs the store's transactions at `level` instead of the server's default
    /// (see [`Isolation`] for what each level means for claims).
    pub fn with_isolation(mut self, level: Isolation) -> Self {
        self.isolation = Some(level);
        // Transactions kept by the store this was cloned from began at its level, not this one.
        self.warm = Arc::default();
        self
    }

    /// The isolation level set with [`SqlStore::with_isolation`], if any.
    pub fn isolation(&self) -> Option<Isolation> {
        self.isolation
    }

    /// The pool (for the application's own queries).
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// The table naming in use.
    pub fn tables(&self) -> &Tables {
        &self.tables
    }
}

#[cfg(feature = "mysql")]
impl SqlStore<MySql> {
    /// Whether [`Store::committed_claims`] leaves duplicates to the claim: never here.
    async fn reads_in_claim_only(&self, _: &mut sqlx::MySqlConnection) -> Result<bool> {
        Ok(false)
    }

    /// MySQL's `max_allowed_packet` (the largest statement the server takes), read once.
    async fn packet_limit(&self) -> Result<Option<usize>> {
        let limit = self
            .packet_limit
            .get_or_try_init(|| async {
                self.engine
                    .query_scalar::<_, i64>("SELECT CAST(@@max_allowed_packet AS SIGNED)")
                    .fetch_one(&self.pool)
                    .await
                    .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
                    .map_err(|e| db("reading max_allowed_packet", e))
            })
            .await?;
        Ok(Some(*limit))
    }

    async fn commit_tx(
        &self,
        tx: sqlx::Transaction<'static, MySql>,
        _: Option<usize>,
    ) -> Result<()> {
        tx.commit().await.map_err(|e| db("commit", e))
    }
}

#[cfg(feature = "postgres")]
impl SqlStore<Postgres> {
    async fn packet_limit(&self) -> Result<Option<usize>> {
        Ok(None)
    }

    /// Whether [`Store::committed_claims`] leaves duplicates to the claim: on the
    /// time-partitioned inbox, where each lookup probes every partition.
    async fn reads_in_claim_only(&self, conn: &mut sqlx::PgConnection) -> Result<bool> {
        self.partitioned_inbox(conn).await
    }

    /// Commits `tx` (begun on `host`) and keeps the transaction the commit opens for the next
    /// `begin`; at most half the pool's connections wait there, so the store's other reads
    /// and writes always find one.
    async fn commit_tx(
        &self,
        mut tx: sqlx::Transaction<'static, Postgres>,
        host: Option<usize>,
    ) -> Result<()> {
        let begin = self.begin_sql().unwrap_or("BEGIN");
        commit_checked(&mut tx, self.replication, begin).await?;
        let limit = self.pool.options().get_max_connections() as usize / 2;
        self.warm.keep(tx, host, limit);
        Ok(())
    }
}

#[cfg(feature = "sqlite")]
impl SqlStore<Sqlite> {
    /// Whether [`Store::committed_claims`] leaves duplicates to the claim: never here.
    async fn reads_in_claim_only(&self, _: &mut sqlx::SqliteConnection) -> Result<bool> {
        Ok(false)
    }

    async fn packet_limit(&self) -> Result<Option<usize>> {
        Ok(None)
    }

    async fn commit_tx(
        &self,
        tx: sqlx::Transaction<'static, Sqlite>,
        _: Option<usize>,
    ) -> Result<()> {
        tx.commit().await.map_err(|e| db("commit", e))
    }
}

/// The columns of the inbox and dead-letter tables this version reads and writes (after
/// [`crate::INBOX`]'s last migration), checked at a consumer's start by
/// [`Store::check_ready`]: one `SELECT … WHERE 1 = 0` each, so a missing table, a table of an
/// older version or a missing grant stops the consumer with a [`Config`] error
/// (`oncely_core::ErrorKind::Config`, see [`crate::error_kind`]) instead of failing every claim.
///
/// [`Config`]: oncely_core::ErrorKind::Config
fn ready_checks(tables: &Tables) -> [(String, &'static str); 2] {
    [
        (
            tables.inbox(),
            "consumer, message_id, payload_hash, received_at",
        ),
        (
            tables.dead_letters(),
            "consumer, message_id, raw_id, payload, payload_hash, stored_hash, reason, detail, \
             attempts, entity_key, version, source_time, headers, dead_lettered_at, id_hash, \
             last_seen, deliveries",
        ),
    ]
}

macro_rules! sql_store {
    ($db:ty) => {
        impl Store for SqlStore<$db> {
            type Tx = sqlx::Transaction<'static, $db>;

            async fn begin(&self) -> Result<Self::Tx> {
                let host = self.host();
                if !self.pool.is_closed()
                    && let Some(tx) = self.warm.take(host)
                {
                    return Ok(tx);
                }
                match self.begin_sql() {
                    Some(sql) => self.pool.begin_with(sql).await,
                    None => self.pool.begin().await,
                }
                .map_err(|e| self.failed_on(host, db("begin", e)))
            }

            async fn committed_claim(
                &self,
                consumer: &ConsumerName,
                id: &MessageId,
                hash: PayloadHash,
            ) -> Result<bool> {
                let stored = self.claimed_hash(consumer, id.as_str()).await?;
                // A row read outside a transaction was committed (with this store's durability).
                Ok(stored == Some(hash))
            }

            async fn committed_claims(
                &self,
                consumer: &ConsumerName,
                items: &[(MessageId, PayloadHash)],
            ) -> Result<Vec<bool>> {
                let unique = crate::batch::unique_sorted(items);
                let mut stored = std::collections::HashMap::new();
                let mut conn = Autocommit::begin(&self.pool, self.engine)
                    .await
                    .map_err(|e| db("reading claimed payload hashes", e))?;
                // The partitioned inbox probes every partition per id: the claim does that
                // once anyway, so reading first would double it for every fresh message.
                let skip = self.reads_in_claim_only(&mut *conn).await?;
                for chunk in unique.chunks(crate::batch::CHUNK).filter(|_| !skip) {
                    let ids: Vec<&str> = chunk.iter().map(|(id, _)| *id).collect();
                    // Rows read outside the store's transactions are committed ones.
                    for (id, hash) in self.stored_hashes(&mut *conn, consumer, &ids).await? {
                        stored.insert(id, stored_hash_of(&hash)?);
                    }
                }
                conn.commit()
                    .await
                    .map_err(|e| db("reading claimed payload hashes", e))?;
                Ok(items
                    .iter()
                    .map(|(id, hash)| stored.get(id.as_str()) == Some(hash))
                    .collect())
            }

            async fn claim(
                &self,
                tx: &mut Self::Tx,
                consumer: &ConsumerName,
                id: &MessageId,
                hash: PayloadHash,
            ) -> Result<Claim> {
                let inserted = self
                    .engine
                    .query(self.queries.claim.clone())
                    .bind(consumer.as_str())
                    .bind(id.as_str())
                    .bind(hash.to_hex())
                    .execute(&mut **tx)
                    .await
                    .map_err(|e| db("claim", e))?
                    .rows_affected();
                if inserted == 1 {
                    return Ok(Claim::Fresh);
                }
                let stored: String = self
                    .engine
                    .query_scalar(self.queries.claim_hash.clone())
                    .bind(consumer.as_str())
                    .bind(id.as_str())
                    .fetch_one(&mut **tx)
                    .await
                    .map_err(|e| db("reading the claimed payload hash", e))?;
                let stored = stored_hash_of(&stored)?;
                Ok(Claim::given(Some(stored), hash))
            }

            async fn claim_batch(
                &self,
                tx: &mut Self::Tx,
                consumer: &ConsumerName,
                items: &[(MessageId, PayloadHash)],
            ) -> Result<Vec<Claim>> {
                let unique = crate::batch::unique_sorted(items);
                let mut found = crate::batch::Found::default();
                for chunk in unique.chunks(crate::batch::CHUNK) {
                    self.claim_chunk(tx, consumer, chunk, &mut found).await?;
                }
                crate::batch::resolve(items, &found)
            }

            async fn commit(&self, tx: Self::Tx) -> Result<()> {
                let host = self.host();
                self.commit_tx(tx, host)
                    .await
                    .map_err(|e| self.failed_on(host, e))
            }

            async fn rollback(&self, tx: Self::Tx) -> Result<()> {
                tx.rollback().await.map_err(|e| db("rollback", e))
            }

            async fn dead_letter(&self, letter: &DeadLetter) -> Result<()> {
                let limit = self.packet_limit().await?;
                let row = LetterRow::new(letter, <$db as SqlDatabase>::DIALECT, limit);
                let query = self
                    .engine
                    .query(self.queries.upsert_dead_letter.clone())
                    .bind(row.consumer)
                    .bind(row.message_id)
                    .bind(row.raw_id.as_deref())
                    .bind(&*row.payload)
                    .bind(row.payload_hash)
                    .bind(row.stored_hash)
                    .bind(row.reason)
                    .bind(row.detail)
                    .bind(row.attempts)
                    .bind(row.entity_key)
                    .bind(row.version)
                    .bind(row.source_time)
                    .bind(row.headers)
                    .bind(row.id_hash);
                let failed = |e| db("storing a dead letter", e);
                if self.replication == Replication::AsConfigured {
                    let mut conn = Autocommit::begin(&self.pool, self.engine)
                        .await
                        .map_err(failed)?;
                    query.execute(&mut *conn).await.map_err(failed)?;
                    // The runtime acks after this returns: the row must be committed by then.
                    return conn.commit().await.map_err(failed);
                }
                // Replicated: in a transaction of the store, whose commit waits for a standby.
                let mut tx = self.begin().await?;
                query.execute(&mut *tx).await.map_err(failed)?;
                self.commit(tx).await
            }

            async fn check_ready(&self) -> Result<()> {
                for (table, columns) in ready_checks(&self.tables) {
                    // Simple protocol (no prepared statement): the same under any pooler.
                    sqlx::raw_sql(AssertSqlSafe(format!(
                        "SELECT {columns} FROM {table} WHERE 1 = 0"
                    )))
                    .execute(&self.pool)
                    .await
                    .map_err(|e| db(&format!("checking table {table}"), e))?;
                }
                Ok(())
            }
        }

        impl Inspect for SqlStore<$db> {
            async fn claimed_hash(
                &self,
                consumer: &ConsumerName,
                id: &str,
            ) -> Result<Option<PayloadHash>> {
                let failed = |e| db("reading the inbox", e);
                let mut conn = Autocommit::begin(&self.pool, self.engine)
                    .await
                    .map_err(failed)?;
                let stored: Option<String> = self
                    .engine
                    .query_scalar(self.queries.stored_hash.clone())
                    .bind(consumer.as_str())
                    .bind(id)
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err(failed)?;
                conn.commit().await.map_err(failed)?;
                stored.as_deref().map(stored_hash_of).transpose()
            }

            async fn dead_letters(
                &self,
                consumer: Option<&ConsumerName>,
            ) -> Result<Vec<StoredDeadLetter>> {
                let failed = |e| db("reading dead letters", e);
                let mut conn = Autocommit::begin(&self.pool, self.engine)
                    .await
                    .map_err(failed)?;
                let (sql, args) = match consumer {
                    Some(c) => (&self.queries.dead_letters_of, vec![c.as_str().into()]),
                    None => (&self.queries.dead_letters, vec![]),
                };
                let types = crate::letter::DEAD_LETTER_TYPES;
                let rows = <$db as SqlDatabase>::fetch(
                    &mut *conn,
                    self.engine,
                    sql.as_str(),
                    &args,
                    types,
                )
                .await
                .map_err(failed)?;
                conn.commit().await.map_err(failed)?;
                Ok(rows
                    .iter()
                    .map(|r| crate::letter::decode_dead_letter(r))
                    .collect())
            }
        }
    };
}

#[cfg(feature = "sqlite")]
sql_store!(Sqlite);
#[cfg(feature = "postgres")]
sql_store!(Postgres);
#[cfg(feature = "mysql")]
sql_store!(MySql);
