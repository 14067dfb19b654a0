//! Versioned apply: an update carrying version `v` of an entity is applied only if the stored
//! version is lower, in one atomic statement, so reordered and duplicated updates converge on
//! the highest version.

use crate::EffectTables;
use oncely_core::{Handled, Result};
use oncely_sql::clock::now_ms;
use oncely_sql::{Column, Dialect, SqlTx, Tables, Value};

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
    pub async fn apply_if_newer(
        &self,
        tx: &mut impl SqlTx,
        entity: &str,
        key: &str,
        version: i64,
    ) -> Result<Versioned> {
        let (sql, applied) = upsert_if_newer(tx.dialect(), &self.tables.versions());
        let args: Vec<Value> = vec![entity.into(), key.into(), version.into(), now_ms().into()];
        let done = tx.execute(&sql, &args).await?;
        Ok(if applied(done.rows, done.last_insert_id) {
            Versioned::Applied
        } else {
            Versioned::Stale
        })
    }

    /// The stored version of `(entity, key)`, if any.
    pub async fn current(
        &self,
        tx: &mut impl SqlTx,
        entity: &str,
        key: &str,
    ) -> Result<Option<i64>> {
        let sql = format!(
            "SELECT version FROM {} WHERE entity = $1 AND entity_key = $2",
            self.tables.versions(),
        );
        let rows = tx
            .fetch(&sql, &[entity.into(), key.into()], &[Column::I64])
            .await?;
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
pub async fn apply_if_newer(
    tx: &mut impl SqlTx,
    entity: &str,
    key: &str,
    version: i64,
) -> Result<Versioned> {
    Versions::default()
        .apply_if_newer(tx, entity, key, version)
        .await
}

/// Whether an upsert applied, from the rows it reported and its `LAST_INSERT_ID`.
type Applied = fn(u64, u64) -> bool;

/// The versioned upsert of `versions` (columns `entity, entity_key, version, updated_at`,
/// bound as `$1..$4`): insert, or update only when the stored version is lower; and how to
/// tell applied from stale. Built from [`Dialect::on_conflict_update_where`]; where the
/// database has no conditional upsert (MySQL), each column is updated through `IF(…)`.
fn upsert_if_newer(d: Dialect, versions: &str) -> (String, Applied) {
    let insert = |alias: &str| {
        format!(
            "INSERT INTO {versions}{alias} (entity, entity_key, version, updated_at) VALUES ({})",
            d.params(1, 4)
        )
    };
    let newer = "cur.version < excluded.version";
    match d.on_conflict_update_where("entity, entity_key", &["version", "updated_at"], newer) {
        Some(clause) => (format!("{} {clause}", insert(" AS cur")), |rows, _| {
            rows == 1
        }),
        // sqlx connects MySQL with CLIENT_FOUND_ROWS, so an unchanged row counts 1 like an
        // insert: the stale branch sets LAST_INSERT_ID(1), which the OK packet reports, to
        // tell them apart. An applied update changes the row and counts 2. `updated_at` is
        // assigned first so that its condition still sees the old version.
        None => (
            format!(
                "{} ON DUPLICATE KEY UPDATE \
                 updated_at = IF(version < VALUES(version), VALUES(updated_at), updated_at + 0 * LAST_INSERT_ID(1)), \
                 version = IF(version < VALUES(version), VALUES(version), version)",
                insert("")
            ),
            |rows, last_insert_id| matches!((rows, last_insert_id), (2, _) | (1, 0)),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upsert_is_conditional_on_every_database() {
        let (pg, applied) = upsert_if_newer(Dialect::Postgres, "v");
        assert!(pg.starts_with("INSERT INTO v AS cur (entity"), "{pg}");
        assert!(pg.ends_with("WHERE cur.version < excluded.version"), "{pg}");
        assert!(applied(1, 0) && !applied(0, 0));
        let (sqlite, _) = upsert_if_newer(Dialect::Sqlite, "v");
        assert!(
            sqlite.contains("VALUES (?1, ?2, ?3, ?4) ON CONFLICT"),
            "{sqlite}"
        );
        let (mysql, applied) = upsert_if_newer(Dialect::MySql, "v");
        assert!(mysql.contains("LAST_INSERT_ID(1)"), "{mysql}");
        assert!(applied(2, 0) && applied(1, 0) && !applied(1, 1) && !applied(0, 0));
    }
}
