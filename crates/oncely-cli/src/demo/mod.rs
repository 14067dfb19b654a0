//! `oncely demo`: the credits ledger under duplicates, conflicts, reordering and crashes,
//! checked independently against the database.

mod broker;
mod check;
mod consume_only;
mod publish;
#[cfg(feature = "redis")]
mod redis_target;
mod report;

use anyhow::{Context, Result};
use check::check;
use indicatif::{ProgressBar, ProgressStyle};
use oncely::brokers::{connect_source, publish};
use oncely_core::{Consumer, ConsumerName, RetryPolicy, Source, StatsSnapshot, StopWhenIdle};
use oncely_sql::AnyStore;
use oncely_sql::migrate::reset_sql;
use oncely_sql::{ConnectOptions, Dialect, INBOX, MigrationSet, SqlTx, Tables, redact_url};
use oncely_testkit::chaos::{
    AckEarly, CrashPlan, CrashingHandler, CrashingSource, CrashingStore, Step,
};
use oncely_testkit::credits::{CreditTables, Credits};
use oncely_testkit::{FaultySource, SourceFaults};
use publish::{Mix, generate};
use report::{Report, SourceCounts};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::debug;

/// Flags of `oncely demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Distinct messages to publish.
    #[arg(long, default_value_t = 10_000)]
    pub messages: usize,
    /// Seed for every random choice (same seed, same stream and faults).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Groups in flight (lanes of accounts); with `--group-commit 1`, deliveries processed at once.
    #[arg(long, default_value_t = oncely_core::DEFAULT_CONCURRENCY)]
    pub workers: usize,
    /// Group commit: up to this many ready deliveries share one transaction (the library's
    /// default; 1: off, every delivery in its own).
    #[arg(long, default_value_t = oncely_core::DEFAULT_GROUP_COMMIT)]
    pub group_commit: usize,
    /// Share of messages delivered twice by the broker.
    #[arg(long, default_value_t = 0.2)]
    pub duplicate_rate: f64,
    /// Share of ids published again with a different amount (a conflict).
    #[arg(long, default_value_t = 0.05)]
    pub conflict_rate: f64,
    /// Reordering: each delivery is taken at random among this many ready messages.
    #[arg(long, default_value_t = 32)]
    pub reorder_window: usize,
    /// Probability of a consumer crash after each step of the contract (0: the consumer runs
    /// without the crash wrappers, as an application's does).
    #[arg(long, default_value_t = 0.01)]
    pub crash_rate: f64,
    /// Probability that an ack is lost (the message is redelivered).
    #[arg(long, default_value_t = 0.02)]
    pub lost_ack_rate: f64,
    /// Share of messages without a usable id.
    #[arg(long, default_value_t = 0.001)]
    pub bad_id_rate: f64,
    /// Share of messages whose payload cannot be decoded.
    #[arg(long, default_value_t = 0.001)]
    pub undecodable_rate: f64,
    /// Accounts credited.
    #[arg(long, default_value_t = 100)]
    pub accounts: usize,
    /// Database URL (default: a temporary SQLite file). postgres:// and mysql:// work too.
    #[arg(long, env = "ONCELY_DEMO_STORE")]
    pub store: Option<String>,
    /// Schema (PostgreSQL) or database (MySQL) the demo resets and uses.
    #[arg(long, default_value = "oncely_demo")]
    pub schema: String,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// TESTING ONLY: ack before commit, breaking the contract, to show the checker catches it.
    #[arg(long, hide = true)]
    pub unsafe_ack_before_commit: bool,
    /// Broker URL (amqp://, nats://, redis://, mqtt://, kafka://) to publish and consume through;
    /// default: the in-process broker. Duplicates are then published by the demo itself.
    #[arg(long, env = "ONCELY_DEMO_SOURCE")]
    pub source: Option<String>,
    /// Only consume from --source into --store until idle, then report what the database
    /// holds (for producers written elsewhere; see docs/wire-format.md). Keeps existing data.
    #[arg(long, requires = "source")]
    pub consume_only: bool,
    /// With a real broker: stop after this many seconds without a delivery.
    #[arg(long, default_value_t = 5)]
    pub idle_exit: u64,
    #[command(flatten)]
    pub metrics: oncely::cli::metrics::MetricsArgs,
}

/// Runs the demo; returns whether every invariant held.
pub async fn run(args: DemoArgs) -> Result<bool> {
    let metrics = oncely::cli::metrics::serve(&args.metrics)?;
    let temp = tempfile::tempdir().context("creating a temporary directory")?;
    let url = args
        .store
        .clone()
        .unwrap_or_else(|| format!("sqlite:{}", temp.path().join("oncely-demo.db").display()));
    let target = Target::open(&url, &args).await?;
    if args.consume_only {
        let Some((store, credit_tables)) = target.sql() else {
            anyhow::bail!("--consume-only reads SQL stores only");
        };
        let ok = consume_only::run(&args, store, credit_tables).await?;
        metrics.hold().await;
        return Ok(ok);
    }
    target.reset().await?;

    let run = match &args.source {
        None => String::new(),
        Some(_) => format!(
            "-r{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_secs()
        ),
    };
    let published = generate(
        args.seed,
        &run,
        Mix {
            messages: args.messages,
            accounts: args.accounts,
            conflict_rate: args.conflict_rate,
            bad_id_rate: args.bad_id_rate,
            undecodable_rate: args.undecodable_rate,
        },
    );
    let name = ConsumerName::new("demo")?;
    let (stats, crashes, source_stats, elapsed, broker_dedups) = match &args.source {
        None => {
            let source = FaultySource::new(SourceFaults {
                seed: args.seed,
                duplicate_rate: args.duplicate_rate,
                reorder_window: args.reorder_window,
                lost_ack_rate: args.lost_ack_rate,
            });
            for m in &published.messages {
                source.publish(m.clone());
            }
            source.close();
            // The broker's count includes the copies the faults injected.
            let copies = source.stats().published;
            let started = Instant::now();
            let (stats, crashes) = target.consume(&args, &name, source.clone(), copies).await?;
            let faults = source.fault_stats();
            let source_stats = SourceCounts {
                deliveries: source.stats().deliveries,
                duplicates_injected: faults.duplicates_injected,
                lost_acks: faults.lost_acks,
            };
            (stats, crashes, source_stats, started.elapsed(), false)
        }
        Some(broker) => {
            let url = broker::consume_url(broker, &args);
            if broker::is_kafka(&url) {
                // Creates the topic, so the consumer does not subscribe to a missing one
                // (librdkafka would only notice it at its next metadata refresh).
                publish(&url, &[]).await?;
            }
            let mut source = connect_source(&url, name.as_str()).await?;
            let broker_dedups = broker::drops_republished_ids(&url);
            let discarded = broker::drain(&mut source, &url).await?;
            if discarded > 0 && !args.json {
                eprintln!("discarded {discarded} leftover message(s) from earlier runs");
            }
            let copies = broker::with_duplicates(&published.messages, &args);
            let publishing = broker::start_publishing(broker, &source, &copies).await?;
            let started = Instant::now();
            let idle = StopWhenIdle::new(source, Duration::from_secs(args.idle_exit));
            let (stats, crashes) = target
                .consume(&args, &name, idle, copies.len() as u64)
                .await?;
            let elapsed = started.elapsed();
            publishing.finish().await?;
            let source_stats = SourceCounts {
                deliveries: stats.received,
                duplicates_injected: (copies.len() - published.messages.len()) as u64,
                lost_acks: 0,
            };
            (stats, crashes, source_stats, elapsed, broker_dedups)
        }
    };

    let mut verdict = target.check(&name, &published).await?;
    if broker_dedups {
        // The broker (JetStream) drops a second publish of an id inside its dedup window,
        // so a conflicting copy never reaches the consumer: the broker resolved it.
        verdict.broker_dropped_conflicts = verdict.conflicts_injected - verdict.conflicts_caught;
    }
    let shown = args
        .source
        .as_deref()
        .map_or("memory".to_owned(), redact_url);
    let mut report = Report::new(
        &args,
        format!("{} via {shown}", redact_url(&url)),
        &published,
        &source_stats,
        &stats,
        &verdict,
        elapsed,
    );
    report.crashes = crashes.total;
    report.crashes_at_receipt = crashes.at_receipt;
    report.print(args.json);
    metrics.hold().await;
    Ok(verdict.holds())
}

/// The store the demo runs on: a SQL database, or Redis (balances and ledger in Redis).
enum Target {
    Sql(AnyStore, CreditTables),
    #[cfg(feature = "redis")]
    Redis(oncely_redis::RedisStore),
}

impl Target {
    /// The SQL store and its demo tables; `None` for the Redis store.
    fn sql(&self) -> Option<(&AnyStore, &CreditTables)> {
        match self {
            Target::Sql(store, tables) => Some((store, tables)),
            #[cfg(feature = "redis")]
            Target::Redis(_) => None,
        }
    }

    async fn open(url: &str, args: &DemoArgs) -> Result<Self> {
        if url.starts_with("redis://") || url.starts_with("rediss://") {
            #[cfg(feature = "redis")]
            return Ok(Self::Redis(redis_target::open(url, &args.schema).await?));
            #[cfg(not(feature = "redis"))]
            anyhow::bail!(
                "--store redis://… needs the binary built with --features redis (or brokers)"
            );
        }
        let (store, tables) = open_store(url, args).await?;
        Ok(Self::Sql(store, tables))
    }

    async fn reset(&self) -> Result<()> {
        match self {
            Self::Sql(store, tables) => reset(store, tables).await,
            #[cfg(feature = "redis")]
            Self::Redis(store) => Ok(oncely_testkit::credits::RedisCredits::reset(store).await?),
        }
    }

    async fn consume<Src: Source>(
        &self,
        args: &DemoArgs,
        name: &ConsumerName,
        source: Src,
        copies: u64,
    ) -> Result<(StatsSnapshot, Crashes)> {
        match self {
            Self::Sql(store, tables) => {
                let handler = Credits::new(tables.clone());
                consume_with(args, store, handler, name, source, copies).await
            }
            #[cfg(feature = "redis")]
            Self::Redis(store) => {
                consume_with(
                    args,
                    store,
                    oncely_testkit::credits::RedisCredits,
                    name,
                    source,
                    copies,
                )
                .await
            }
        }
    }

    async fn check(
        &self,
        name: &ConsumerName,
        published: &publish::Published,
    ) -> Result<check::Verdict> {
        match self {
            Self::Sql(store, tables) => check(store, tables, name, published).await,
            #[cfg(feature = "redis")]
            Self::Redis(store) => {
                use oncely_core::Inspect;
                let readings = redis_target::read(store, name.as_str()).await?;
                let letters = store.dead_letters(Some(name)).await?;
                Ok(check::judge(&readings, &letters, published))
            }
        }
    }
}

async fn open_store(url: &str, args: &DemoArgs) -> Result<(AnyStore, CreditTables)> {
    let connections = (args.workers as u32 + 4).max(8);
    let store = open_in_schema(url, &args.schema, connections).await?;
    let tables = credit_tables(&store);
    Ok((store, tables))
}

/// A demo's store at `url`, its tables in `schema` where the database has schemas
/// (PostgreSQL, MySQL), with a pool of `max_connections`.
pub(crate) async fn open_in_schema(
    url: &str,
    schema: &str,
    max_connections: u32,
) -> Result<AnyStore> {
    let mut tables = Tables::default();
    if Dialect::from_url(url)?.has_schemas() {
        tables = tables.with_schema(schema)?;
    }
    let options = ConnectOptions {
        tables,
        max_connections,
        ..ConnectOptions::default()
    };
    Ok(AnyStore::connect_with(url, &options).await?)
}

/// The crashes a run's plan injected.
struct Crashes {
    total: u64,
    /// After receipt: the delivery was dropped before the runtime saw it (no outcome).
    at_receipt: u64,
}

impl Crashes {
    fn of(plan: &CrashPlan) -> Self {
        Self {
            total: plan.fired(),
            at_receipt: plan.fired_at(Step::Received),
        }
    }
}

async fn consume_with<S, H, Src>(
    args: &DemoArgs,
    store: &S,
    handler: H,
    name: &ConsumerName,
    source: Src,
    copies: u64,
) -> Result<(StatsSnapshot, Crashes)>
where
    S: oncely_core::Store + Clone,
    H: oncely_core::Handler<S::Tx>,
    Src: Source,
{
    let progress = progress_bar(copies, args.json);
    // Consumer crashes come from oncely-testkit's chaos wrappers around the store and source.
    // Without crashes (`--crash-rate 0`) the consumer runs on the plain store, source and
    // handler, as an application does: the demo's rate is then the library's.
    let plan = CrashPlan::new(args.seed, args.crash_rate);
    let stats = if args.crash_rate > 0.0 {
        let source = CrashingSource::new(source, plan.clone());
        let store = CrashingStore::new(store.clone(), plan.clone());
        let consumer = demo_consumer(args, name, store, CrashingHandler(handler));
        consume_acked(args, consumer, source, &progress).await?
    } else {
        let consumer = demo_consumer(args, name, store.clone(), handler);
        consume_acked(args, consumer, source, &progress).await?
    };
    progress.finish_and_clear();
    Ok((stats, Crashes::of(&plan)))
}

/// The demo's consumer: its flags' lanes and group commit, 5 attempts 5 ms apart.
fn demo_consumer<S, H>(args: &DemoArgs, name: &ConsumerName, store: S, handler: H) -> Consumer<S, H>
where
    S: oncely_core::Store,
    H: oncely_core::Handler<S::Tx>,
{
    Consumer::new(name.clone(), store, handler)
        .concurrency(args.workers)
        .group_commit(args.group_commit)
        .retry(
            RetryPolicy::default()
                .max_attempts(5)
                .base_delay(Duration::from_millis(5)),
        )
}

/// Runs `consumer`, acking after the commit (or, with `--unsafe-ack-before-commit`, before).
async fn consume_acked<S, H, Src>(
    args: &DemoArgs,
    consumer: Consumer<S, H>,
    source: Src,
    progress: &ProgressBar,
) -> Result<StatsSnapshot>
where
    S: oncely_core::Store,
    H: oncely_core::Handler<S::Tx>,
    Src: Source,
{
    if args.unsafe_ack_before_commit {
        consume(consumer, AckEarly(source), progress).await
    } else {
        consume(consumer, source, progress).await
    }
}

async fn consume<S, H, Src>(
    consumer: Consumer<S, H>,
    source: Src,
    progress: &ProgressBar,
) -> Result<StatsSnapshot>
where
    S: oncely_core::Store,
    H: oncely_core::Handler<S::Tx>,
    Src: Source,
{
    let ticker = {
        let (stats, progress) = (consumer.stats(), progress.clone());
        tokio::spawn(async move {
            loop {
                let s = stats.snapshot();
                progress.set_position(s.applied + s.duplicates + s.dead_lettered + s.stale);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let stats = consumer.run(source, CancellationToken::new()).await;
    ticker.abort();
    Ok(stats?)
}

fn progress_bar(len: u64, hidden: bool) -> ProgressBar {
    if hidden {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} consuming [{bar:40}] {pos}/{len} acked  {per_sec}  eta {eta}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar
}

/// The migration sets the demo applies ([`create_tables`]) and its reset undoes.
const DEMO_SETS: &[&MigrationSet] = &[&INBOX];

/// Gives the demo a clean slate: its schema (PostgreSQL/MySQL), or on SQLite its own tables
/// and those of [`DEMO_SETS`] as the migration registry knows them, with their ledger rows (so
/// the next migration recreates them; a ledger left behind made a second run skip them).
async fn reset(store: &AnyStore, tables: &CreditTables) -> Result<()> {
    reset_with(store, tables, DEMO_SETS).await
}

/// [`reset`] for a demo whose store has the migration `sets` (the webhook demo adds the queue).
pub(crate) async fn reset_with(
    store: &AnyStore,
    tables: &CreditTables,
    sets: &[&MigrationSet],
) -> Result<()> {
    let schema = store.tables().schema();
    let drops: Vec<String> = match schema.and_then(|s| store.dialect().drop_schema_sql(s)) {
        Some(drop) => vec![drop],
        None => tables
            .names()
            .iter()
            .map(|t| format!("DROP TABLE IF EXISTS {t}"))
            .chain(reset_sql(store.dialect(), store.tables(), sets)?)
            .collect(),
    };
    debug!(statements = ?drops, "resetting the demo store");
    for sql in drops {
        store
            .pool()
            .script(&sql)
            .await
            .context("resetting the demo schema")?;
    }
    create_tables_with(store, tables, sets).await
}

/// The demo's credits tables, `demo_accounts` and `demo_ledger`, in `store`'s schema.
pub(crate) fn credit_tables(store: &AnyStore) -> CreditTables {
    CreditTables::new(store.dialect(), store.tables().schema(), "demo_")
}

/// Migrates and creates the demo tables if missing (keeps existing data).
async fn create_tables(store: &AnyStore, tables: &CreditTables) -> Result<()> {
    create_tables_with(store, tables, DEMO_SETS).await
}

/// [`create_tables`] with the migration `sets`.
async fn create_tables_with(
    store: &AnyStore,
    tables: &CreditTables,
    sets: &[&MigrationSet],
) -> Result<()> {
    let ran = store.migrate_with(sets).await?;
    debug!(migrations = ran, "demo store migrated");
    tables
        .create(store)
        .await
        .context("creating the demo tables")
}
