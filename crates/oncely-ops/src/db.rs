//! [`Ops`]: an oncely-sql pool of any database plus its table naming.

use oncely_core::{Error, Result};
use oncely_sql::error::is_missing_table;
use oncely_sql::sqlx::Pool;
use oncely_sql::{
    AnyPool, AnyStore, AnyTx, Column, Dialect, SqlDatabase, SqlStore, SqlTx, Tables, Value,
};

/// What the operations run against: a pool and the tables of one oncely installation.
#[derive(Debug, Clone)]
pub struct Ops {
    pool: AnyPool,
    tables: Tables,
}

impl Ops {
    /// Operations over `pool` for the tables named by `tables`. What the database can do
    /// (portable mode, a transaction pooler) is read from the pool's
    /// [`Engine`](oncely_sql::Engine): `Ops::from(&store)` and a store's `pool()` carry the
    /// store's.
    pub fn new(pool: AnyPool, tables: Tables) -> Self {
        Self { pool, tables }
    }

    /// Whether the pool's engine runs in portable mode.
    pub fn portable(&self) -> bool {
        self.pool.engine().portable()
    }

    /// The pool (for typed sqlx code; [`Ops::begin`] runs statements on any database).
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// The table naming: `ops.tables().inbox()`, `ops.tables().dead_letters()`, …
    pub fn tables(&self) -> &Tables {
        &self.tables
    }

    /// The database.
    pub fn dialect(&self) -> Dialect {
        self.pool.dialect()
    }

    /// A transaction on the pool: operations run their statements through it, with the same
    /// [`SqlTx`](oncely_sql::SqlTx) seam a handler's transaction offers.
    pub async fn begin(&self) -> Result<AnyTx> {
        self.pool.begin().await
    }

    /// The pool as a [`SqlTx`](oncely_sql::SqlTx) that runs each statement on its own
    /// (autocommit): for reads and single writes that need no transaction.
    pub(crate) fn autocommit(&self) -> AnyPool {
        self.pool.clone()
    }

    /// Runs a query on its own ([`Ops::autocommit`]) and decodes each row with `row`; an
    /// error says `what` was being done.
    pub(crate) async fn rows<T>(
        &self,
        what: &str,
        sql: &str,
        args: &[Value],
        cols: &[Column],
        row: impl Fn(&[Value]) -> T,
    ) -> Result<Vec<T>> {
        let rows = self.autocommit().fetch(sql, args, cols).await;
        Ok(rows.map_err(doing(what))?.iter().map(|r| row(r)).collect())
    }
}

/// Names what failed (`reading the inbox: …`), keeping the error's kind and cause.
pub(crate) fn doing(what: &str) -> impl FnOnce(Error) -> Error + '_ {
    move |e| e.context(what)
}

/// `Ok(None)` for a table that does not exist (oncely-effects' tables, where it is not
/// installed); other errors as they are.
pub(crate) fn unless_missing<T>(result: Result<T>) -> Result<Option<T>> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(e) if is_missing_table(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

impl From<&AnyStore> for Ops {
    fn from(s: &AnyStore) -> Self {
        Self::new(s.pool(), s.tables().clone())
    }
}

impl<DB: SqlDatabase> From<&SqlStore<DB>> for Ops
where
    AnyPool: From<Pool<DB>>,
{
    fn from(s: &SqlStore<DB>) -> Self {
        Self::new(s.any_pool(), s.tables().clone())
    }
}
