//! Cutting connections from the server side (and a run across such cuts), and the SIGKILL
//! crash loop.

use crate::check::{Effects, Report};
use crate::ledger::Db;
use crate::runner::{RunOptions, RunSummary, run_until_idle};
use crate::workload::Workload;
use oncely_core::Source;
use rand::Rng;
use std::future::Future;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

/// Closes every RabbitMQ connection whose client property `connection_name` is `name`,
/// with `rabbitmqctl close_connection`. Returns how many were closed.
pub async fn rabbitmq_close_connections(name: &str) -> usize {
    let out = Command::new("rabbitmqctl")
        .args(["list_connections", "pid", "client_properties", "-q"])
        .output()
        .await
        .expect("rabbitmqctl runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let needle = format!("{{\"connection_name\",\"{name}\"}}");
    let mut closed = 0;
    for line in text.lines().filter(|l| l.contains(&needle)) {
        let Some(pid) = line.split('\t').next() else {
            continue;
        };
        let status = Command::new("rabbitmqctl")
            .args(["close_connection", pid, "oncely test: connection cut"])
            .stdout(Stdio::null())
            .status()
            .await
            .expect("rabbitmqctl runs");
        if status.success() {
            closed += 1;
        }
    }
    closed
}

/// Kills every Redis client whose name (`CLIENT SETNAME`) is `name` (`CLIENT KILL ID`).
pub async fn redis_kill_clients(name: &str) -> usize {
    let out = Command::new("redis-cli")
        .args(["CLIENT", "LIST"])
        .output()
        .await
        .expect("redis-cli runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut killed = 0;
    for line in text.lines() {
        let field = |k: &str| {
            line.split(' ')
                .find_map(|kv| kv.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
        };
        if field("name") == Some(name)
            && let Some(id) = field("id")
        {
            let status = Command::new("redis-cli")
                .args(["CLIENT", "KILL", "ID", id])
                .stdout(Stdio::null())
                .status()
                .await
                .expect("redis-cli runs");
            if status.success() {
                killed += 1;
            }
        }
    }
    killed
}

/// Publishes `messages` in chunks of `chunk`, each only once the consumer has caught up to
/// within `backlog` unique ids (ledger rows + dead letters). For brokers that drop messages
/// beyond a per-client queue limit (Mosquitto's `max_queued_messages`, default 1000).
pub async fn paced_publish(
    url: &str,
    messages: &[oncely_core::RawEnvelope],
    db: &Db,
    chunk: usize,
    backlog: i64,
) -> oncely_core::Result<()> {
    let mut ids = std::collections::HashSet::new();
    for part in messages.chunks(chunk) {
        let target = ids.len() as i64 - backlog;
        for _ in 0..6000 {
            let (rows, dead) = db.counts().await.unwrap_or_default();
            if rows + dead >= target {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        crate::brokers::publish(url, part).await?;
        for m in part {
            ids.insert(m.id.clone().unwrap_or_else(|| m.payload.clone()));
        }
    }
    Ok(())
}

/// Waits until the database holds at least `rows` ledger rows (or 120 s passed).
pub async fn wait_for_rows(db: &Db, rows: i64) {
    for _ in 0..1200 {
        if db.counts().await.map(|c| c.0).unwrap_or(0) >= rows {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What [`crash_run`] did: the final report, the clean runs' summary lines, and how many
/// consumers were SIGKILLed while still running (the others exited on their own first).
#[derive(Debug, Clone)]
pub struct CrashRun {
    /// The checker's report after the last run.
    pub report: Report,
    /// The clean runs' summary lines.
    pub outputs: Vec<String>,
    /// Consumers killed with SIGKILL mid-run.
    pub kills: usize,
}

/// The checker's report, read again (up to 5 times, 500 ms apart) when the read itself
/// fails: on a loaded machine a read of the whole ledger may time out (the Redis store's
/// client answers `timed out` after 500 ms), which says nothing about the effects. The last
/// error fails the test.
pub async fn read_report<D: Effects>(db: &D, workload: &Workload) -> Report {
    let mut attempt = 1;
    loop {
        match db.report(workload).await {
            Ok(report) => return report,
            Err(e) if attempt < 5 => {
                eprintln!("checker: reading the report failed ({e}); reading again");
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("checker: reading the report failed {attempt} times: {e:?}"),
        }
    }
}

/// The SIGKILL crash loop, on any effect store (a SQL [`Db`], the Redis store's
/// [`crate::redis_db::RedisDb`]): starts the consumer binary and kills it mid-stream `kills`
/// times ([`kill_mid_stream`]), then runs it to its idle exit until the checker finds every
/// unique id (at most 20 clean runs).
pub async fn crash_run<D: Effects>(
    binary: &str,
    args: &[String],
    db: &D,
    workload: &Workload,
    kills: usize,
) -> CrashRun {
    let progress = || async { db.counts().await.map_or(0, |(rows, dead)| rows + dead) };
    let killed = kill_mid_stream(binary, args, kills, progress).await;
    let outputs = run_until(binary, args, 20, || async {
        let report = read_report(db, workload).await;
        report.complete() || report.double > 0
    })
    .await;
    let report = read_report(db, workload).await;
    CrashRun {
        report,
        outputs,
        kills: killed,
    }
}

/// Rows a consumer must have added since it started before it is killed: every kill lands
/// mid-stream, after connecting (or a Kafka group join) and while deliveries are in flight.
const PROGRESS_BEFORE_KILL: i64 = 50;

/// Starts the consumer binary `kills` times and kills each with SIGKILL once `progress` (the
/// effects counted so far) has grown by [`PROGRESS_BEFORE_KILL`] since it started, at a random
/// moment up to 200 ms after that: mid-batch, mid-commit, mid-rebalance. Returns how many were
/// killed while running (the others exited on their own first: nothing left to do).
pub async fn kill_mid_stream<P, PF>(
    binary: &str,
    args: &[String],
    kills: usize,
    progress: P,
) -> usize
where
    P: Fn() -> PF,
    PF: Future<Output = i64>,
{
    let started = Instant::now();
    let mut rng = rand::rng();
    let mut killed = 0;
    for k in 1..=kills {
        let mut child = Command::new(binary)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("consumer binary starts");
        let before = progress().await;
        let delay = Duration::from_millis(rng.random_range(0..200));
        let exited = loop {
            tokio::select! {
                status = child.wait() => break Some(status),
                _ = tokio::time::sleep(Duration::from_millis(50)) => {
                    if progress().await >= before + PROGRESS_BEFORE_KILL {
                        break None;
                    }
                }
            }
        };
        let exited = match exited {
            Some(status) => Some(status),
            None => tokio::select! {
                status = child.wait() => Some(status),
                _ = tokio::time::sleep(delay) => None,
            },
        };
        if let Some(status) = exited {
            eprintln!("kill {k}: consumer exited on its own ({status:?}) before the kill");
            continue;
        }
        child.start_kill().expect("SIGKILL");
        let _ = child.wait().await;
        killed += 1;
        eprintln!(
            "kill {k}: SIGKILL at {:?}, effects so far {}",
            started.elapsed(),
            progress().await
        );
    }
    killed
}

/// Runs the consumer binary to its idle exit, up to `max` times until `done`; returns each
/// run's summary line (panics if a run fails).
pub async fn run_until<F, Fut>(binary: &str, args: &[String], max: u32, mut done: F) -> Vec<String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let mut outputs = Vec::new();
    for round in 1..=max {
        let out = Command::new(binary)
            .args(args)
            .stderr(Stdio::inherit())
            .output()
            .await
            .expect("consumer binary runs");
        let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        eprintln!("clean run {round}: {line}");
        assert!(out.status.success(), "consumer failed: {:?}", out.status);
        outputs.push(line);
        if done().await {
            break;
        }
    }
    outputs
}

/// Consumes `workload` while `cut` severs the connection twice mid-stream; checks
/// 0 double, 0 lost. Returns the run summary (its rate is the measured throughput).
pub async fn connection_loss<Src, C, CF>(
    label: &str,
    db: &Db,
    workload: &Workload,
    source: Src,
    mut cut: C,
    idle: Duration,
) -> RunSummary
where
    Src: Source,
    C: FnMut() -> CF,
    CF: Future<Output = usize>,
{
    let mut options = RunOptions::new("connloss");
    options.idle_exit = idle;
    let db2 = db.clone();
    let run = tokio::spawn(async move {
        run_until_idle(&db2, source, &options, CancellationToken::new()).await
    });
    let n = workload.unique.len() as i64;
    for at in [n / 4, n / 2] {
        wait_for_rows(db, at).await;
        let mut cut_count = 0;
        for _ in 0..50 {
            cut_count = cut().await;
            if cut_count > 0 {
                break;
            }
            // Not (re)connected yet: try again shortly.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        eprintln!("{label}: cut {cut_count} connection(s) at ≥{at} ledger rows");
        assert!(cut_count > 0, "{label}: nothing to cut");
    }
    let run = run.await.expect("join").expect("run");
    eprintln!("{label}: {:?}; {:.0} deliveries/s", run.stats, run.rate());
    Report::read(db, workload)
        .await
        .expect("report")
        .assert_exact(label);
    run
}
