//! Migrations: applied once (a second run applies nothing), printable per dialect.

mod support;

use oncely_sql::{Dialect, Tables};

#[tokio::test]
async fn migrate_twice_applies_once_sqlite() {
    let (store, _dir) = support::sqlite().await; // migrated once already
    assert_eq!(
        oncely_effects::migrate(store.pool(), store.tables())
            .await
            .unwrap(),
        0
    );
    let with_schema = Tables::default().with_schema("nope").unwrap();
    assert!(
        oncely_effects::migrate(store.pool(), &with_schema)
            .await
            .is_err(),
        "SQLite has no schemas"
    );
}

#[tokio::test]
async fn migrate_twice_applies_once_postgres() {
    let Some(store) = support::postgres("mig").await else {
        return;
    };
    assert_eq!(
        oncely_effects::migrate(store.pool(), store.tables())
            .await
            .unwrap(),
        0
    );
    support::drop_pg(&store).await;
}

#[tokio::test]
async fn migrate_twice_applies_once_mariadb() {
    let Some(store) = support::mysql("mig").await else {
        return;
    };
    assert_eq!(
        oncely_effects::migrate(store.pool(), store.tables())
            .await
            .unwrap(),
        0
    );
    support::drop_mysql(&store).await;
}

#[test]
fn printed_migrations_are_rendered_per_dialect() {
    let tables = Tables::default()
        .with_schema("billing")
        .unwrap()
        .with_prefix("x_")
        .unwrap();
    for d in [Dialect::Postgres, Dialect::MySql] {
        let sql = oncely_effects::print_migrations(d, &tables);
        for t in ["versions", "effect_journal", "outbox"] {
            assert!(
                sql.contains(&format!("CREATE TABLE IF NOT EXISTS billing.x_{t}")),
                "{d:?} {t}"
            );
        }
        assert!(!sql.contains('{'), "no placeholder left: {sql}");
    }
    let sqlite = oncely_effects::print_migrations(Dialect::Sqlite, &Tables::default());
    assert!(sqlite.starts_with("-- version 1 (effects)"));
    assert!(sqlite.contains("CREATE TABLE IF NOT EXISTS oncely_outbox"));
}
