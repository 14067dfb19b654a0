//! Versioned apply: an update carrying version `v` of an entity is applied only if the stored
//! version is lower, in one atomic statement, so reordered and duplicated updates converge on
//! the highest version.

use oncely_core::{Handled, Result};
use oncely_sql::Tables;
use oncely_sql::{Column, SqlDatabase, Value};
use oncely_sql::{db, now_ms};
use sqlx::Transaction;

/// What [`apply_if_newer`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Versioned {
    /// The version is newer than the stored one (or the first seen): it is now stored; write
    /// the effect in the same transaction.
    Applied,
    /// The stored version is the same or newer: write nothing. The handler returns
    /// [`Handled::Stale`] and the delivery is acked.
    Stale,
}

impl Versioned {
    /// The handler's answer for this result.
    pub fn handled(self) -> Handled {
        match self {
            Self::Applied => Handled::Applied,
            Self::Stale => Handled::Stale,
        }
    }

    /// True for [`Versioned::Applied`].
    pub fn is_applied(self) -> bool {
        self == Self::Applied
    }
}

/// The per-entity version table (`{prefix}versions`), with custom [`Tables`].
///
/// ```no_run
/// # use oncely_effects::{Versions, Versioned};
/// # async fn f(tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>) -> oncely_core::Result<()> {
/// let versions = Versions::new(oncely_sql::Tables::default());
/// if versions.apply_if_newer(tx, "order", "o-17", 4).await? == Versioned::Applied {
///     sqlx::query("UPDATE orders SET status = 'shipped' WHERE id = 'o-17'")
///         .execute(&mut **tx)
///         .await
///         .map_err(|e| oncely_core::Error::transient(e))?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Versions {
    tables: Tables,
}

impl Versions {
    /// The version table of `tables`.
    pub fn new(tables: Tables) -> Self {
        Self { tables }
    }

    /// Stores `version` for `(entity, key)` if it is higher than the stored version (or none is
    /// stored), inside `tx`. A concurrent transaction on the same entity waits on the row lock
    /// and then compares against the committed version.
    pub async fn apply_if_newer<DB: SqlDatabase>(
        &self,
        tx: &mut Transaction<'_, DB>,
        entity: &str,
        key: &str,
        version: i64,
    ) -> Result<Versioned> {
        let sql = DB::DIALECT.upsert_if_newer(&self.tables.versions());
        let args: Vec<Value> = vec![entity.into(), key.into(), version.into(), now_ms().into()];
        let done = DB::execute(&mut **tx, &sql, &args)
            .await
            .map_err(|e| db("apply_if_newer", e))?;
        Ok(
            if DB::DIALECT.upsert_if_newer_applied(done.rows, done.last_insert_id) {
                Versioned::Applied
            } else {
                Versioned::Stale
            },
        )
    }

    /// The stored version of `(entity, key)`, if any.
    pub async fn current<DB: SqlDatabase>(
        &self,
        conn: &mut DB::Connection,
        entity: &str,
        key: &str,
    ) -> Result<Option<i64>> {
        let d = DB::DIALECT;
        let sql = format!(
            "SELECT version FROM {} WHERE entity = {} AND entity_key = {}",
            self.tables.versions(),
            d.param(1),
            d.param(2)
        );
        let rows = DB::fetch(conn, &sql, &[entity.into(), key.into()], &[Column::I64])
            .await
            .map_err(|e| db("reading a version", e))?;
        Ok(rows.first().map(|r| r[0].i64()))
    }
}

/// [`Versions::apply_if_newer`] on the default tables (`oncely_versions`).
///
/// ```no_run
/// # use oncely_core::{Envelope, Handled, Handler, Error};
/// # struct Orders;
/// impl Handler<sqlx::Transaction<'static, sqlx::Sqlite>> for Orders {
///     async fn handle(&self, tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>, msg: &Envelope) -> Result<Handled, Error> {
///         let key = msg.meta().entity_key.clone().ok_or_else(|| Error::permanent("no entity key"))?;
///         let version = msg.meta().version.ok_or_else(|| Error::permanent("no version"))?;
///         let seen = oncely_effects::apply_if_newer(tx, "order", &key, version).await?;
///         if seen.is_applied() {
///             // write the order's new state through `tx`
///         }
///         Ok(seen.handled())
///     }
/// }
/// ```
pub async fn apply_if_newer<DB: SqlDatabase>(
    tx: &mut Transaction<'_, DB>,
    entity: &str,
    key: &str,
    version: i64,
) -> Result<Versioned> {
    Versions::default()
        .apply_if_newer(tx, entity, key, version)
        .await
}
