//! The `oncely` admin commands as a library (feature `cli`; the facade re-exports this module
//! as `oncely::cli`), so that you can build your own admin binary with your handlers
//! registered for `dlq replay`:
//!
//! ```no_run
//! use oncely_core::{Envelope, Handled, Handler};
//! use oncely_sql::AnyTx;
//!
//! #[derive(Clone)]
//! struct Orders;
//!
//! impl Handler<AnyTx> for Orders {
//!     async fn handle(&self, tx: &mut AnyTx, msg: &Envelope) -> oncely_core::Result<Handled> {
//!         tx.execute("INSERT INTO orders (id) VALUES ($1)", &[msg.id().as_str().into()]).await?;
//!         Ok(Handled::Applied)
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> std::process::ExitCode {
//!     // my-admin migrate | prune | partition | stats | inspect | dlq list/show/replay/resolve/purge
//!     oncely_ops::cli::Admin::new().handler("orders", Orders).run().await
//! }
//! ```
//!
//! The commands: `migrate`, `prune`, `partition`, `stats`, `inspect`, `dlq` ([`AdminCommand`]);
//! `--metrics-addr` serves Prometheus metrics while `prune` runs ([`metrics`]). The work is
//! done by the rest of this crate; this module parses arguments (clap) and prints. The `oncely`
//! binary is this library plus its `demo` and `bench` subcommands, with the demo's `credits`
//! handler registered.

pub mod dlq;
pub mod inspect;
pub mod metrics;
pub mod migrate;
pub mod partition;
pub mod prune;
pub mod stats;

use crate::Ops;
use crate::dlq::Filter;
use crate::replay::{self, ReplayOptions, Replayed};
use crate::time::format_utc_ms;
use anyhow::Result;
use oncely_core::Handler;
use oncely_sql::{AnyStore, AnyTx, ConnectOptions, Tables};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;

/// The admin subcommands. Flatten them into your own clap command to add subcommands of your
/// own (the `oncely` binary adds `demo` and `bench` this way), then run the one parsed with
/// [`Admin::execute`].
///
/// ```
/// use clap::{Parser, Subcommand};
///
/// #[derive(Parser)]
/// struct Cli {
///     #[command(subcommand)]
///     command: Command,
/// }
///
/// #[derive(Subcommand)]
/// enum Command {
///     /// My own subcommand.
///     Hello,
///     #[command(flatten)]
///     Admin(oncely_ops::cli::AdminCommand),
/// }
///
/// let cli = Cli::parse_from(["my-admin", "dlq", "list", "--database", "sqlite::memory:"]);
/// assert!(matches!(cli.command, Command::Admin(_)));
/// ```
#[derive(Debug, clap::Subcommand)]
pub enum AdminCommand {
    /// Apply (or print) the migrations: inbox and dead letters, plus the sets named by `--with`.
    Migrate(migrate::MigrateArgs),
    /// Delete inbox ids older than the retention window (in batches, or by dropping partitions).
    Prune(prune::PruneArgs),
    /// PostgreSQL time-partitioned inbox: install, ensure, list, sql.
    Partition(partition::PartitionArgs),
    /// Per-consumer numbers: ids held, oldest, newest, conflicts, dead letters, table sizes.
    Stats(stats::StatsArgs),
    /// Where one message id is: inbox, dead letters, effect journal, outbox.
    Inspect(inspect::InspectArgs),
    /// Dead letters: list, show, replay, resolve, purge.
    Dlq(dlq::DlqArgs),
}

/// The command line of an admin binary made of [`AdminCommand`] alone (what [`Admin::run`]
/// parses).
#[derive(Debug, clap::Parser)]
#[command(about = "oncely admin: migrations, retention, stats, inspect and dead letters")]
struct AdminCli {
    #[command(subcommand)]
    command: AdminCommand,
}

type ReplayFuture<'a> =
    Pin<Box<dyn Future<Output = oncely_core::Result<Vec<Replayed>>> + Send + 'a>>;

/// What one `dlq replay` covers.
pub(crate) struct ReplayJob<'a> {
    pub ops: &'a Ops,
    pub store: &'a AnyStore,
    /// One row, or every row matching `filter`.
    pub id: Option<i64>,
    pub filter: &'a Filter,
    pub options: &'a ReplayOptions,
    pub progress: &'a mut (dyn FnMut(&Replayed) + Send),
}

/// A registered handler, its type erased.
trait Replayer: Send + Sync {
    fn replay<'a>(&'a self, job: ReplayJob<'a>) -> ReplayFuture<'a>;
}

/// A handler made from the opened store (its dialect, its tables) when a replay starts.
struct Factory<F>(F);

impl<F, H> Replayer for Factory<F>
where
    F: Fn(&AnyStore) -> H + Send + Sync,
    H: Handler<AnyTx> + Clone,
{
    fn replay<'a>(&'a self, job: ReplayJob<'a>) -> ReplayFuture<'a> {
        let handler = (self.0)(job.store);
        Box::pin(async move {
            let store = Arc::new(job.store.clone());
            match job.id {
                Some(id) => Ok(vec![
                    replay::replay(job.ops, store, handler, id, job.options).await?,
                ]),
                None => {
                    replay::replay_all(
                        job.ops,
                        store,
                        handler,
                        job.filter,
                        job.options,
                        job.progress,
                    )
                    .await
                }
            }
        })
    }
}

/// An admin tool: the admin commands plus the handlers `dlq replay` may run, by name.
///
/// ```no_run
/// # #[derive(Clone)] struct Orders;
/// # impl oncely_core::Handler<oncely_sql::AnyTx> for Orders {
/// #     async fn handle(&self, _: &mut oncely_sql::AnyTx, _: &oncely_core::Envelope) -> oncely_core::Result<oncely_core::Handled> {
/// #         Ok(oncely_core::Handled::Applied)
/// #     }
/// # }
/// # async fn f() -> std::process::ExitCode {
/// // my-admin dlq replay 42 --handler orders --database postgres://…
/// oncely_ops::cli::Admin::new().handler("orders", Orders).run().await
/// # }
/// ```
#[derive(Default, Clone)]
pub struct Admin {
    handlers: BTreeMap<String, Arc<dyn Replayer>>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin")
            .field("handlers", &self.names())
            .finish()
    }
}

impl Admin {
    /// An admin tool without handlers (every command but `dlq replay` works).
    ///
    /// ```
    /// assert!(oncely_ops::cli::Admin::new().names().is_empty());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `handler` under `name` for `dlq replay --handler NAME`. A handler is written
    /// once for every database (`impl Handler<AnyTx>`); it is cloned per replay run.
    ///
    /// ```
    /// # #[derive(Clone)] struct Orders;
    /// # impl oncely_core::Handler<oncely_sql::AnyTx> for Orders {
    /// #     async fn handle(&self, _: &mut oncely_sql::AnyTx, _: &oncely_core::Envelope) -> oncely_core::Result<oncely_core::Handled> {
    /// #         Ok(oncely_core::Handled::Applied)
    /// #     }
    /// # }
    /// let admin = oncely_ops::cli::Admin::new().handler("orders", Orders);
    /// assert_eq!(admin.names(), ["orders"]);
    /// ```
    pub fn handler<H>(self, name: impl Into<String>, handler: H) -> Self
    where
        H: Handler<AnyTx> + Clone,
    {
        self.handler_with(name, move |_| handler.clone())
    }

    /// Registers a handler made from the store `dlq replay` opened, for handlers that need
    /// its dialect or its tables (schema, prefix) to name their own tables.
    ///
    /// ```
    /// # #[derive(Clone)] struct Orders { table: String }
    /// # impl oncely_core::Handler<oncely_sql::AnyTx> for Orders {
    /// #     async fn handle(&self, _: &mut oncely_sql::AnyTx, _: &oncely_core::Envelope) -> oncely_core::Result<oncely_core::Handled> {
    /// #         Ok(oncely_core::Handled::Applied)
    /// #     }
    /// # }
    /// let admin = oncely_ops::cli::Admin::new().handler_with("orders", |store| Orders {
    ///     table: store.tables().table("orders"), // {schema}.{prefix}orders
    /// });
    /// assert_eq!(admin.names(), ["orders"]);
    /// ```
    pub fn handler_with<F, H>(mut self, name: impl Into<String>, make: F) -> Self
    where
        F: Fn(&AnyStore) -> H + Send + Sync + 'static,
        H: Handler<AnyTx> + Clone,
    {
        self.handlers.insert(name.into(), Arc::new(Factory(make)));
        self
    }

    /// The registered handler names, sorted.
    ///
    /// ```
    /// assert_eq!(oncely_ops::cli::Admin::new().names(), Vec::<&str>::new());
    /// ```
    pub fn names(&self) -> Vec<&str> {
        self.handlers.keys().map(String::as_str).collect()
    }

    /// Parses the process's arguments, runs the command and returns the exit status: 0 done,
    /// 1 done but "not found" (e.g. `inspect` of an unknown id), 2 an error (printed).
    ///
    /// ```no_run
    /// # async fn f() -> std::process::ExitCode {
    /// oncely_ops::cli::Admin::new().run().await
    /// # }
    /// ```
    pub async fn run(self) -> ExitCode {
        exit_code(self.run_from(std::env::args_os()).await)
    }

    /// Parses `args` (the first is the program name), runs the command, and returns whether
    /// it found what it looked for. Help and usage errors exit the process, as clap does.
    ///
    /// ```no_run
    /// # async fn f() -> anyhow::Result<()> {
    /// let admin = oncely_ops::cli::Admin::new();
    /// admin.run_from(["my-admin", "stats", "--database", "sqlite:app.db", "--json"]).await?;
    /// # Ok(()) }
    /// ```
    pub async fn run_from<I, T>(&self, args: I) -> Result<bool>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let cli = <AdminCli as clap::Parser>::parse_from(args);
        self.execute(cli.command).await
    }

    /// Runs one parsed command (see [`AdminCommand`] for flattening it into your own CLI).
    ///
    /// ```no_run
    /// # async fn f(command: oncely_ops::cli::AdminCommand) -> anyhow::Result<()> {
    /// let found = oncely_ops::cli::Admin::new().execute(command).await?;
    /// # Ok(()) }
    /// ```
    pub async fn execute(&self, command: AdminCommand) -> Result<bool> {
        match command {
            AdminCommand::Migrate(args) => migrate::run(args).await.map(|()| true),
            AdminCommand::Prune(args) => prune::run(args).await,
            AdminCommand::Partition(args) => partition::run(args).await,
            AdminCommand::Stats(args) => stats::run(args).await,
            AdminCommand::Inspect(args) => inspect::run(args).await,
            AdminCommand::Dlq(args) => dlq::run(self, args).await,
        }
    }

    /// The handler `name` (or the only one registered, when `name` is `None`); an error
    /// listing the registered names otherwise.
    fn replayer(&self, name: Option<&str>) -> Result<&dyn Replayer> {
        let known = || match self.names() {
            names if names.is_empty() => {
                "no handler is registered in this admin tool: build your own with \
                 oncely::cli::Admin::new().handler(\"NAME\", YourHandler) (see docs/operations.md, \
                 \"Your own admin binary\")"
                    .to_owned()
            }
            names => format!("registered: {}", names.join(", ")),
        };
        match name {
            Some(name) => match self.handlers.get(name) {
                Some(r) => Ok(r.as_ref()),
                None => anyhow::bail!("no handler {name:?} to replay with; {}", known()),
            },
            None if self.handlers.len() == 1 => {
                Ok(self.handlers.values().next().expect("one handler").as_ref())
            }
            None if self.handlers.is_empty() => anyhow::bail!("{}", known()),
            None => anyhow::bail!("which handler? give --handler NAME; {}", known()),
        }
    }
}

/// The exit status for a command's result: 0 for `Ok(true)`, 1 for `Ok(false)` ("not
/// found"), 2 for an error, which is printed to stderr.
///
/// ```
/// use std::process::ExitCode;
/// assert_eq!(oncely_ops::cli::exit_code(Ok(true)), ExitCode::SUCCESS);
/// ```
pub fn exit_code(result: Result<bool>) -> ExitCode {
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {}", said_once(&e));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes, each said once: oncely's errors already print their source, so a
/// cause whose text is in what came before is left out (`{e:#}` would repeat it).
fn said_once(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if !text.contains(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
    }
    text
}

/// Table naming from `--schema` and `--prefix`.
fn tables(schema: Option<&str>, prefix: &str) -> Result<Tables> {
    let mut t = Tables::default().with_prefix(prefix)?;
    if let Some(s) = schema {
        t = t.with_schema(s)?;
    }
    Ok(t)
}

/// Where the oncely tables are, and how to print.
#[derive(Debug, Clone, clap::Args)]
pub struct DbArgs {
    /// Database URL (sqlite:…, postgres://…, mysql://…).
    #[arg(long, env = "ONCELY_DATABASE_URL")]
    pub database: String,
    /// Schema (PostgreSQL) or database (MySQL) of the tables.
    #[arg(long)]
    pub schema: Option<String>,
    /// Table-name prefix.
    #[arg(long, default_value = "oncely_")]
    pub prefix: String,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

impl DbArgs {
    /// Opens the store (no migration) and the operations over it.
    pub(crate) async fn open(&self) -> Result<(AnyStore, Ops)> {
        let options = ConnectOptions {
            tables: tables(self.schema.as_deref(), &self.prefix)?,
            max_connections: 4,
            ..ConnectOptions::default()
        };
        let store = AnyStore::connect_with(&self.database, &options).await?;
        let ops = Ops::from(&store);
        Ok((store, ops))
    }
}

/// clap value parser for durations such as `7d`, `36h`, `1h30m` (see
/// [`crate::retention::parse_duration`]).
pub(crate) fn duration(text: &str) -> std::result::Result<std::time::Duration, String> {
    crate::retention::parse_duration(text).map_err(|e| e.to_string())
}

/// Prints `value` as one line of JSON.
pub(crate) fn print_json<T: serde::Serialize>(value: &T) {
    println!(
        "{}",
        serde_json::to_string(value).expect("serializable output")
    );
}

/// Prints rows as an aligned text table.
pub(crate) fn print_table(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let text: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", text.join("  ").trim_end());
    };
    line(headers.iter().map(|h| h.to_uppercase()).collect());
    for row in rows {
        line(row.clone());
    }
}

/// A unix-ms time for humans, or `-`.
pub(crate) fn when(ms: Option<i64>) -> String {
    ms.map(format_utc_ms).unwrap_or_else(|| "-".to_owned())
}

/// Bytes for humans, or `-`.
pub(crate) fn bytes(n: Option<i64>) -> String {
    match n {
        None => "-".to_owned(),
        Some(b) if b < 1024 => format!("{b} B"),
        Some(b) if b < 1024 * 1024 => format!("{:.1} KiB", b as f64 / 1024.0),
        Some(b) => format!("{:.1} MiB", b as f64 / 1_048_576.0),
    }
}

/// Cuts `text` to `max` characters for a table cell.
pub(crate) fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// Prints one section of rows: `title: none` (or `absent` when the table does not exist:
/// `None`), else the title and the rows as a table.
pub(crate) fn print_section<T>(
    title: &str,
    rows: Option<&[T]>,
    absent: &str,
    headers: &[&str],
    cells: impl Fn(&T) -> Vec<String>,
) {
    match rows {
        None => println!("\n{title}: {absent}"),
        Some([]) => println!("\n{title}: none"),
        Some(rows) => {
            println!("\n{title}:");
            let rows: Vec<Vec<String>> = rows.iter().map(cells).collect();
            print_table(headers, &rows);
        }
    }
}

#[cfg(test)]
mod said_once_tests {
    use super::said_once;

    #[test]
    fn a_cause_already_in_the_text_is_not_repeated() {
        let inner = oncely_core::Error::config("pool_mode = statement");
        let outer = oncely_core::Error::new(inner.kind(), "opening the store").with_source(inner);
        let e = anyhow::Error::new(outer).context("demo");
        assert_eq!(
            said_once(&e),
            "demo: opening the store: pool_mode = statement"
        );
    }
}
