//! How throughput grows with consumer processes, Galera nodes and database shards:
//!
//! ```text
//! bash scripts/cluster.sh start galera && bash scripts/test-db.sh start pg
//! cargo run -p oncely-broker-tests --bin oncely-scale-bench -- [--messages N]
//! ```
//!
//! Every run drains a fresh RabbitMQ queue (N unique messages + 20 % duplicates, published
//! before the consumers start) with `oncely-broker-consumer` processes, and is timed from their
//! start until the database holds one ledger row per unique id; the checker then requires
//! 0 double and 0 lost. Rates are printed with their ratio to the run's baseline (the first
//! row of its group), measured in the same invocation on the same machine.

use oncely_broker_tests::check::Report;
use oncely_broker_tests::ledger::Db;
use oncely_broker_tests::procs::{consumer_args, finish, spawn};
use oncely_broker_tests::services::{AMQP_URL, PG_URL, unique};
use oncely_broker_tests::workload::Workload;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// One consumer group: its name and the store URL of each of its processes.
struct Group {
    consumer: &'static str,
    stores: Vec<String>,
}

fn consumer_exe() -> PathBuf {
    std::env::current_exe()
        .expect("own path")
        .with_file_name("oncely-broker-consumer")
}

/// Runs `groups` at once (each on its own queue and schema); returns unique ids per second.
async fn run(label: &str, groups: &[Group], messages: usize) -> f64 {
    let mut prepared = Vec::new();
    for (g, group) in groups.iter().enumerate() {
        let queue = unique("scale");
        let schema = unique("t_scale");
        let source = format!("{AMQP_URL}?queue={queue}");
        let workload = Workload::new(&queue, messages, 0.2, 0, 40 + g as u64);
        let db = Db::open(&group.stores[0], Some(&schema))
            .await
            .expect("store");
        oncely_amqp::publish(&source, &workload.messages)
            .await
            .expect("publish");
        prepared.push((source, schema, workload, db));
    }
    let started = Instant::now();
    let mut children = Vec::new();
    for (group, (source, schema, _, _)) in groups.iter().zip(&prepared) {
        for store in &group.stores {
            let args = consumer_args(source, group.consumer, store, Some(schema.as_str()), 3);
            children.push(spawn(consumer_exe(), &args));
        }
    }
    for (_, _, workload, db) in &prepared {
        let want = workload.unique.len() as i64;
        while db.counts().await.map(|(n, _)| n).unwrap_or(0) < want {
            assert!(
                started.elapsed() < Duration::from_secs(600),
                "{label}: stalled"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let elapsed = started.elapsed();
    for (i, child) in children.into_iter().enumerate() {
        finish(child, &format!("{label} process {}", i + 1)).await;
    }
    let mut total = 0;
    for (_, _, workload, db) in &prepared {
        Report::read(db, workload)
            .await
            .expect("report")
            .assert_exact(label);
        total += workload.unique.len();
    }
    total as f64 / elapsed.as_secs_f64()
}

fn row(label: &str, rate: f64, baseline: f64) {
    println!(
        "{label:<44} {rate:>8.0} unique msg/s   x{:.2}",
        rate / baseline
    );
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let messages = args
        .iter()
        .position(|a| a == "--messages")
        .and_then(|i| args.get(i + 1))
        .map_or(6_000, |n| n.parse().expect("--messages N"));
    let galera = oncely_testkit::cluster::galera_urls();
    let one = |s: &str| vec![s.to_owned()];

    println!("Galera ({messages} unique messages + 20 % duplicates per run, RabbitMQ):");
    let single = "mysql://root@127.0.0.1:3306/test";
    let base = run(
        "MariaDB (no cluster), 1 process",
        &[Group {
            consumer: "scale",
            stores: one(single),
        }],
        messages,
    )
    .await;
    row("MariaDB (no cluster), 1 process", base, base);
    let three_local = vec![single.to_owned(); 3];
    let r = run(
        "MariaDB (no cluster), 3 processes",
        &[Group {
            consumer: "scale",
            stores: three_local,
        }],
        messages,
    )
    .await;
    row("MariaDB (no cluster), 3 processes", r, base);
    let r = run(
        "Galera, 1 node, 1 process",
        &[Group {
            consumer: "scale",
            stores: one(&galera[0]),
        }],
        messages,
    )
    .await;
    row("Galera, 1 node, 1 process", r, base);
    let r = run(
        "Galera, 1 node, 3 processes",
        &[Group {
            consumer: "scale",
            stores: vec![galera[0].clone(); 3],
        }],
        messages,
    )
    .await;
    row("Galera, 1 node, 3 processes", r, base);
    let r = run(
        "Galera, 3 nodes, 3 processes (one each)",
        &[Group {
            consumer: "scale",
            stores: galera.clone(),
        }],
        messages,
    )
    .await;
    row("Galera, 3 nodes, 3 processes (one each)", r, base);

    println!("\nSharding by consumer name (two consumers, one process each, PostgreSQL):");
    let second = std::env::var("ONCELY_SHARD2_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:15432/postgres".to_owned());
    let base = run(
        "2 consumers, one PostgreSQL server",
        &[
            Group {
                consumer: "shard-a",
                stores: one(PG_URL),
            },
            Group {
                consumer: "shard-b",
                stores: one(PG_URL),
            },
        ],
        messages,
    )
    .await;
    row("2 consumers, one PostgreSQL server", base, base);
    let r = run(
        "2 consumers, two PostgreSQL servers",
        &[
            Group {
                consumer: "shard-a",
                stores: one(PG_URL),
            },
            Group {
                consumer: "shard-b",
                stores: one(&second),
            },
        ],
        messages,
    )
    .await;
    row("2 consumers, two PostgreSQL servers", r, base);
}
