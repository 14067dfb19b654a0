//! [`Engine`]: the facts of a connection, decided once when a store or pool connects (which
//! database, whether oncely must use its portable SQL there, whether a transaction pooler
//! stands in between), held by the store, its pool and every transaction they hand out, and
//! read there by everything that needs one of them: the store's statements, the migration
//! runner, locks, the outbox and its relay, operations.
//!
//! Portable mode is for engines that speak the PostgreSQL or MySQL protocol but lack
//! single-node features: CockroachDB, YugabyteDB and Citus (no session advisory locks shared
//! across nodes, no `ctid`, no `LISTEN`/`NOTIFY`), TiDB (no `GET_LOCK` across nodes in older
//! versions, `LOCK IN SHARE MODE` ignored) and MariaDB Galera (`GET_LOCK` is node-local); and
//! for PostgreSQL behind a transaction pooler (no session state between transactions).

use crate::dialect::Dialect;
use crate::error::db;
use oncely_core::Result;
#[cfg(feature = "mysql")]
use sqlx::MySqlPool;
#[cfg(feature = "postgres")]
use sqlx::{PgPool, Row};

/// The facts of one connection (a store, its pool, their transactions), decided once when the
/// store connects: the [`Dialect`], portable mode, and whether a transaction pooler stands
/// between oncely and PostgreSQL. Everything that depends on one of them asks here
/// ([`SqlStore::engine`](crate::SqlStore::engine), [`AnyPool::engine`](crate::AnyPool::engine),
/// [`SqlTx::engine`](crate::SqlTx::engine)); no copy of a fact is kept anywhere else.
///
/// ```no_run
/// # async fn f() -> oncely_core::Result<()> {
/// let store = oncely_sql::AnyStore::connect("postgres://app@127.0.0.1:6432/app").await?;
/// let engine = store.engine();
/// if engine.behind_transaction_pooler() {
///     assert!(engine.portable() && !engine.caches_statements());
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Engine {
    dialect: Dialect,
    portable: bool,
    pooler: Pooler,
}

/// What stands between a PostgreSQL client and the server, as far as oncely knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pooler {
    /// A direct connection, or a session pooler: a client connection is one server session.
    None,
    /// A transaction pooler (PgBouncer `pool_mode = transaction` and alike).
    Transaction,
    /// Not known: a typed sqlx pool or transaction handed to oncely without its store. On
    /// PostgreSQL oncely then takes the safe side (unnamed statements, each in a transaction).
    Unknown,
}

impl Engine {
    /// A single-node server of `dialect` reached directly: no pooler in between, no portable
    /// mode, named statements cached. For a store made from a pool known to be direct
    /// ([`SqlStore::with_engine`](crate::SqlStore::with_engine)); a pool of unknown origin is
    /// [`Engine::assumed`].
    ///
    /// ```
    /// use oncely_sql::{Dialect, Engine};
    /// let engine = Engine::direct(Dialect::Postgres);
    /// assert!(engine.caches_statements() && engine.notifies() && !engine.portable());
    /// ```
    pub const fn direct(dialect: Dialect) -> Self {
        Self {
            dialect,
            portable: false,
            pooler: Pooler::None,
        }
    }

    /// What oncely assumes of a sqlx pool or transaction it did not open itself (a typed
    /// `sqlx::Transaction` or a pool converted with `AnyPool::from`): on PostgreSQL a
    /// transaction pooler may stand between, so statements are unnamed and each runs inside a
    /// transaction; SQLite and MySQL connections are never pooled that way.
    ///
    /// ```
    /// use oncely_sql::{Dialect, Engine};
    /// assert!(!Engine::assumed(Dialect::Postgres).caches_statements());
    /// assert!(Engine::assumed(Dialect::Sqlite).caches_statements());
    /// assert!(!Engine::assumed(Dialect::Postgres).behind_transaction_pooler());
    /// ```
    pub const fn assumed(dialect: Dialect) -> Self {
        Self {
            dialect,
            portable: false,
            pooler: match dialect {
                Dialect::Postgres => Pooler::Unknown,
                _ => Pooler::None,
            },
        }
    }

    /// The same engine in portable mode, forced (or not: `false` keeps what was detected off
    /// only where nothing required it; a transaction pooler always keeps portable mode).
    pub(crate) const fn with_portable(mut self, portable: bool) -> Self {
        self.portable = portable || matches!(self.pooler, Pooler::Transaction);
        self
    }

    /// The same engine behind a transaction pooler (which implies portable mode).
    pub(crate) const fn behind_pooler(mut self, behind: bool) -> Self {
        self.pooler = if behind {
            Pooler::Transaction
        } else {
            Pooler::None
        };
        self.with_portable(self.portable)
    }

    /// The database.
    pub const fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Whether only SQL that distributed engines support is used (CockroachDB, YugabyteDB,
    /// TiDB, Citus, MariaDB Galera; and PostgreSQL behind a transaction pooler): lease-table
    /// locks instead of advisory / named locks, primary-key-range pruning instead of `ctid`,
    /// a polling outbox relay (no `LISTEN`/`NOTIFY`), `FOR UPDATE` claim reads on the MySQL
    /// family, batch claims one at a time.
    pub const fn portable(&self) -> bool {
        self.portable
    }

    /// Whether a transaction pooler (PgBouncer `pool_mode = transaction` and alike) was found
    /// (or named with `?pooler=transaction`) when the store connected. See [`crate::pooler`].
    pub const fn behind_transaction_pooler(&self) -> bool {
        matches!(self.pooler, Pooler::Transaction)
    }

    /// Whether statements may be prepared by name and cached per connection: everywhere but
    /// on PostgreSQL behind a transaction pooler (or where that is not known).
    pub const fn caches_statements(&self) -> bool {
        matches!(self.pooler, Pooler::None)
    }

    /// Whether a statement outside a transaction must get a transaction of its own, so that
    /// its `Parse` and `Bind` reach the same server connection (see [`crate::pooler`]).
    pub(crate) const fn pins_statements(&self) -> bool {
        !self.caches_statements()
    }

    /// Whether `LISTEN`/`NOTIFY` may wake an outbox relay: PostgreSQL, not in portable mode.
    pub fn notifies(&self) -> bool {
        self.dialect == Dialect::Postgres && !self.portable
    }

    /// Whether a lock shared by every client of the database must be a lease row: on SQLite
    /// (no advisory locks) and in portable mode (session locks are node- or server-local).
    pub fn leases_locks(&self) -> bool {
        self.dialect == Dialect::Sqlite || self.portable
    }

    /// `sqlx::query`, named and cached only where [`Engine::caches_statements`].
    ///
    /// ```no_run
    /// # async fn f(store: oncely_sql::PgStore, tx: &mut oncely_sql::sqlx::Transaction<'static, oncely_sql::sqlx::Postgres>) -> Result<(), oncely_sql::sqlx::Error> {
    /// let engine = store.engine();
    /// engine.query("UPDATE accounts SET balance = balance + $1 WHERE id = $2")
    ///     .bind(5_i64)
    ///     .bind("acct-17")
    ///     .execute(&mut **tx)
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn query<'q, DB: sqlx::Database + sqlx::database::HasStatementCache>(
        &self,
        sql: impl sqlx::SqlSafeStr,
    ) -> sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments> {
        sqlx::query(sql).persistent(self.caches_statements())
    }

    /// `sqlx::query_as`, named and cached only where [`Engine::caches_statements`].
    pub fn query_as<'q, DB: sqlx::Database + sqlx::database::HasStatementCache, O>(
        &self,
        sql: impl sqlx::SqlSafeStr,
    ) -> sqlx::query::QueryAs<'q, DB, O, <DB as sqlx::Database>::Arguments>
    where
        O: for<'r> sqlx::FromRow<'r, DB::Row>,
    {
        sqlx::query_as(sql).persistent(self.caches_statements())
    }

    /// `sqlx::query_scalar`, named and cached only where [`Engine::caches_statements`].
    pub fn query_scalar<'q, DB: sqlx::Database + sqlx::database::HasStatementCache, O>(
        &self,
        sql: impl sqlx::SqlSafeStr,
    ) -> sqlx::query::QueryScalar<'q, DB, O, <DB as sqlx::Database>::Arguments>
    where
        (O,): for<'r> sqlx::FromRow<'r, DB::Row>,
    {
        sqlx::query_scalar(sql).persistent(self.caches_statements())
    }
}

/// The distributed engine a `version()` / `VERSION()` string names, if any:
/// `CockroachDB`, `YugabyteDB` (its versions contain `-YB-`) or `TiDB`.
pub(crate) fn engine_of_version(version: &str) -> Option<&'static str> {
    if version.contains("CockroachDB") {
        Some("CockroachDB")
    } else if version.contains("-YB-") {
        Some("YugabyteDB")
    } else if version.contains("TiDB") {
        Some("TiDB")
    } else {
        None
    }
}

/// Whether a MySQL-family `@@wsrep_on` value (as text) means Galera replication is on.
fn wsrep_on(value: Option<&str>) -> bool {
    value.is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("ON"))
}

#[cfg(feature = "postgres")]
pub(crate) async fn postgres_engine(pool: &PgPool) -> Result<Option<&'static str>> {
    // Simple protocol (no prepared statement): safe through any pooler.
    let first = |sql: &'static str| async move {
        let row = sqlx::raw_sql(sql).fetch_one(pool).await?;
        Ok::<_, sqlx::Error>((
            row.try_get::<String, _>(0)?,
            row.try_get::<Option<String>, _>(1).ok().flatten(),
        ))
    };
    let both = first(
        "SELECT version(), (SELECT count(*) FROM pg_catalog.pg_extension WHERE extname = 'citus')::text",
    )
    .await;
    let (version, citus) = match both {
        Ok(row) => row,
        // An engine without pg_extension: the version alone decides.
        Err(_) => first("SELECT version()")
            .await
            .map_err(|e| db("reading the server version", e))?,
    };
    let citus = citus.is_some_and(|n| n != "0");
    Ok(engine_of_version(&version).or(citus.then_some("Citus")))
}

#[cfg(feature = "mysql")]
pub(crate) async fn mysql_engine(pool: &MySqlPool) -> Result<Option<&'static str>> {
    // `@@wsrep_on` exists on MariaDB (OFF without Galera) but not on MySQL or TiDB, where the
    // statement fails: then the version alone decides.
    let both = sqlx::query_as::<_, (String, Option<String>)>(
        "SELECT CAST(VERSION() AS CHAR), CAST(@@wsrep_on AS CHAR)",
    )
    .fetch_one(pool)
    .await;
    let (version, wsrep) = match both {
        Ok(row) => row,
        Err(_) => (
            sqlx::query_scalar::<_, String>("SELECT CAST(VERSION() AS CHAR)")
                .fetch_one(pool)
                .await
                .map_err(|e| db("reading the server version", e))?,
            None,
        ),
    };
    Ok(engine_of_version(&version).or(wsrep_on(wsrep.as_deref()).then_some("MariaDB Galera")))
}

#[cfg(test)]
mod tests {
    #[test]
    fn engine_of_version_names_the_distributed_engines() {
        assert_eq!(
            engine_of_version("CockroachDB CCL v23.1.11 (x86_64-pc-linux-gnu)"),
            Some("CockroachDB")
        );
        assert_eq!(
            engine_of_version("PostgreSQL 11.2-YB-2.20.1.0-b0 on x86_64"),
            Some("YugabyteDB")
        );
        assert_eq!(engine_of_version("8.0.11-TiDB-v7.5.0"), Some("TiDB"));
        assert_eq!(
            engine_of_version("PostgreSQL 15.5 (Debian 15.5-0+deb12u1)"),
            None
        );
        assert_eq!(engine_of_version("10.11.6-MariaDB-0+deb12u1"), None);
    }

    use super::*;

    #[test]
    fn a_transaction_pooler_implies_portable_mode_and_unnamed_statements() {
        let direct = Engine::direct(Dialect::Postgres);
        assert!(direct.caches_statements() && !direct.portable() && direct.notifies());
        let pooled = direct.behind_pooler(true);
        assert!(pooled.behind_transaction_pooler() && pooled.portable());
        assert!(!pooled.caches_statements() && pooled.pins_statements() && !pooled.notifies());
        assert!(
            pooled.with_portable(false).portable(),
            "the pooler keeps portable mode"
        );
        assert!(Engine::direct(Dialect::Sqlite).leases_locks());
        assert!(!Engine::direct(Dialect::MySql).leases_locks());
        assert!(
            Engine::direct(Dialect::MySql)
                .with_portable(true)
                .leases_locks()
        );
        assert!(!Engine::direct(Dialect::MySql).notifies());
    }

    #[test]
    fn galera_is_on_only_with_wsrep_on() {
        assert!(wsrep_on(Some("1")));
        assert!(wsrep_on(Some("ON")));
        assert!(!wsrep_on(Some("0")));
        assert!(!wsrep_on(Some("OFF")));
        assert!(!wsrep_on(None));
    }
}
