//! Which engine is behind a pool, and whether oncely must use its portable mode there
//! ([`SqlStore::portable`](crate::SqlStore::portable())).
//!
//! Portable mode is for engines that speak the PostgreSQL or MySQL protocol but lack
//! single-node features: CockroachDB, YugabyteDB and Citus (no session advisory locks shared
//! across nodes, no `ctid`, no `LISTEN`/`NOTIFY`), TiDB (no `GET_LOCK` across nodes in older
//! versions, `LOCK IN SHARE MODE` ignored) and MariaDB Galera (`GET_LOCK` is node-local).

use crate::any::AnyPool;
use crate::error::db;
use oncely_core::Result;
#[cfg(feature = "mysql")]
use sqlx::MySqlPool;
#[cfg(feature = "postgres")]
use sqlx::{PgPool, Row};

/// The distributed engine a `version()` / `VERSION()` string names, if any:
/// `CockroachDB`, `YugabyteDB` (its versions contain `-YB-`) or `TiDB`.
///
/// ```
/// use oncely_sql::engine_of_version;
/// assert_eq!(engine_of_version("CockroachDB CCL v23.1.11 (x86_64-pc-linux-gnu)"), Some("CockroachDB"));
/// assert_eq!(engine_of_version("PostgreSQL 11.2-YB-2.20.1.0-b0 on x86_64"), Some("YugabyteDB"));
/// assert_eq!(engine_of_version("8.0.11-TiDB-v7.5.0"), Some("TiDB"));
/// assert_eq!(engine_of_version("PostgreSQL 15.5 (Debian 15.5-0+deb12u1)"), None);
/// assert_eq!(engine_of_version("10.11.6-MariaDB-0+deb12u1"), None);
/// ```
pub fn engine_of_version(version: &str) -> Option<&'static str> {
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

/// Whether the database behind `pool` needs portable mode: CockroachDB, YugabyteDB, a
/// PostgreSQL with the `citus` extension or behind a transaction pooler
/// ([`behind_transaction_pooler`](crate::behind_transaction_pooler)), TiDB, or MariaDB with Galera replication on
/// (`@@wsrep_on`). SQLite never does. One query per call (plus a simpler one if the engine
/// rejects the first, e.g. `@@wsrep_on` on a MySQL without Galera).
///
/// ```no_run
/// # async fn f(pool: oncely_sql::AnyPool) -> oncely_core::Result<()> {
/// if oncely_sql::detect_portable(&pool).await? {
///     println!("a distributed engine: oncely uses its portable SQL");
/// }
/// # Ok(()) }
/// ```
pub async fn detect_portable(pool: &AnyPool) -> Result<bool> {
    let engine: Option<&'static str> = match pool {
        #[cfg(feature = "sqlite")]
        AnyPool::Sqlite(_) => None,
        #[cfg(feature = "postgres")]
        AnyPool::Postgres(pool) => postgres_engine(pool).await?,
        #[cfg(feature = "mysql")]
        AnyPool::MySql(pool) => mysql_engine(pool).await?,
    };
    if let Some(engine) = engine {
        tracing::debug!(engine, "distributed engine detected: portable mode");
    }
    Ok(engine.is_some())
}

#[cfg(feature = "postgres")]
async fn postgres_engine(pool: &PgPool) -> Result<Option<&'static str>> {
    if crate::pooler::behind_transaction_pooler() {
        // Not an engine, but the same want: no session state between statements.
        return Ok(Some("a transaction pooler"));
    }
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
async fn mysql_engine(pool: &MySqlPool) -> Result<Option<&'static str>> {
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
    use super::*;

    #[test]
    fn galera_is_on_only_with_wsrep_on() {
        assert!(wsrep_on(Some("1")));
        assert!(wsrep_on(Some("ON")));
        assert!(!wsrep_on(Some("0")));
        assert!(!wsrep_on(Some("OFF")));
        assert!(!wsrep_on(None));
    }
}
