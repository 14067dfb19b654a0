//! [`Ops`]: an oncely-sql pool of any database plus its table naming.

use oncely_sql::sqlx::Pool;
use oncely_sql::{AnyPool, AnyStore, AnyTx, Dialect, SqlDatabase, SqlStore, Tables};

/// What the operations run against: a pool and the tables of one oncely installation.
#[derive(Debug, Clone)]
pub struct Ops {
    pool: AnyPool,
    tables: Tables,
    portable: bool,
}

impl Ops {
    /// Operations over `pool` for the tables named by `tables` (portable mode off unless
    /// detected: [`Ops::with_portable`]; `Ops::from(&store)` takes the store's).
    pub fn new(pool: AnyPool, tables: Tables) -> Self {
        Self {
            pool,
            tables,
            portable: false,
        }
    }

    /// Forces portable mode ([`oncely_sql::SqlStore::portable()`]): lease locks and
    /// primary-key-range pruning even where the engine is not detected as distributed.
    pub fn with_portable(mut self, portable: bool) -> Self {
        self.portable = portable;
        self
    }

    /// Whether portable mode is forced (it is also used when detected at the time).
    pub fn portable(&self) -> bool {
        self.portable
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
    pub async fn begin(&self) -> oncely_core::Result<AnyTx> {
        self.pool.begin().await
    }
}

impl From<&AnyStore> for Ops {
    fn from(s: &AnyStore) -> Self {
        Self::new(s.pool(), s.tables().clone()).with_portable(s.portable())
    }
}

impl<DB: SqlDatabase> From<&SqlStore<DB>> for Ops
where
    AnyPool: From<Pool<DB>>,
{
    fn from(s: &SqlStore<DB>) -> Self {
        Self::new(AnyPool::from(s.pool().clone()), s.tables().clone()).with_portable(s.portable())
    }
}
