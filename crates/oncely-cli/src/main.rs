//! The `oncely` command: the admin commands of `oncely::cli` (with the demo's `credits`
//! handler registered for `dlq replay`) plus `demo` and `bench`.

mod demo;
mod http_demo;
#[cfg(feature = "otlp")]
mod otlp;

use clap::{Parser, Subcommand};
use demo::credits::{CreditTables, Credits};
use oncely::cli::{Admin, AdminCommand, exit_code};
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
    /// Serve POST /orders behind the HTTP Idempotency-Key layer (docs/http.md).
    HttpDemo(http_demo::HttpDemoArgs),
    #[command(flatten)]
    Admin(AdminCommand),
}

/// The admin tool of the `oncely` binary: `dlq replay` can run the demo's ledger handler.
fn admin() -> Admin {
    Admin::new().handler_with("credits", |store| {
        Credits::new(CreditTables::new(store.dialect(), store.tables().schema()))
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    use tracing_subscriber::prelude::*;
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(
            tracing_subscriber::EnvFilter::try_from_env("ONCELY_LOG")
                .unwrap_or_else(|_| "error".into()),
        );
    // Spans to an OpenTelemetry collector (feature `otlp`, docs/tracing.md).
    #[cfg(feature = "otlp")]
    let (otel, _flush) = otlp::layer();
    #[cfg(not(feature = "otlp"))]
    let otel: Option<tracing_subscriber::layer::Identity> = None;
    tracing_subscriber::registry().with(log).with(otel).init();
    let cli = Cli::parse();
    exit_code(match cli.command {
        Command::Demo(args) => demo::run(args).await,
        Command::Bench(args) => oncely_bench::run(args).await,
        Command::HttpDemo(args) => http_demo::run(args).await,
        Command::Admin(command) => admin().execute(command).await,
    })
}
