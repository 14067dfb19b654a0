//! Store outages under a real broker: the consumer runs against a source while the test takes
//! its store away for a while (read-only database, cut connection, restart), then gives it
//! back. Deliveries are counted at the source ([`CountingSource`]); effects are counted in
//! the database ([`Report`]).

use crate::check::Report;
use crate::faults::wait_for_rows;
use crate::ledger::Db;
use crate::runner::{RunOptions, run_until_idle};
use crate::workload::Workload;
use oncely_core::{Delivery, RawEnvelope, Result, Source};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Every delivery a source handed out: when (since the log started) and the message id.
#[derive(Debug)]
pub struct DeliveryLog {
    start: Instant,
    seen: Mutex<Vec<(Duration, Vec<u8>)>>,
}

impl DeliveryLog {
    /// An empty log whose clock starts now.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            seen: Mutex::new(Vec::new()),
        })
    }

    /// Time since the log started.
    pub fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn record(&self, d: &Delivery) {
        let id = d.message().id.clone().unwrap_or_default();
        let at = self.now();
        self.seen.lock().expect("log lock").push((at, id));
    }

    /// Deliveries handed out in `[from, to)`.
    pub fn window(&self, from: Duration, to: Duration) -> Window {
        let seen = self.seen.lock().expect("log lock");
        let mut per_id: HashMap<&[u8], u32> = HashMap::new();
        for (at, id) in seen.iter().filter(|(at, _)| *at >= from && *at < to) {
            let _ = at;
            *per_id.entry(id.as_slice()).or_default() += 1;
        }
        Window {
            deliveries: per_id.values().map(|n| u64::from(*n)).sum(),
            messages: per_id.len(),
            max_per_message: per_id.values().copied().max().unwrap_or(0),
        }
    }

    /// All deliveries so far.
    pub fn total(&self) -> usize {
        self.seen.lock().expect("log lock").len()
    }
}

/// Deliveries within a time window.
#[derive(Debug, Clone, Copy, Default)]
pub struct Window {
    /// Deliveries handed to the consumer.
    pub deliveries: u64,
    /// Distinct message ids among them.
    pub messages: usize,
    /// Most deliveries of one id.
    pub max_per_message: u32,
}

impl Window {
    /// Deliveries per distinct message (0 when none).
    pub fn per_message(&self) -> f64 {
        if self.messages == 0 {
            0.0
        } else {
            self.deliveries as f64 / self.messages as f64
        }
    }
}

/// A source that logs each delivery it hands out.
pub struct CountingSource<S> {
    inner: S,
    log: Arc<DeliveryLog>,
}

impl<S> CountingSource<S> {
    /// Wraps `inner`, logging into `log`.
    pub fn new(inner: S, log: Arc<DeliveryLog>) -> Self {
        Self { inner, log }
    }
}

impl<S: Source> Source for CountingSource<S> {
    async fn next(&mut self) -> Result<Option<Delivery>> {
        let next = self.inner.next().await;
        if let Ok(Some(d)) = &next {
            self.log.record(d);
        }
        next
    }

    fn read_ahead(&mut self, deliveries: usize) {
        self.inner.read_ahead(deliveries);
    }
}

/// How an outage run goes: sizes and timings.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Unique messages published (plus ~5 % exact duplicates).
    pub messages: usize,
    /// Published in chunks of this many…
    pub chunk: usize,
    /// …one chunk per this interval, so that messages keep arriving during the outage.
    pub every: Duration,
    /// The fault starts once this many ledger rows exist.
    pub down_after_rows: i64,
    /// How long the store stays down.
    pub outage: Duration,
    /// After the store is back, how long the run may take to complete.
    pub recover_within: Duration,
}

impl Default for Plan {
    /// 1,000 messages over ~15 s, the store down for 10 s after the first 150 are applied.
    fn default() -> Self {
        Self {
            messages: 1000,
            chunk: 35,
            every: Duration::from_millis(500),
            down_after_rows: 150,
            outage: Duration::from_secs(10),
            recover_within: Duration::from_secs(75),
        }
    }
}

/// What one outage run measured.
#[derive(Debug, Clone)]
pub struct Measured {
    /// The database's count of effects against the workload.
    pub report: Report,
    /// Deliveries while the store was down.
    pub outage: Window,
    /// How long the store was actually down (fault on → fault off).
    pub down_for: Duration,
    /// From the store's return to the first new ledger row (None: none came).
    pub first_apply: Option<Duration>,
    /// From the store's return to every message applied (None: not within the plan's limit).
    pub complete: Option<Duration>,
    /// Deliveries in the whole run.
    pub deliveries: usize,
}

impl Measured {
    /// One line with the figures, for the test log and reports.
    pub fn line(&self, label: &str) -> String {
        format!(
            "FIGURES {label}: store down {:.1} s; during it {} deliveries of {} messages = {:.2}/message (max {}); \
             after it: first apply {}, complete {}; whole run {} deliveries; ledger rows {} for {} unique ids, double {}, lost {}, valid ids dead-lettered {}",
            self.down_for.as_secs_f64(),
            self.outage.deliveries,
            self.outage.messages,
            self.outage.per_message(),
            self.outage.max_per_message,
            secs(self.first_apply),
            secs(self.complete),
            self.deliveries,
            self.report.ledger_rows,
            self.report.unique,
            self.report.double,
            self.report.lost,
            self.report.valid_dead_lettered,
        )
    }

    /// The promise under a store outage: 0 double, 0 lost, every message applied after
    /// recovery, fewer than 5 deliveries of any message while the store was down.
    pub fn assert_held(&self, label: &str) {
        eprintln!("{}", self.line(label));
        assert!(
            self.complete.is_some(),
            "{label}: not every message was applied after the store came back: {:#?}",
            self.report
        );
        self.report.assert_exact(label);
        assert!(
            self.outage.max_per_message < 5,
            "{label}: {} deliveries of one message while the store was down ({:.2}/message over {} messages): \
             the consumer loops instead of holding deliveries",
            self.outage.max_per_message,
            self.outage.per_message(),
            self.outage.messages
        );
    }
}

fn secs(d: Option<Duration>) -> String {
    d.map_or("never".to_owned(), |d| format!("{:.1} s", d.as_secs_f64()))
}

/// The database twice: as the consumer reaches it (perhaps through a fault) and as the
/// checker does (directly).
#[derive(Clone, Copy)]
pub struct Stores<'a> {
    /// The consumer's store.
    pub consumer: &'a Db,
    /// A separate connection to the same tables, for the checker.
    pub check: &'a Db,
}

/// Runs `source` into `stores.consumer` (the store under test, possibly behind a fault)
/// while `publish` feeds the workload in paced chunks; once `plan.down_after_rows` rows are
/// in, calls `down`, waits `plan.outage`, calls `up`, then waits until `stores.check` shows
/// every message applied. Measures, does not assert.
pub async fn outage_run<Src, P, PF, D, DF, U, UF>(
    label: &str,
    stores: Stores<'_>,
    source: Src,
    publish: P,
    plan: &Plan,
    down: D,
    up: U,
) -> Measured
where
    Src: Source,
    P: Fn(Vec<RawEnvelope>) -> PF + Send + 'static,
    PF: Future<Output = Result<()>> + Send,
    D: FnOnce() -> DF,
    DF: Future<Output = ()>,
    U: FnOnce() -> UF,
    UF: Future<Output = ()>,
{
    let (consumer_db, check_db) = (stores.consumer, stores.check);
    let workload = Workload::new(label, plan.messages, 0.05, 0, 17);
    let log = DeliveryLog::new();
    let stop = CancellationToken::new();
    let mut options = RunOptions::new("faults");
    // The run ends when the checker says so, not on idleness: a paused consumer is idle.
    options.idle_exit = plan.recover_within + Duration::from_secs(60);
    let run = {
        let (db, source, stop) = (
            consumer_db.clone(),
            CountingSource::new(source, log.clone()),
            stop.clone(),
        );
        tokio::spawn(async move { run_until_idle(&db, source, &options, stop).await })
    };
    let publisher = {
        let (messages, chunk, every) = (workload.messages.clone(), plan.chunk, plan.every);
        tokio::spawn(async move {
            for part in messages.chunks(chunk) {
                publish(part.to_vec()).await.expect("publish");
                tokio::time::sleep(every).await;
            }
        })
    };
    wait_for_rows(check_db, plan.down_after_rows).await;
    down().await;
    let t_down = log.now();
    tokio::time::sleep(plan.outage).await;
    up().await;
    let t_up = log.now();
    // Read after `up`: while the store is down, the checker's reads would wait too.
    let rows_at_up = rows(check_db).await;
    eprintln!(
        "{label}: store down at {:.1} s, back at {:.1} s ({rows_at_up} ledger rows)",
        t_down.as_secs_f64(),
        t_up.as_secs_f64()
    );
    let (mut first_apply, mut complete) = (None, None);
    let deadline = t_up + plan.recover_within;
    publisher.await.expect("publisher");
    while log.now() < deadline {
        if first_apply.is_none() && rows(check_db).await > rows_at_up {
            first_apply = Some(log.now() - t_up);
        }
        if let Ok(Ok(r)) = tokio::time::timeout(CHECK, Report::read(check_db, &workload)).await
            && (r.complete() || r.double > 0)
        {
            if r.complete() {
                complete = Some(log.now() - t_up);
            }
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.cancel();
    match tokio::time::timeout(Duration::from_secs(30), run).await {
        Ok(joined) => {
            if let Err(e) = joined.expect("consumer task") {
                eprintln!("{label}: consumer ended with {e}");
            }
        }
        Err(_) => eprintln!("{label}: consumer did not stop within 30 s of the cancel"),
    }
    let report = Report::read(check_db, &workload).await.expect("report");
    Measured {
        report,
        outage: log.window(t_down, t_up),
        down_for: t_up - t_down,
        first_apply,
        complete,
        deliveries: log.total(),
    }
}

/// How long one checker read may take (the checker's pool waits for a down server too).
const CHECK: Duration = Duration::from_secs(3);

async fn rows(db: &Db) -> i64 {
    match tokio::time::timeout(CHECK, db.counts()).await {
        Ok(Ok((rows, _))) => rows,
        _ => 0,
    }
}
