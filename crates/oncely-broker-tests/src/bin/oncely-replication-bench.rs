//! What `Replication::Replicated` costs per message, on the test-owned primary and streaming
//! replica of `scripts/pg-ha.sh` (all in one run, same machine, same data):
//!
//! ```text
//! bash scripts/pg-ha.sh start
//! cargo run --release -p oncely-broker-tests --bin oncely-replication-bench -- [--messages N] [--concurrency C] [--rounds R]
//! ```
//!
//! Each message is one transaction of the store: begin, claim, one effect row, commit. Three
//! configurations, each at concurrency 1 (the latency a message pays) and at `--concurrency`
//! (throughput): asynchronous replication with the default store (what most installations
//! run), synchronous replication with the default store (the server already makes commits
//! wait), synchronous replication with `Replication::Replicated`. The configurations are
//! interleaved over `--rounds` rounds and the median is printed, one line each; asserts no
//! speed. Leaves the cluster in synchronous mode.

use oncely_core::{ConsumerName, MessageId, PayloadHash, Store};
use oncely_sql::sqlx::{self, AssertSqlSafe};
use oncely_sql::{ConnectOptions, PgStore, Replication, Tables};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const URL: &str = "postgres://postgres@127.0.0.1:25432,127.0.0.1:25433/postgres";

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

fn ha(mode: &str) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pg-ha.sh");
    let status = std::process::Command::new("bash")
        .arg(script)
        .args(["start", mode])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .status()
        .expect("bash runs");
    assert!(status.success(), "pg-ha.sh start {mode} failed");
}

/// Runs `n` one-message transactions on `concurrency` tasks; returns the elapsed time.
async fn run(store: &PgStore, ledger: &str, tag: &str, n: usize, concurrency: usize) -> Duration {
    let consumer = ConsumerName::new(format!("bench-{tag}")).expect("name");
    let insert = format!("INSERT INTO {ledger} (message_id) VALUES ($1)");
    let start = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|t| {
            let (store, consumer, insert) = (store.clone(), consumer.clone(), insert.clone());
            let tag = tag.to_owned();
            tokio::spawn(async move {
                for i in (t..n).step_by(concurrency) {
                    let id = MessageId::new(format!("{tag}-{i}")).expect("id");
                    let mut tx = store.begin().await.expect("begin");
                    store
                        .claim(
                            &mut tx,
                            &consumer,
                            &id,
                            PayloadHash::of(id.as_str().as_bytes()),
                        )
                        .await
                        .expect("claim");
                    sqlx::query(AssertSqlSafe(insert.clone()))
                        .bind(id.as_str())
                        .execute(&mut *tx)
                        .await
                        .expect("effect");
                    store.commit(tx).await.expect("commit");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    start.elapsed()
}

async fn open(options: &ConnectOptions, ledger: &str) -> PgStore {
    let store = PgStore::connect_with(URL, options).await.expect("connect");
    store.migrate().await.expect("migrate");
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE TABLE IF NOT EXISTS {ledger} (message_id text NOT NULL)"
    )))
    .execute(store.pool())
    .await
    .expect("ledger");
    store
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

#[tokio::main]
async fn main() {
    let n = arg("--messages", 2_000);
    let concurrency = arg("--concurrency", 8);
    let rounds = arg("--rounds", 5);
    let schema = format!("bench_repl_{}", std::process::id());
    let tables = Tables::default().with_schema(&schema).expect("schema");
    let ledger = format!("{schema}.ledger");
    let options = |replication| ConnectOptions {
        tables: tables.clone(),
        max_connections: concurrency as u32 + 2,
        replication,
        ..ConnectOptions::default()
    };
    // Replicated is refused at start without synchronous standbys: both open in sync mode.
    ha("sync");
    let default = open(&options(Replication::AsConfigured), &ledger).await;
    let replicated = open(&options(Replication::Replicated), &ledger).await;
    let configs: [(&str, &PgStore, &str); 3] = [
        ("async", &default, "asynchronous replication, default store"),
        ("sync", &default, "synchronous replication, default store"),
        ("sync", &replicated, "synchronous replication, Replicated"),
    ];
    // Rounds interleave the configurations, so a busy moment of the machine hits all three.
    let mut cells: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); 2]; configs.len()];
    for round in 0..rounds {
        for (k, (mode, store, _)) in configs.iter().enumerate() {
            ha(mode);
            for (j, c) in [1, concurrency].into_iter().enumerate() {
                let tag = format!("{round}-{k}-{c}");
                let elapsed = run(store, &ledger, &tag, n, c).await;
                cells[k][j].push(elapsed.as_secs_f64() * 1e6 / n as f64);
            }
        }
    }
    println!(
        "{n} messages per cell (begin, claim, one effect row, commit), median of {rounds} interleaved rounds"
    );
    let base: Vec<f64> = cells[0].iter().map(|v| median(v.clone())).collect();
    for (k, (_, _, what)) in configs.iter().enumerate() {
        let line: Vec<String> = [1, concurrency]
            .iter()
            .enumerate()
            .map(|(j, c)| {
                let us = median(cells[k][j].clone());
                format!(
                    "concurrency {c}: {us:.0} µs/msg ({:.0} msgs/s, {:+.0} µs/msg)",
                    1e6 / us,
                    us - base[j]
                )
            })
            .collect();
        println!("{what:<42} {}", line.join("; "));
    }
    ha("sync");
    let _ = sqlx::raw_sql(AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
        .execute(default.pool())
        .await;
}
