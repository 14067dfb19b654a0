//! The user's path through RabbitMQ (`amqp_demo`): the `oncely` binary itself,
//! `oncely demo --consume-only --crash-rate 0` at its defaults with a plain URL, spawned on a
//! quorum queue that is already full (published first, then consumed), into the cell's
//! PostgreSQL; beside it in every round a bare lapin consumer of an equally filled queue
//! (`amqp_existing_bare`). The key `amqp_pg_demo_vs_bare_consumer` is the median of the
//! rounds' ratios (`report.rs`); `scripts/amqp-user-path.sh` measures the same path by hand,
//! next to a bare pika consumer.
//!
//! The demo is timed from its spawn to its exit, minus its idle exit (`--idle-exit 1`): its
//! start-up, schema migration and final read-back count, as they do for a user. Its checker
//! (`--json`) must find every id once, 0 double, the credits total as published.
//!
//! The binary is looked up next to the bench's own (the same target directory and profile)
//! or at `ONCELY_BIN`; without it (or without its `amqp` feature) the cells are skipped
//! loudly and the key is absent.

use super::Broker;
use crate::cells::Check;
use anyhow::{Context, Result, bail};
use oncely_core::RawEnvelope;
use oncely_sql::sqlx::{self, AssertSqlSafe, Connection, PgConnection};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The demo's `--idle-exit`, subtracted from its wall time.
const IDLE_EXIT: Duration = Duration::from_secs(1);

/// How to build the binary the cell runs.
pub(crate) const BUILD: &str = "cargo build --release -p oncely-cli --features oncely-cli/amqp";

struct Demo {
    bin: PathBuf,
    postgres: String,
    schema: String,
}

static DEMO: OnceLock<Demo> = OnceLock::new();

/// Whether the demo's cells run (after [`enable`] found a usable binary).
pub(crate) fn enabled() -> bool {
    DEMO.get().is_some()
}

/// Where the `oncely` binary should be: `ONCELY_BIN`, else next to this executable (its
/// parent for a test binary in `deps/`).
pub(crate) fn binary_path() -> Result<PathBuf> {
    if let Some(bin) = std::env::var_os("ONCELY_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let exe = std::env::current_exe().context("locating the bench's own executable")?;
    let mut dir = exe.parent().context("the executable's folder")?;
    if dir
        .file_name()
        .is_some_and(|n| n == "deps" || n == "examples")
    {
        dir = dir.parent().context("the target folder")?;
    }
    Ok(dir.join(format!("oncely{}", std::env::consts::EXE_SUFFIX)))
}

/// Finds the binary and checks it has the `amqp` feature; enables the demo's cells into
/// `postgres` (a schema of their own, `schema`), or says loudly why they are skipped.
pub(crate) async fn enable(postgres: &str, schema: &str) {
    let bin = match binary_path() {
        Ok(bin) => bin,
        Err(e) => {
            eprintln!("SKIPPED: amqp_demo ({e:#}); set ONCELY_BIN to the oncely binary");
            return;
        }
    };
    if !bin.is_file() {
        eprintln!(
            "SKIPPED: oncely binary not found at {}; build it with {BUILD} (or set ONCELY_BIN); \
             the amqp_demo cells and the key amqp_pg_demo_vs_bare_consumer are left out",
            bin.display()
        );
        return;
    }
    if let Err(e) = probe(&bin).await {
        eprintln!(
            "SKIPPED: amqp_demo: {} cannot consume from RabbitMQ ({e:#}); build it with {BUILD}",
            bin.display()
        );
        return;
    }
    let _ = DEMO.set(Demo {
        bin,
        postgres: postgres.to_owned(),
        schema: schema.to_owned(),
    });
}

/// Fails if the binary was built without its `amqp` feature: it then refuses an `amqp://`
/// URL at once and names the feature. (With it, the probe's unreachable broker fails to
/// connect, or the probe is cut short: either way the binary knows `amqp://`.)
async fn probe(bin: &Path) -> Result<()> {
    let mut command = tokio::process::Command::new(bin);
    command
        .args(["demo", "--consume-only", "--json", "--idle-exit", "1"])
        .args([
            "--source",
            "amqp://127.0.0.1:1/%2f?queue=oncely-bench-probe",
        ])
        .env_remove("ONCELY_DEMO_STORE")
        .kill_on_drop(true);
    let Ok(out) = tokio::time::timeout(Duration::from_secs(10), command.output()).await else {
        return Ok(());
    };
    let out = out.with_context(|| format!("running {}", bin.display()))?;
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    if text.contains("is not built in") || text.contains("unrecognized subcommand") {
        bail!("{}", text.trim());
    }
    Ok(())
}

/// What `oncely demo --consume-only --json` prints (the fields the cell checks).
#[derive(Debug, Deserialize)]
struct Holdings {
    ledger_rows: u64,
    distinct_ids: u64,
    double_effects: u64,
    total_credits: i64,
    dead_letters_by_reason: BTreeMap<String, u64>,
}

impl Holdings {
    fn check(&self, published: u64, expected_total: i64) -> Check {
        let dead_letters: u64 = self.dead_letters_by_reason.values().sum();
        let lost = published.saturating_sub(self.distinct_ids + dead_letters);
        Check {
            published,
            effect_rows: self.ledger_rows,
            double: self.double_effects,
            lost,
            dead_letters,
            expected_total,
            balance_total: self.total_credits,
            // The demo does not report its inbox; its own checker counts the ledger.
            inbox_rows: 0,
            ok: self.double_effects == 0
                && lost == 0
                && dead_letters == 0
                && self.distinct_ids == published
                && self.total_credits == expected_total,
        }
    }
}

async fn drop_schema(postgres: &str, schema: &str) -> Result<()> {
    let mut conn = PgConnection::connect(postgres)
        .await
        .with_context(|| format!("connecting to {}", oncely_sql::redact_url(postgres)))?;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS {schema} CASCADE"
    )))
    .execute(&mut conn)
    .await
    .context("dropping the demo's schema")?;
    let _ = conn.close().await;
    Ok(())
}

/// Removes what the demo's cells left in PostgreSQL (called once the sweep is over).
pub(crate) async fn finish() {
    if let Some(demo) = DEMO.get()
        && let Err(e) = drop_schema(&demo.postgres, &demo.schema).await
    {
        eprintln!("bench: could not drop {}: {e:#}", demo.schema);
    }
}

/// One round of `amqp_demo`: fills a fresh quorum queue with `msgs`, then spawns the demo on
/// it into a fresh schema; returns its time (spawn to exit, minus the idle exit) and the
/// check of what its `--json` says the database holds.
pub(crate) async fn run(msgs: &[RawEnvelope], expected_total: i64) -> Result<(Duration, Check)> {
    let demo = DEMO
        .get()
        .context("amqp_demo ran without an oncely binary")?;
    drop_schema(&demo.postgres, &demo.schema).await?;
    let filled = Broker::Amqp.fill("demo", msgs).await?;
    let ran = spawn(demo, &filled.url, msgs.len()).await;
    filled.remove().await;
    let (elapsed, holdings) = ran?;
    Ok((elapsed, holdings.check(msgs.len() as u64, expected_total)))
}

async fn spawn(demo: &Demo, url: &str, n: usize) -> Result<(Duration, Holdings)> {
    let mut command = tokio::process::Command::new(&demo.bin);
    command
        .args(["demo", "--consume-only", "--crash-rate", "0", "--json"])
        .args(["--source", url, "--store", demo.postgres.as_str()])
        .args(["--schema", demo.schema.as_str()])
        .args(["--idle-exit", IDLE_EXIT.as_secs().to_string().as_str()])
        .env_remove("ONCELY_DEMO_STORE")
        .env_remove("ONCELY_DEMO_SOURCE")
        .kill_on_drop(true);
    let limit = Duration::from_secs(60 + n as u64 / 200);
    let started = Instant::now();
    let out = tokio::time::timeout(limit, command.output())
        .await
        .with_context(|| format!("oncely demo: not done after {} s", limit.as_secs()))?
        .with_context(|| format!("running {}", demo.bin.display()))?;
    let elapsed = started.elapsed().saturating_sub(IDLE_EXIT);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().rev().find(|l| !l.trim().is_empty());
    let parsed = last.map(serde_json::from_str::<Holdings>);
    match parsed {
        Some(Ok(holdings)) => Ok((elapsed, holdings)),
        _ => bail!(
            "oncely demo exited with {} without its JSON report:\n{}\n{}",
            out.status,
            stdout.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::Holdings;

    fn holdings(json: &str) -> Holdings {
        serde_json::from_str(json).unwrap()
    }

    /// The check holds only for every id once, no dead letter and the total as published.
    #[test]
    fn the_demo_check_needs_every_id_once_and_the_total() {
        let good = holdings(
            r#"{"deliveries":3,"applied":3,"duplicates_skipped":0,"ledger_rows":3,"distinct_ids":3,
               "double_effects":0,"total_credits":6,"balances":{"acct-0":6},"dead_letters_by_reason":{}}"#,
        );
        assert!(good.check(3, 6).ok);
        assert!(!good.check(3, 7).ok, "a wrong total");
        let lost = good.check(4, 6);
        assert_eq!((lost.lost, lost.ok), (1, false));
        let double = holdings(
            r#"{"ledger_rows":4,"distinct_ids":3,"double_effects":1,"total_credits":8,"dead_letters_by_reason":{}}"#,
        );
        let check = double.check(3, 6);
        assert_eq!((check.double, check.ok), (1, false));
        let dead = holdings(
            r#"{"ledger_rows":2,"distinct_ids":2,"double_effects":0,"total_credits":3,"dead_letters_by_reason":{"undecodable":1}}"#,
        );
        let check = dead.check(3, 3);
        assert_eq!((check.lost, check.dead_letters, check.ok), (0, 1, false));
    }
}
