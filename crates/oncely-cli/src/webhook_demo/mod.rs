//! `oncely webhook-demo`: the webhook receiver (crates/oncely-webhook) under a sender that
//! signs like Standard Webhooks, Stripe and GitHub, retries on timeouts and 5xx on a
//! compressed schedule, sends concurrent copies of one event, changed bodies and forged
//! signatures, while the server process is SIGKILLed and restarted. The report reads the
//! database back: every accepted event applied once, forged ones absent, conflicts
//! dead-lettered.
//!
//! Processes: this one prepares the database, runs the sender and the killer, and checks;
//! the server is the same binary run as `oncely webhook-demo --serve ADDR` (`serve.rs`).

mod check;
mod events;
mod send;
mod serve;

use anyhow::{Context, Result, bail};
use events::Plan;
use oncely_sql::{AnyStore, ConnectOptions, Dialect, INBOX, MigrationSet, redact_url};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// Flags of `oncely webhook-demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct WebhookDemoArgs {
    /// Distinct events per source (Standard Webhooks, Stripe, GitHub).
    #[arg(long, default_value_t = 200)]
    pub events: usize,
    /// Times the server process is SIGKILLed (and restarted) while events are sent.
    #[arg(long, default_value_t = 5)]
    pub kills: usize,
    /// Events in flight at once.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Seed for every random choice (same seed, same events).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Database URL (default: a temporary SQLite file). postgres:// and mysql:// work too.
    #[arg(long, env = "ONCELY_WEBHOOK_DEMO_STORE")]
    pub store: Option<String>,
    /// Schema (PostgreSQL) or database (MySQL) the demo resets and uses.
    #[arg(long, default_value = "oncely_webhook_demo")]
    pub schema: String,
    /// The GitHub source's mode: `inline` (applied in the request) or `deferred` (queued,
    /// answered 202, drained by a consumer; PostgreSQL only). Default: deferred on
    /// PostgreSQL, inline elsewhere.
    #[arg(long, value_enum)]
    pub github_mode: Option<Mode>,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// TESTING ONLY: the server skips the inbox (verify, apply, 200), to show the checker
    /// catches the double effects of retries.
    #[arg(long, hide = true)]
    pub unsafe_without_inbox: bool,
    /// INTERNAL: serve the receiver on this address (the process the demo kills).
    #[arg(long, hide = true)]
    pub serve: Option<String>,
}

/// How a source answers: after the effect's commit, or once the request is queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Verify, claim and apply in the request; 200 after the commit.
    Inline,
    /// Verify and queue in the request (202); a consumer applies the queue.
    Deferred,
}

/// The migration sets the demo applies: the inbox, and the queue in deferred mode.
fn migration_sets(mode: Mode) -> Vec<&'static MigrationSet> {
    match mode {
        Mode::Inline => vec![&INBOX],
        Mode::Deferred => vec![&INBOX, &oncely_sql_queue::MIGRATIONS],
    }
}

/// Runs the demo (or, with `--serve`, the server it kills); returns whether every check held.
pub async fn run(args: WebhookDemoArgs) -> Result<bool> {
    let temp = tempfile::tempdir().context("creating a temporary directory")?;
    let url = args
        .store
        .clone()
        .unwrap_or_else(|| format!("sqlite:{}", temp.path().join("webhook-demo.db").display()));
    let dialect = Dialect::from_url(&url)?;
    let mode = args.github_mode.unwrap_or(match dialect {
        Dialect::Postgres => Mode::Deferred,
        _ => Mode::Inline,
    });
    if mode == Mode::Deferred && dialect != Dialect::Postgres {
        bail!("--github-mode deferred needs PostgreSQL (the queue table is oncely-sql-queue's)");
    }
    let pool = ConnectOptions::default().max_connections;
    let store = crate::demo::open_in_schema(&url, &args.schema, pool).await?;
    let tables = crate::demo::credit_tables(&store);
    if let Some(addr) = &args.serve {
        let unsafe_mode = args.unsafe_without_inbox;
        return serve::run(addr, store, tables, mode, unsafe_mode)
            .await
            .map(|()| true);
    }

    crate::demo::reset_with(&store, &tables, &migration_sets(mode)).await?;
    let plan = Plan::generate(args.events, args.seed);
    if !args.json {
        println!(
            "oncely webhook-demo: {} events from 3 senders (Standard Webhooks, Stripe, GitHub {}), {} server kills, store {}",
            plan.events.len(),
            if mode == Mode::Deferred {
                "deferred"
            } else {
                "inline"
            },
            args.kills,
            redact_url(&url)
        );
    }
    let mut server = Server::start(&url, &args, mode, temp.path().join("server.log")).await?;
    let started = Instant::now();
    let sender = Arc::new(send::Sender::new(&server.base_url()));
    let sending = tokio::spawn({
        let (sender, plan) = (sender.clone(), plan.clone());
        async move { sender.send_all(&plan, args.concurrency).await }
    });
    // Kill i lands when the sender has finished (i + 1) / (kills + 1) of the events.
    let mut kills = 0;
    for i in 0..args.kills {
        let due = plan.events.len() * (i + 1) / (args.kills + 1);
        while sender.finished() < due && !sending.is_finished() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        if sending.is_finished() {
            break;
        }
        server.kill_and_restart().await?;
        kills += 1;
    }
    let outcomes = sending.await.context("the sender panicked")?;
    let sent_in = started.elapsed();
    if mode == Mode::Deferred {
        drain(&store).await?;
    }
    server.kill().await;
    let report = check::check(&store, &tables, &plan, &outcomes, sender.counts(), kills).await?;
    let report = check::Report {
        mode: Some(mode),
        seconds: sent_in.as_secs_f64(),
        ..report
    };
    report.print(args.json)?;
    if !report.holds() {
        eprintln!("the server's log: {}", server.log.display());
        let _ = temp.keep();
    }
    Ok(report.holds())
}

/// Waits until the deferred source's queue is empty (every queued request applied or
/// dead-lettered); a queue that stops shrinking for a minute is an error.
async fn drain(store: &AnyStore) -> Result<()> {
    let AnyStore::Postgres(pg) = store else {
        bail!("the deferred mode runs on PostgreSQL");
    };
    let queue = oncely_sql_queue::SqlQueue::of(pg);
    let (mut last, mut since) = (i64::MAX, Instant::now());
    loop {
        let left = queue.len().await?;
        if left == 0 {
            return Ok(());
        }
        if left < last {
            (last, since) = (left, Instant::now());
        } else if since.elapsed() > Duration::from_secs(60) {
            bail!("the deferred queue holds {left} rows and has not shrunk for 60 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The server process: this binary with `--serve`, on a fixed loopback port so a restart
/// answers where the sender keeps sending.
struct Server {
    command: Command,
    addr: String,
    child: Child,
    log: PathBuf,
}

impl Server {
    async fn start(url: &str, args: &WebhookDemoArgs, mode: Mode, log: PathBuf) -> Result<Self> {
        let addr = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").context("a free port")?;
            probe.local_addr()?.to_string()
        };
        let exe = std::env::current_exe().context("the oncely binary")?;
        let mut command = Command::new(exe);
        command
            .args(["webhook-demo", "--serve", &addr, "--store", url])
            .args(["--schema", &args.schema, "--github-mode"])
            .arg(if mode == Mode::Deferred {
                "deferred"
            } else {
                "inline"
            })
            .args(
                args.unsafe_without_inbox
                    .then_some("--unsafe-without-inbox"),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true);
        let child = Self::spawn(&mut command, &log)?;
        let mut server = Self {
            command,
            addr,
            child,
            log,
        };
        server.wait_ready().await?;
        Ok(server)
    }

    fn spawn(command: &mut Command, log: &PathBuf) -> Result<Child> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .context("the server's log file")?;
        command.stderr(log);
        command.spawn().context("starting the server process")
    }

    fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Polls `GET /ready` until it answers 200 (30 s at most).
    async fn wait_ready(&mut self) -> Result<()> {
        let client = reqwest::Client::new();
        let ready = format!("{}/ready", self.base_url());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = client.get(&ready).send().await
                && r.status().is_success()
            {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                bail!("the server process exited ({status}) before it was ready:\n{log}");
            }
            if Instant::now() > deadline {
                bail!("the server did not answer on {} within 30 s", self.addr);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL (no shutdown of any kind: open transactions die with the process), then a
    /// new process on the same address.
    async fn kill_and_restart(&mut self) -> Result<()> {
        self.kill().await;
        self.child = Self::spawn(&mut self.command, &self.log)?;
        self.wait_ready().await
    }

    async fn kill(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}
