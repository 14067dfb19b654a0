//! The one place that touches sqlx per database: [`EffectsDb`] runs a statement with
//! [`Val`] arguments and decodes rows into [`Val`]s, so the rest of the crate is written once.
//! The SQL that differs between databases comes from [`oncely_sql::Dialect`].

use futures::future::BoxFuture;
use oncely_sql::SqlDatabase;
use sqlx::{AssertSqlSafe, MySql, Postgres, Row, Sqlite};

/// A bound argument or a decoded column value.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Val {
    /// A 64-bit integer.
    I64(i64),
    /// Text.
    Text(String),
    /// Bytes.
    Bytes(Vec<u8>),
    /// A NULL integer.
    NullI64,
    /// A NULL text.
    NullText,
}

impl Val {
    pub(crate) fn i64(&self) -> i64 {
        match self {
            Self::I64(v) => *v,
            _ => 0,
        }
    }

    pub(crate) fn opt_i64(&self) -> Option<i64> {
        match self {
            Self::I64(v) => Some(*v),
            _ => None,
        }
    }

    pub(crate) fn text(&self) -> String {
        self.opt_text().unwrap_or_default()
    }

    pub(crate) fn opt_text(&self) -> Option<String> {
        match self {
            Self::Text(s) => Some(s.clone()),
            Self::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }

    pub(crate) fn bytes(&self) -> Vec<u8> {
        match self {
            Self::Bytes(b) => b.clone(),
            Self::Text(s) => s.clone().into_bytes(),
            _ => Vec::new(),
        }
    }
}

impl From<i64> for Val {
    fn from(v: i64) -> Self {
        Self::I64(v)
    }
}
impl From<&str> for Val {
    fn from(v: &str) -> Self {
        Self::Text(v.to_owned())
    }
}
impl From<String> for Val {
    fn from(v: String) -> Self {
        Self::Text(v)
    }
}
impl From<Option<String>> for Val {
    fn from(v: Option<String>) -> Self {
        v.map_or(Self::NullText, Self::Text)
    }
}
impl From<Option<i64>> for Val {
    fn from(v: Option<i64>) -> Self {
        v.map_or(Self::NullI64, Self::I64)
    }
}

/// The type of a column to decode.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Col {
    /// BIGINT NOT NULL.
    I64,
    /// BIGINT NULL.
    OptI64,
    /// Text NOT NULL (VARBINARY on MySQL).
    Text,
    /// Text NULL.
    OptText,
    /// Bytes NOT NULL.
    Bytes,
}

/// What an executed statement reports.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    /// Rows affected (MySQL: found rows, as sqlx connects with `CLIENT_FOUND_ROWS`).
    pub rows: u64,
    /// MySQL's last insert id (0 elsewhere).
    pub last_insert_id: u64,
}

/// A database oncely-effects supports: SQLite, PostgreSQL, MySQL/MariaDB.
///
/// Implemented for [`sqlx::Sqlite`], [`sqlx::Postgres`] and [`sqlx::MySql`]; the methods
/// are internal plumbing.
pub trait EffectsDb: SqlDatabase {
    /// The statement that begins a writing transaction (`BEGIN IMMEDIATE` on SQLite, so the
    /// single writer lock is taken up front instead of failing on upgrade).
    #[doc(hidden)]
    const BEGIN: &'static str;

    /// Runs a statement.
    #[doc(hidden)]
    fn execute<'c>(
        conn: &'c mut Self::Connection,
        sql: String,
        args: Vec<Val>,
    ) -> BoxFuture<'c, Result<Done, sqlx::Error>>;

    /// Runs a script of several statements without arguments (migrations).
    #[doc(hidden)]
    fn script<'c>(
        conn: &'c mut Self::Connection,
        sql: String,
    ) -> BoxFuture<'c, Result<(), sqlx::Error>>;

    /// Runs a query and decodes each row as `cols`.
    #[doc(hidden)]
    fn fetch<'c>(
        conn: &'c mut Self::Connection,
        sql: String,
        args: Vec<Val>,
        cols: &'static [Col],
    ) -> BoxFuture<'c, Result<Vec<Vec<Val>>, sqlx::Error>>;
}

macro_rules! bind_all {
    ($q:expr, $args:expr) => {{
        let mut q = $q;
        for arg in $args {
            q = match arg {
                Val::I64(v) => q.bind(v),
                Val::Text(v) => q.bind(v),
                Val::Bytes(v) => q.bind(v),
                Val::NullI64 => q.bind(None::<i64>),
                Val::NullText => q.bind(None::<String>),
            };
        }
        q
    }};
}

macro_rules! effects_db {
    ($db:ty, $begin:expr, $text:ty, |$t:ident| $to_text:expr) => {
        impl EffectsDb for $db {
            const BEGIN: &'static str = $begin;

            fn execute<'c>(
                conn: &'c mut Self::Connection,
                sql: String,
                args: Vec<Val>,
            ) -> BoxFuture<'c, Result<Done, sqlx::Error>> {
                Box::pin(async move {
                    let q = bind_all!(sqlx::query(AssertSqlSafe(sql)), args);
                    let r = q.execute(&mut *conn).await?;
                    Ok(done_of(&r))
                })
            }

            fn script<'c>(
                conn: &'c mut Self::Connection,
                sql: String,
            ) -> BoxFuture<'c, Result<(), sqlx::Error>> {
                Box::pin(async move {
                    sqlx::raw_sql(AssertSqlSafe(sql))
                        .execute(&mut *conn)
                        .await?;
                    Ok(())
                })
            }

            fn fetch<'c>(
                conn: &'c mut Self::Connection,
                sql: String,
                args: Vec<Val>,
                cols: &'static [Col],
            ) -> BoxFuture<'c, Result<Vec<Vec<Val>>, sqlx::Error>> {
                Box::pin(async move {
                    let q = bind_all!(sqlx::query(AssertSqlSafe(sql)), args);
                    let rows = q.fetch_all(&mut *conn).await?;
                    let text = |v: Option<$text>| v.map(|$t| $to_text);
                    rows.iter()
                        .map(|row| {
                            cols.iter()
                                .enumerate()
                                .map(|(i, col)| {
                                    Ok(match col {
                                        Col::I64 => Val::I64(row.try_get::<i64, _>(i)?),
                                        Col::OptI64 => row.try_get::<Option<i64>, _>(i)?.into(),
                                        Col::Text | Col::OptText => {
                                            text(row.try_get::<Option<$text>, _>(i)?).into()
                                        }
                                        Col::Bytes => Val::Bytes(row.try_get::<Vec<u8>, _>(i)?),
                                    })
                                })
                                .collect()
                        })
                        .collect()
                })
            }
        }
    };
}

fn done_of<R: QueryResultExt>(r: &R) -> Done {
    Done {
        rows: r.rows(),
        last_insert_id: r.insert_id(),
    }
}

trait QueryResultExt {
    fn rows(&self) -> u64;
    fn insert_id(&self) -> u64 {
        0
    }
}
impl QueryResultExt for sqlx::sqlite::SqliteQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}
impl QueryResultExt for sqlx::postgres::PgQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}
impl QueryResultExt for sqlx::mysql::MySqlQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
    fn insert_id(&self) -> u64 {
        self.last_insert_id()
    }
}

effects_db!(Sqlite, "BEGIN IMMEDIATE", String, |t| t);
effects_db!(Postgres, "BEGIN", String, |t| t);
effects_db!(MySql, "BEGIN", Vec<u8>, |t| String::from_utf8_lossy(&t)
    .into_owned());
