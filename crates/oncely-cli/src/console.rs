//! `oncely console --database URL [--addr 127.0.0.1:9898]`: the operator console of
//! oncely-console (docs/console.md), with the demo's ledger handler registered for replay.

use anyhow::Result;
use oncely_sql::{AnyStore, ConnectOptions, Tables};
use oncely_testkit::credits::Credits;
use std::net::SocketAddr;
use std::time::Duration;

/// Flags of `oncely console`.
#[derive(Debug, clap::Args)]
pub struct ConsoleArgs {
    /// Database URL (sqlite:…, postgres://…, mysql://…).
    #[arg(long, env = "ONCELY_DATABASE_URL")]
    database: String,
    /// Schema (PostgreSQL) or database (MySQL) of the tables.
    #[arg(long)]
    schema: Option<String>,
    /// Table-name prefix.
    #[arg(long, default_value = "oncely_")]
    prefix: String,
    /// Where to serve. A non-loopback address needs --token.
    #[arg(long, default_value = "127.0.0.1:9898")]
    addr: SocketAddr,
    /// Access token of the operator role (replay, resolve, purge).
    #[arg(long, env = "ONCELY_CONSOLE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Access token of the read-only role.
    #[arg(long, env = "ONCELY_CONSOLE_VIEWER_TOKEN", hide_env_values = true)]
    viewer_token: Option<String>,
    /// Without tokens, give every request the read-only role.
    #[arg(long)]
    read_only: bool,
    /// The inbox retention window replay checks (what `oncely prune --older-than` keeps).
    #[arg(long, value_parser = duration)]
    retention: Option<Duration>,
    /// Payload fields shown as "[redacted]" (comma-separated JSON keys).
    #[arg(long, value_delimiter = ',')]
    redact: Vec<String>,
    /// Show no payload at all (only its size and hash), on the pages and in the API.
    #[arg(long)]
    hide_payloads: bool,
}

fn duration(text: &str) -> std::result::Result<Duration, String> {
    oncely::ops::retention::parse_duration(text).map_err(|e| e.to_string())
}

/// Serves the console until the process is stopped.
pub async fn run(args: ConsoleArgs) -> Result<bool> {
    // Before connecting: a refusal needs no database.
    let has_token = args.token.is_some() || args.viewer_token.is_some();
    oncely_console::security::check_bind(&args.addr, has_token)?;
    let mut tables = Tables::default().with_prefix(&args.prefix)?;
    if let Some(s) = &args.schema {
        tables = tables.with_schema(s)?;
    }
    let options = ConnectOptions {
        tables,
        max_connections: 4,
        ..ConnectOptions::default()
    };
    let store = AnyStore::connect_with(&args.database, &options).await?;
    let credits = Credits::new(crate::demo::credit_tables(&store));
    let mut console = oncely_console::Console::new(store)
        .default_handler(credits)
        .redact(args.redact)
        .hide_payloads(args.hide_payloads);
    if let Some(w) = args.retention {
        console = console.retention(w);
    }
    if args.read_only {
        console = console.default_role(oncely_console::Role::Viewer);
    }
    if let Some(t) = args.token {
        console = console.operator_token(t);
    }
    if let Some(t) = args.viewer_token {
        console = console.viewer_token(t);
    }
    eprintln!(
        "oncely console: serving http://{}/ (Ctrl-C to stop)",
        args.addr
    );
    tokio::select! {
        served = oncely_console::serve(console, args.addr) => served?,
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(true)
}
