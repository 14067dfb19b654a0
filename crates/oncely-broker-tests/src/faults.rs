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
use std::time::Duration;
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

/// The SIGKILL crash loop: starts the consumer binary, kills it with SIGKILL at random
/// moments `kills` times, then lets it run to idle exit until the database is complete
/// (at most `max_rounds` clean runs). Returns the final report and the last run's output.
pub async fn crash_loop(
    binary: &str,
    args: &[String],
    db: &Db,
    workload: &Workload,
    kills: usize,
) -> (Report, Vec<String>) {
    let run = crash_run(binary, args, db, workload, kills).await;
    (run.report, run.outputs)
}

/// [`crash_loop`] on any effect store (a SQL [`Db`], the Redis store's
/// [`crate::redis_db::RedisDb`]), saying how many kills hit a running consumer.
pub async fn crash_run<D: Effects>(
    binary: &str,
    args: &[String],
    db: &D,
    workload: &Workload,
    kills: usize,
) -> CrashRun {
    let mut rng = rand::rng();
    let mut outputs = Vec::new();
    let mut killed = 0;
    for k in 0..kills {
        let mut child = Command::new(binary)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("consumer binary starts");
        let wait = Duration::from_millis(rng.random_range(300..2500));
        tokio::select! {
            _ = tokio::time::sleep(wait) => {
                child.start_kill().expect("SIGKILL");
                let _ = child.wait().await;
                killed += 1;
                let (rows, dead) = db.counts().await.unwrap_or_default();
                eprintln!("kill {}: SIGKILL after {wait:?}; ledger rows {rows}, dead letters {dead}", k + 1);
            }
            status = child.wait() => {
                eprintln!("kill {}: consumer exited on its own ({status:?}) before the kill", k + 1);
            }
        }
    }
    let mut report = db.report(workload).await.expect("report");
    for round in 0..20 {
        let out = Command::new(binary)
            .args(args)
            .stderr(Stdio::inherit())
            .output()
            .await
            .expect("consumer binary runs");
        let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        eprintln!("clean run {}: {line}", round + 1);
        assert!(out.status.success(), "consumer failed: {:?}", out.status);
        outputs.push(line);
        report = db.report(workload).await.expect("report");
        if report.complete() || report.double > 0 {
            break;
        }
    }
    CrashRun {
        report,
        outputs,
        kills: killed,
    }
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
