//! [`Ops`]: an oncely-sql pool of any dialect plus its table naming.

use oncely_sql::sqlx::{MySqlPool, PgPool, SqlitePool};
use oncely_sql::{Dialect, MySqlStore, PgStore, SqliteStore, Tables};
use std::time::{SystemTime, UNIX_EPOCH};

/// The pool of one of the three dialects.
#[derive(Debug, Clone)]
pub enum OpsPool {
    /// SQLite.
    Sqlite(SqlitePool),
    /// PostgreSQL.
    Postgres(PgPool),
    /// MySQL / MariaDB.
    MySql(MySqlPool),
}

/// What the operations run against: a pool and the tables of one oncely installation.
#[derive(Debug, Clone)]
pub struct Ops {
    pool: OpsPool,
    tables: Tables,
}

/// Runs `$body` with `$p` bound to the concrete pool (the body is compiled once per dialect).
macro_rules! with_pool {
    ($ops:expr, $p:ident => $body:expr) => {
        match $ops.pool() {
            $crate::db::OpsPool::Sqlite($p) => $body,
            $crate::db::OpsPool::Postgres($p) => $body,
            $crate::db::OpsPool::MySql($p) => $body,
        }
    };
}
pub(crate) use with_pool;

impl Ops {
    /// Operations over `pool` for the tables named by `tables`.
    pub fn new(pool: OpsPool, tables: Tables) -> Self {
        Self { pool, tables }
    }

    /// The pool.
    pub fn pool(&self) -> &OpsPool {
        &self.pool
    }

    /// The table naming.
    pub fn tables(&self) -> &Tables {
        &self.tables
    }

    /// The dialect.
    pub fn dialect(&self) -> Dialect {
        match self.pool {
            OpsPool::Sqlite(_) => Dialect::Sqlite,
            OpsPool::Postgres(_) => Dialect::Postgres,
            OpsPool::MySql(_) => Dialect::MySql,
        }
    }

    /// Qualified name of an oncely table (`inbox`, `dead_letters`, …).
    pub fn table(&self, name: &str) -> String {
        self.tables.table(name)
    }

    /// Bind placeholder `n` (1-based) in this dialect.
    pub(crate) fn p(&self, n: usize) -> String {
        match self.dialect() {
            Dialect::Postgres => format!("${n}"),
            Dialect::Sqlite => format!("?{n}"),
            Dialect::MySql => "?".to_owned(),
        }
    }

    /// A text column as `String` (MySQL stores inbox keys as VARBINARY).
    pub(crate) fn text(&self, column: &str) -> String {
        match self.dialect() {
            Dialect::MySql => format!("CAST({column} AS CHAR)"),
            _ => column.to_owned(),
        }
    }
}

impl From<&SqliteStore> for Ops {
    fn from(s: &SqliteStore) -> Self {
        Self::new(OpsPool::Sqlite(s.pool().clone()), s.tables().clone())
    }
}

impl From<&PgStore> for Ops {
    fn from(s: &PgStore) -> Self {
        Self::new(OpsPool::Postgres(s.pool().clone()), s.tables().clone())
    }
}

impl From<&MySqlStore> for Ops {
    fn from(s: &MySqlStore) -> Self {
        Self::new(OpsPool::MySql(s.pool().clone()), s.tables().clone())
    }
}

/// Milliseconds since the Unix epoch, as the inbox stores `received_at`.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Wraps a sqlx error with what was being done: the one classifier of oncely-sql.
pub(crate) use oncely_sql::db_error as db;

/// True when the error says the table does not exist (so optional tables can be skipped).
pub(crate) fn is_missing_table(e: &oncely_sql::sqlx::Error) -> bool {
    match e {
        oncely_sql::sqlx::Error::Database(d) => {
            matches!(d.code().as_deref(), Some("42P01" | "42S02" | "1146"))
                || d.message().contains("no such table")
        }
        _ => false,
    }
}
