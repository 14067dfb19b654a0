//! The test bed: the effect every cell applies ("credit an account": one ledger row plus the
//! account balance), the tables it writes, and the hand-written SQL that the plain consumer
//! and the raw reference run. One [`Bed`] per database.

use anyhow::{Context, Result};
use oncely_core::{Envelope, Error, Handled, Handler};
use oncely_sql::clock::now_ms;
use oncely_sql::sqlx::{
    self, AssertSqlSafe, MySql, Pool, Postgres, SqlSafeStr, SqlStr, Sqlite, Transaction,
};
use oncely_sql::{AnyStore, AnyTx, Dialect, Engine, SqlStore, Tables};
use oncely_testkit::credits::CreditTables;
use std::future::Future;

/// The payload every message carries: the testkit's credits workload,
/// `{"account": "acct-17", "amount": 5}`.
pub use oncely_testkit::credits::Credit;

/// One message as the raw reference sees it: id, payload hash (hex) and decoded credit.
#[derive(Debug, Clone)]
pub struct Item {
    /// Message id.
    pub id: String,
    /// SHA-256 of the payload, hex.
    pub hash: String,
    /// Decoded payload.
    pub credit: Credit,
}

/// What the checker reads back from the database after a cell.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    /// Ledger rows (one per applied effect).
    pub ledger_rows: u64,
    /// Distinct message ids in the ledger.
    pub ledger_ids: u64,
    /// Sum of all balances.
    pub balance_total: i64,
    /// Inbox rows.
    pub inbox_rows: u64,
    /// Dead-letter rows.
    pub dead_letters: u64,
}

/// Statements of the effect, rendered for one dialect and schema.
#[derive(Clone)]
pub struct Sql {
    pub(crate) ledger: String,
    pub(crate) accounts: String,
    pub(crate) inbox: String,
    dead_letters: String,
    insert_ledger: SqlStr,
    upsert_balance: SqlStr,
    claim: SqlStr,
    lookup: SqlStr,
    credits: CreditTables,
}

fn s(text: String) -> SqlStr {
    AssertSqlSafe(text).into_sql_str()
}

impl Sql {
    fn new(d: Dialect, tables: &Tables) -> Self {
        let credits = CreditTables::new(d, tables.schema(), "bench_");
        let (ledger, accounts) = (credits.ledger.clone(), credits.accounts.clone());
        let inbox = tables.table("inbox");
        Self {
            insert_ledger: s(format!(
                "INSERT INTO {ledger} (message_id, account, amount) VALUES ({})",
                d.params(1, 3)
            )),
            upsert_balance: s(format!(
                "INSERT INTO {accounts} (account, balance) VALUES ({}) {}",
                d.params(1, 2),
                d.on_conflict_add(&accounts, "account", "balance")
            )),
            claim: s(format!(
                "INSERT INTO {inbox} (consumer, message_id, payload_hash, received_at) VALUES ({}) ON CONFLICT DO NOTHING",
                d.params(1, 4)
            )),
            lookup: s(format!(
                "SELECT payload_hash FROM {inbox} WHERE consumer = {} AND message_id = {}",
                d.param(1),
                d.param(2)
            )),
            credits,
            dead_letters: tables.table("dead_letters"),
            ledger,
            accounts,
            inbox,
        }
    }

    fn ddl(&self) -> Vec<String> {
        self.credits.ddl()
    }

    /// The statements that empty the bench tables: one `TRUNCATE` on PostgreSQL, one per table
    /// on MariaDB, and on SQLite `DELETE`s, then a checkpoint that truncates the WAL file.
    fn reset(&self) -> Vec<String> {
        let tables = [
            &self.ledger,
            &self.accounts,
            &self.inbox,
            &self.dead_letters,
        ];
        let each = |verb: &str| tables.iter().map(|t| format!("{verb} {t}")).collect();
        match self.credits.dialect() {
            Dialect::Postgres => vec![format!(
                "TRUNCATE {}",
                tables.map(String::as_str).join(", ")
            )],
            Dialect::MySql => each("TRUNCATE TABLE"),
            // VACUUM: a compact file for each cell, as TRUNCATE gives the others. Without it the
            // pages the deletes free stay in the file and later cells grow into them: the
            // 10^6-id cells of one run slowed turn by turn (6,082, 5,357, 5,361 msgs/s; with
            // it 7,344, 7,577, 7,746).
            Dialect::Sqlite => {
                let mut sql: Vec<String> = each("DELETE FROM");
                sql.push("VACUUM".to_owned());
                sql.push("PRAGMA wal_checkpoint(TRUNCATE)".to_owned());
                sql
            }
        }
    }
}

/// A credit write's sqlx error, classified by the workspace's one classifier.
pub(crate) fn db_err(e: sqlx::Error) -> Error {
    oncely_sql::error::db("credit write", e)
}

/// The oncely handler: the same two statements as the plain consumer, through the store's
/// transaction.
#[derive(Clone)]
pub struct Credits {
    sql: Sql,
}

/// The effect written through a transaction of one database.
pub(crate) trait Effect {
    /// Inserts the ledger row and credits the balance.
    fn credit(
        &mut self,
        sql: &Sql,
        id: &str,
        credit: &Credit,
    ) -> impl Future<Output = oncely_core::Result<()>> + Send;

    /// The raw reference for one message: the claim written by hand, then the effect if it
    /// inserted.
    fn raw_one(
        &mut self,
        sql: &Sql,
        consumer: &str,
        item: &Item,
    ) -> impl Future<Output = oncely_core::Result<()>> + Send;

    /// Inserts the ledger rows and credits the balances of many messages with multi-row
    /// statements.
    fn credit_many(
        &mut self,
        sql: &Sql,
        rows: &[(&str, &Credit)],
    ) -> impl Future<Output = oncely_core::Result<()>> + Send;
}

/// The effect on a typed transaction: what the plain consumer and the raw reference run.
macro_rules! typed_effect {
    ($db:ty, $many:path) => {
        impl Effect for Transaction<'static, $db> {
            async fn credit(
                &mut self,
                sql: &Sql,
                id: &str,
                credit: &Credit,
            ) -> oncely_core::Result<()> {
                sqlx::query(sql.insert_ledger.clone())
                    .bind(id)
                    .bind(credit.account.as_str())
                    .bind(credit.amount)
                    .execute(&mut **self)
                    .await
                    .map_err(db_err)?;
                sqlx::query(sql.upsert_balance.clone())
                    .bind(credit.account.as_str())
                    .bind(credit.amount)
                    .execute(&mut **self)
                    .await
                    .map_err(db_err)?;
                Ok(())
            }

            async fn raw_one(
                &mut self,
                sql: &Sql,
                consumer: &str,
                item: &Item,
            ) -> oncely_core::Result<()> {
                let inserted = sqlx::query(sql.claim.clone())
                    .bind(consumer)
                    .bind(item.id.as_str())
                    .bind(item.hash.as_str())
                    .bind(now_ms())
                    .execute(&mut **self)
                    .await
                    .map_err(db_err)?
                    .rows_affected();
                if inserted == 1 {
                    self.credit(sql, &item.id, &item.credit).await?;
                }
                Ok(())
            }

            async fn credit_many(
                &mut self,
                sql: &Sql,
                rows: &[(&str, &Credit)],
            ) -> oncely_core::Result<()> {
                $many(sql, self, rows).await
            }
        }
    };
}

typed_effect!(Postgres, crate::raw::pg_effects);
typed_effect!(Sqlite, crate::raw::sqlite_effects);
typed_effect!(MySql, crate::raw::mysql_effects);

/// One impl for both databases: the two statements through [`AnyTx::execute`] (the store's
/// transaction, erased); a batch through the typed transaction inside, as the multi-row
/// statements bind arrays on PostgreSQL (the same ones the raw reference uses).
impl Handler<AnyTx> for Credits {
    async fn handle(&self, tx: &mut AnyTx, message: &Envelope) -> oncely_core::Result<Handled> {
        let credit = Credit::parse(message.payload())?;
        let (id, account) = (message.id().as_str(), credit.account.as_str());
        let args = [id.into(), account.into(), credit.amount.into()];
        tx.execute(self.sql.insert_ledger.as_str(), &args).await?;
        tx.execute(self.sql.upsert_balance.as_str(), &args[1..])
            .await?;
        Ok(Handled::Applied)
    }

    /// Batch mode: every fresh message's ledger row and balance with multi-row statements.
    async fn handle_batch(
        &self,
        tx: &mut AnyTx,
        messages: &[Envelope],
    ) -> oncely_core::Result<Vec<Handled>> {
        let credits = messages
            .iter()
            .map(|m| Credit::parse(m.payload()))
            .collect::<oncely_core::Result<Vec<_>>>()?;
        let rows: Vec<(&str, &Credit)> = messages
            .iter()
            .zip(&credits)
            .map(|(m, c)| (m.id().as_str(), c))
            .collect();
        oncely_sql::with_tx!(tx, tx => tx.credit_many(&self.sql, &rows).await?);
        Ok(vec![Handled::Applied; messages.len()])
    }

    /// The account row is what the effect locks: group commit's lanes go by account.
    fn lock_key(&self, message: &oncely_core::RawEnvelope) -> Option<String> {
        Credit::lock_key(&message.payload)
    }
}

/// A database prepared for the benchmark: pool, oncely tables, effect tables.
pub struct Bed<DB: sqlx::Database> {
    pub(crate) pool: Pool<DB>,
    pub(crate) tables: Tables,
    pub(crate) sql: Sql,
    /// The facts of the store's connection the pool came from.
    pub(crate) engine: Engine,
}

impl<DB: sqlx::Database> Clone for Bed<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            tables: self.tables.clone(),
            sql: self.sql.clone(),
            engine: self.engine,
        }
    }
}

/// What every cell needs from a database, implemented for PostgreSQL and SQLite.
pub trait Ops: Clone + Send + Sync + 'static {
    /// The sqlx database.
    type Db: oncely_sql::SqlDatabase;
    /// An oncely store over the bed's pool (the handler is written once, for [`AnyTx`]).
    fn store(&self) -> AnyStore;
    /// The oncely handler.
    fn handler(&self) -> Credits;
    /// Empties the inbox, dead letters, ledger and accounts.
    fn reset(&self) -> impl Future<Output = Result<()>> + Send;
    /// The plain consumer's unit of work: one transaction with the effect, no dedup.
    fn plain(
        &self,
        id: &str,
        credit: &Credit,
    ) -> impl Future<Output = oncely_core::Result<()>> + Send;
    /// The raw reference: one transaction claiming and applying `items` with hand-written SQL
    /// (single-row statements for one item, multi-row statements for more).
    fn raw(
        &self,
        consumer: &str,
        items: &[Item],
    ) -> impl Future<Output = oncely_core::Result<()>> + Send;
    /// Reads back what the checker needs.
    fn counts(&self) -> impl Future<Output = Result<Counts>> + Send;
    /// Looks each id up in the inbox by primary key, one `SELECT` after another on one
    /// connection (the floor for "is it a duplicate?"); returns how many were found.
    fn lookups(&self, consumer: &str, ids: &[String]) -> impl Future<Output = Result<u64>> + Send;
}

impl<DB: oncely_sql::SqlDatabase> Bed<DB> {
    pub(crate) fn make(pool: Pool<DB>, tables: Tables, engine: Engine) -> Self {
        let sql = Sql::new(DB::DIALECT, &tables);
        Self {
            pool,
            tables,
            sql,
            engine,
        }
    }

    pub(crate) fn ddl(&self) -> Vec<String> {
        self.sql.ddl()
    }
}

macro_rules! common_ops {
    ($db:ty) => {
        type Db = $db;

        fn store(&self) -> AnyStore {
            SqlStore::<$db>::with_tables(self.pool.clone(), self.tables.clone())
                .with_engine(self.engine)
                .into()
        }

        async fn reset(&self) -> Result<()> {
            for statement in self.sql.reset() {
                sqlx::query(AssertSqlSafe(statement))
                    .execute(&self.pool)
                    .await
                    .context("emptying the bench tables")?;
            }
            Ok(())
        }

        fn handler(&self) -> Credits {
            Credits {
                sql: self.sql.clone(),
            }
        }

        async fn plain(&self, id: &str, credit: &Credit) -> oncely_core::Result<()> {
            let mut tx = self.begin().await.map_err(db_err)?;
            tx.credit(&self.sql, id, credit).await?;
            tx.commit().await.map_err(db_err)
        }

        async fn lookups(&self, consumer: &str, ids: &[String]) -> Result<u64> {
            let mut conn = self.pool.acquire().await.context("connecting")?;
            let mut found = 0;
            for id in ids {
                let hash: Option<String> = sqlx::query_scalar(self.sql.lookup.clone())
                    .bind(consumer)
                    .bind(id.as_str())
                    .fetch_optional(&mut *conn)
                    .await
                    .context("looking an id up")?;
                found += u64::from(hash.is_some());
            }
            Ok(found)
        }

        async fn counts(&self) -> Result<Counts> {
            let sql = &self.sql;
            let (rows, ids): (i64, i64) = sqlx::query_as(AssertSqlSafe(format!(
                "SELECT count(*), count(DISTINCT message_id) FROM {}",
                sql.ledger
            )))
            .fetch_one(&self.pool)
            .await
            .context("counting ledger rows")?;
            let total: Option<i64> = sqlx::query_scalar(AssertSqlSafe(format!(
                "SELECT {} FROM {}",
                sql.credits.dialect().cast_i64("sum(balance)"),
                sql.accounts
            )))
            .fetch_one(&self.pool)
            .await
            .context("summing balances")?;
            let inbox: i64 =
                sqlx::query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM {}", sql.inbox)))
                    .fetch_one(&self.pool)
                    .await
                    .context("counting inbox rows")?;
            let dead: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
                "SELECT count(*) FROM {}",
                sql.dead_letters
            )))
            .fetch_one(&self.pool)
            .await
            .context("counting dead letters")?;
            Ok(Counts {
                ledger_rows: rows as u64,
                ledger_ids: ids as u64,
                balance_total: total.unwrap_or(0),
                inbox_rows: inbox as u64,
                dead_letters: dead as u64,
            })
        }
    };
}

impl Ops for Bed<Postgres> {
    common_ops!(Postgres);

    async fn raw(&self, consumer: &str, items: &[Item]) -> oncely_core::Result<()> {
        let mut tx = self.begin().await.map_err(db_err)?;
        match items {
            [one] => tx.raw_one(&self.sql, consumer, one).await?,
            _ => crate::raw::pg_batch(&self.sql, &mut tx, consumer, items).await?,
        }
        tx.commit().await.map_err(db_err)
    }
}

impl Ops for Bed<Sqlite> {
    common_ops!(Sqlite);

    async fn raw(&self, consumer: &str, items: &[Item]) -> oncely_core::Result<()> {
        let mut tx = self.begin().await.map_err(db_err)?;
        match items {
            [one] => tx.raw_one(&self.sql, consumer, one).await?,
            _ => crate::raw::sqlite_batch(&self.sql, &mut tx, consumer, items).await?,
        }
        tx.commit().await.map_err(db_err)
    }
}

/// MariaDB / MySQL: the cells of the per-message API (group commit, duplicates); the raw
/// reference and the batch handler are written for PostgreSQL and SQLite.
impl Ops for Bed<MySql> {
    common_ops!(MySql);

    async fn raw(&self, _consumer: &str, _items: &[Item]) -> oncely_core::Result<()> {
        Err(Error::config(
            "the raw SQL reference is written for PostgreSQL and SQLite",
        ))
    }
}

impl Bed<MySql> {
    async fn begin(&self) -> sqlx::Result<Transaction<'static, MySql>> {
        self.pool.begin().await
    }
}

impl Bed<Postgres> {
    async fn begin(&self) -> sqlx::Result<Transaction<'static, Postgres>> {
        self.pool.begin().await
    }

    /// The server's WAL position in bytes (`pg_current_wal_lsn()`): two readings apart are
    /// the WAL written between them.
    pub(crate) async fn wal_position(&self) -> Result<i64> {
        sqlx::query_scalar("SELECT (pg_current_wal_lsn() - '0/0')::bigint")
            .fetch_one(&self.pool)
            .await
            .context("reading the WAL position")
    }
}

impl Bed<Sqlite> {
    /// `BEGIN IMMEDIATE`, as the oncely SQLite store does, so writers queue on the lock
    /// instead of failing to upgrade.
    async fn begin(&self) -> sqlx::Result<Transaction<'static, Sqlite>> {
        self.pool.begin_with("BEGIN IMMEDIATE").await
    }
}
