//! The `oncely` command.

mod db;
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
    /// Apply (or print) the inbox and dead-letter migrations.
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
        Command::Bench(args) => oncely_bench::run(args).await,
        Command::Migrate {
            database,
            print,
            schema,
            prefix,
        } => match tables(schema.as_deref(), &prefix) {
            Ok(t) => migrate::run(&database, t, print).await.map(|()| true),
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
