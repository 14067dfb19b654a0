//! The effects tables (versions, effect journal, outbox) as plain `.sql` files per dialect,
//! applied by [`migrate`] under a lock or printed by [`print_migrations`] for your own tool.

use crate::db::{Col, EffectsDb, Val, db, now_ms, ps};
use oncely_core::{Error, Result};
use oncely_sql::{Dialect, Tables};
use sqlx::Pool;

/// One migration of the effects tables: a version, a name, and a SQL template with
/// `{schema}` and `{prefix}` placeholders.
#[derive(Debug, Clone, Copy)]
pub struct EffectsMigration {
    /// Version, applied in ascending order.
    pub version: i64,
    /// Short name.
    pub name: &'static str,
    template: &'static str,
}

impl EffectsMigration {
    /// The SQL for these tables.
    pub fn sql(&self, tables: &Tables) -> String {
        tables.render(self.template)
    }
}

const SQLITE: &[EffectsMigration] = &[
    EffectsMigration {
        version: 1,
        name: "effects",
        template: include_str!("../migrations/sqlite/0001_effects.sql"),
    },
    EffectsMigration {
        version: 2,
        name: "journal_lease",
        template: include_str!("../migrations/sqlite/0002_journal_lease.sql"),
    },
];
const POSTGRES: &[EffectsMigration] = &[
    EffectsMigration {
        version: 1,
        name: "effects",
        template: include_str!("../migrations/postgres/0001_effects.sql"),
    },
    EffectsMigration {
        version: 2,
        name: "journal_lease",
        template: include_str!("../migrations/postgres/0002_journal_lease.sql"),
    },
];
const MYSQL: &[EffectsMigration] = &[
    EffectsMigration {
        version: 1,
        name: "effects",
        template: include_str!("../migrations/mysql/0001_effects.sql"),
    },
    EffectsMigration {
        version: 2,
        name: "journal_lease",
        template: include_str!("../migrations/mysql/0002_journal_lease.sql"),
    },
];

/// The effects migrations of a dialect, oldest first.
pub fn migrations(dialect: Dialect) -> &'static [EffectsMigration] {
    match dialect {
        Dialect::Sqlite => SQLITE,
        Dialect::Postgres => POSTGRES,
        Dialect::MySql => MYSQL,
    }
}

/// All effects migrations of a dialect as one SQL script, for users who run their own
/// migration tool.
///
/// ```
/// use oncely_sql::{Dialect, Tables};
/// let sql = oncely_effects::print_migrations(Dialect::Postgres, &Tables::default());
/// assert!(sql.contains("CREATE TABLE IF NOT EXISTS oncely_outbox"));
/// ```
pub fn print_migrations(dialect: Dialect, tables: &Tables) -> String {
    migrations(dialect)
        .iter()
        .map(|m| format!("-- version {} ({})\n{}", m.version, m.name, m.sql(tables)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Arbitrary constant for PostgreSQL's advisory lock and MySQL's named lock.
const LOCK_KEY: i64 = 0x6f6e_6365_6666;

/// Applies the pending effects migrations (a no-op when up to date) and returns how many ran.
///
/// Concurrent migrators serialize: SQLite through `BEGIN IMMEDIATE`, PostgreSQL through an
/// advisory lock, MySQL through `GET_LOCK`. The schema (PostgreSQL) or database (MySQL) of
/// `tables` is created if missing. Applied versions are kept in `{prefix}effects_migrations`.
pub async fn migrate<DB: EffectsDb>(pool: &Pool<DB>, tables: &Tables) -> Result<usize> {
    let dialect = DB::DIALECT;
    if dialect == Dialect::Sqlite && tables.schema().is_some() {
        return Err(Error::config(
            "SQLite has no schemas: use a table prefix instead",
        ));
    }
    if dialect == Dialect::MySql {
        let mut conn = pool
            .acquire()
            .await
            .map_err(|e| db("connecting for migration", e))?;
        let lock = format!("oncely_effects_migrate_{LOCK_KEY}");
        let got = DB::fetch(
            &mut conn,
            "SELECT GET_LOCK(?, 60)".into(),
            vec![lock.clone().into()],
            &[Col::OptI64],
        )
        .await
        .map_err(|e| db("taking the migration lock", e))?;
        if got.first().and_then(|r| r[0].opt_i64()) != Some(1) {
            return Err(Error::transient(
                "another process held the migration lock for 60 s",
            ));
        }
        let result = run_pending::<DB>(&mut conn, tables).await;
        let _ = DB::execute(
            &mut conn,
            "SELECT RELEASE_LOCK(?)".into(),
            vec![lock.into()],
        )
        .await;
        return result;
    }
    let mut tx = pool
        .begin_with(DB::BEGIN)
        .await
        .map_err(|e| db("locking for migration", e))?;
    if dialect == Dialect::Postgres {
        DB::execute(
            &mut tx,
            "SELECT pg_advisory_xact_lock($1)".into(),
            vec![LOCK_KEY.into()],
        )
        .await
        .map_err(|e| db("taking the migration lock", e))?;
    }
    let applied = run_pending::<DB>(&mut tx, tables).await?;
    tx.commit()
        .await
        .map_err(|e| db("committing migrations", e))?;
    Ok(applied)
}

async fn run_pending<DB: EffectsDb>(conn: &mut DB::Connection, tables: &Tables) -> Result<usize> {
    let dialect = DB::DIALECT;
    if let Some(schema) = tables.schema() {
        let ddl = match dialect {
            Dialect::MySql => format!("CREATE DATABASE IF NOT EXISTS {schema}"),
            _ => format!("CREATE SCHEMA IF NOT EXISTS {schema}"),
        };
        DB::script(conn, ddl)
            .await
            .map_err(|e| db("creating the schema", e))?;
    }
    let ledger = tables.table("effects_migrations");
    let name_type = if dialect == Dialect::MySql {
        "VARCHAR(128)"
    } else {
        "TEXT"
    };
    DB::script(
        conn,
        format!("CREATE TABLE IF NOT EXISTS {ledger} (version BIGINT PRIMARY KEY, name {name_type} NOT NULL, applied_at BIGINT NOT NULL)"),
    )
    .await
    .map_err(|e| db("creating the effects migrations table", e))?;
    let done = DB::fetch(
        conn,
        format!("SELECT version FROM {ledger}"),
        vec![],
        &[Col::I64],
    )
    .await
    .map_err(|e| db("reading applied effects migrations", e))?;
    let done: Vec<i64> = done.iter().map(|r| r[0].i64()).collect();
    let mut applied = 0;
    for m in migrations(dialect) {
        if done.contains(&m.version) {
            continue;
        }
        DB::script(conn, m.sql(tables))
            .await
            .map_err(|e| db(&format!("effects migration {} ({})", m.version, m.name), e))?;
        DB::execute(
            conn,
            format!(
                "INSERT INTO {ledger} (version, name, applied_at) VALUES ({})",
                ps(dialect, 1, 3)
            ),
            vec![Val::I64(m.version), m.name.into(), now_ms().into()],
        )
        .await
        .map_err(|e| db("recording an effects migration", e))?;
        applied += 1;
    }
    Ok(applied)
}
