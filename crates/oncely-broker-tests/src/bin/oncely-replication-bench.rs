//! What `Replication::Replicated` costs per message, on the test-owned primary and streaming
//! replica of `scripts/pg-ha.sh` (all in one run, same machine, same data):
//!
//! ```text
//! bash scripts/pg-ha.sh start
//! cargo run --release -p oncely-broker-tests --bin oncely-replication-bench -- [--messages N] [--concurrency C]
//! ```
//!
//! Each message is one transaction of the store: begin, claim, one effect row, commit. Three
//! configurations, each at concurrency 1 (the latency a message pays) and at `--concurrency`
//! (throughput): asynchronous replication with the default store (what most installations
//! run), synchronous replication with the default store (the server already makes commits
//! wait), synchronous replication with `Replication::Replicated`. Prints one line each; asserts
//! no speed. Leaves the cluster in synchronous mode.

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

#[tokio::main]
async fn main() {
    let n = arg("--messages", 3_000);
    let concurrency = arg("--concurrency", 8);
    let schema = format!("bench_repl_{}", std::process::id());
    let tables = Tables::default().with_schema(&schema).expect("schema");
    let ledger = format!("{schema}.ledger");
    let configs = [
        (
            "async",
            Replication::AsConfigured,
            "asynchronous replication, default store",
        ),
        (
            "sync",
            Replication::AsConfigured,
            "synchronous replication, default store",
        ),
        (
            "sync",
            Replication::Replicated,
            "synchronous replication, Replicated",
        ),
    ];
    let mut base = None;
    println!("{n} messages (begin, claim, one effect row, commit) per cell");
    for (k, (mode, replication, what)) in configs.into_iter().enumerate() {
        ha(mode);
        let options = ConnectOptions {
            tables: tables.clone(),
            max_connections: concurrency as u32 + 2,
            replication,
            ..ConnectOptions::default()
        };
        let store = PgStore::connect_with(URL, &options).await.expect("connect");
        store.migrate().await.expect("migrate");
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE TABLE IF NOT EXISTS {ledger} (message_id text NOT NULL)"
        )))
        .execute(store.pool())
        .await
        .expect("ledger");
        let mut cells = Vec::new();
        for c in [1, concurrency] {
            let elapsed = run(&store, &ledger, &format!("{k}-{c}"), n, c).await;
            let per_msg = elapsed.as_secs_f64() * 1e6 / n as f64;
            cells.push((c, per_msg, n as f64 / elapsed.as_secs_f64()));
        }
        let base = base.get_or_insert_with(|| cells.clone()).clone();
        let line: Vec<String> = cells
            .iter()
            .zip(&base)
            .map(|((c, us, rate), (_, base_us, _))| {
                format!(
                    "concurrency {c}: {us:.0} µs/msg ({rate:.0} msgs/s, {:+.0} µs/msg)",
                    us - base_us
                )
            })
            .collect();
        println!("{what:<46} {}", line.join("; "));
        store.pool().close().await;
    }
    let store = PgStore::connect(URL).await.expect("connect");
    let _ = sqlx::raw_sql(AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
        .execute(store.pool())
        .await;
}
