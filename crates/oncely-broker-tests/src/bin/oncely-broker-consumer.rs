//! A consumer process for crash and scale-out tests:
//!
//! ```text
//! oncely-broker-consumer --source URL --consumer NAME --store URL [--schema S]
//!                        [--idle-exit SECS] [--concurrency N]
//! ```
//!
//! Consumes into the ledger until no delivery arrived for `--idle-exit` seconds, then
//! prints its counters as one line and exits 0. A `redis://` store is the Redis store
//! (ledger and balances in Redis, `--schema` its hash tag), any other URL a SQL database.

use oncely_broker_tests::brokers::connect_source;
use oncely_broker_tests::ledger::Db;
use oncely_broker_tests::redis_db::RedisDb;
use oncely_broker_tests::runner::{RunOptions, run_store_until_idle, run_until_idle};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main]
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
    let source_url = need("--source")?;
    let consumer = need("--consumer")?;
    let store_url = need("--store")?;
    let schema = arg(&args, "--schema");
    let mut options = RunOptions::new(&consumer);
    if let Some(s) = arg(&args, "--idle-exit") {
        options.idle_exit = Duration::from_secs_f64(s.parse()?);
    }
    if let Some(n) = arg(&args, "--concurrency") {
        options.concurrency = n.parse()?;
    }
    let summary = if store_url.starts_with("redis://") {
        let db = RedisDb::open(&store_url, schema.as_deref().unwrap_or("oncely")).await?;
        let source = connect_source(&source_url, &consumer).await?;
        let (store, handler) = (db.store().clone(), db.handler());
        run_store_until_idle(store, handler, source, &options, CancellationToken::new()).await?
    } else {
        let db = Db::open(&store_url, schema.as_deref()).await?;
        let source = connect_source(&source_url, &consumer).await?;
        run_until_idle(&db, source, &options, CancellationToken::new()).await?
    };
    let s = summary.stats;
    println!(
        "received={} applied={} duplicates={} dead_lettered={} ack_failures={} busy_ms={} rate={:.0}",
        s.received,
        s.applied,
        s.duplicates,
        s.dead_lettered,
        s.ack_failures,
        summary.busy.as_millis(),
        summary.rate()
    );
    Ok(())
}
