//! [`SqlTx`]: the one seam through which every crate above oncely-sql runs SQL inside the
//! transaction a handler gets.
//!
//! A handler holds an [`AnyTx`] (the erased transaction of an [`AnyStore`](crate::AnyStore)) or
//! a typed `sqlx::Transaction` of one database (`impl Handler<Transaction<'static, Postgres>>`).
//! Effects (outbox, versioned apply), the HTTP layer and operations take `&mut impl SqlTx`, so
//! both kinds of handler pass their transaction as they got it, and no crate above this one
//! matches on which database it is: SQL that differs is built from [`SqlTx::dialect`]'s
//! primitives.

use crate::any::AnyPool;
use crate::any::tx::AnyTx;
use crate::dialect::Dialect;
use crate::engine::Engine;
use crate::error::db;
use crate::query::{Column, Done, SqlDatabase, Value};
use oncely_core::Result;
use sqlx::Transaction;
use sqlx::pool::PoolConnection;
use std::future::Future;

/// Runs statements with [`Value`] arguments (numbered placeholders `$1, $2, …`, rewritten on
/// MySQL) inside one transaction or on one connection, on any of the three databases.
///
/// Implemented by [`AnyTx`], by every `sqlx::Transaction` of a database oncely supports, and
/// by their pooled connections (for reads outside a transaction). Errors are classified by
/// [`crate::error_kind`].
///
/// ```no_run
/// use oncely_sql::{SqlTx, Value};
/// async fn credit(tx: &mut impl SqlTx, account: &str, amount: i64) -> oncely_core::Result<()> {
///     let upsert = format!(
///         "INSERT INTO accounts (account, balance) VALUES ($1, $2) {}",
///         tx.dialect().on_conflict_add("accounts", "account", "balance")
///     );
///     tx.execute(&upsert, &[account.into(), Value::I64(amount)]).await?;
///     Ok(())
/// }
/// ```
pub trait SqlTx: Send {
    /// The facts of the connection ([`Engine`]): its store's for an [`AnyTx`] or an
    /// [`AnyPool`]; [`Engine::assumed`] for a typed sqlx transaction or connection, which does
    /// not know its store.
    fn engine(&self) -> Engine;

    /// The database.
    fn dialect(&self) -> Dialect {
        self.engine().dialect()
    }

    /// Runs a statement with `args` bound to `$1, $2, …`; reports the rows it affected.
    fn execute(&mut self, sql: &str, args: &[Value]) -> impl Future<Output = Result<Done>> + Send;

    /// Runs a query with `args` bound and returns every row, its columns decoded as `cols`.
    fn fetch(
        &mut self,
        sql: &str,
        args: &[Value],
        cols: &[Column],
    ) -> impl Future<Output = Result<Vec<Vec<Value>>>> + Send;

    /// Runs several statements without arguments (DDL, session settings).
    fn script(&mut self, sql: &str) -> impl Future<Output = Result<()>> + Send;

    /// The first row of a query, if any (the query should return at most one).
    fn fetch_optional(
        &mut self,
        sql: &str,
        args: &[Value],
        cols: &[Column],
    ) -> impl Future<Output = Result<Option<Vec<Value>>>> + Send {
        async move { Ok(self.fetch(sql, args, cols).await?.into_iter().next()) }
    }

    /// The integer in the first column of the first row; `None` for no row or NULL.
    fn fetch_i64(
        &mut self,
        sql: &str,
        args: &[Value],
    ) -> impl Future<Output = Result<Option<i64>>> + Send {
        async move {
            let row = self.fetch_optional(sql, args, &[Column::OptI64]).await?;
            Ok(row.and_then(|row| row[0].opt_i64()))
        }
    }
}

impl SqlTx for AnyTx {
    fn engine(&self) -> Engine {
        AnyTx::engine(self)
    }

    fn execute(&mut self, sql: &str, args: &[Value]) -> impl Future<Output = Result<Done>> + Send {
        AnyTx::execute(self, sql, args)
    }

    fn fetch(
        &mut self,
        sql: &str,
        args: &[Value],
        cols: &[Column],
    ) -> impl Future<Output = Result<Vec<Vec<Value>>>> + Send {
        AnyTx::fetch(self, sql, args, cols)
    }

    fn script(&mut self, sql: &str) -> impl Future<Output = Result<()>> + Send {
        AnyTx::script(self, sql)
    }
}

/// Implements [`SqlTx`] for a type that derefs (twice: `&mut **self`) to `DB::Connection`.
macro_rules! typed_seam {
    ($($ty:ty),*) => {$(
        impl<DB: SqlDatabase> SqlTx for $ty {
            fn engine(&self) -> Engine {
                Engine::assumed(DB::DIALECT)
            }

            fn execute(
                &mut self,
                sql: &str,
                args: &[Value],
            ) -> impl Future<Output = Result<Done>> + Send {
                async move {
                    DB::execute(&mut **self, Engine::assumed(DB::DIALECT), sql, args)
                        .await
                        .map_err(|e| db("executing a statement", e))
                }
            }

            fn fetch(
                &mut self,
                sql: &str,
                args: &[Value],
                cols: &[Column],
            ) -> impl Future<Output = Result<Vec<Vec<Value>>>> + Send {
                async move {
                    DB::fetch(&mut **self, Engine::assumed(DB::DIALECT), sql, args, cols)
                        .await
                        .map_err(|e| db("running a query", e))
                }
            }

            fn script(&mut self, sql: &str) -> impl Future<Output = Result<()>> + Send {
                async move {
                    DB::script(&mut **self, sql)
                        .await
                        .map_err(|e| db("running a script", e))
                }
            }
        }
    )*};
}

typed_seam!(Transaction<'_, DB>, PoolConnection<DB>);

/// A pool runs each statement on its own (autocommit): on a connection of the pool, inside a
/// short transaction of its own where a transaction pooler may stand between (see
/// [`crate::pooler`]). For code that reads or writes outside a handler's transaction (the
/// effect journal, operations); statements that must commit together take
/// [`AnyPool::begin`].
///
/// ```no_run
/// use oncely_sql::SqlTx;
/// # async fn f(pool: oncely_sql::AnyPool) -> oncely_core::Result<()> {
/// let mut pool = pool;
/// let n = pool.fetch_i64("SELECT COUNT(*) FROM oncely_inbox", &[]).await?;
/// # Ok(()) }
/// ```
impl SqlTx for AnyPool {
    fn engine(&self) -> Engine {
        AnyPool::engine(self)
    }

    fn execute(&mut self, sql: &str, args: &[Value]) -> impl Future<Output = Result<Done>> + Send {
        let engine = AnyPool::engine(self);
        async move {
            crate::with_pool!(&*self, p => async {
                let mut conn = p.acquire().await?;
                sql_database_execute(&mut conn, engine, sql, args).await
            }
            .await)
            .map_err(|e| db("executing a statement", e))
        }
    }

    fn fetch(
        &mut self,
        sql: &str,
        args: &[Value],
        cols: &[Column],
    ) -> impl Future<Output = Result<Vec<Vec<Value>>>> + Send {
        let engine = AnyPool::engine(self);
        async move {
            crate::with_pool!(&*self, p => async {
                let mut conn = p.acquire().await?;
                sql_database_fetch(&mut conn, engine, sql, args, cols).await
            }
            .await)
            .map_err(|e| db("running a query", e))
        }
    }

    async fn script(&mut self, sql: &str) -> Result<()> {
        crate::with_pool!(&*self, p => async {
            let mut conn = p.acquire().await?;
            sql_database_script(&mut conn, sql).await
        }
        .await)
        .map_err(|e| db("running a script", e))
    }
}

async fn sql_database_execute<DB: SqlDatabase>(
    conn: &mut PoolConnection<DB>,
    engine: Engine,
    sql: &str,
    args: &[Value],
) -> std::result::Result<Done, sqlx::Error> {
    DB::execute(&mut **conn, engine, sql, args).await
}

async fn sql_database_fetch<DB: SqlDatabase>(
    conn: &mut PoolConnection<DB>,
    engine: Engine,
    sql: &str,
    args: &[Value],
    cols: &[Column],
) -> std::result::Result<Vec<Vec<Value>>, sqlx::Error> {
    DB::fetch(&mut **conn, engine, sql, args, cols).await
}

async fn sql_database_script<DB: SqlDatabase>(
    conn: &mut PoolConnection<DB>,
    sql: &str,
) -> std::result::Result<(), sqlx::Error> {
    DB::script(&mut **conn, sql).await
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;

    /// Written once against the seam; run below on a typed transaction and on an [`AnyTx`].
    async fn count_after_insert(tx: &mut impl SqlTx) -> Option<i64> {
        tx.script("CREATE TABLE t (a BIGINT)").await.unwrap();
        let done = tx
            .execute("INSERT INTO t (a) VALUES ($1), ($2)", &[1.into(), 2.into()])
            .await
            .unwrap();
        assert_eq!(done.rows, 2);
        tx.fetch_i64("SELECT SUM(a) FROM t WHERE a >= $1", &[1.into()])
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn typed_and_erased_transactions_run_the_same_code() {
        let pool = sqlx::SqlitePool::connect("sqlite::memory:").await.unwrap();
        let mut typed = pool.begin().await.unwrap();
        assert_eq!(SqlTx::dialect(&typed), Dialect::Sqlite);
        assert_eq!(count_after_insert(&mut typed).await, Some(3));
        typed.rollback().await.unwrap();
        let mut erased = AnyTx::from(pool.begin().await.unwrap());
        assert_eq!(count_after_insert(&mut erased).await, Some(3));
        let e = SqlTx::execute(
            &mut erased,
            "INSERT INTO nowhere (a) VALUES ($1)",
            &[1.into()],
        )
        .await
        .unwrap_err();
        assert!(crate::error::is_missing_table(&e), "{e}");
        erased.rollback().await.unwrap();
    }

    /// A pool runs each statement on its own: what one statement wrote, the next one sees,
    /// and the pool and its transactions answer with the store's engine.
    #[tokio::test]
    async fn a_pool_runs_statements_one_by_one_with_its_stores_engine() {
        let store = crate::SqliteStore::connect("sqlite::memory:")
            .await
            .unwrap();
        let store = store.with_portable(true);
        let mut pool = store.any_pool();
        assert_eq!(SqlTx::engine(&pool), store.engine());
        assert!(SqlTx::engine(&pool).portable());
        pool.script("CREATE TABLE t (a BIGINT)").await.unwrap();
        let done = SqlTx::execute(&mut pool, "INSERT INTO t (a) VALUES ($1)", &[7.into()])
            .await
            .unwrap();
        assert_eq!(done.rows, 1);
        assert_eq!(
            pool.fetch_i64("SELECT SUM(a) FROM t", &[]).await.unwrap(),
            Some(7)
        );
        let tx = pool.begin().await.unwrap();
        assert_eq!(SqlTx::engine(&tx), store.engine(), "its transactions too");
        tx.rollback().await.unwrap();
        let typed = store.pool().begin().await.unwrap();
        assert_eq!(SqlTx::engine(&typed), Engine::assumed(Dialect::Sqlite));
    }
}
