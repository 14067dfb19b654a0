//! `oncely-bench`: the same as `oncely bench`, buildable on its own.

use clap::Parser;
use std::process::ExitCode;

/// Benchmark oncely against a plain consumer and raw SQL (PostgreSQL, SQLite), with charts.
#[derive(Parser)]
#[command(name = "oncely-bench", version, about)]
struct Cli {
    #[command(flatten)]
    args: oncely_bench::BenchArgs,
}

#[tokio::main]
async fn main() -> ExitCode {
    match oncely_bench::run(Cli::parse().args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
