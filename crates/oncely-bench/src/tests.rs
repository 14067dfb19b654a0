//! The checker must be able to fail: a plain consumer fed every message twice doubles its
//! effects, and the checker says so; oncely over the same stream passes.

use crate::bed::{Bed, Ops};
use crate::broker::Broker;
use crate::cells::{Cell, Check, Mode, Spec, workload};
use crate::report::{Machine, Report};
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
    let bed = Bed::make(store.pool().clone(), Tables::default(), store.engine());
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

/// A broker key is the median over rounds of each round's ratio, each round divided by the
/// lower of its own bare and in-process rates: one disturbed round does not move it.
#[test]
fn broker_keys_are_the_median_of_paired_rounds() {
    let spec = |mode, batch, concurrency| Spec {
        mode,
        batch,
        concurrency,
        messages: 1000,
    };
    let (g, lanes) = (crate::plan::GROUP, oncely_core::DEFAULT_CONCURRENCY);
    let b = Broker::Amqp;
    let cells = vec![
        // In process, the bare consumer and oncely through the broker, five rounds each; the
        // machine was slow in round 3 for the in-process cell only, and in round 5 for oncely.
        Cell::with_rounds(
            "postgres",
            spec(Mode::InProcess(b), g, lanes),
            &[8000.0, 8000.0, 2000.0, 8000.0, 8000.0],
        ),
        Cell::with_rounds(
            "postgres",
            spec(Mode::Bare(b), 1, 1),
            &[6000.0, 7000.0, 6000.0, 9000.0, 6000.0],
        ),
        Cell::with_rounds(
            "postgres",
            spec(Mode::Through(b), g, lanes),
            &[5400.0, 6300.0, 5000.0, 7000.0, 1000.0],
        ),
    ];
    let report = Report::new(Machine::probe(), cells);
    let json = report.json();
    // Rounds: 5400/6000 = 0.9, 6300/7000 = 0.9, 5000/2000 = 2.5, 7000/8000 = 0.875,
    // 1000/6000 = 0.17: median 0.9. Summed over the rounds instead it would be
    // 2,964 / min(6,631, 5,000) = 0.59.
    let value = json["amqp_pg_vs_bare_consumer"].as_f64().expect("a value");
    assert!((value - 0.9).abs() < 1e-9, "{value}");
    let rounds = json["other_ratios"]["amqp_postgres_vs_bare_consumer_rounds"]
        .as_array()
        .expect("the rounds' ratios")
        .len();
    assert_eq!(rounds, 5);
    assert!(json["kafka_pg_vs_bare_consumer"].is_null());
}

/// The user's path key is the median of each round's demo / bare lapin ratio, on PostgreSQL;
/// without the demo's cells (no oncely binary) the key is absent, not `null`.
#[test]
fn the_demo_key_is_the_median_of_its_rounds_and_absent_without_the_demo() {
    let spec = |mode, batch, concurrency| Spec {
        mode,
        batch,
        concurrency,
        messages: 20_000,
    };
    let (g, lanes) = (crate::plan::GROUP, oncely_core::DEFAULT_CONCURRENCY);
    let bare = Cell::with_rounds(
        "postgres",
        spec(Mode::AmqpExistingBare, 1, 1),
        &[10_000.0, 12_000.0, 2_000.0],
    );
    let demo = Cell::with_rounds(
        "postgres",
        spec(Mode::AmqpDemo, g, lanes),
        &[5_000.0, 3_000.0, 1_800.0],
    );
    // Rounds: 0.5, 0.25, 0.9: median 0.5 (over the totals it would be 0.42).
    let report = Report::new(Machine::probe(), vec![bare.clone(), demo]);
    let json = report.json();
    let value = json[crate::report::DEMO_KEY].as_f64().expect("a value");
    assert!((value - 0.5).abs() < 1e-9, "{value}");
    assert_eq!(
        json["other_ratios"]["amqp_postgres_demo_vs_bare_consumer_rounds"]
            .as_array()
            .map(Vec::len),
        Some(3)
    );
    assert!(report.table().contains(crate::report::DEMO_KEY));

    let skipped = Report::new(Machine::probe(), vec![bare]).json();
    assert!(skipped.get(crate::report::DEMO_KEY).is_none(), "{skipped}");
    assert!(
        skipped["other_ratios"]
            .get("amqp_postgres_demo_vs_bare_consumer_rounds")
            .is_none()
    );
}

/// The demo's cells run on PostgreSQL only; a group left empty elsewhere is dropped.
#[test]
fn the_demo_cells_run_on_postgres_only() {
    let spec = |mode| Spec {
        mode,
        batch: 1,
        concurrency: 1,
        messages: 10,
    };
    let groups = vec![
        vec![spec(Mode::AmqpExistingBare), spec(Mode::AmqpDemo)],
        vec![spec(Mode::Bare(Broker::Amqp))],
    ];
    assert_eq!(crate::plan::for_backend("postgres", &groups), groups);
    assert_eq!(
        crate::plan::for_backend("sqlite_full", &groups),
        vec![groups[1].clone()]
    );
}

/// `--messages` past the batch cells' usual cap raises them with it (the cap's `clamp` with
/// min > max used to panic at `--messages 30000`).
#[test]
fn many_messages_raise_the_batch_cells_instead_of_panicking() {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: crate::BenchArgs,
    }
    let cli = Cli::parse_from(["oncely-bench", "--messages", "30000"]);
    let batched: Vec<usize> = crate::plan::matrix(&cli.args)
        .into_iter()
        .flatten()
        .filter(|s| matches!(s.mode, Mode::Oncely | Mode::Raw) && s.batch > 1)
        .map(|s| s.messages)
        .collect();
    assert!(!batched.is_empty());
    assert!(batched.iter().all(|&n| n >= 120_000), "{batched:?}");
}
