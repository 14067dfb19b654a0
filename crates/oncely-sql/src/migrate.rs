//! One migration registry: every crate describes its tables as a [`MigrationSet`] (plain `.sql`
//! templates per dialect), and one runner applies any list of sets under one lock, recording
//! them in one ledger table, `{schema}.{prefix}migration_ledger`, keyed by `(set_name, version)`.
//!
//! The sets: [`INBOX`] (here: inbox and dead letters), `oncely_effects::MIGRATIONS` (entity
//! versions, effect journal, outbox), `oncely_http::MIGRATIONS` (the Idempotency-Key table),
//! `oncely_sql_queue::MIGRATIONS` (the PostgreSQL queue table) and
//! `oncely_ops::partition::MIGRATIONS` (the partitioned inbox's static DDL). This crate knows
//! none of them but its own. There is one way to apply them:
//! `store.migrate_with(&[&INBOX, &oncely_effects::MIGRATIONS, …])` on an
//! [`AnyStore`](crate::AnyStore) or a [`SqlStore`] (`store.migrate()` is the inbox set alone).

mod runner;

use crate::SqlDatabase;
use crate::dialect::Dialect;
use crate::store::SqlStore;
use crate::tables::{Tables, is_identifier};
use oncely_core::{Error, Result};
use sqlx::Pool;
use std::future::Future;

/// One migration of one dialect: a version, a name, and a SQL template with `{schema}` and
/// `{prefix}`.
///
/// SQLite's inbox version 2 has a `-- @backfill id_hash` line: the runner computes
/// `dead_letters.id_hash` (SHA-256 of `raw_id`) there, since SQLite has no SHA-256 function.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Version within its set, applied in ascending order.
    pub version: i64,
    /// Short name.
    pub name: &'static str,
    template: &'static str,
}

impl Migration {
    /// A migration from its template (usually `include_str!` of a `.sql` file).
    pub const fn new(version: i64, name: &'static str, template: &'static str) -> Self {
        Self {
            version,
            name,
            template,
        }
    }

    /// The SQL for these tables.
    pub fn sql(&self, tables: &Tables) -> String {
        tables.render(self.template)
    }
}

/// How the runner recognizes a set that was applied before the ledger knew it, so that an
/// existing installation is adopted without running anything again.
#[derive(Debug, Clone, Copy)]
pub enum Adopt {
    /// An older ledger table `{schema}.{prefix}<name>` (`version, name, applied_at`), as each
    /// crate kept before the shared ledger: the first time the set runs, its rows whose version
    /// and name match a migration of the set are copied into the ledger. The old table is
    /// left in place (an older oncely still reads it); nothing reads it afterwards.
    Ledger(&'static str),
    /// A query template (with `{schema}`/`{prefix}`) returning a count, run on `dialect` when
    /// the set has no ledger row yet: above zero means the set's tables exist (created by code
    /// that kept no ledger), and migrations up to version `through` are recorded as applied.
    Probe {
        /// The dialect the query is written for.
        dialect: Dialect,
        /// The query.
        sql: &'static str,
        /// The last version the probe vouches for.
        through: i64,
    },
}

/// A named set of migrations contributed by one crate, with one template list per dialect
/// (an empty list: the set does not exist on that dialect).
///
/// ```
/// use oncely_sql::MigrationSet;
/// use oncely_sql::migrate::{Adopt, Migration};
/// static AUDIT: MigrationSet = MigrationSet::new("audit")
///     .postgres(&[Migration::new(1, "audit", "CREATE TABLE IF NOT EXISTS {schema}{prefix}audit (id BIGINT);")])
///     .adopt(&[Adopt::Ledger("audit_migrations")]);
/// let sql = AUDIT.print(oncely_sql::Dialect::Postgres, &Default::default()).unwrap();
/// assert!(sql.contains("oncely_audit"));
/// assert!(AUDIT.print(oncely_sql::Dialect::Sqlite, &Default::default()).is_err());
/// ```
#[derive(Debug, Clone, Copy)]
pub struct MigrationSet {
    /// The set's name in the ledger (a plain identifier).
    pub name: &'static str,
    sqlite: &'static [Migration],
    postgres: &'static [Migration],
    mysql: &'static [Migration],
    adopt: &'static [Adopt],
}

impl MigrationSet {
    /// An empty set named `name`.
    pub const fn new(name: &'static str) -> Self {
        Self {
            name,
            sqlite: &[],
            postgres: &[],
            mysql: &[],
            adopt: &[],
        }
    }

    /// The SQLite migrations, oldest first.
    pub const fn sqlite(self, migrations: &'static [Migration]) -> Self {
        Self {
            sqlite: migrations,
            ..self
        }
    }

    /// The PostgreSQL migrations, oldest first.
    pub const fn postgres(self, migrations: &'static [Migration]) -> Self {
        Self {
            postgres: migrations,
            ..self
        }
    }

    /// The MySQL / MariaDB migrations, oldest first.
    pub const fn mysql(self, migrations: &'static [Migration]) -> Self {
        Self {
            mysql: migrations,
            ..self
        }
    }

    /// How an installation made before the shared ledger is recognized.
    pub const fn adopt(self, adopt: &'static [Adopt]) -> Self {
        Self { adopt, ..self }
    }

    /// The migrations of `dialect`, oldest first (empty where the set does not exist).
    pub fn migrations(&self, dialect: Dialect) -> &'static [Migration] {
        match dialect {
            Dialect::Sqlite => self.sqlite,
            Dialect::Postgres => self.postgres,
            Dialect::MySql => self.mysql,
        }
    }

    /// The migrations of `dialect`, or an error naming the set when it has none there.
    fn for_dialect(&self, dialect: Dialect) -> Result<&'static [Migration]> {
        if !is_identifier(self.name) {
            return Err(Error::config(format!(
                "migration set name {:?} is not a plain identifier",
                self.name
            )));
        }
        match self.migrations(dialect) {
            [] => Err(Error::config(format!(
                "the {:?} migrations do not exist on {}",
                self.name,
                dialect.name()
            ))),
            m => Ok(m),
        }
    }

    /// The tables the set owns on `dialect`, as bare names (no schema, no prefix; render them
    /// with [`Tables::table`]), read from its own templates so the list cannot drift from
    /// them: every `CREATE TABLE [IF NOT EXISTS] {schema}{prefix}<name>` in creation order,
    /// then the older ledgers it adopts ([`Adopt::Ledger`]), each once.
    ///
    /// ```
    /// use oncely_sql::{Dialect, INBOX};
    /// assert_eq!(INBOX.tables(Dialect::Sqlite), ["inbox", "dead_letters", "migrations"]);
    /// ```
    pub fn tables(&self, dialect: Dialect) -> Vec<&'static str> {
        let mut names = Vec::new();
        let created = self
            .migrations(dialect)
            .iter()
            .flat_map(|m| created_tables(m.template));
        let adopted = self.adopt.iter().filter_map(|a| match a {
            Adopt::Ledger(name) => Some(*name),
            Adopt::Probe { .. } => None,
        });
        for name in created.chain(adopted) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names
    }

    /// The set as one SQL script for `dialect`, for users who run their own migration tool.
    pub fn print(&self, dialect: Dialect, tables: &Tables) -> Result<String> {
        Ok(self
            .for_dialect(dialect)?
            .iter()
            .map(|m| {
                format!(
                    "-- version {} ({}), set {}\n{}",
                    m.version,
                    m.name,
                    self.name,
                    m.sql(tables)
                )
            })
            .collect::<Vec<_>>()
            .join("\n"))
    }
}

/// A [`MigrationSet`] from `.sql` files laid out as `migrations/<dialect>/<file>` in the
/// calling crate (its `CARGO_MANIFEST_DIR`), the same versions for every dialect listed
/// (`sqlite`, `postgres`, `mysql`); chain [`MigrationSet::adopt`] as needed.
///
/// ```ignore
/// pub static AUDIT: oncely_sql::MigrationSet = oncely_sql::migration_set!(
///     "audit", [postgres, mysql], [
///         1, "audit", "0001_audit.sql";        // migrations/postgres/0001_audit.sql, …
///         2, "audit_index", "0002_audit_index.sql";
///     ]
/// );
/// ```
///
/// (Shown with `ignore`: the files must exist next to the calling crate's `Cargo.toml`.
/// [`INBOX`] is declared this way.)
#[macro_export]
macro_rules! migration_set {
    ($set:literal, [$($dialect:ident),+ $(,)?], $files:tt $(,)?) => {
        $crate::MigrationSet::new($set)
            $( .$dialect($crate::migration_set!(@files $dialect $files)) )+
    };
    (@files $dialect:ident [$($version:literal, $name:literal, $file:literal);+ $(;)?]) => {
        &[$(
            $crate::migrate::Migration::new(
                $version,
                $name,
                include_str!(concat!(
                    env!("CARGO_MANIFEST_DIR"), "/migrations/", stringify!($dialect), "/", $file
                )),
            )
        ),+]
    };
}

/// oncely-sql's own set: the inbox and dead-letter tables.
pub static INBOX: MigrationSet = crate::migration_set!("inbox", [sqlite, postgres, mysql], [
    1, "inbox", "0001_inbox.sql";
    2, "dead_letter_key", "0002_dead_letter_key.sql";
])
.adopt(&[Adopt::Ledger("migrations")]);

/// Sets as one SQL script for `dialect`, in the given order; an error if a set does not exist
/// on `dialect` (the queue and the partitioned inbox are PostgreSQL only).
///
/// ```
/// use oncely_sql::{Dialect, INBOX, Tables};
/// use oncely_sql::migrate::print_migration_sets;
/// let sql = print_migration_sets(Dialect::Sqlite, &Tables::default(), &[&INBOX]).unwrap();
/// assert!(sql.starts_with("-- version 1 (inbox), set inbox"));
/// ```
pub fn print_migration_sets(
    dialect: Dialect,
    tables: &Tables,
    sets: &[&MigrationSet],
) -> Result<String> {
    Ok(sets
        .iter()
        .map(|s| s.print(dialect, tables))
        .collect::<Result<Vec<_>>>()?
        .join("\n"))
}

/// The names after `CREATE [UNLOGGED] TABLE [IF NOT EXISTS] {schema}{prefix}` in `template` (a
/// statement creating a table that is not `{prefix}`-named, or prose in a comment, is not
/// oncely's).
fn created_tables(template: &'static str) -> impl Iterator<Item = &'static str> {
    let upper = template.to_ascii_uppercase();
    let mut starts: Vec<(usize, usize)> = ["CREATE TABLE", "CREATE UNLOGGED TABLE"]
        .iter()
        .flat_map(|create| upper.match_indices(create).map(|(at, m)| (at, m.len())))
        .collect();
    starts.sort_unstable();
    starts.into_iter().filter_map(move |(at, len)| {
        let rest = template[at + len..].trim_start();
        let rest = match rest.get(..13) {
            Some(words) if words.eq_ignore_ascii_case("IF NOT EXISTS") => rest[13..].trim_start(),
            _ => rest,
        };
        let rest = rest.strip_prefix("{schema}").unwrap_or(rest);
        let rest = rest.strip_prefix("{prefix}")?;
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        (end > 0).then(|| &rest[..end])
    })
}

/// The statements that undo `sets` on `dialect` for the tables `tables`, for a demo or a test
/// that resets a database of its own (**every row of those tables is lost**): each set's
/// tables ([`MigrationSet::tables`]) dropped, newest first, and its rows removed from the
/// shared ledger, so that the next [`SqlStore::migrate_with`] applies the sets again from version 1.
/// The ledger itself stays (other sets may be recorded in it). Run them in order.
///
/// ```
/// use oncely_sql::{Dialect, INBOX, Tables};
/// use oncely_sql::migrate::reset_sql;
/// let sql = reset_sql(Dialect::Sqlite, &Tables::default(), &[&INBOX]).unwrap();
/// assert!(sql.contains(&"DROP TABLE IF EXISTS oncely_inbox".to_owned()));
/// assert!(sql.last().unwrap().starts_with("DELETE FROM oncely_migration_ledger WHERE set_name IN ('inbox')"));
/// ```
pub fn reset_sql(dialect: Dialect, tables: &Tables, sets: &[&MigrationSet]) -> Result<Vec<String>> {
    let mut sql = Vec::new();
    let mut names = Vec::new();
    for set in sets {
        set.for_dialect(dialect)?;
        names.push(format!("'{}'", set.name));
        sql.extend(
            set.tables(dialect)
                .iter()
                .rev()
                .map(|t| format!("DROP TABLE IF EXISTS {}", tables.table(t))),
        );
    }
    sql.push(tables.render(include_str!("../migrations/ledger.sql")));
    sql.push(format!(
        "DELETE FROM {} WHERE set_name IN ({})",
        tables.migration_ledger(),
        names.join(", ")
    ));
    Ok(sql)
}

mod sealed {
    pub trait Sealed {}
    #[cfg(feature = "sqlite")]
    impl Sealed for sqlx::Sqlite {}
    #[cfg(feature = "postgres")]
    impl Sealed for sqlx::Postgres {}
    #[cfg(feature = "mysql")]
    impl Sealed for sqlx::MySql {}
}

/// A database the runner can lock and migrate: SQLite, PostgreSQL, MySQL / MariaDB.
pub trait MigrateDb: SqlDatabase + sealed::Sealed {
    #[doc(hidden)]
    fn run_sets(
        pool: &Pool<Self>,
        tables: &Tables,
        engine: crate::Engine,
        sets: &[&MigrationSet],
    ) -> impl Future<Output = Result<usize>> + Send;
}

impl<DB: MigrateDb> SqlStore<DB> {
    /// Applies the pending inbox and dead-letter migrations ([`INBOX`]); a no-op when up to
    /// date. Returns how many ran. The same as `migrate_with(&[&INBOX])`.
    pub async fn migrate(&self) -> Result<usize> {
        self.migrate_with(&[&INBOX]).await
    }

    /// Applies the pending migrations of `sets` on this store's pool and tables, set after set
    /// in the given order, and returns how many ran (0 when up to date): the one way to
    /// create or upgrade any crate's tables.
    ///
    /// Concurrent migrators serialize: SQLite through `BEGIN IMMEDIATE`, PostgreSQL through an
    /// advisory lock, MySQL through `GET_LOCK`; in portable mode (the store's
    /// [`Engine::portable`](crate::Engine::portable), decided at connect) through a lease row in
    /// `{prefix}ops_leases`, waited for up to two minutes. The schema (PostgreSQL) or database
    /// (MySQL) of the store's tables is created if missing. Applied versions are recorded in
    /// `{schema}.{prefix}migration_ledger`; a set's older ledger or tables are adopted first
    /// (see [`Adopt`]).
    ///
    /// ```no_run
    /// # async fn f() -> oncely_core::Result<()> {
    /// let store = oncely_sql::SqliteStore::connect("sqlite:app.db").await?;
    /// store.migrate_with(&[&oncely_sql::INBOX]).await?;
    /// # Ok(()) }
    /// ```
    pub async fn migrate_with(&self, sets: &[&MigrationSet]) -> Result<usize> {
        DB::run_sets(self.pool(), self.tables(), self.engine(), sets).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dialect_has_the_same_versions_and_prints_them() {
        for d in [Dialect::Sqlite, Dialect::Postgres, Dialect::MySql] {
            let versions: Vec<i64> = INBOX.migrations(d).iter().map(|m| m.version).collect();
            assert_eq!(versions, vec![1, 2], "{d:?}");
            let script = INBOX.print(d, &Tables::default()).unwrap();
            assert!(script.contains("-- version 2 (dead_letter_key)"), "{d:?}");
            assert!(script.contains("dead_letters_key"), "{d:?}");
            let sql = INBOX.migrations(d)[1].sql(&Tables::default());
            assert_eq!(
                runner::split_backfill(&sql).1.is_some(),
                d == Dialect::Sqlite,
                "{d:?}"
            );
        }
    }

    #[test]
    fn a_sets_tables_come_from_its_templates() {
        for d in [Dialect::Sqlite, Dialect::Postgres, Dialect::MySql] {
            assert_eq!(
                INBOX.tables(d),
                ["inbox", "dead_letters", "migrations"],
                "{d:?}"
            );
        }
        static SET: MigrationSet = MigrationSet::new("t").postgres(&[
            Migration::new(
                1,
                "a",
                "-- CREATE TABLE IF NOT EXISTS then leaves this table alone).\n\
                 create table {schema}{prefix}one (a INT);\n\
                 CREATE TABLE other (b INT);\n\
                 CREATE TABLE {schema}{prefix}two_default PARTITION OF {schema}{prefix}one DEFAULT;",
            ),
            Migration::new(2, "b", "CREATE TABLE IF NOT EXISTS {prefix}one (a INT);"),
        ]);
        assert_eq!(SET.tables(Dialect::Postgres), ["one", "two_default"]);
        assert!(SET.tables(Dialect::Sqlite).is_empty());
        let t = Tables::default().with_schema("s").unwrap();
        let sql = reset_sql(Dialect::Postgres, &t, &[&SET]).unwrap();
        assert_eq!(
            sql[..2],
            [
                "DROP TABLE IF EXISTS s.oncely_two_default",
                "DROP TABLE IF EXISTS s.oncely_one"
            ]
        );
        assert!(
            sql[2].contains("CREATE TABLE IF NOT EXISTS s.oncely_migration_ledger"),
            "{}",
            sql[2]
        );
        assert_eq!(
            sql[3],
            "DELETE FROM s.oncely_migration_ledger WHERE set_name IN ('t')"
        );
        assert!(reset_sql(Dialect::MySql, &t, &[&SET]).is_err());
    }

    #[test]
    fn a_set_missing_on_a_dialect_is_an_error() {
        static PG_ONLY: MigrationSet =
            MigrationSet::new("pg_only").postgres(&[Migration::new(1, "t", "SELECT 1;")]);
        let t = Tables::default();
        assert!(print_migration_sets(Dialect::Postgres, &t, &[&INBOX, &PG_ONLY]).is_ok());
        let e = print_migration_sets(Dialect::MySql, &t, &[&INBOX, &PG_ONLY]).unwrap_err();
        assert!(e.to_string().contains("pg_only"), "{e}");
        static BAD: MigrationSet =
            MigrationSet::new("no-dash").sqlite(&[Migration::new(1, "t", "SELECT 1;")]);
        assert!(BAD.print(Dialect::Sqlite, &t).is_err());
    }
}
