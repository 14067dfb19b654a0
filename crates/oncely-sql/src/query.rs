//! The erased query layer: run a statement with [`Value`] arguments and decode rows into
//! [`Value`]s on any of the three databases, so code above it is written once.
//!
//! - [`SqlDatabase`]'s `execute` / `fetch` / `script` work on a typed connection (generic code,
//!   e.g. `oncely-effects`);
//! - [`AnyTx`](crate::AnyTx) offers the same on whichever database's transaction it holds
//!   (handlers written once for any database).
//!
//! Statements number their placeholders `$1, $2, …` (or use the database's own); on MySQL the
//! numbers are rewritten to `?` by [`Dialect::rewrite_params`]. SQL that differs between
//! databases beyond that comes from [`Dialect`]'s methods.

use crate::dialect::Dialect;
use crate::engine::Engine;
use futures::future::BoxFuture;
#[cfg(feature = "mysql")]
use sqlx::MySql;
#[cfg(feature = "postgres")]
use sqlx::Postgres;
#[cfg(feature = "sqlite")]
use sqlx::Sqlite;
use sqlx::{AssertSqlSafe, Database, Row};

/// A bound argument or a decoded column value.
///
/// ```
/// use oncely_sql::Value;
/// let args: [Value; 3] = ["acct-17".into(), 5_i64.into(), None::<String>.into()];
/// assert_eq!(args[1].i64(), 5);
/// assert_eq!(args[0].text(), "acct-17");
/// assert_eq!(args[2], Value::NullText);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
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
    /// A NULL byte string (binds as the bytes type: `BYTEA`, `BLOB`).
    NullBytes,
}

impl Value {
    /// The integer, 0 for anything else (NULL included).
    ///
    /// ```
    /// assert_eq!(oncely_sql::Value::NullI64.i64(), 0);
    /// ```
    pub fn i64(&self) -> i64 {
        self.opt_i64().unwrap_or(0)
    }

    /// The integer, `None` for anything else (NULL included).
    ///
    /// ```
    /// assert_eq!(oncely_sql::Value::I64(3).opt_i64(), Some(3));
    /// ```
    pub fn opt_i64(&self) -> Option<i64> {
        match self {
            Self::I64(v) => Some(*v),
            _ => None,
        }
    }

    /// The text (bytes decoded lossily), empty for anything else.
    ///
    /// ```
    /// assert_eq!(oncely_sql::Value::Bytes(b"ab".to_vec()).text(), "ab");
    /// ```
    pub fn text(&self) -> String {
        self.opt_text().unwrap_or_default()
    }

    /// The text (bytes decoded lossily), `None` for anything else (NULL included).
    ///
    /// ```
    /// assert_eq!(oncely_sql::Value::NullText.opt_text(), None);
    /// ```
    pub fn opt_text(&self) -> Option<String> {
        match self {
            Self::Text(s) => Some(s.clone()),
            Self::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }

    /// The bytes (text as UTF-8), `None` for anything else (NULL included).
    ///
    /// ```
    /// assert_eq!(oncely_sql::Value::NullBytes.opt_bytes(), None);
    /// assert_eq!(oncely_sql::Value::Bytes(vec![1]).opt_bytes(), Some(vec![1]));
    /// ```
    pub fn opt_bytes(&self) -> Option<Vec<u8>> {
        match self {
            Self::Bytes(b) => Some(b.clone()),
            Self::Text(s) => Some(s.clone().into_bytes()),
            _ => None,
        }
    }

    /// The bytes (text as UTF-8), empty for anything else.
    ///
    /// ```
    /// assert_eq!(oncely_sql::Value::Text("ab".into()).bytes(), b"ab");
    /// ```
    pub fn bytes(&self) -> Vec<u8> {
        self.opt_bytes().unwrap_or_default()
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Self::I64(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Self::Text(v.to_owned())
    }
}
impl From<&String> for Value {
    fn from(v: &String) -> Self {
        Self::Text(v.clone())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Self::Text(v)
    }
}
impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Self::Bytes(v)
    }
}
impl From<&[u8]> for Value {
    fn from(v: &[u8]) -> Self {
        Self::Bytes(v.to_vec())
    }
}
impl From<Option<String>> for Value {
    fn from(v: Option<String>) -> Self {
        v.map_or(Self::NullText, Self::Text)
    }
}
impl From<Option<Vec<u8>>> for Value {
    fn from(v: Option<Vec<u8>>) -> Self {
        v.map_or(Self::NullBytes, Self::Bytes)
    }
}
impl From<Option<i64>> for Value {
    fn from(v: Option<i64>) -> Self {
        v.map_or(Self::NullI64, Self::I64)
    }
}

/// The type of a column to decode into a [`Value`].
///
/// ```
/// use oncely_sql::Column;
/// // SELECT account, balance FROM accounts
/// const ROW: &[Column] = &[Column::Text, Column::I64];
/// # assert_eq!(ROW.len(), 2);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    /// `BIGINT NOT NULL` (decodes [`Value::I64`]).
    I64,
    /// `BIGINT NULL` ([`Value::I64`] or [`Value::NullI64`]).
    OptI64,
    /// Text `NOT NULL` ([`Value::Text`]; MySQL's `VARBINARY` and text columns alike).
    Text,
    /// Text `NULL` ([`Value::Text`] or [`Value::NullText`]).
    OptText,
    /// Bytes `NOT NULL` ([`Value::Bytes`]).
    Bytes,
    /// Bytes `NULL` ([`Value::Bytes`] or [`Value::NullBytes`]).
    OptBytes,
}

/// What an executed statement reports.
///
/// ```
/// let done = oncely_sql::Done { rows: 1, last_insert_id: 0 };
/// assert_eq!(done.rows, 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    /// Rows affected (MySQL: found rows, as sqlx connects with `CLIENT_FOUND_ROWS`).
    pub rows: u64,
    /// MySQL's last insert id (0 elsewhere).
    pub last_insert_id: u64,
}

/// A sqlx database oncely supports: SQLite, PostgreSQL, MySQL/MariaDB. Its dialect, and the
/// erased query layer on its connections (the methods [`AnyTx`](crate::AnyTx) dispatches to).
///
/// Implemented for [`sqlx::Sqlite`], [`sqlx::Postgres`] and [`sqlx::MySql`].
///
/// ```no_run
/// use oncely_sql::{Column, SqlDatabase, Value, sqlx};
/// # async fn f<DB: SqlDatabase>(pool: sqlx::Pool<DB>) -> Result<(), sqlx::Error> {
/// let mut conn = pool.acquire().await?;
/// let args = [Value::from("acct-17")];
/// let engine = oncely_sql::Engine::assumed(DB::DIALECT);
/// let rows = DB::fetch(&mut conn, engine, "SELECT balance FROM accounts WHERE account = $1", &args, &[Column::I64]).await?;
/// # Ok(()) }
/// ```
pub trait SqlDatabase: Database {
    /// The dialect.
    const DIALECT: Dialect;

    /// The statement that begins a writing transaction (`BEGIN IMMEDIATE` on SQLite, so the
    /// single writer lock is taken up front instead of failing on upgrade).
    const BEGIN: &'static str;

    /// Runs a statement with `args` bound to its placeholders (`$1, $2, …`, see
    /// [`Dialect::rewrite_params`]), prepared as `engine` allows (named only where it
    /// [caches statements](Engine::caches_statements)).
    fn execute<'c>(
        conn: &'c mut Self::Connection,
        engine: Engine,
        sql: &'c str,
        args: &'c [Value],
    ) -> BoxFuture<'c, Result<Done, sqlx::Error>>;

    /// Runs a script of several statements without arguments (DDL, migrations).
    fn script<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c str,
    ) -> BoxFuture<'c, Result<(), sqlx::Error>>;

    /// Runs a query with `args` bound and decodes each row's columns as `cols` (in order),
    /// prepared as `engine` allows.
    fn fetch<'c>(
        conn: &'c mut Self::Connection,
        engine: Engine,
        sql: &'c str,
        args: &'c [Value],
        cols: &'c [Column],
    ) -> BoxFuture<'c, Result<Vec<Vec<Value>>, sqlx::Error>>;
}

/// The arguments in the order the (possibly rewritten) statement binds them: `args` as given,
/// or picked by `order` (see [`Dialect::rewrite_params`]). A number without an argument binds
/// nothing, so the database reports the missing parameter.
fn ordered<'a>(args: &'a [Value], order: Option<&'a [usize]>) -> impl Iterator<Item = &'a Value> {
    let (all, picked) = match order {
        None => (Some(args.iter()), None),
        Some(order) => (None, Some(order.iter().filter_map(|&i| args.get(i)))),
    };
    all.into_iter()
        .flatten()
        .chain(picked.into_iter().flatten())
}

macro_rules! bind_all {
    ($q:expr, $args:expr) => {{
        let mut q = $q;
        for arg in $args {
            q = match arg {
                Value::I64(v) => q.bind(*v),
                Value::Text(v) => q.bind(v.as_str()),
                Value::Bytes(v) => q.bind(v.as_slice()),
                Value::NullI64 => q.bind(None::<i64>),
                Value::NullText => q.bind(None::<String>),
                Value::NullBytes => q.bind(None::<Vec<u8>>),
            };
        }
        q
    }};
}

macro_rules! sql_database {
    ($db:ty, $dialect:expr, $begin:expr, $text:ty, |$t:ident| $to_text:expr) => {
        impl SqlDatabase for $db {
            const DIALECT: Dialect = $dialect;
            const BEGIN: &'static str = $begin;

            fn execute<'c>(
                conn: &'c mut Self::Connection,
                engine: Engine,
                sql: &'c str,
                args: &'c [Value],
            ) -> BoxFuture<'c, Result<Done, sqlx::Error>> {
                Box::pin(async move {
                    if must_pin::<Self>(conn, engine) {
                        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
                        let done = Self::execute(&mut *tx, engine, sql, args).await?;
                        tx.commit().await?;
                        return Ok(done);
                    }
                    let (sql, order) = Self::DIALECT.rewrite_params(sql);
                    let q = bind_all!(
                        engine.query(AssertSqlSafe(sql.into_owned())),
                        ordered(args, order.as_deref())
                    );
                    let r = q.execute(&mut *conn).await?;
                    Ok(done_of(&r))
                })
            }

            fn script<'c>(
                conn: &'c mut Self::Connection,
                sql: &'c str,
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
                engine: Engine,
                sql: &'c str,
                args: &'c [Value],
                cols: &'c [Column],
            ) -> BoxFuture<'c, Result<Vec<Vec<Value>>, sqlx::Error>> {
                Box::pin(async move {
                    if must_pin::<Self>(conn, engine) {
                        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
                        let rows = Self::fetch(&mut *tx, engine, sql, args, cols).await?;
                        tx.commit().await?;
                        return Ok(rows);
                    }
                    let (sql, order) = Self::DIALECT.rewrite_params(sql);
                    let q = bind_all!(
                        engine.query(AssertSqlSafe(sql.into_owned())),
                        ordered(args, order.as_deref())
                    );
                    let rows = q.fetch_all(&mut *conn).await?;
                    let text = |v: Option<$text>| v.map(|$t| $to_text);
                    rows.iter()
                        .map(|row| {
                            cols.iter()
                                .enumerate()
                                .map(|(i, col)| {
                                    Ok(match col {
                                        Column::I64 => Value::I64(row.try_get::<i64, _>(i)?),
                                        Column::OptI64 => row.try_get::<Option<i64>, _>(i)?.into(),
                                        Column::Text | Column::OptText => {
                                            text(row.try_get::<Option<$text>, _>(i)?).into()
                                        }
                                        Column::Bytes => {
                                            Value::Bytes(row.try_get::<Vec<u8>, _>(i)?)
                                        }
                                        Column::OptBytes => {
                                            row.try_get::<Option<Vec<u8>>, _>(i)?.into()
                                        }
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

/// Whether a statement on `conn` must get a transaction of its own first: behind a
/// transaction pooler (or where that is not known), on a connection outside a transaction
/// (see [`crate::pooler`]: the pooler could hand the statement's `Bind` to another server).
fn must_pin<DB: SqlDatabase>(conn: &DB::Connection, engine: Engine) -> bool {
    engine.pins_statements() && !sqlx::Connection::is_in_transaction(conn)
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
#[cfg(feature = "sqlite")]
impl QueryResultExt for sqlx::sqlite::SqliteQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}
#[cfg(feature = "postgres")]
impl QueryResultExt for sqlx::postgres::PgQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}
#[cfg(feature = "mysql")]
impl QueryResultExt for sqlx::mysql::MySqlQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
    fn insert_id(&self) -> u64 {
        self.last_insert_id()
    }
}

#[cfg(feature = "sqlite")]
sql_database!(Sqlite, Dialect::Sqlite, "BEGIN IMMEDIATE", String, |t| t);
#[cfg(feature = "postgres")]
sql_database!(Postgres, Dialect::Postgres, "BEGIN", String, |t| t);
#[cfg(feature = "mysql")]
sql_database!(MySql, Dialect::MySql, "BEGIN", Vec<u8>, |t| {
    String::from_utf8_lossy(&t).into_owned()
});
