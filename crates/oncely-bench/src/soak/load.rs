//! The moving parts of a soak run beside the consumer: the producer at the offered rate, the
//! ack hook that times each message, the pruner, and the two faults (the pin and the readers).

use super::targets::{Latencies, PIN, READERS};
use crate::cells::credit_message;
use anyhow::{Context, Result};
use oncely_core::MemorySource;
use oncely_ops::prune::{PruneOptions, prune};
use oncely_sql::sqlx::{self, AssertSqlSafe, Connection, PgConnection};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::time::{MissedTickBehavior, interval, sleep_until};
use tokio_util::sync::CancellationToken;

/// How often the producer publishes what is due: small ticks, not a burst per second.
const TICK: Duration = Duration::from_millis(10);
/// Connections that loop repeatable-read `count(*)`s in the readers phase.
pub const READER_CONNECTIONS: usize = 4;

/// The run's start and length: when each phase begins.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    pub start: Instant,
    pub total: Duration,
}

impl Clock {
    /// The instant at `fraction` of the run.
    pub fn at(&self, fraction: f64) -> tokio::time::Instant {
        (self.start + self.total.mul_f64(fraction)).into()
    }

    /// Seconds since the start.
    pub fn secs(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }
}

/// Publish times of the messages not yet acked, and the latencies of the current interval.
#[derive(Default)]
pub(crate) struct Tracker {
    sent: HashMap<String, Instant>,
    current: Latencies,
}

/// The tracker shared by the producer, the ack hook and the sampler.
#[derive(Clone, Default)]
pub(crate) struct Tracked(Arc<Mutex<Tracker>>);

impl Tracked {
    fn lock(&self) -> MutexGuard<'_, Tracker> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes that message `id` was acked now (while a prune ran if `pruning`).
    pub fn acked(&self, id: &str, pruning: bool) {
        let now = Instant::now();
        let mut t = self.lock();
        // A redelivery of an acked message has no publish time left: it is not timed twice.
        if let Some(at) = t.sent.remove(id) {
            let latency = now.duration_since(at);
            if pruning {
                t.current.during_prune.push(latency);
            } else {
                t.current.outside_prune.push(latency);
            }
        }
    }

    /// The latencies of the interval that ends now; the next one starts empty.
    pub fn take(&self) -> Latencies {
        std::mem::take(&mut self.lock().current)
    }
}

/// What the producer published.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Produced {
    /// Messages published.
    pub messages: u64,
    /// Sum of their amounts (what the balances must add up to).
    pub total: i64,
}

/// Publishes `rate` messages per second with random UUIDv4 ids for the length of `clock`,
/// every [`TICK`] what is due since the start, then closes the source.
pub(crate) async fn produce(
    source: MemorySource,
    tracked: Tracked,
    clock: Clock,
    rate: u32,
) -> Produced {
    let mut tick = interval(TICK);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut produced = Produced::default();
    loop {
        tick.tick().await;
        let elapsed = clock.start.elapsed().min(clock.total);
        let due = (f64::from(rate) * elapsed.as_secs_f64()) as u64;
        let batch: Vec<_> = (produced.messages..due)
            .map(|i| credit_message(i as usize, uuid::Uuid::new_v4().to_string()))
            .collect();
        let now = Instant::now();
        {
            // Noted before publishing, so that an ack always finds its publish time.
            let mut t = tracked.lock();
            for (m, _) in &batch {
                t.sent.insert(m.display_id().unwrap_or_default(), now);
            }
        }
        for (m, amount) in batch {
            source.publish(m);
            produced.total += amount;
        }
        produced.messages = due;
        if elapsed >= clock.total {
            break;
        }
    }
    source.close();
    produced
}

/// One run of the pruner.
#[derive(Debug, Clone, Serialize)]
pub struct PruneRun {
    /// Seconds since the start when it began.
    pub started_secs: f64,
    /// Seconds since the start when it ended.
    pub ended_secs: f64,
    /// False when another pruner held the lock.
    pub ran: bool,
    /// Rows deleted.
    pub deleted: u64,
    /// `DELETE` batches.
    pub batches: u64,
    /// Its error, if it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The pruner's runs so far, and whether one is in progress.
#[derive(Clone, Default)]
pub(crate) struct PruneLog {
    runs: Arc<Mutex<Vec<PruneRun>>>,
    running: Arc<AtomicBool>,
}

impl PruneLog {
    /// Whether a prune is running now.
    pub fn running(&self) -> bool {
        self.running.load(Ordering::Relaxed)
    }

    /// The runs that ended after `from` and up to `to` seconds since the start.
    pub fn ended(&self, from: f64, to: f64) -> Vec<PruneRun> {
        let runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        let within = |r: &&PruneRun| r.ended_secs > from && r.ended_secs <= to;
        runs.iter().filter(within).cloned().collect()
    }

    /// Every run.
    pub fn all(&self) -> Vec<PruneRun> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Runs `oncely_ops::prune` (batch deletes, the CLI's defaults but `window`) every `every`
/// until `stop`; a run in progress when `stop` comes is finished.
pub(crate) async fn prune_every(
    ops: oncely_ops::Ops,
    window: Duration,
    every: Duration,
    clock: Clock,
    log: PruneLog,
    stop: CancellationToken,
) {
    let options = PruneOptions {
        window,
        ..PruneOptions::default()
    };
    let mut tick = interval(every);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        let started_secs = clock.secs();
        log.running.store(true, Ordering::Relaxed);
        let result = prune(&ops, &options, &mut |_| {}).await;
        log.running.store(false, Ordering::Relaxed);
        let mut run = PruneRun {
            started_secs,
            ended_secs: clock.secs(),
            ran: false,
            deleted: 0,
            batches: 0,
            error: None,
        };
        match result {
            Ok(r) => (run.ran, run.deleted, run.batches) = (r.ran, r.deleted, r.batches),
            Err(e) => run.error = Some(format!("{e:#}")),
        }
        log.runs.lock().unwrap_or_else(|p| p.into_inner()).push(run);
    }
}

/// What the pin did: the xid its idle transaction held, and from when to when.
#[derive(Debug, Clone, Serialize)]
pub struct PinReport {
    /// `txid_current()` of the idle transaction.
    pub xid: i64,
    /// Seconds since the start when the transaction began.
    pub from_secs: f64,
    /// Seconds since the start when it was rolled back.
    pub to_secs: f64,
}

/// Holds an idle transaction with an xid on its own connection from [`PIN`]`.0` to
/// [`PIN`]`.1` of the run: `BEGIN; SELECT txid_current();`, then nothing until `ROLLBACK`.
/// The session turns `idle_in_transaction_session_timeout` off for itself, so that a server
/// which sets one does not end the pin early.
pub(crate) async fn pin(url: String, clock: Clock) -> Result<PinReport> {
    let mut conn = PgConnection::connect(&url)
        .await
        .context("connecting the pin")?;
    sqlx::raw_sql("SET idle_in_transaction_session_timeout = 0")
        .execute(&mut conn)
        .await
        .context("setting up the pin's session")?;
    sleep_until(clock.at(PIN.0)).await;
    sqlx::raw_sql("BEGIN")
        .execute(&mut conn)
        .await
        .context("beginning the pin")?;
    let xid: i64 = sqlx::query_scalar("SELECT txid_current()")
        .fetch_one(&mut conn)
        .await
        .context("taking the pin's xid")?;
    let from_secs = clock.secs();
    sleep_until(clock.at(PIN.1)).await;
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut conn)
        .await
        .context("ending the pin")?;
    let to_secs = clock.secs();
    conn.close().await.context("closing the pin")?;
    Ok(PinReport {
        xid,
        from_secs,
        to_secs,
    })
}

/// What the readers did.
#[derive(Debug, Clone, Serialize)]
pub struct ReadersReport {
    /// Connections.
    pub connections: usize,
    /// Repeatable-read `count(*)` transactions run, all connections together.
    pub counts: u64,
    /// The slowest of them, ms.
    pub slowest_ms: f64,
    /// Seconds since the start when they started.
    pub from_secs: f64,
    /// Seconds since the start when the last one stopped.
    pub to_secs: f64,
}

/// From [`READERS`]`.0` to [`READERS`]`.1` of the run, [`READER_CONNECTIONS`] connections each
/// loop `BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM <inbox>; COMMIT`.
pub(crate) async fn readers(url: String, inbox: String, clock: Clock) -> Result<ReadersReport> {
    let mut conns = Vec::new();
    for _ in 0..READER_CONNECTIONS {
        conns.push(
            PgConnection::connect(&url)
                .await
                .context("connecting a reader")?,
        );
    }
    sleep_until(clock.at(READERS.0)).await;
    let from_secs = clock.secs();
    let until = clock.at(READERS.1);
    let count = format!("SELECT count(*) FROM {inbox}");
    let each = conns.into_iter().map(|mut conn| {
        let count = count.clone();
        async move {
            let (mut done, mut slowest) = (0u64, Duration::ZERO);
            while tokio::time::Instant::now() < until {
                let started = Instant::now();
                sqlx::raw_sql("BEGIN ISOLATION LEVEL REPEATABLE READ")
                    .execute(&mut conn)
                    .await?;
                let _: i64 = sqlx::query_scalar(AssertSqlSafe(count.clone()))
                    .fetch_one(&mut conn)
                    .await?;
                sqlx::raw_sql("COMMIT").execute(&mut conn).await?;
                (done, slowest) = (done + 1, slowest.max(started.elapsed()));
            }
            conn.close().await?;
            Ok::<_, sqlx::Error>((done, slowest))
        }
    });
    let mut report = ReadersReport {
        connections: READER_CONNECTIONS,
        counts: 0,
        slowest_ms: 0.0,
        from_secs,
        to_secs: 0.0,
    };
    for result in futures::future::join_all(each).await {
        let (done, slowest) = result.context("a reader's count")?;
        report.counts += done;
        report.slowest_ms = report.slowest_ms.max(slowest.as_secs_f64() * 1e3);
    }
    report.to_secs = clock.secs();
    Ok(report)
}
