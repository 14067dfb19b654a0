//! Migrations: applied once (a second run applies nothing), printable per dialect.

mod support;

use oncely_effects::MIGRATIONS;
use oncely_sql::{Dialect, SqliteStore, Tables};

#[tokio::test]
async fn migrate_twice_applies_once_sqlite() {
    let (store, _dir) = support::sqlite().await; // migrated once already
    assert_eq!(store.migrate_with(&[&MIGRATIONS]).await.unwrap(), 0);
    let with_schema = Tables::default().with_schema("nope").unwrap();
    let elsewhere = SqliteStore::with_tables(store.pool().clone(), with_schema);
    assert!(
        elsewhere.migrate_with(&[&MIGRATIONS]).await.is_err(),
        "SQLite has no schemas"
    );
}

#[tokio::test]
async fn migrate_twice_applies_once_postgres() {
    let Some((store, _db)) = support::postgres("mig").await else {
        return;
    };
    assert_eq!(store.migrate_with(&[&MIGRATIONS]).await.unwrap(), 0);
}

#[tokio::test]
async fn migrate_twice_applies_once_mariadb() {
    let Some((store, _db)) = support::mysql("mig").await else {
        return;
    };
    assert_eq!(store.migrate_with(&[&MIGRATIONS]).await.unwrap(), 0);
}

#[test]
fn printed_migrations_are_rendered_per_dialect() {
    let tables = Tables::default()
        .with_schema("billing")
        .unwrap()
        .with_prefix("x_")
        .unwrap();
    for d in [Dialect::Postgres, Dialect::MySql] {
        let sql = MIGRATIONS.print(d, &tables).unwrap();
        for t in ["versions", "effect_journal", "outbox"] {
            assert!(
                sql.contains(&format!("CREATE TABLE IF NOT EXISTS billing.x_{t}")),
                "{d:?} {t}"
            );
        }
        assert!(!sql.contains('{'), "no placeholder left: {sql}");
    }
    let sqlite = MIGRATIONS
        .print(Dialect::Sqlite, &Tables::default())
        .unwrap();
    assert!(sqlite.starts_with("-- version 1 (effects)"));
    assert!(sqlite.contains("CREATE TABLE IF NOT EXISTS oncely_outbox"));
}

/// Pruning deletes only dispatched outbox rows and resolved journal rows, in bounded batches.
async fn prunes(pool: oncely_sql::AnyPool, tables: Tables) {
    use oncely_effects::{Journal, Outbox, Outgoing, Relay, prune_journal, prune_outbox};
    use std::time::Duration;
    let outbox = Outbox::new("p", tables.clone());
    let mut tx = pool.begin().await.unwrap();
    for n in 0..5 {
        let id = oncely_core::MessageId::new(format!("m{n}")).unwrap();
        outbox
            .enqueue(&mut tx, &id, 0, &Outgoing::new("t", format!("e{n}"), "x"))
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    let relay = Relay::new(
        pool.clone(),
        tables.clone(),
        oncely_core::MemorySource::new(),
    )
    .batch(3);
    relay.dispatch_once().await.unwrap(); // 3 of 5 dispatched
    assert_eq!(
        prune_outbox(&pool, &tables, Duration::ZERO, 2)
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        prune_outbox(&pool, &tables, Duration::ZERO, 2)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        prune_outbox(&pool, &tables, Duration::ZERO, 2)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        relay.undispatched().await.unwrap(),
        2,
        "undispatched rows kept"
    );
    assert_eq!(
        prune_outbox(&pool, &tables, Duration::from_secs(3600), 10)
            .await
            .unwrap(),
        0
    );
    let journal = Journal::new(pool.clone(), tables.clone());
    for k in ["a", "b", "c"] {
        journal.record(k, "email", b"").await.unwrap();
    }
    journal.mark_done("a", "ref-1").await.unwrap();
    journal.mark_failed("b", "rejected").await.unwrap();
    assert_eq!(
        prune_journal(&pool, &tables, Duration::from_secs(3600), 10)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        prune_journal(&pool, &tables, Duration::ZERO, 10)
            .await
            .unwrap(),
        2
    );
    let left: Vec<String> = journal
        .entries()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(left, ["c"], "pending rows kept");
}

#[tokio::test]
async fn prune_sqlite() {
    let (store, _dir) = support::sqlite().await;
    prunes(store.any_pool(), store.tables().clone()).await;
}

#[tokio::test]
async fn prune_postgres() {
    let Some((store, _db)) = support::postgres("prune").await else {
        return;
    };
    prunes(store.any_pool(), store.tables().clone()).await;
}

#[tokio::test]
async fn prune_mariadb() {
    let Some((store, _db)) = support::mysql("prune").await else {
        return;
    };
    prunes(store.any_pool(), store.tables().clone()).await;
}
