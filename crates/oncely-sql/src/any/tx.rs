//! [`AnyTx`]: the transaction of an [`AnyStore`](crate::AnyStore), whichever database it is,
//! so that a handler is written once (`impl Handler<AnyTx>`) and runs on SQLite, PostgreSQL
//! and MySQL/MariaDB.

use crate::dialect::Dialect;
use crate::engine::Engine;
use crate::error::db;
use crate::query::{Column, Done, SqlDatabase, Value};
use oncely_core::Result;
#[cfg(feature = "mysql")]
use sqlx::MySql;
#[cfg(feature = "postgres")]
use sqlx::Postgres;
#[cfg(feature = "sqlite")]
use sqlx::Sqlite;
use sqlx::Transaction;

/// A transaction of any of the three databases: what [`AnyStore`] hands a handler.
///
/// Statements number their placeholders `$1, $2, …` on every database (on MySQL they are
/// rewritten to `?`, see [`Dialect::rewrite_params`]); arguments are [`Value`]s, rows come back
/// as [`Value`]s decoded as the [`Column`]s asked for. Errors are classified by the
/// workspace's one classifier ([`crate::error_kind`]), so a deadlock is transient and a
/// constraint violation permanent. SQL that differs between databases is built with
/// [`AnyTx::dialect`]'s methods. For everything else the variants hold the typed sqlx
/// transaction ([`AnyTx::as_postgres`] and its siblings).
///
/// ```no_run
/// use oncely_core::{Envelope, Handled, Handler, Result};
/// use oncely_sql::AnyTx;
///
/// struct Credits;
///
/// impl Handler<AnyTx> for Credits {
///     async fn handle(&self, tx: &mut AnyTx, message: &Envelope) -> Result<Handled> {
///         let upsert = format!(
///             "INSERT INTO accounts (account, balance) VALUES ($1, $2) {}",
///             tx.dialect().on_conflict_add("accounts", "account", "balance")
///         );
///         tx.execute(&upsert, &["acct-17".into(), 5.into()]).await?;
///         Ok(Handled::Applied)
///     }
/// }
/// ```
///
/// It carries its store's [`Engine`] ([`AnyTx::engine`]): statements are named and cached
/// where that connection allows, and effects ask it what the database can do (an outbox
/// `NOTIFY` only where [`Engine::notifies`]). A transaction converted from a sqlx one
/// (`AnyTx::from(tx)`) holds [`Engine::assumed`].
#[derive(Debug)]
pub struct AnyTx {
    pub(super) engine: Engine,
    pub(super) tx: TxKind,
}

/// The sqlx transaction inside an [`AnyTx`] (what [`with_tx!`](crate::with_tx) matches on).
#[doc(hidden)]
#[derive(Debug)]
pub enum TxKind {
    /// SQLite.
    #[cfg(feature = "sqlite")]
    Sqlite(Transaction<'static, Sqlite>),
    /// PostgreSQL.
    #[cfg(feature = "postgres")]
    Postgres(Transaction<'static, Postgres>),
    /// MySQL / MariaDB.
    #[cfg(feature = "mysql")]
    MySql(Transaction<'static, MySql>),
}

/// Runs `$body` with `$t` bound to the typed sqlx transaction inside an [`AnyTx`] (given as
/// `&mut AnyTx`): `&mut Transaction<'static, Sqlite>`, `…Postgres>` or `…MySql>`. The body is
/// compiled once per database built in (generic code such as `oncely-effects`' outbox, which
/// takes a typed transaction), so callers need no `match` on the database and no features.
///
/// ```no_run
/// # async fn f(tx: &mut oncely_sql::AnyTx) -> oncely_core::Result<()> {
/// use oncely_sql::sqlx;
/// let rows = oncely_sql::with_tx!(tx, t => sqlx::query("DELETE FROM t")
///     .execute(&mut **t)
///     .await
///     .map_err(|e| oncely_sql::error::db("clearing t", e))?
///     .rows_affected());
/// # Ok(()) }
/// ```
#[macro_export]
macro_rules! with_tx {
    ($any:expr, $t:ident => $body:expr) => {
        $crate::__any_arms_sqlite!(($crate::AnyTx::__kind_mut($any)) TxKind $t ($body) {})
    };
}

/// Runs `$body` with `$conn` bound to the connection of the transaction inside `$tx` and `$db`
/// to its sqlx database type.
macro_rules! with_conn {
    ($tx:expr, $db:ident, $conn:ident => $body:expr) => {
        match &mut $tx.tx {
            #[cfg(feature = "sqlite")]
            TxKind::Sqlite(t) => {
                type $db = Sqlite;
                let $conn = &mut **t;
                $body
            }
            #[cfg(feature = "postgres")]
            TxKind::Postgres(t) => {
                type $db = Postgres;
                let $conn = &mut **t;
                $body
            }
            #[cfg(feature = "mysql")]
            TxKind::MySql(t) => {
                type $db = MySql;
                let $conn = &mut **t;
                $body
            }
        }
    };
}

impl AnyTx {
    /// The database.
    ///
    /// ```no_run
    /// # fn f(tx: &oncely_sql::AnyTx) {
    /// let upsert = tx.dialect().on_conflict_add("accounts", "account", "balance");
    /// # }
    /// ```
    pub fn dialect(&self) -> Dialect {
        self.engine.dialect()
    }

    /// The facts of the transaction's connection ([`Engine`]): its store's.
    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// The same transaction, its connection's facts being `engine`.
    pub(crate) fn with_engine(mut self, engine: Engine) -> Self {
        self.engine = engine;
        self
    }

    #[doc(hidden)]
    pub fn __kind_mut(&mut self) -> &mut TxKind {
        &mut self.tx
    }

    /// Runs a statement with `args` bound to `$1, $2, …`; reports the rows it affected.
    ///
    /// ```no_run
    /// # async fn f(tx: &mut oncely_sql::AnyTx) -> oncely_core::Result<()> {
    /// let done = tx
    ///     .execute("UPDATE accounts SET balance = balance + $2 WHERE account = $1", &["acct-17".into(), 5.into()])
    ///     .await?;
    /// assert!(done.rows <= 1);
    /// # Ok(()) }
    /// ```
    pub async fn execute(&mut self, sql: &str, args: &[Value]) -> Result<Done> {
        let engine = self.engine;
        with_conn!(self, DB, conn => DB::execute(conn, engine, sql, args).await)
            .map_err(|e| db("executing a statement", e))
    }

    /// Runs a query with `args` bound and returns every row, its columns decoded as `cols`.
    ///
    /// ```no_run
    /// # async fn f(tx: &mut oncely_sql::AnyTx) -> oncely_core::Result<()> {
    /// use oncely_sql::Column;
    /// let rows = tx
    ///     .fetch("SELECT account, balance FROM accounts ORDER BY account", &[], &[Column::Text, Column::I64])
    ///     .await?;
    /// for row in rows {
    ///     println!("{}: {}", row[0].text(), row[1].i64());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn fetch(
        &mut self,
        sql: &str,
        args: &[Value],
        cols: &[Column],
    ) -> Result<Vec<Vec<Value>>> {
        let engine = self.engine;
        with_conn!(self, DB, conn => DB::fetch(conn, engine, sql, args, cols).await)
            .map_err(|e| db("running a query", e))
    }

    /// The first row of a query, if any (the query should return at most one).
    ///
    /// ```no_run
    /// # async fn f(tx: &mut oncely_sql::AnyTx) -> oncely_core::Result<()> {
    /// use oncely_sql::Column;
    /// let row = tx
    ///     .fetch_optional("SELECT balance FROM accounts WHERE account = $1", &["acct-17".into()], &[Column::I64])
    ///     .await?;
    /// let balance = row.map_or(0, |row| row[0].i64());
    /// # Ok(()) }
    /// ```
    pub async fn fetch_optional(
        &mut self,
        sql: &str,
        args: &[Value],
        cols: &[Column],
    ) -> Result<Option<Vec<Value>>> {
        Ok(self.fetch(sql, args, cols).await?.into_iter().next())
    }

    /// The integer in the first column of the first row; `None` for no row or NULL.
    ///
    /// ```no_run
    /// # async fn f(tx: &mut oncely_sql::AnyTx) -> oncely_core::Result<()> {
    /// let balance = tx
    ///     .fetch_i64("SELECT balance FROM accounts WHERE account = $1", &["acct-17".into()])
    ///     .await?
    ///     .unwrap_or(0);
    /// # Ok(()) }
    /// ```
    pub async fn fetch_i64(&mut self, sql: &str, args: &[Value]) -> Result<Option<i64>> {
        let row = self.fetch_optional(sql, args, &[Column::OptI64]).await?;
        Ok(row.and_then(|row| row[0].opt_i64()))
    }

    /// Runs several statements without arguments (e.g. DDL).
    ///
    /// ```no_run
    /// # async fn f(tx: &mut oncely_sql::AnyTx) -> oncely_core::Result<()> {
    /// tx.script("DELETE FROM a; DELETE FROM b").await?;
    /// # Ok(()) }
    /// ```
    pub async fn script(&mut self, sql: &str) -> Result<()> {
        with_conn!(self, DB, conn => DB::script(conn, sql).await)
            .map_err(|e| db("running a script", e))
    }

    /// Commits the transaction (what [`Store::commit`] does for a store's transaction).
    ///
    /// ```no_run
    /// # async fn f(pool: oncely_sql::AnyPool) -> oncely_core::Result<()> {
    /// let mut tx = pool.begin().await?;
    /// tx.execute("DELETE FROM accounts WHERE balance = 0", &[]).await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn commit(self) -> Result<()> {
        crate::__any_arms_sqlite!((self.tx) TxKind t (t.commit().await) {})
            .map_err(|e| db("committing", e))
    }

    /// Rolls the transaction back.
    ///
    /// ```no_run
    /// # async fn f(pool: oncely_sql::AnyPool) -> oncely_core::Result<()> {
    /// let tx = pool.begin().await?;
    /// tx.rollback().await?;
    /// # Ok(()) }
    /// ```
    pub async fn rollback(self) -> Result<()> {
        crate::__any_arms_sqlite!((self.tx) TxKind t (t.rollback().await) {})
            .map_err(|e| db("rolling back", e))
    }

    /// The typed SQLite transaction, if it is one.
    ///
    /// ```no_run
    /// # async fn f(tx: &mut oncely_sql::AnyTx) -> Result<(), oncely_sql::sqlx::Error> {
    /// if let Some(tx) = tx.as_sqlite() {
    ///     oncely_sql::sqlx::query("PRAGMA optimize").execute(&mut **tx).await?;
    /// }
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "sqlite")]
    pub fn as_sqlite(&mut self) -> Option<&mut Transaction<'static, Sqlite>> {
        match &mut self.tx {
            #[cfg(feature = "sqlite")]
            TxKind::Sqlite(tx) => Some(tx),
            _ => None,
        }
    }

    /// The typed PostgreSQL transaction, if it is one (for what the erased layer lacks:
    /// arrays, `COPY`, other types).
    ///
    /// ```no_run
    /// # async fn f(tx: &mut oncely_sql::AnyTx) -> Result<(), oncely_sql::sqlx::Error> {
    /// if let Some(tx) = tx.as_postgres() {
    ///     oncely_sql::sqlx::query("INSERT INTO t SELECT * FROM unnest($1::int8[])")
    ///         .bind(vec![1_i64, 2, 3])
    ///         .execute(&mut **tx)
    ///         .await?;
    /// }
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "postgres")]
    pub fn as_postgres(&mut self) -> Option<&mut Transaction<'static, Postgres>> {
        match &mut self.tx {
            #[cfg(feature = "postgres")]
            TxKind::Postgres(tx) => Some(tx),
            _ => None,
        }
    }

    /// The typed MySQL / MariaDB transaction, if it is one.
    ///
    /// ```no_run
    /// # async fn f(tx: &mut oncely_sql::AnyTx) -> Result<(), oncely_sql::sqlx::Error> {
    /// if let Some(tx) = tx.as_mysql() {
    ///     oncely_sql::sqlx::query("DO 1").execute(&mut **tx).await?;
    /// }
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "mysql")]
    pub fn as_mysql(&mut self) -> Option<&mut Transaction<'static, MySql>> {
        match &mut self.tx {
            #[cfg(feature = "mysql")]
            TxKind::MySql(tx) => Some(tx),
            _ => None,
        }
    }
}

#[cfg(feature = "sqlite")]
impl From<Transaction<'static, Sqlite>> for AnyTx {
    /// A transaction oncely did not begin: its facts are [`Engine::assumed`].
    fn from(tx: Transaction<'static, Sqlite>) -> Self {
        Self {
            engine: Engine::assumed(Dialect::Sqlite),
            tx: TxKind::Sqlite(tx),
        }
    }
}

#[cfg(feature = "postgres")]
impl From<Transaction<'static, Postgres>> for AnyTx {
    /// A transaction oncely did not begin: its facts are [`Engine::assumed`].
    fn from(tx: Transaction<'static, Postgres>) -> Self {
        Self {
            engine: Engine::assumed(Dialect::Postgres),
            tx: TxKind::Postgres(tx),
        }
    }
}

#[cfg(feature = "mysql")]
impl From<Transaction<'static, MySql>> for AnyTx {
    /// A transaction oncely did not begin: its facts are [`Engine::assumed`].
    fn from(tx: Transaction<'static, MySql>) -> Self {
        Self {
            engine: Engine::assumed(Dialect::MySql),
            tx: TxKind::MySql(tx),
        }
    }
}
