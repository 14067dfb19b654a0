//! `oncely bench`: the flags, the matrix of cells, the databases, and the run.

use crate::bed::{Bed, Ops};
use crate::broker::Broker;
use crate::cells::{Cell, Mode, Spec, run_cell};
use crate::report::{Machine, Report};
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use oncely_core::DEFAULT_CONCURRENCY;
use oncely_sql::migrate::MigrateDb;
use oncely_sql::sqlx::{self, AssertSqlSafe, MySql, Postgres, Sqlite};
use oncely_sql::{
    ConnectOptions, Durability, MySqlStore, PgStore, SqlStore, SqliteStore, Tables, redact_url,
};
use std::path::PathBuf;

/// Flags of `oncely bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// PostgreSQL URL (a throwaway schema is created in it and dropped afterwards).
    #[arg(
        long,
        env = "ONCELY_BENCH_POSTGRES",
        default_value = "postgres://postgres@127.0.0.1/test"
    )]
    pub postgres: String,
    /// Skip PostgreSQL.
    #[arg(long)]
    pub no_postgres: bool,
    /// MariaDB / MySQL URL for the group-commit cells (a throwaway database is created in
    /// it and dropped afterwards).
    #[arg(
        long,
        env = "ONCELY_BENCH_MARIADB",
        default_value = "mysql://root@127.0.0.1:3306/test"
    )]
    pub mariadb: String,
    /// Skip MariaDB.
    #[arg(long)]
    pub no_mariadb: bool,
    /// Skip SQLite.
    #[arg(long)]
    pub no_sqlite: bool,
    /// RabbitMQ URL for the cells through a broker (a fresh queue per cell, deleted after).
    #[arg(
        long,
        env = "ONCELY_BENCH_AMQP",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    pub amqp: String,
    /// NATS URL for the cells through JetStream (a fresh stream per cell, deleted after).
    #[arg(
        long,
        env = "ONCELY_BENCH_NATS",
        default_value = "nats://127.0.0.1:4222"
    )]
    pub nats: String,
    /// Redis URL for the cells through Redis Streams (a fresh stream per cell, deleted after).
    #[arg(
        long,
        env = "ONCELY_BENCH_REDIS",
        default_value = "redis://127.0.0.1:6379/"
    )]
    pub redis: String,
    /// MQTT URL (Mosquitto) for the cells through MQTT (a fresh topic and sessions per cell).
    #[arg(
        long,
        env = "ONCELY_BENCH_MQTT",
        default_value = "mqtt://127.0.0.1:1883"
    )]
    pub mqtt: String,
    /// Kafka bootstrap address for the cells through Kafka (a fresh topic and consumer
    /// groups per cell, the topic deleted after; `bash scripts/kafka-broker.sh start`).
    #[arg(long, env = "ONCELY_BENCH_KAFKA", default_value = "127.0.0.1:9092")]
    pub kafka: String,
    /// Skip the cells through a broker.
    #[arg(long)]
    pub no_brokers: bool,
    /// Run only the cells through a broker (each with oncely in process beside it).
    #[arg(long, conflicts_with = "no_brokers")]
    pub brokers_only: bool,
    /// Only the cells through these brokers (`amqp,nats,redis,mqtt,kafka`; default: all).
    #[arg(long, value_delimiter = ',', value_enum)]
    pub brokers: Option<Vec<Broker>>,
    /// Skip the Redis store cells (the peer's workload at each durability setting).
    #[arg(long)]
    pub no_redis_store: bool,
    /// Run only the Redis store cells (the peer's workload at each durability setting).
    #[arg(long, conflicts_with = "no_redis_store")]
    pub redis_store_only: bool,
    /// Small CI smoke run (under two minutes): fewer messages, concurrency 1 and 16.
    #[arg(long)]
    pub quick: bool,
    /// The long-horizon mode instead of the matrix: the inbox prefilled to each of
    /// `--horizon-rows` (ids of `--horizon-ids`, spread over 7 days), then oncely with group
    /// commit at its defaults; msgs/s, WAL per message and bytes per row beside the empty
    /// inbox, per layout (docs/performance.md). `--messages` sets the messages per cell
    /// (default 100,000; `--quick`: 3,000).
    #[arg(long)]
    pub horizon: bool,
    /// Inbox sizes of the long-horizon mode (rows prefilled before each measured run).
    #[arg(long, value_delimiter = ',', default_values_t = [0u64, 1_000_000, 10_000_000])]
    pub horizon_rows: Vec<u64>,
    /// How the long-horizon mode's producers make ids.
    #[arg(long, value_enum, default_value = "uuid4")]
    pub horizon_ids: crate::horizon::IdKind,
    /// Cells per layout and inbox size in the long-horizon mode. On PostgreSQL the two layouts
    /// take turns at each size (plain, partitioned, then partitioned, plain, …), each cell after
    /// its own prefill, and the partitioned layout's speed is also given as the median of the
    /// turns' ratios: one cell moves ±15 % or more from run to run on a small VM.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub horizon_repeat: u32,
    /// The long-horizon mode on servers set as `oncely stats` advises for a large inbox:
    /// PostgreSQL `wal_compression = zstd`, `max_wal_size = 8GB`; MariaDB's buffer pool 4 GB.
    /// Set server-wide for the store's cells and restored after them (docs/performance.md).
    /// `shared_buffers` above the inbox is advised too but takes a restart: set it by hand.
    #[arg(long, requires = "horizon")]
    pub horizon_advised: bool,
    /// The soak mode (`--soak` and its `--soak-*` flags).
    #[command(flatten)]
    pub soak: crate::soak::SoakArgs,
    /// Print one JSON object on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Folder for bench.json, bench.csv and the SVG charts.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// Consumer counts of the concurrency sweep.
    #[arg(long, value_delimiter = ',')]
    pub concurrency: Option<Vec<usize>>,
    /// Batch sizes of the batch sweep.
    #[arg(long, value_delimiter = ',')]
    pub batches: Option<Vec<usize>>,
    /// Messages per per-message cell (batch cells use more, see docs/perf/history.md).
    #[arg(long)]
    pub messages: Option<usize>,
    /// Rounds: each group of compared cells runs this many times back to back; a cell's
    /// figure is its total messages over its total time.
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Rounds of the groups whose ratios are PostgreSQL's in-process target keys (plain vs
    /// oncely at 16 consumers, latency with and without group commit): more, shorter
    /// samples side by side, every other round in reverse order; each key is the median of
    /// the rounds' ratios. Default 7 (`--quick`: 1).
    #[arg(long)]
    pub paired_rounds: Option<usize>,
    /// Rounds of each broker's cells (oncely in process, the bare consumer, oncely through
    /// the broker, back to back, every other round in reverse order); the
    /// `*_vs_bare_consumer` keys are the median of the rounds' ratios. Default 5 (`--quick`: 1).
    #[arg(long)]
    pub broker_rounds: Option<usize>,
    /// Most connections of the PostgreSQL pool (default: the largest concurrency + 2).
    #[arg(long)]
    pub pool: Option<u32>,
    /// Most connections of the SQLite pools. SQLite has one writer at a time: consumers
    /// beyond it queue on the pool (FIFO) instead of on SQLite's busy handler, which sleeps.
    #[arg(long, default_value_t = 1)]
    pub sqlite_pool: u32,
}

/// Most deliveries per transaction in the group-commit cells: the library's default.
pub(crate) const GROUP: usize = oncely_core::DEFAULT_GROUP_COMMIT;

/// Messages per round of the user's path (`amqp_demo`, `amqp_existing_bare`) without
/// `--messages` or `--quick`: the backlog of the issue that asked for it. The demo's wall time
/// includes its start-up, so a small backlog would price the start-up, not the consuming.
pub(crate) const DEMO_MESSAGES: usize = 20_000;

/// The cells of the per-message API with group commit, on every database (MariaDB runs only
/// these): group commit vs the plain consumer (and per-message oncely) at 1 and 16 consumers,
/// redelivered duplicates vs primary-key lookups, and latency at one consumer.
pub(crate) fn group_matrix(args: &BenchArgs) -> Vec<Vec<Spec>> {
    let quick = args.quick;
    let base = args.messages.unwrap_or(if quick { 150 } else { 500 });
    let spec = |mode, batch, concurrency, messages| Spec {
        mode,
        batch,
        concurrency,
        messages,
    };
    let many = base * 6;
    // Latency is measured idle: a message every 20 ms, slower than any per-message cell
    // (per round: the latency cells run `--paired-rounds` times).
    let paced = if quick { 60 } else { 100 };
    let mut groups = vec![
        vec![
            spec(Mode::Plain, 1, 16, many),
            spec(Mode::Oncely, 1, 16, many),
            spec(Mode::Group, GROUP, 16, many),
            // The defaults, side by side with the plain consumer they are compared to.
            spec(Mode::Group, GROUP, DEFAULT_CONCURRENCY, many),
        ],
        vec![
            spec(Mode::Plain, 1, 1, base),
            spec(Mode::Group, GROUP, 1, base),
        ],
        // How group commit scales with groups in flight (lanes of accounts).
        vec![spec(Mode::Group, GROUP, 2, many)],
    ];
    // The same through each real broker, next to a bare consumer of the same client
    // library and to oncely in process, all three in every round.
    groups.extend(Broker::ALL.into_iter().filter(|b| b.enabled()).map(|b| {
        let n = b.cell_messages(many);
        vec![
            spec(Mode::InProcess(b), GROUP, DEFAULT_CONCURRENCY, n),
            spec(Mode::Bare(b), 1, 1, n),
            spec(Mode::Through(b), GROUP, DEFAULT_CONCURRENCY, n),
        ]
    }));
    // The user's path through RabbitMQ (PostgreSQL only, see `for_backend`): the oncely
    // binary's demo on a full quorum queue, beside a bare lapin consumer of an equally full one.
    if Broker::Amqp.enabled() && crate::broker::demo::enabled() {
        let n = if args.messages.is_some() || quick {
            many
        } else {
            DEMO_MESSAGES
        };
        groups.push(vec![
            spec(Mode::AmqpExistingBare, 1, 1, n),
            spec(Mode::AmqpDemo, GROUP, DEFAULT_CONCURRENCY, n),
        ]);
    }
    groups.extend([
        vec![
            spec(Mode::GroupDuplicate, GROUP, 1, many),
            spec(Mode::PkLookup, GROUP, 1, many),
        ],
        vec![
            spec(Mode::Latency, 1, 1, paced),
            spec(Mode::Latency, GROUP, 1, paced),
        ],
    ]);
    groups
}

/// The cells to run on one database, in groups: the cells of a group are compared by a ratio,
/// so each round runs them back to back (the machine's load drifts; side by side it hits
/// every cell of a group alike).
pub(crate) fn matrix(args: &BenchArgs) -> Vec<Vec<Spec>> {
    if args.brokers_only {
        return group_matrix(args)
            .into_iter()
            .filter(|g| is_broker_group(g))
            .collect();
    }
    let quick = args.quick;
    let conc = args.concurrency.clone().unwrap_or_else(|| {
        if quick {
            vec![1, 16]
        } else {
            vec![1, 4, 16, 32]
        }
    });
    let batches = args.batches.clone().unwrap_or_else(|| vec![10, 100, 1000]);
    let base = args.messages.unwrap_or(if quick { 150 } else { 500 });
    // More consumers go faster: give them more messages so each cell lasts long enough.
    let per_message = |c: usize| base * (1 + c / 8);
    let batched = |b: usize| {
        let n = if quick { b * 2 } else { b * 20 };
        // At least four times the per-message cells' count, which `--messages` may raise past
        // the usual cap (a `clamp` with min > max panicked at `--messages 30000`).
        let cap: usize = if quick { 2000 } else { 20_000 };
        n.clamp(base * 4, cap.max(base * 4))
    };
    let spec = |mode, batch, concurrency, messages| Spec {
        mode,
        batch,
        concurrency,
        messages,
    };
    let mut groups = Vec::new();
    for &c in &conc {
        groups.push(
            [Mode::Plain, Mode::Oncely, Mode::Raw]
                .map(|mode| spec(mode, 1, c, per_message(c)))
                .to_vec(),
        );
    }
    for &b in &batches {
        groups.push(vec![
            spec(Mode::Oncely, b, 1, batched(b)),
            spec(Mode::Raw, b, 1, batched(b)),
        ]);
    }
    let mut dups = vec![
        spec(Mode::Duplicate, 1, 1, base),
        spec(Mode::DuplicateChecked, 1, 1, base),
    ];
    if batches.contains(&100) {
        dups.push(spec(Mode::Duplicate, 100, 1, batched(100)));
    }
    groups.push(dups);
    groups.extend(group_matrix(args));
    groups
}

/// The groups that run on `backend`: without the PostgreSQL-only cells elsewhere.
pub(crate) fn for_backend(backend: &str, groups: &[Vec<Spec>]) -> Vec<Vec<Spec>> {
    groups
        .iter()
        .map(|g| {
            g.iter()
                .filter(|s| backend == "postgres" || !s.mode.postgres_only())
                .copied()
                .collect::<Vec<_>>()
        })
        .filter(|g| !g.is_empty())
        .collect()
}

fn max_concurrency(args: &BenchArgs) -> u32 {
    matrix(args)
        .iter()
        .flatten()
        .map(|s| s.concurrency)
        .max()
        .unwrap_or(1) as u32
}

/// Whether a missing server must fail the run (CI) rather than be skipped.
fn services_required() -> bool {
    std::env::var_os("CI").is_some() || std::env::var_os("ONCELY_REQUIRE_SERVICES").is_some()
}

fn server_options(args: &BenchArgs, schema: &str) -> Result<ConnectOptions> {
    Ok(ConnectOptions {
        tables: Tables::default().with_schema(schema)?,
        max_connections: args.pool.unwrap_or(max_concurrency(args) + 2),
        durability: Durability::Full,
        ..ConnectOptions::default()
    })
}

/// A bed in a fresh `schema` (PostgreSQL schema, MySQL database) of a server: dropped if it is
/// left over, created, migrated, the effect tables added.
async fn server_bed<DB: MigrateDb>(store: SqlStore<DB>, schema: &str) -> Result<Bed<DB>> {
    fresh_schema(&store, schema).await?;
    migrated_bed(store).await
}

/// Drops `schema` if it is left over and creates it.
async fn fresh_schema<DB: MigrateDb>(store: &SqlStore<DB>, schema: &str) -> Result<()> {
    let mut conn = store.pool().acquire().await.context("connecting")?;
    let fresh = [
        DB::DIALECT.drop_schema_sql(schema),
        DB::DIALECT.create_schema_sql(schema),
    ];
    for sql in fresh.into_iter().flatten() {
        DB::script(&mut conn, &sql).await?;
    }
    Ok(())
}

/// Migrates the store's tables and adds the effect tables.
async fn migrated_bed<DB: MigrateDb>(store: SqlStore<DB>) -> Result<Bed<DB>> {
    store.migrate().await?;
    let pool = store.pool().clone();
    let bed = Bed::make(pool, store.tables().clone(), store.engine());
    let mut conn = bed.pool.acquire().await.context("connecting")?;
    for sql in bed.ddl() {
        DB::script(&mut conn, &sql).await?;
    }
    drop(conn);
    Ok(bed)
}

pub(crate) async fn postgres(args: &BenchArgs, schema: &str) -> Result<Bed<Postgres>> {
    let store = PgStore::connect_with(&args.postgres, &server_options(args, schema)?)
        .await
        .with_context(|| format!("connecting to {}", redact_url(&args.postgres)))?;
    server_bed(store, schema).await
}

/// A PostgreSQL bed whose inbox is the time-partitioned layout (`oncely partition install`),
/// with the daily partitions of the last 8 days.
pub(crate) async fn postgres_partitioned(args: &BenchArgs, schema: &str) -> Result<Bed<Postgres>> {
    let store = PgStore::connect_with(&args.postgres, &server_options(args, schema)?)
        .await
        .with_context(|| format!("connecting to {}", redact_url(&args.postgres)))?;
    fresh_schema(&store, schema).await?;
    let ops = oncely_ops::Ops::from(&oncely_sql::AnyStore::from(store.clone()));
    oncely_ops::partition::install(&ops, 1).await?;
    let week = 8 * oncely_ops::time::DAY_MS;
    oncely_ops::partition::ensure(&ops, oncely_sql::clock::now_ms() - week, 1).await?;
    migrated_bed(store).await
}

pub(crate) async fn mariadb(args: &BenchArgs, database: &str) -> Result<Bed<MySql>> {
    let store = MySqlStore::connect_with(&args.mariadb, &server_options(args, database)?)
        .await
        .with_context(|| format!("connecting to {}", redact_url(&args.mariadb)))?;
    server_bed(store, database).await
}

pub(crate) async fn sqlite(
    args: &BenchArgs,
    dir: &std::path::Path,
    durability: Durability,
) -> Result<Bed<Sqlite>> {
    let file = dir.join(format!("bench-{durability:?}.db").to_lowercase());
    let url = format!("sqlite:{}", file.display());
    let options = ConnectOptions {
        tables: Tables::default(),
        max_connections: args.sqlite_pool.max(1),
        durability,
        ..ConnectOptions::default()
    };
    let store = SqliteStore::connect_with(&url, &options).await?;
    store.migrate().await?;
    let bed = Bed::make(store.pool().clone(), options.tables, store.engine());
    for sql in bed.ddl() {
        sqlx::query(AssertSqlSafe(sql)).execute(&bed.pool).await?;
    }
    Ok(bed)
}

/// How many times each group runs: a broker's group `broker` times, on PostgreSQL a group
/// of an in-process target key ([`is_paired`]) `paired` times, every other group `rounds`.
#[derive(Debug, Clone, Copy)]
struct Rounds {
    rounds: usize,
    broker: usize,
    paired: usize,
}

impl Rounds {
    fn of(self, backend: &str, group: &[Spec]) -> usize {
        if is_broker_group(group) {
            self.broker
        } else if backend == "postgres" && is_paired(group) {
            self.paired
        } else {
            self.rounds
        }
    }

    /// Cells run over `groups` on `backend` (for the progress bar).
    fn cells(self, backend: &str, groups: &[Vec<Spec>]) -> usize {
        groups.iter().map(|g| g.len() * self.of(backend, g)).sum()
    }
}

/// Whether every cell of `group` is a broker's (oncely in process, bare, through the broker).
fn is_broker_group(group: &[Spec]) -> bool {
    group.iter().all(|s| s.mode.is_broker())
}

/// Whether `group` holds the cells of an in-process target key measured round by round:
/// the plain consumer and oncely per-message at 16 consumers, or the latency pair.
fn is_paired(group: &[Spec]) -> bool {
    let has = |mode: Mode| {
        group
            .iter()
            .any(|s| s.mode == mode && s.batch == 1 && s.concurrency == 16)
    };
    group.iter().any(|s| s.mode == Mode::Latency) || (has(Mode::Plain) && has(Mode::Oncely))
}

/// Runs the groups on one bed, each group its rounds back to back, every other round in
/// reverse order (so no cell always runs first, on warmer or colder caches); a cell's figure
/// is its messages over its time summed across rounds, each round's figure is kept (the
/// report takes ratios round by round within a group), and its check passes only if every
/// round's did.
async fn sweep<B: Ops>(
    bed: &B,
    backend: &str,
    groups: &[Vec<Spec>],
    rounds: Rounds,
    bar: &ProgressBar,
) -> Result<Vec<Cell>> {
    // Warm-up (not recorded): opens the pool's connections and prepares the statements.
    let top = groups
        .iter()
        .flatten()
        .map(|s| s.concurrency)
        .max()
        .unwrap_or(1);
    let has_raw = groups.iter().flatten().any(|s| s.mode == Mode::Raw);
    for mode in [Mode::Plain, Mode::Oncely, Mode::Raw] {
        for (batch, concurrency) in [(1, top), (100, 1)] {
            if (mode == Mode::Raw || batch > 1) && !has_raw {
                continue;
            }
            let spec = Spec {
                mode,
                batch,
                concurrency,
                messages: top * 8,
            };
            if mode != Mode::Plain || batch == 1 {
                run_cell(bed, backend, spec, "warm").await?;
            }
        }
    }
    let mut cells = Vec::new();
    for (at, group) in groups.iter().enumerate() {
        let mut sums: Vec<Option<Cell>> = vec![None; group.len()];
        for round in 0..rounds.of(backend, group) {
            let mut order: Vec<usize> = (0..group.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for i in order {
                let spec = &group[i];
                bar.set_message(format!(
                    "{backend} {} B={} c={} round {}",
                    spec.mode.name(),
                    spec.batch,
                    spec.concurrency,
                    round + 1
                ));
                let mut cell = run_cell(bed, backend, *spec, &format!("r{round}"))
                    .await
                    .with_context(|| format!("{backend} {spec:?}"))?;
                cell.group = at;
                bar.inc(1);
                sums[i] = Some(match sums[i].take() {
                    None => cell,
                    Some(sum) => sum.merge(cell),
                });
            }
        }
        cells.extend(sums.into_iter().flatten());
    }
    bed.reset().await?;
    Ok(cells)
}

/// Runs the benchmark; returns whether every cell's checker found 0 double and 0 lost.
pub async fn run(mut args: BenchArgs) -> Result<bool> {
    if args.horizon {
        let schema = format!("oncely_horizon_{}", std::process::id());
        // Boxed: its future nested in `run`'s is deeper than the compiler's layout limit.
        return Box::pin(crate::horizon::run(&args, &schema)).await;
    }
    if args.soak.enabled {
        let schema = format!("oncely_soak_{}", std::process::id());
        return Box::pin(crate::soak::run(&args, &schema)).await;
    }
    if args.redis_store_only {
        (
            args.no_postgres,
            args.no_mariadb,
            args.no_sqlite,
            args.no_brokers,
        ) = (true, true, true, true);
    }
    if !args.no_brokers {
        for (broker, url) in [
            (Broker::Amqp, &args.amqp),
            (Broker::Nats, &args.nats),
            (Broker::Redis, &args.redis),
            (Broker::Mqtt, &args.mqtt),
            (Broker::Kafka, &args.kafka),
        ] {
            if args
                .brokers
                .as_ref()
                .is_some_and(|only| !only.contains(&broker))
            {
                continue;
            }
            match broker.probe(url).await {
                Ok(()) => broker.enable(url),
                Err(e) if !services_required() => eprintln!(
                    "SKIPPED: the cells through {} ({e:#}); set CI or ONCELY_REQUIRE_SERVICES to fail instead",
                    broker.name()
                ),
                Err(e) => {
                    return Err(e.context(format!(
                        "{} is required (CI / ONCELY_REQUIRE_SERVICES)",
                        broker.name()
                    )));
                }
            }
        }
    }
    let schema = format!("oncely_bench_{}", std::process::id());
    if !args.no_postgres && Broker::Amqp.enabled() {
        crate::broker::demo::enable(&args.postgres, &format!("{schema}_demo")).await;
    }
    let groups = matrix(&args);
    let rounds = Rounds {
        rounds: args.rounds.unwrap_or(if args.quick { 1 } else { 3 }).max(1),
        broker: args
            .broker_rounds
            .unwrap_or(if args.quick { 1 } else { 5 })
            .max(1),
        paired: args
            .paired_rounds
            .unwrap_or(if args.quick { 1 } else { 7 })
            .max(1),
    };
    let mut machine = Machine::probe();
    let mut cells = Vec::new();
    let mut backends = Vec::new();
    let mut pg = None;
    if !args.no_postgres {
        match postgres(&args, &schema).await {
            Ok(bed) => {
                machine.postgres = sqlx::query_scalar("SELECT version()")
                    .fetch_one(&bed.pool)
                    .await
                    .ok();
                pg = Some(bed);
                backends.push("postgres");
            }
            Err(e) if !services_required() => {
                eprintln!(
                    "SKIPPED: PostgreSQL cells ({e:#}); set CI or ONCELY_REQUIRE_SERVICES to fail instead"
                );
            }
            Err(e) => {
                return Err(e.context("PostgreSQL is required (CI / ONCELY_REQUIRE_SERVICES)"));
            }
        }
    }
    let mut maria = None;
    if !args.no_mariadb {
        match mariadb(&args, &schema).await {
            Ok(bed) => {
                machine.mariadb = sqlx::query_scalar("SELECT version()")
                    .fetch_one(&bed.pool)
                    .await
                    .ok();
                maria = Some(bed);
            }
            Err(e) if !services_required() => {
                eprintln!(
                    "SKIPPED: MariaDB cells ({e:#}); set CI or ONCELY_REQUIRE_SERVICES to fail instead"
                );
            }
            Err(e) => return Err(e.context("MariaDB is required (CI / ONCELY_REQUIRE_SERVICES)")),
        }
    }
    let maria_groups: Vec<Vec<Spec>> = for_backend("mariadb", &group_matrix(&args))
        .into_iter()
        .filter(|g| !args.brokers_only || is_broker_group(g))
        .collect();
    let dir = tempfile::tempdir().context("creating a temporary directory for SQLite")?;
    if !args.no_sqlite {
        backends.extend(["sqlite_full", "sqlite_normal"]);
    }
    let server_cells: usize = backends
        .iter()
        .map(|b| rounds.cells(b, &for_backend(b, &groups)))
        .sum();
    let maria_cells = rounds.cells("mariadb", &maria_groups) * usize::from(maria.is_some());
    let bar = ProgressBar::new((server_cells + maria_cells) as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    if let Some(bed) = &pg {
        let result = sweep(bed, "postgres", &groups, rounds, &bar).await;
        crate::broker::demo::finish().await;
        let _ = sqlx::query(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE"
        )))
        .execute(&bed.pool)
        .await;
        cells.extend(result?);
    }
    if let Some(bed) = &maria {
        let result = sweep(bed, "mariadb", &maria_groups, rounds, &bar).await;
        let _ = sqlx::query(AssertSqlSafe(format!("DROP DATABASE IF EXISTS {schema}")))
            .execute(&bed.pool)
            .await;
        bed.pool.close().await;
        cells.extend(result?);
    }
    if !args.no_sqlite {
        for (name, durability) in [
            ("sqlite_full", Durability::Full),
            ("sqlite_normal", Durability::Normal),
        ] {
            let bed = sqlite(&args, dir.path(), durability).await?;
            machine.sqlite = sqlx::query_scalar("SELECT sqlite_version()")
                .fetch_one(&bed.pool)
                .await
                .ok();
            let groups = for_backend(name, &groups);
            cells.extend(sweep(&bed, name, &groups, rounds, &bar).await?);
            bed.pool.close().await;
        }
    }
    bar.finish_and_clear();
    let peer = if args.no_redis_store || args.brokers_only {
        Vec::new()
    } else {
        crate::peer::run(&args.redis, args.quick, rounds.rounds, services_required()).await?
    };
    machine.finish(rounds.rounds, rounds.broker, rounds.paired, args.quick);
    let report = Report::new(machine, cells).with_peer(peer);
    report.write(&args.out)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.json())?);
    } else {
        print!("{}", report.table());
        println!("results written to {}", args.out.display());
    }
    Ok(report.all_ok())
}

#[cfg(test)]
mod rounds_tests {
    use super::{GROUP, Rounds};
    use crate::broker::Broker;
    use crate::cells::{Mode, Spec};

    /// A broker's group runs the broker rounds on every database, the groups of PostgreSQL's
    /// in-process keys the paired rounds on PostgreSQL only, the rest the plain rounds.
    #[test]
    fn each_group_runs_its_own_count_of_rounds() {
        let spec = |mode, batch, concurrency| Spec {
            mode,
            batch,
            concurrency,
            messages: 10,
        };
        let rounds = Rounds {
            rounds: 3,
            broker: 5,
            paired: 7,
        };
        let b = Broker::Amqp;
        let broker = [
            spec(Mode::InProcess(b), GROUP, 4),
            spec(Mode::Bare(b), 1, 1),
            spec(Mode::Through(b), GROUP, 4),
        ];
        let paired = [spec(Mode::Plain, 1, 16), spec(Mode::Oncely, 1, 16)];
        let latency = [spec(Mode::Latency, 1, 1), spec(Mode::Latency, GROUP, 1)];
        let other = [spec(Mode::Plain, 1, 1), spec(Mode::Group, GROUP, 1)];
        for backend in ["postgres", "sqlite_full", "mariadb"] {
            assert_eq!(rounds.of(backend, &broker), 5, "{backend}");
            assert_eq!(rounds.of(backend, &other), 3, "{backend}");
        }
        assert_eq!(rounds.of("postgres", &paired), 7);
        assert_eq!(rounds.of("postgres", &latency), 7);
        assert_eq!(rounds.of("sqlite_full", &paired), 3);
        assert_eq!(
            rounds.cells("postgres", &[paired.to_vec(), broker.to_vec()]),
            2 * 7 + 3 * 5
        );
    }
}
