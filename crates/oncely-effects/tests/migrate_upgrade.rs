//! Upgrading to the one migration ledger: a database migrated by the older code (the inbox
//! ledger `{prefix}migrations` with plain versions, the effects crate's own
//! `{prefix}effects_migrations`) is adopted without running anything again, and a version the
//! old ledger lacks still runs.

mod support;

use oncely_effects::EffectTables;
use oncely_sql::{INBOX, Tables};

/// The old per-crate ledgers (as the code before the shared ledger created them), filled with
/// the given `(version, name)` rows at `applied_at` 1000 + version.
fn old_ledgers(tables: &Tables, name_type: &str, effects: &[(i64, &str)]) -> String {
    let mut sql = String::new();
    for (table, rows) in [
        ("migrations", &[(1, "inbox"), (2, "dead_letter_key")][..]),
        ("effects_migrations", effects),
    ] {
        let t = tables.table(table);
        sql += &format!(
            "CREATE TABLE {t} (version BIGINT PRIMARY KEY, name {name_type} NOT NULL, applied_at BIGINT NOT NULL);\n"
        );
        for (v, n) in rows {
            sql += &format!(
                "INSERT INTO {t} (version, name, applied_at) VALUES ({v}, '{n}', {});\n",
                1000 + v
            );
        }
    }
    sql
}

/// Turns a freshly migrated store into the older code's state, runs both crates' sets,
/// and checks the outcome. Sentinel: the tables the first migrations create (`IF NOT EXISTS`)
/// are dropped first, so a re-run would bring them back.
macro_rules! upgrade {
    ($store:expr, $name_type:literal) => {{
        let (store, t) = (&$store, $store.tables().clone());
        let exec = |sql: String| async move {
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(store.pool())
                .await
                .unwrap()
        };
        let ledger = |set: &'static str| {
            let t = t.clone();
            async move {
                let rows: Vec<(i64, String, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                    "SELECT version, name, applied_at FROM {} WHERE set_name = '{set}' ORDER BY version",
                    t.migration_ledger()
                )))
                .fetch_all(store.pool())
                .await
                .unwrap();
                rows
            }
        };
        // 1. Everything applied by the old code.
        exec(format!("DROP TABLE {}", t.migration_ledger())).await;
        exec(old_ledgers(&t, $name_type, &[(1, "effects"), (2, "journal_lease")])).await;
        exec(format!("DROP TABLE {}; DROP TABLE {}", t.inbox(), t.versions())).await;
        assert_eq!(store.migrate().await.unwrap(), 0, "inbox adopted, not re-run");
        assert_eq!(
            store.migrate_with(&[&oncely_effects::MIGRATIONS]).await.unwrap(),
            0,
            "effects adopted, not re-run"
        );
        let gone = |name: &str| {
            let sql = format!("SELECT COUNT(*) FROM {}", t.table(name));
            async move {
                sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql))
                    .fetch_one(store.pool())
                    .await
                    .is_err()
            }
        };
        assert!(gone("inbox").await, "inbox migration 1 did not run again");
        assert!(gone("versions").await, "effects migration 1 did not run again");
        assert_eq!(
            ledger("inbox").await,
            [(1, "inbox".to_owned(), 1001), (2, "dead_letter_key".to_owned(), 1002)]
        );
        assert_eq!(
            ledger("effects").await,
            [(1, "effects".to_owned(), 1001), (2, "journal_lease".to_owned(), 1002)]
        );
        assert_eq!(
            store.migrate_with(&[&INBOX, &oncely_effects::MIGRATIONS]).await.unwrap(),
            0,
            "up to date in the new ledger"
        );

        // 2. An older effects install (version 1 only): version 2 runs, once.
        exec(format!(
            "DROP TABLE {}; DROP TABLE {}; DROP TABLE {}",
            t.migration_ledger(),
            t.table("migrations"),
            t.table("effects_migrations")
        ))
        .await;
        exec(format!(
            "ALTER TABLE {j} DROP COLUMN lease_until; ALTER TABLE {j} DROP COLUMN leased_by",
            j = t.effect_journal()
        ))
        .await;
        exec(old_ledgers(&t, $name_type, &[(1, "effects")])).await;
        assert_eq!(
            store.migrate_with(&[&INBOX, &oncely_effects::MIGRATIONS]).await.unwrap(),
            1,
            "only journal_lease"
        );
        let effects = ledger("effects").await;
        assert_eq!(effects.len(), 2);
        assert_eq!(effects[0], (1, "effects".to_owned(), 1001));
        assert_eq!((effects[1].0, effects[1].2 > 1002), (2, true), "applied now");
        exec(format!(
            "SELECT lease_until, leased_by FROM {}",
            t.effect_journal()
        ))
        .await;
    }};
}

#[tokio::test]
async fn older_ledgers_are_adopted_sqlite() {
    let (store, _dir) = support::sqlite().await;
    upgrade!(store, "TEXT");
}

#[tokio::test]
async fn older_ledgers_are_adopted_postgres() {
    let Some((store, _db)) = support::postgres("upgrade").await else {
        return;
    };
    upgrade!(store, "TEXT");
}

#[tokio::test]
async fn older_ledgers_are_adopted_mariadb() {
    let Some((store, _db)) = support::mysql("upgrade").await else {
        return;
    };
    upgrade!(store, "VARCHAR(128)");
}
