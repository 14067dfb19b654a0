//! The per-database batch claim of [`SqlStore`] (how each database claims many ids in one
//! statement per chunk: see [`crate::batch`], which holds the helpers these share).

use super::SqlStore;
use crate::batch::{CLAIM_LOCKED, Found, Layout, claim_key_sql, list, padded, shape_len};
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
        let ids: Vec<String> = chunk.iter().map(|(id, _)| (*id).to_owned()).collect();
        let layout = self.inbox_layout(tx).await?;
        let planner = if layout.partitioned {
            Some(self.lock_claims(tx, consumer, &ids).await?)
        } else {
            None
        };
        let probe = match layout {
            Layout {
                partitioned: false, ..
            } => Probe::Unique,
            Layout { sealed: true, .. } => Probe::SealedAndRecent,
            _ => Probe::EveryPartition,
        };
        let inserted = self.insert_claims(tx, consumer, chunk, probe).await?;
        found.fresh.extend(inserted);
        let rest: Vec<String> = ids
            .into_iter()
            .filter(|id| !found.fresh.contains(id))
            .collect();
        if !rest.is_empty() {
            let stored = if layout.partitioned {
                self.stored_hashes_keyed(tx, consumer, &rest).await?
            } else {
                let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
                self.stored_hashes(&mut **tx, consumer, &rest).await?
            };
            for (id, hash) in stored {
                found.store_hash(id, &hash)?;
            }
        }
        if probe == Probe::SealedAndRecent {
            // A sealed key with no row behind it (the row was deleted or its day dropped since
            // the keys were built, or two ids share a 64-bit key): claimed after a probe of
            // every partition, which alone tells.
            let unheld: Vec<(&str, PayloadHash)> = chunk
                .iter()
                .filter(|(id, _)| !found.fresh.contains(*id) && !found.stored.contains_key(*id))
                .copied()
                .collect();
            if !unheld.is_empty() {
                let inserted =
                    (self.insert_claims(tx, consumer, &unheld, Probe::EveryPartition)).await?;
                found.fresh.extend(inserted);
            }
        }
        if let Some(before) = planner {
            // The handler's statements after the claim plan as the user configured.
            let restore: Vec<String> = (CLAIM_PLANNER.iter().enumerate())
                .map(|(i, (name, _))| format!("set_config('{name}', ${}, true)", i + 1))
                .collect();
            let mut restore = self
                .engine()
                .query(AssertSqlSafe(format!("SELECT {}", restore.join(", "))));
            for value in before {
                restore = restore.bind(value);
            }
            restore
                .execute(&mut **tx)
                .await
                .map_err(|e| db("restoring the planner settings after a claim", e))?;
        }
        Ok(())
    }

    /// Inserts the claims of `chunk` that `probe` finds nowhere; returns the ids inserted.
    async fn insert_claims(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        consumer: &ConsumerName,
        chunk: &[(&str, PayloadHash)],
        probe: Probe,
    ) -> Result<Vec<String>> {
        let (inbox, now) = (self.tables().inbox(), Dialect::Postgres.now_ms_sql());
        let ids: Vec<&str> = chunk.iter().map(|(id, _)| *id).collect();
        let hashes: Vec<String> = chunk.iter().map(|(_, h)| h.to_hex()).collect();
        let unclaimed = probe.filter(self.tables());
        self.engine().query_scalar(AssertSqlSafe(format!(
            "INSERT INTO {inbox} (consumer, message_id, payload_hash, received_at) \
             SELECT $1, m.id, m.hash, {now} FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS m(id, hash, n) \
             {unclaimed} ORDER BY m.n ON CONFLICT DO NOTHING RETURNING message_id"
        )))
        .bind(consumer.as_str())
        .bind(&ids)
        .bind(&hashes)
        .fetch_all(&mut **tx)
        .await
        .map_err(|e| db("batch claim", e))
    }

    /// Whether the inbox is the time-partitioned layout (asked once per store, on `conn`).
    pub(crate) async fn partitioned_inbox(&self, conn: &mut sqlx::PgConnection) -> Result<bool> {
        Ok(self.inbox_layout(conn).await?.partitioned)
    }

    /// The inbox's [`Layout`] (asked once per store, on `conn`). A partitioned inbox without
    /// its claim-key index (an installation from before the layout's third migration) is a
    /// configuration error that says how to upgrade it: the claims would read every partition
    /// whole without it. One without the sealed days' keys (before the fourth) is probed
    /// partition by partition, as before them.
    async fn inbox_layout(&self, conn: &mut sqlx::PgConnection) -> Result<Layout> {
        let sql = "SELECT EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass($1)), \
                   EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
                           WHERE i.indrelid = to_regclass($1) AND c.relname = $2), \
                   to_regclass($3) IS NOT NULL";
        let found = self.partitioned.get_or_try_init(|| async move {
            let inbox = self.tables().inbox();
            let (partitioned, keyed, sealed): (bool, bool, bool) = self
                .engine()
                .query_as(sql)
                .bind(&inbox)
                .bind(format!("{}inbox_claim_key", self.tables().prefix()))
                .bind(self.tables().inbox_sealed_state())
                .fetch_one(conn)
                .await
                .map_err(|e| db("reading the inbox layout", e))?;
            if partitioned && !keyed {
                return Err(Error::config(format!(
                    "the partitioned inbox {inbox} lacks its claim-key index (the layout's \
                     migration 3, partitioned_key): upgrade it with `oncely partition install` \
                     or `oncely migrate --with partitioned` (docs/retention.md)"
                )));
            }
            Ok(Layout {
                partitioned,
                sealed: partitioned && sealed,
            })
        });
        Ok(*found.await?)
    }

    /// Takes the partitioned inbox's advisory lock of each id, in key order, and tells the
    /// guard trigger that the next insert's ids are locked and checked ([`CLAIM_LOCKED`]).
    /// Refuses isolation levels above `READ COMMITTED`, as the guard trigger does: the insert's
    /// check must see what the lock holders before it committed.
    ///
    /// Also sets [`CLAIM_PLANNER`] until the claim's end, and returns the settings' values to
    /// restore.
    async fn lock_claims(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        consumer: &ConsumerName,
        ids: &[String],
    ) -> Result<Vec<String>> {
        // OFFSET 0 keeps the sorted subquery whole, so the locks are taken in key order.
        let key = claim_key_sql("$1", "id");
        let (get, set): (Vec<String>, Vec<String>) = CLAIM_PLANNER
            .iter()
            .map(|(name, value)| {
                let get = format!("current_setting('{name}')");
                (get, format!("set_config('{name}', '{value}', true)"))
            })
            .unzip();
        let (get, set) = (get.join(", "), format!("ARRAY[{}]", set.join(", ")));
        let sql = format!(
            "SELECT current_setting('transaction_isolation'), prev.settings, \
             set_config('{CLAIM_LOCKED}', 'on', true), {set} \
             FROM (SELECT ARRAY[{get}] AS settings) AS prev, \
             (SELECT count(pg_advisory_xact_lock(k)) \
             FROM (SELECT DISTINCT {key} AS k \
             FROM unnest($2::text[]) AS id ORDER BY k OFFSET 0) AS keys) AS locked"
        );
        let (isolation, before, ..): (String, Vec<String>, String, Vec<String>) = self
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
        Ok(before)
    }

    /// `(message_id, payload_hash)` of the ids the partitioned inbox holds for `consumer`,
    /// found by the claim-key index ([`keyed_rows`]).
    async fn stored_hashes_keyed(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        consumer: &ConsumerName,
        ids: &[String],
    ) -> Result<Vec<(String, String)>> {
        let held = keyed_rows(&self.tables().inbox(), "consumer, message_id, payload_hash");
        self.engine()
            .query_as(AssertSqlSafe(format!(
                "SELECT message_id, payload_hash FROM ({held}) AS held \
                 WHERE consumer = $1 AND message_id = ANY($2)"
            )))
            .bind(consumer.as_str())
            .bind(ids)
            .fetch_all(&mut **tx)
            .await
            .map_err(|e| db("reading claimed payload hashes", e))
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

/// The planner settings a group claim on the partitioned inbox runs under (transaction-local,
/// restored before the handler runs): with sequential, index-only and bitmap scans off and
/// only nested loops to join, without materializing their inner side, the claim-key index
/// looked up once per id is the only path the probe has ([`keyed_rows`]), so its one generic
/// plan, made once per connection, is safe, and no group pays for planning the probe of every
/// partition.
#[cfg(feature = "postgres")]
const CLAIM_PLANNER: [(&str, &str); 7] = [
    ("enable_seqscan", "off"),
    ("enable_indexonlyscan", "off"),
    ("enable_bitmapscan", "off"),
    ("enable_hashjoin", "off"),
    ("enable_mergejoin", "off"),
    ("enable_material", "off"),
    ("plan_cache_mode", "force_generic_plan"),
];

/// A subquery of the partitioned `inbox`'s rows (columns `cols`) whose claim key is that of
/// consumer `$1` with one of the ids `$2`, read through the partitions' claim-key index only:
/// for each of the ids' keys, a lateral lookup per partition (lateral, so that a plan made on
/// empty partitions cannot turn the join around and read the partitions by another index, the
/// keys in the inner loop).
///
/// A prepared statement is planned for its parameters five times, then gets a generic plan
/// if that looks no dearer. Made while today's partition is nearly empty, a generic plan
/// that may use another index reads the partition by it: by the primary key, by `consumer`
/// alone, filtering the ids (measured with pgbench on a fresh partitioned inbox: 57 groups/s in
/// the first 10 s, 13 after 60 s); by the `received_at` index, for the sealed bound
/// (`received_at >= …`, [`Probe::SealedAndRecent`]), the whole day (1,362 instead of 15,428
/// msgs/s from an empty inbox, measured); on a partition analyzed while empty, the primary key
/// whole, index-only (3,000 instead of 15,000 msgs/s). Here the claim-key index is the only one
/// the subquery can use: `OFFSET 0` keeps the caller's filters on `consumer` and `message_id`
/// outside it, and the other paths are off while the claim runs ([`CLAIM_PLANNER`]). So the
/// generic plan is one index lookup per id and partition whatever the statistics said, and no
/// group pays for planning the probe of every partition (about 2 ms at 11 partitions).
#[cfg(feature = "postgres")]
fn keyed_rows(inbox: &str, cols: &str) -> String {
    keyed_rows_where(inbox, cols, "")
}

/// [`keyed_rows`] with `and` (`AND …`) among the subquery's own conditions.
#[cfg(feature = "postgres")]
fn keyed_rows_where(inbox: &str, cols: &str, and: &str) -> String {
    let (key, wanted) = (claim_key_sql("consumer", "message_id"), wanted_keys());
    format!(
        "SELECT {cols} FROM unnest({wanted}) AS k(key), \
         LATERAL (SELECT {cols} FROM {inbox} WHERE {key} = k.key {and} OFFSET 0) AS i OFFSET 0"
    )
}

/// The array of the claim keys of consumer `$1` with the ids `$2`.
#[cfg(feature = "postgres")]
fn wanted_keys() -> String {
    format!(
        "ARRAY(SELECT {} FROM unnest($2::text[]) AS x)",
        claim_key_sql("$1", "x")
    )
}

/// Where a group claim on PostgreSQL looks for the ids already claimed before it inserts.
#[cfg(feature = "postgres")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    /// The plain inbox: its primary key (`ON CONFLICT DO NOTHING`).
    Unique,
    /// The partitioned inbox: every daily partition, by its claim-key index.
    EveryPartition,
    /// The partitioned inbox with sealed days (oncely-ops `sealed`): the sealed days' keys,
    /// and the partitions from the sealed bound on (runtime partition pruning on
    /// `received_at`). Without a current build (no state row: a crash or a failover emptied
    /// the unlogged tables, or none was made yet), every partition.
    SealedAndRecent,
}

#[cfg(feature = "postgres")]
impl Probe {
    /// The `WHERE` of the claim's `INSERT … SELECT … FROM unnest(…) AS m(id, hash, n)`.
    fn filter(self, tables: &crate::Tables) -> String {
        let inbox = tables.inbox();
        let held = |and: &str| {
            let rows = keyed_rows_where(&inbox, "consumer, message_id", and);
            format!("m.id NOT IN (SELECT message_id FROM ({rows}) AS held WHERE consumer = $1)")
        };
        match self {
            Self::Unique => String::new(),
            Self::EveryPartition => format!("WHERE {}", held("")),
            Self::SealedAndRecent => {
                let state = tables.inbox_sealed_state();
                let recent = held(&format!(
                    "AND received_at >= coalesce((SELECT below FROM {state} WHERE one), '{}'::bigint)",
                    i64::MIN
                ));
                let active =
                    format!("(SELECT active FROM {state} WHERE one AND below IS NOT NULL)");
                let wanted = wanted_keys();
                let sealed = ["a", "b"].map(|t| {
                    let table = tables.inbox_sealed_keys(t);
                    format!(
                        "SELECT claim_key FROM {table} WHERE {active} = '{t}' AND claim_key = ANY({wanted})"
                    )
                });
                format!(
                    "WHERE {recent} AND {} NOT IN ({} UNION ALL {})",
                    claim_key_sql("$1", "m.id"),
                    sealed[0],
                    sealed[1]
                )
            }
        }
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
