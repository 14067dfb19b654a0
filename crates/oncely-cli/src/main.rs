//! The `oncely` command: the admin commands of `oncely::cli` (with the demo's `credits`
//! handler registered for `dlq replay`) plus `demo`, `http-demo` and `webhook-demo`. The benchmark is its own
//! binary: `cargo run --release -p oncely-bench -- --quick` (docs/performance.md).

mod console;
mod demo;
mod http_demo;
#[cfg(feature = "otlp")]
mod otlp;
mod webhook_demo;

use clap::{Parser, Subcommand};
use oncely::cli::{Admin, AdminCommand, exit_code};
use oncely_testkit::credits::Credits;
use std::process::ExitCode;

/// oncely: idempotent consumers — each message's effect once under at-least-once delivery.
#[derive(Debug, Parser)]
#[command(
    name = "oncely",
    version,
    about,
    after_help = "Logs go to stderr, filtered by RUST_LOG (or its alias ONCELY_LOG), e.g. \
                  RUST_LOG=oncely=debug; default: warn."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the credits-ledger demo under duplicates, conflicts, reordering and crashes.
    Demo(demo::DemoArgs),
    /// Serve POST /orders behind the HTTP Idempotency-Key layer (docs/http.md).
    HttpDemo(http_demo::HttpDemoArgs),
    /// Send signed webhooks (Standard Webhooks, Stripe, GitHub) with retries, copies and
    /// forgeries to a receiver that is SIGKILLed and restarted; check the database (docs/webhooks.md).
    WebhookDemo(webhook_demo::WebhookDemoArgs),
    /// Serve the operator console: dead letters, safe replay, audit (docs/console.md).
    Console(console::ConsoleArgs),
    #[command(flatten)]
    Admin(AdminCommand),
}

/// The admin tool of the `oncely` binary: `dlq replay` can run the demo's ledger handler.
fn admin() -> Admin {
    Admin::new().handler_with("credits", |store| {
        Credits::new(crate::demo::credit_tables(store))
    })
}

/// The log filter when neither `RUST_LOG` nor `ONCELY_LOG` is set: warnings (a store outage,
/// a dead letter, a refusal to start) and errors.
const DEFAULT_LOG: &str = "warn";

/// The demo's default: the same, without the runtime's per-delivery WARNs of the faults the
/// demo injects on purpose (about 1,200 lines in a default run: each crash, conflict and bad
/// id; its report counts them). Store health and everything else still shows at WARN.
const DEMO_LOG: &str = "warn,oncely_core::consumer=error";

/// The log filter: `RUST_LOG` (the ecosystem's convention, e.g. `RUST_LOG=oncely=debug`; it
/// wins), else its alias `ONCELY_LOG`, else `default`. A filter that does not parse is
/// reported and `default` used.
fn log_filter(default: &str) -> tracing_subscriber::EnvFilter {
    filter_of(
        ["RUST_LOG", "ONCELY_LOG"].map(|var| (var, std::env::var(var).ok())),
        default,
    )
}

/// [`log_filter`] from the variables' values, first set (and not blank) wins.
fn filter_of(vars: [(&str, Option<String>); 2], default: &str) -> tracing_subscriber::EnvFilter {
    let set = vars.into_iter().find_map(|(var, value)| {
        let value = value.filter(|v| !v.trim().is_empty())?;
        Some((var, value))
    });
    if let Some((var, filter)) = set {
        match tracing_subscriber::EnvFilter::try_new(&filter) {
            Ok(filter) => return filter,
            Err(e) => eprintln!("oncely: ignoring {var}={filter:?} ({e}); logging at {default}"),
        }
    }
    tracing_subscriber::EnvFilter::new(default)
}

#[tokio::main]
async fn main() -> ExitCode {
    use std::io::IsTerminal;
    use tracing_subscriber::prelude::*;
    let cli = Cli::parse();
    let default = match cli.command {
        Command::Demo(_) => DEMO_LOG,
        _ => DEFAULT_LOG,
    };
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(log_filter(default));
    // Spans to an OpenTelemetry collector (feature `otlp`, docs/tracing.md).
    #[cfg(feature = "otlp")]
    let (otel, _flush) = otlp::layer();
    #[cfg(not(feature = "otlp"))]
    let otel: Option<tracing_subscriber::layer::Identity> = None;
    tracing_subscriber::registry().with(log).with(otel).init();
    exit_code(match cli.command {
        Command::Demo(args) => demo::run(args).await,
        Command::HttpDemo(args) => http_demo::run(args).await,
        Command::WebhookDemo(args) => webhook_demo::run(args).await,
        Command::Console(args) => console::run(args).await,
        Command::Admin(command) => admin().execute(command).await,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::prelude::*;

    /// What `filter` lets through of a few events, as the binary would print them.
    fn printed(filter: tracing_subscriber::EnvFilter) -> String {
        let out = Arc::new(Mutex::new(Vec::new()));
        let writer = {
            let out = out.clone();
            move || Sink(out.clone())
        };
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .with_writer(writer)
                .with_ansi(false)
                .with_filter(filter),
        );
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(target: "oncely_core::health", "store unavailable");
            tracing::error!(target: "oncely_core::health", "store refused the consumer");
            tracing::warn!(target: "oncely_core::consumer::settle", "dead-lettered");
            tracing::info!(target: "oncely_core::health", "store recovered");
            tracing::debug!(target: "oncely_core::consumer", "delivery settled");
            tracing::debug!(target: "oncely::demo", "resetting the demo store");
        });
        String::from_utf8(out.lock().unwrap().clone()).unwrap()
    }

    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn vars(
        rust_log: Option<&str>,
        oncely_log: Option<&str>,
    ) -> [(&'static str, Option<String>); 2] {
        [
            ("RUST_LOG", rust_log.map(str::to_owned)),
            ("ONCELY_LOG", oncely_log.map(str::to_owned)),
        ]
    }

    #[test]
    fn by_default_warnings_show_and_nothing_below() {
        let out = printed(filter_of(vars(None, None), DEFAULT_LOG));
        assert!(
            out.contains("store unavailable") && out.contains("store refused"),
            "{out}"
        );
        assert!(out.contains("dead-lettered"), "{out}");
        assert!(!out.contains("INFO") && !out.contains("DEBUG"), "{out}");
        // The demo hides only the per-delivery WARNs of the faults it injects.
        let out = printed(filter_of(vars(None, Some(" ")), DEMO_LOG));
        assert!(
            out.contains("store unavailable") && out.contains("store refused"),
            "{out}"
        );
        assert!(
            !out.contains("dead-lettered") && !out.contains("DEBUG"),
            "{out}"
        );
    }

    #[test]
    fn rust_log_wins_over_its_alias_oncely_log() {
        let out = printed(filter_of(vars(Some("oncely=debug"), None), DEMO_LOG));
        assert!(out.contains("DEBUG oncely::demo: resetting"), "{out}");
        assert!(
            out.contains("delivery settled") && out.contains("dead-lettered"),
            "{out}"
        );
        let out = printed(filter_of(vars(None, Some("oncely=debug")), DEFAULT_LOG));
        assert!(out.contains("resetting the demo store"), "{out}");
        let out = printed(filter_of(vars(Some("error"), Some("debug")), DEFAULT_LOG));
        assert!(
            out.contains("store refused") && !out.contains("WARN"),
            "{out}"
        );
        // Not a filter: the default, with a note on stderr.
        let out = printed(filter_of(vars(Some("oncely=loud"), None), DEFAULT_LOG));
        assert!(
            out.contains("store unavailable") && !out.contains("DEBUG"),
            "{out}"
        );
    }
}
