//! Versioned apply on every store: deterministic outcomes, and a property test where shuffled,
//! duplicated updates of many entities, applied concurrently, end with every entity at its
//! highest version and its row holding that version's value.

mod support;

use oncely_effects::{Versioned, Versions};
use oncely_sql::{Column, SqlDatabase, Tables, Value};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use sqlx::{Connection, Pool};
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
struct Update {
    key: String,
    version: i64,
    value: String,
}

/// Entities, each a list of (version gap, value, copies); flattened and shuffled.
fn scenario() -> impl Strategy<Value = Vec<(usize, i64, String)>> {
    prop::collection::vec(
        prop::collection::vec((1..4i64, "[a-z]{1,8}", 1..=3usize), 1..6),
        1..7,
    )
    .prop_flat_map(|entities| {
        let mut flat = Vec::new();
        for (e, versions) in entities.iter().enumerate() {
            let mut v = 0;
            for (gap, value, copies) in versions {
                v += gap;
                for _ in 0..*copies {
                    flat.push((e, v, value.clone()));
                }
            }
        }
        Just(flat).prop_shuffle()
    })
}

fn values_table(tables: &Tables) -> String {
    match tables.schema() {
        Some(s) => format!("{s}.entity_values"),
        None => "entity_values".into(),
    }
}

async fn create_values<DB: SqlDatabase>(pool: &Pool<DB>, tables: &Tables) {
    let key = DB::DIALECT.key_text(190);
    let sql = format!(
        "CREATE TABLE IF NOT EXISTS {} (k {key} PRIMARY KEY, value TEXT NOT NULL, version BIGINT NOT NULL)",
        values_table(tables)
    );
    let mut conn = pool.acquire().await.unwrap();
    DB::script(&mut conn, &sql).await.unwrap();
}

/// One update in its own transaction, as a handler would: apply_if_newer, then (only if
/// applied) the natural upsert of the entity row. Transient errors (deadlocks) are retried.
async fn apply<DB: SqlDatabase>(pool: &Pool<DB>, tables: &Tables, u: &Update) -> Versioned {
    let d = DB::DIALECT;
    let upsert = format!(
        "INSERT INTO {} (k, value, version) VALUES ({}) {}",
        values_table(tables),
        d.params(1, 3),
        d.on_conflict_update("k", &["value", "version"])
    );
    let versions = Versions::new(tables.clone());
    for attempt in 1.. {
        let result: oncely_core::Result<Versioned> = async {
            let mut tx = pool
                .begin_with(DB::BEGIN)
                .await
                .map_err(oncely_core::Error::transient)?;
            let seen = versions
                .apply_if_newer(&mut tx, "order", &u.key, u.version)
                .await?;
            if seen.is_applied() {
                let args = vec![
                    Value::from(u.key.as_str()),
                    u.value.as_str().into(),
                    u.version.into(),
                ];
                DB::execute(
                    &mut tx,
                    oncely_sql::Engine::assumed(DB::DIALECT),
                    &upsert,
                    &args,
                )
                .await
                .map_err(oncely_core::Error::transient)?;
            }
            tx.commit().await.map_err(oncely_core::Error::transient)?;
            Ok(seen)
        }
        .await;
        match result {
            Ok(seen) => return seen,
            Err(e) if e.is_transient() && attempt < 50 => continue,
            Err(e) => panic!("update {u:?} failed: {e}"),
        }
    }
    unreachable!()
}

async fn run_case<DB: SqlDatabase>(
    pool: &Pool<DB>,
    tables: &Tables,
    case: usize,
    flat: Vec<(usize, i64, String)>,
) -> Result<(), TestCaseError> {
    use futures::StreamExt;
    let updates: Vec<Update> = flat
        .into_iter()
        .map(|(e, version, value)| Update {
            key: format!("c{case}-e{e}"),
            version,
            value,
        })
        .collect();
    // Expected, computed from the inputs alone: the highest version and its value.
    let mut expected: BTreeMap<String, (i64, String)> = BTreeMap::new();
    let mut distinct: BTreeMap<String, std::collections::BTreeSet<i64>> = BTreeMap::new();
    for u in &updates {
        let best = expected
            .entry(u.key.clone())
            .or_insert((i64::MIN, String::new()));
        if u.version > best.0 {
            *best = (u.version, u.value.clone());
        }
        distinct.entry(u.key.clone()).or_default().insert(u.version);
    }
    let results: Vec<(String, Versioned)> = futures::stream::iter(updates.iter())
        .map(|u| async move { (u.key.clone(), apply(pool, tables, u).await) })
        .buffer_unordered(4)
        .collect()
        .await;
    let mut applied: BTreeMap<String, usize> = BTreeMap::new();
    for (k, seen) in &results {
        if seen.is_applied() {
            *applied.entry(k.clone()).or_default() += 1;
        }
    }
    let versions = Versions::new(tables.clone());
    let mut conn = pool.acquire().await.unwrap();
    for (key, (version, value)) in &expected {
        let stored = versions.current(&mut conn, "order", key).await.unwrap();
        prop_assert_eq!(stored, Some(*version), "version of {}", key);
        let rows = DB::fetch(
            &mut conn,
            oncely_sql::Engine::assumed(DB::DIALECT),
            &format!(
                "SELECT value, version FROM {} WHERE k = {}",
                values_table(tables),
                DB::DIALECT.param(1)
            ),
            &[key.as_str().into()],
            &[Column::Text, Column::I64],
        )
        .await
        .unwrap();
        prop_assert_eq!(rows.len(), 1);
        prop_assert_eq!(&rows[0][0], &Value::Text(value.clone()), "value of {}", key);
        prop_assert_eq!(&rows[0][1], &Value::I64(*version));
        // A version (duplicates included) is applied at most once, and at least the highest is.
        let n = applied.get(key).copied().unwrap_or(0);
        prop_assert!(
            n >= 1 && n <= distinct[key].len(),
            "{} applied {} times",
            key,
            n
        );
    }
    Ok(())
}

fn property<DB: SqlDatabase>(
    rt: &tokio::runtime::Runtime,
    pool: Pool<DB>,
    tables: Tables,
    cases: u32,
) {
    rt.block_on(create_values(&pool, &tables));
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let case = std::sync::atomic::AtomicUsize::new(0);
    runner
        .run(&scenario(), |flat| {
            let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            rt.block_on(run_case(&pool, &tables, n, flat))
        })
        .unwrap();
}

/// v1 applied, v3 applied, v2 stale, v3 again stale, v4 applied; a second key is independent.
/// All on one connection, so MySQL's session state (LAST_INSERT_ID) can't mislead.
async fn outcomes<DB: SqlDatabase>(pool: &Pool<DB>, tables: &Tables) {
    let versions = Versions::new(tables.clone());
    let mut conn = pool.acquire().await.unwrap();
    let steps = [
        ("a", 1, Versioned::Applied),
        ("a", 3, Versioned::Applied),
        ("a", 2, Versioned::Stale),
        ("a", 3, Versioned::Stale),
        ("b", 2, Versioned::Applied),
        ("a", 4, Versioned::Applied),
        ("b", 1, Versioned::Stale),
        ("c", 0, Versioned::Applied),
        ("c", 0, Versioned::Stale),
    ];
    for (key, version, want) in steps {
        let mut tx = conn.begin_with(DB::BEGIN).await.unwrap();
        let got = versions
            .apply_if_newer(&mut tx, "order", key, version)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(got, want, "{key} v{version}");
    }
    // A rolled-back apply leaves nothing behind.
    let mut tx = conn.begin_with(DB::BEGIN).await.unwrap();
    assert_eq!(
        versions
            .apply_if_newer(&mut tx, "order", "a", 9)
            .await
            .unwrap(),
        Versioned::Applied
    );
    tx.rollback().await.unwrap();
    assert_eq!(
        versions.current(&mut conn, "order", "a").await.unwrap(),
        Some(4)
    );
    assert_eq!(
        versions.current(&mut conn, "order", "b").await.unwrap(),
        Some(2)
    );
    assert_eq!(
        versions.current(&mut conn, "order", "zz").await.unwrap(),
        None
    );
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn outcomes_on_sqlite() {
    rt().block_on(async {
        let (store, _dir) = support::sqlite().await;
        outcomes(store.pool(), store.tables()).await;
    });
}

#[test]
fn outcomes_on_postgres() {
    rt().block_on(async {
        let Some((store, _db)) = support::postgres("vout").await else {
            return;
        };
        outcomes(store.pool(), store.tables()).await;
    });
}

#[test]
fn outcomes_on_mariadb() {
    rt().block_on(async {
        let Some((store, _db)) = support::mysql("vout").await else {
            return;
        };
        outcomes(store.pool(), store.tables()).await;
    });
}

#[test]
fn reorder_property_on_sqlite() {
    let rt = rt();
    let (store, _dir) = rt.block_on(support::sqlite());
    property(&rt, store.pool().clone(), store.tables().clone(), 48);
}

#[test]
fn reorder_property_on_postgres() {
    let rt = rt();
    let Some((store, _db)) = rt.block_on(support::postgres("vprop")) else {
        return;
    };
    property(&rt, store.pool().clone(), store.tables().clone(), 24);
}

#[test]
fn reorder_property_on_mariadb() {
    let rt = rt();
    let Some((store, _db)) = rt.block_on(support::mysql("vprop")) else {
        return;
    };
    property(&rt, store.pool().clone(), store.tables().clone(), 24);
}

/// The checker can fail: without apply_if_newer (last write wins), v2 arriving after v3
/// leaves the older value, which the same comparison catches.
#[test]
fn last_write_wins_is_caught() {
    rt().block_on(async {
        let (store, _dir) = support::sqlite().await;
        let pool = store.pool();
        create_values(pool, store.tables()).await;
        let mut conn = pool.acquire().await.unwrap();
        for (version, value) in [(3, "shipped"), (2, "paid")] {
            <sqlx::Sqlite as SqlDatabase>::execute(
                &mut conn,
                store.engine(),
                "INSERT INTO entity_values (k, value, version) VALUES (?1, ?2, ?3) ON CONFLICT (k) DO UPDATE SET value = excluded.value, version = excluded.version",
                &["o1".into(), value.into(), Value::I64(version)],
            )
            .await
            .unwrap();
        }
        let rows = <sqlx::Sqlite as SqlDatabase>::fetch(
            &mut conn,
            store.engine(),
            "SELECT value FROM entity_values WHERE k = 'o1'",
            &[],
            &[Column::Text],
        )
        .await
        .unwrap();
        assert_ne!(rows[0][0], Value::Text("shipped".into()), "last write wins must lose v3 here");
    });
}
