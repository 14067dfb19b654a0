//! The checker must be able to fail: a plain consumer fed every message twice doubles its
//! effects, and the checker says so; oncely over the same stream passes.

use crate::bed::{Bed, Ops};
use crate::cells::{Check, workload};
use crate::runners;
use oncely_core::{ConsumerName, MemorySource};
use oncely_sql::sqlx::{self, AssertSqlSafe, Sqlite};
use oncely_sql::{ConnectOptions, Durability, SqliteStore, Tables};

async fn sqlite_bed(dir: &std::path::Path) -> Bed<Sqlite> {
    let url = format!("sqlite:{}", dir.join("check.db").display());
    let options = ConnectOptions {
        tables: Tables::default(),
        max_connections: 1,
        durability: Durability::Normal,
        ..ConnectOptions::default()
    };
    let store = SqliteStore::connect_with(&url, &options).await.unwrap();
    store.migrate().await.unwrap();
    let bed = Bed::make(store.pool().clone(), Tables::default());
    for sql in bed.ddl() {
        sqlx::query(AssertSqlSafe(sql))
            .execute(&bed.pool)
            .await
            .unwrap();
    }
    bed
}

fn twice(n: usize) -> (MemorySource, i64) {
    let (msgs, total) = workload(n, "t");
    let source = MemorySource::new();
    for m in msgs.iter().chain(&msgs) {
        source.publish(m.clone());
    }
    source.close();
    (source, total)
}

#[tokio::test]
async fn the_checker_catches_a_plain_consumer_doubling_effects_and_passes_oncely() {
    let dir = tempfile::tempdir().unwrap();
    let bed = sqlite_bed(dir.path()).await;
    let n = 40;

    let (source, total) = twice(n);
    runners::plain(&bed, source, 2).await.unwrap();
    let check = Check::new(n as u64, total, bed.counts().await.unwrap(), false);
    assert_eq!(check.double, n as u64, "{check:?}");
    assert_eq!(check.lost, 0, "{check:?}");
    assert!(!check.ok, "{check:?}");

    bed.reset().await.unwrap();
    let (source, total) = twice(n);
    let name = ConsumerName::new("t").unwrap();
    runners::oncely(&bed, &name, source, 2, false)
        .await
        .unwrap();
    let check = Check::new(n as u64, total, bed.counts().await.unwrap(), true);
    assert_eq!((check.double, check.lost), (0, 0), "{check:?}");
    assert!(check.ok, "{check:?}");

    bed.reset().await.unwrap();
    let (source, total) = twice(n);
    let stats = runners::oncely(&bed, &name, source, 2, true).await.unwrap();
    assert_eq!(stats.duplicates, n as u64, "{stats:?}");
    let check = Check::new(n as u64, total, bed.counts().await.unwrap(), true);
    assert_eq!((check.double, check.lost), (0, 0), "{check:?}");

    bed.reset().await.unwrap();
    let (source, total) = twice(n);
    let (stats, _) = runners::oncely_batch(&bed, &name, source, 16)
        .await
        .unwrap();
    assert_eq!(stats.duplicates, n as u64, "{stats:?}");
    let check = Check::new(n as u64, total, bed.counts().await.unwrap(), true);
    assert!(check.ok, "{check:?}");
}

#[tokio::test]
async fn the_checker_catches_lost_messages() {
    let dir = tempfile::tempdir().unwrap();
    let bed = sqlite_bed(dir.path()).await;
    let (msgs, total) = workload(10, "l");
    let source = MemorySource::new();
    for m in msgs.iter().skip(3) {
        source.publish(m.clone());
    }
    source.close();
    runners::raw(&bed, "t", source, 4, 1).await.unwrap();
    let check = Check::new(10, total, bed.counts().await.unwrap(), true);
    assert_eq!(check.lost, 3, "{check:?}");
    assert!(!check.ok, "{check:?}");
}
