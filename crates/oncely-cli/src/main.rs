//! The `oncely` command.

mod admin;
mod demo;
mod migrate;

use anyhow::Result;
use clap::{Parser, Subcommand};
use oncely_sql::Tables;
use std::process::ExitCode;

/// oncely: idempotent consumers — each message's effect once under at-least-once delivery.
#[derive(Debug, Parser)]
#[command(name = "oncely", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the credits-ledger demo under duplicates, conflicts, reordering and crashes.
    Demo(demo::DemoArgs),
    /// Benchmark oncely against a plain consumer and raw SQL (PostgreSQL, SQLite), with charts.
    Bench(oncely_bench::BenchArgs),
    /// Delete inbox ids older than the retention window (in batches, or by dropping partitions).
    Prune(admin::prune::PruneArgs),
    /// PostgreSQL time-partitioned inbox: install, ensure, list, sql.
    Partition(admin::partition::PartitionArgs),
    /// Per-consumer numbers: ids held, oldest, newest, conflicts, dead letters, table sizes.
    Stats(admin::stats::StatsArgs),
    /// Where one message id is: inbox, dead letters, effect journal, outbox.
    Inspect(admin::inspect::InspectArgs),
    /// Dead letters: list, show, replay, purge.
    Dlq(admin::dlq::DlqArgs),
    /// Apply (or print) the migrations: inbox and dead letters, plus the sets named by `--with`.
    Migrate {
        /// Database URL (sqlite:…, postgres://…, mysql://…).
        #[arg(long, env = "ONCELY_DATABASE_URL")]
        database: String,
        /// Print the SQL instead of applying it.
        #[arg(long)]
        print: bool,
        /// Schema (PostgreSQL) or database (MySQL) for the tables.
        #[arg(long)]
        schema: Option<String>,
        /// Table-name prefix.
        #[arg(long, default_value = "oncely_")]
        prefix: String,
        /// Further migration sets, comma-separated.
        #[arg(long, value_enum, value_delimiter = ',')]
        with: Vec<migrate::With>,
    },
}

fn tables(schema: Option<&str>, prefix: &str) -> Result<Tables> {
    let mut t = Tables::default().with_prefix(prefix)?;
    if let Some(s) = schema {
        t = t.with_schema(s)?;
    }
    Ok(t)
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ONCELY_LOG")
                .unwrap_or_else(|_| "error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => demo::run(args).await,
        Command::Prune(args) => admin::prune::run(args).await,
        Command::Partition(args) => admin::partition::run(args).await,
        Command::Stats(args) => admin::stats::run(args).await,
        Command::Inspect(args) => admin::inspect::run(args).await,
        Command::Dlq(args) => admin::dlq::run(args).await,
        Command::Bench(args) => oncely_bench::run(args).await,
        Command::Migrate {
            database,
            print,
            schema,
            prefix,
            with,
        } => match tables(schema.as_deref(), &prefix) {
            Ok(t) => migrate::run(&database, t, print, &with)
                .await
                .map(|()| true),
            Err(e) => Err(e),
        },
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
