//! The child process of the Kafka SIGKILL crash test: consumes a topic into the ledger of
//! a SQLite (or PostgreSQL) database until the source has been idle, then prints one line
//! of counters and exits 0.
//!
//! ```text
//! kafka_consumer --source kafka://127.0.0.1:9092/topic?idle_exit_ms=3000 --consumer NAME
//!                --store sqlite:/path/file.db [--concurrency N]
//! ```

use oncely_broker_tests::kafka as common;
use oncely_broker_tests::ledger::Db;
use tokio_util::sync::CancellationToken;

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().collect();
    let need = |n: &str| arg(&args, n).ok_or_else(|| format!("missing {n}"));
    let source = need("--source")?;
    let consumer = need("--consumer")?;
    let store = need("--store")?;
    let concurrency = arg(&args, "--concurrency").map_or(Ok(8), |n| n.parse())?;
    let db = Db::open(&store, arg(&args, "--schema").as_deref()).await?;
    let (s, timing) = common::consume(
        &db,
        &source,
        &consumer,
        concurrency,
        CancellationToken::new(),
    )
    .await?;
    println!(
        "received={} applied={} duplicates={} dead_lettered={} abandoned={} busy_ms={} rate={:.0}",
        s.received,
        s.applied,
        s.duplicates,
        s.dead_lettered,
        s.abandoned,
        timing.busy().as_millis(),
        timing.rate()
    );
    Ok(())
}
