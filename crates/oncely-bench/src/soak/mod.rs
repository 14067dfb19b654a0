//! The soak mode (`oncely-bench --soak`): a fixed offered load through oncely on PostgreSQL,
//! for minutes, while `oncely prune` runs and two faults come and go.
//!
//! One run, on the plain inbox layout in a schema of its own: a producer publishes
//! `--soak-rate` messages per second (random UUIDv4 ids, every 10 ms what is due) into the
//! in-process source for `--soak-minutes`; oncely with group commit at its defaults consumes
//! them all along, applying the bench's effect (a ledger row and a balance); a pruner runs
//! [`oncely_ops::prune::prune`] (batch deletes, window `--soak-window-secs`) every
//! `--soak-prune-secs`. Two faults, as phases of the run ([`targets::Phase`]): from 25 % to
//! 50 % an idle transaction with an xid pins the xmin horizon (vacuum cannot remove dead
//! tuples); from 62.5 % to 87.5 % four connections loop repeatable-read `count(*)`s of the
//! inbox.
//!
//! Every 10 s a [`targets::Sample`]: offered and consumed msgs/s, backlog, latency p50/p99,
//! prune runs and rows deleted, inbox rows, dead tuples and WAL bytes/s. Latency is from the
//! publish to the ack, which the consumer sends right after its transaction's `COMMIT`
//! returned: an upper bound on publish → commit, by the ack's hop (in process, microseconds).
//! At the end the producer stops, the consumer drains, and the checker counts the ledger and
//! the balances against the published messages (the inbox is pruned: its rows are reported,
//! not compared). The targets ([`targets::evaluate`]) are reported, not asserted: the exit
//! code is 1 only when the checker finds a double or a loss or a fault could not run.

mod load;
mod sampler;
pub mod targets;
#[cfg(test)]
mod tests;

use crate::bed::{Bed, Ops};
use crate::cells::Check;
use crate::group::{Timed, oncely_group, quantile_ms};
use crate::plan::{BenchArgs, GROUP};
use anyhow::{Context, Result, bail};
use load::{Clock, PinReport, PruneLog, PruneRun, ReadersReport, Tracked};
use oncely_core::{ConsumerName, DEFAULT_CONCURRENCY, MemorySource};
use oncely_sql::sqlx::{self, Connection, PgConnection, Postgres};
use serde::Serialize;
use std::time::{Duration, Instant};
use targets::{Latencies, Plan, Sample, Target};
use tokio_util::sync::CancellationToken;

/// The consumer the soak claims for.
const CONSUMER: &str = "soak";

/// Flags of the soak mode.
#[derive(Debug, Clone, Serialize, clap::Args)]
pub struct SoakArgs {
    /// The soak mode instead of the matrix: a steady offered load through oncely on PostgreSQL
    /// while prune runs, an idle transaction pins the xmin horizon, then four readers loop,
    /// sampled every 10 s (docs/performance.md).
    #[arg(id = "soak", long = "soak", conflicts_with = "horizon")]
    pub enabled: bool,
    /// Minutes the soak offers its load (the drain comes after).
    #[arg(
        id = "soak_minutes",
        long = "soak-minutes",
        value_name = "MINUTES",
        default_value_t = 20.0
    )]
    pub minutes: f64,
    /// Messages per second the soak's producer offers.
    #[arg(
        id = "soak_rate",
        long = "soak-rate",
        value_name = "MSGS_PER_SEC",
        default_value_t = 2000
    )]
    pub rate: u32,
    /// Retention window of the soak's pruner, seconds.
    #[arg(
        id = "soak_window_secs",
        long = "soak-window-secs",
        value_name = "SECS",
        default_value_t = 120
    )]
    pub window_secs: u64,
    /// Seconds between two runs of the soak's pruner.
    #[arg(
        id = "soak_prune_secs",
        long = "soak-prune-secs",
        value_name = "SECS",
        default_value_t = 10
    )]
    pub prune_secs: u64,
}

/// The server's settings that shape the run, as a new session sees them (oncely's pool sets
/// its own `idle_in_transaction_session_timeout`).
#[derive(Debug, Clone, Serialize)]
pub struct Server {
    /// `version()`.
    pub version: String,
    /// `autovacuum`: when `off`, each prune run that deleted rows vacuums the inbox itself
    /// (`oncely_ops::vacuum`).
    pub autovacuum: String,
    /// `autovacuum_naptime`.
    pub autovacuum_naptime: String,
    /// `autovacuum_vacuum_scale_factor`.
    pub autovacuum_vacuum_scale_factor: String,
    /// `idle_in_transaction_session_timeout` (the pin turns it off for its own session).
    pub idle_in_transaction_session_timeout: String,
}

/// Everything a soak run measured: written to `soak.json`.
#[derive(Debug, Serialize)]
pub struct SoakReport {
    /// The flags of the run.
    pub args: SoakArgs,
    /// The server.
    pub server: Server,
    /// Messages published.
    pub published: u64,
    /// Seconds from the producer's end until the consumer had acked everything.
    pub drain_secs: f64,
    /// Median latency over the whole run, ms.
    pub p50_ms: f64,
    /// 99th percentile latency over the whole run, ms.
    pub p99_ms: f64,
    /// The samples, every 10 s.
    pub samples: Vec<Sample>,
    /// Every run of the pruner.
    pub prunes: Vec<PruneRun>,
    /// The pin, if it ran.
    pub pin: Option<PinReport>,
    /// The readers, if they ran.
    pub readers: Option<ReadersReport>,
    /// The targets, reported.
    pub targets: Vec<Target>,
    /// The checker's verdict.
    pub check: Check,
    /// What failed beside the checker (a fault that could not run, a failed prune).
    pub errors: Vec<String>,
}

async fn setting(conn: &mut PgConnection, name: &str) -> Result<String> {
    sqlx::query_scalar("SELECT current_setting($1)")
        .bind(name)
        .fetch_one(conn)
        .await
        .with_context(|| format!("reading {name}"))
}

async fn server(url: &str) -> Result<Server> {
    let mut conn = PgConnection::connect(url)
        .await
        .context("connecting to read the settings")?;
    let c = &mut conn;
    let server = Server {
        version: setting(c, "server_version").await?,
        autovacuum: setting(c, "autovacuum").await?,
        autovacuum_naptime: setting(c, "autovacuum_naptime").await?,
        autovacuum_vacuum_scale_factor: setting(c, "autovacuum_vacuum_scale_factor").await?,
        idle_in_transaction_session_timeout: setting(c, "idle_in_transaction_session_timeout")
            .await?,
    };
    conn.close().await.context("closing")?;
    Ok(server)
}

/// Runs the load, the pruner, the faults and the sampler on `bed`, drains, checks.
async fn soak(bed: &Bed<Postgres>, args: &BenchArgs) -> Result<SoakReport> {
    let flags = &args.soak;
    let server = server(&args.postgres).await?;
    if server.autovacuum != "on" {
        eprintln!(
            "soak: autovacuum is {} on this server: each prune run that deletes rows vacuums the inbox itself",
            server.autovacuum
        );
    }
    let clock = Clock {
        start: Instant::now(),
        total: Duration::from_secs_f64(flags.minutes * 60.0),
    };
    let source = MemorySource::new();
    let (tracked, prunes, stop) = (
        Tracked::default(),
        PruneLog::default(),
        CancellationToken::new(),
    );
    let producer = tokio::spawn(load::produce(
        source.clone(),
        tracked.clone(),
        clock,
        flags.rate,
    ));
    let pruner = tokio::spawn(load::prune_every(
        oncely_ops::Ops::from(&bed.store()),
        Duration::from_secs(flags.window_secs),
        Duration::from_secs(flags.prune_secs),
        clock,
        prunes.clone(),
        stop.clone(),
    ));
    let pin = tokio::spawn(load::pin(args.postgres.clone(), clock));
    let readers = tokio::spawn(load::readers(
        args.postgres.clone(),
        bed.sql.inbox.clone(),
        clock,
    ));
    let timed = {
        let (tracked, prunes) = (tracked.clone(), prunes.clone());
        Timed::new(source.clone(), move |id, _| {
            tracked.acked(id, prunes.running())
        })
    };
    let name = ConsumerName::new(CONSUMER)?;
    let consumer = async {
        let result = oncely_group(bed, &name, timed, GROUP, DEFAULT_CONCURRENCY).await;
        (result, clock.secs())
    };
    let sampled = async {
        let sampled = sampler::sample(bed, &source, &tracked, &prunes, clock).await;
        // The load ends with the last sample: the pruner stops, the consumer drains.
        stop.cancel();
        eprintln!("soak: load done, {} unacked: draining", source.unacked());
        sampled
    };
    let ((consumed, ended), sampled) = tokio::join!(consumer, sampled);
    let produced = producer.await.context("the producer")?;
    pruner.await.context("the pruner")?;
    consumed.context("the consumer")?;
    let (samples, latencies) = sampled?;
    let mut errors = Vec::new();
    let pin = match pin.await.context("the pin")? {
        Ok(pin) => Some(pin),
        Err(e) => {
            errors.push(format!("pin: {e:#}"));
            None
        }
    };
    let readers = match readers.await.context("the readers")? {
        Ok(readers) => Some(readers),
        Err(e) => {
            errors.push(format!("readers: {e:#}"));
            None
        }
    };
    let prunes = prunes.all();
    errors.extend(prunes.iter().filter_map(|r| {
        let e = r.error.as_ref()?;
        Some(format!("prune at {:.0} s: {e}", r.started_secs))
    }));
    let check = Check::pruned(produced.messages, produced.total, bed.counts().await?);
    let plan = Plan {
        seconds: clock.total.as_secs_f64(),
        rate: f64::from(flags.rate),
        window_secs: flags.window_secs as f64,
    };
    // Sorted once over the whole run (not each interval first).
    let mut everything: Vec<Duration> =
        latencies.iter().flat_map(Latencies::all).copied().collect();
    everything.sort_unstable();
    let mut targets = targets::evaluate(&plan, &samples, &latencies, &check);
    if server.autovacuum != "on" {
        for t in targets.iter_mut().filter(|t| t.key == "c") {
            t.detail += "; autovacuum is off on this server: prune vacuums the inbox";
        }
    }
    Ok(SoakReport {
        args: flags.clone(),
        server,
        published: produced.messages,
        drain_secs: (ended - plan.seconds).max(0.0),
        p50_ms: quantile_ms(&everything, 0.5),
        p99_ms: quantile_ms(&everything, 0.99),
        targets,
        samples,
        prunes,
        pin,
        readers,
        check,
        errors,
    })
}

impl SoakReport {
    fn print(&self) {
        let a = &self.args;
        let deleted: u64 = self.prunes.iter().map(|r| r.deleted).sum();
        println!(
            "\nsoak: {} min at {} msgs/s offered (window {} s, prune every {} s): {} published, drained in {:.1} s, latency p50 {:.1} ms p99 {:.1} ms (publish -> ack after commit)",
            a.minutes,
            a.rate,
            a.window_secs,
            a.prune_secs,
            self.published,
            self.drain_secs,
            self.p50_ms,
            self.p99_ms
        );
        let v = &self.server;
        println!(
            "  server: PostgreSQL {}, autovacuum {} (naptime {}, scale factor {})",
            v.version, v.autovacuum, v.autovacuum_naptime, v.autovacuum_vacuum_scale_factor
        );
        println!(
            "  prune: {} runs, {deleted} rows deleted",
            self.prunes.len()
        );
        if let Some(pin) = &self.pin {
            println!(
                "  pin: xid {} held from {:.0} s to {:.0} s",
                pin.xid, pin.from_secs, pin.to_secs
            );
        }
        if let Some(r) = &self.readers {
            println!(
                "  readers: {} connections, {} repeatable-read count(*)s from {:.0} s to {:.0} s (slowest {:.0} ms)",
                r.connections, r.counts, r.from_secs, r.to_secs, r.slowest_ms
            );
        }
        for t in &self.targets {
            println!("  {:<4} ({}) {}: {}", t.verdict(), t.key, t.goal, t.detail);
        }
        for e in &self.errors {
            println!("  ERROR {e}");
        }
    }
}

/// Runs the soak mode in `schema` (created, dropped at the end); returns whether the checker
/// passed and every part of the run ran.
pub(crate) async fn run(args: &BenchArgs, schema: &str) -> Result<bool> {
    let flags = &args.soak;
    if args.no_postgres {
        bail!("the soak mode runs on PostgreSQL: --no-postgres leaves nothing to run");
    }
    let minutes_ok = flags.minutes.is_finite() && flags.minutes > 0.0;
    if !minutes_ok || flags.rate == 0 || flags.prune_secs == 0 {
        bail!("--soak-minutes, --soak-rate and --soak-prune-secs must be above 0");
    }
    eprintln!(
        "soak: {} min at {} msgs/s, window {} s, prune every {} s; pinned {:.0}-{:.0} s, readers {:.0}-{:.0} s",
        flags.minutes,
        flags.rate,
        flags.window_secs,
        flags.prune_secs,
        flags.minutes * 60.0 * targets::PIN.0,
        flags.minutes * 60.0 * targets::PIN.1,
        flags.minutes * 60.0 * targets::READERS.0,
        flags.minutes * 60.0 * targets::READERS.1,
    );
    let bed = crate::plan::postgres(args, schema).await?;
    let result = Box::pin(soak(&bed, args)).await;
    crate::horizon::drop_schema(&bed, schema).await;
    let report = result?;
    std::fs::create_dir_all(&args.out)?;
    let json = serde_json::to_string_pretty(&report)?;
    let path = args.out.join("soak.json");
    std::fs::write(&path, &json)?;
    if args.json {
        println!("{json}");
    } else {
        report.print();
        println!("results written to {}", path.display());
    }
    Ok(report.check.ok && report.errors.is_empty())
}
