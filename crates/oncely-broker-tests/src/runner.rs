//! Running a consumer over a source until it has been idle for a while.

use crate::ledger::Db;
use oncely_core::{
    Consumer, ConsumerName, Delivery, Handler, Result, RetryPolicy, Source, StatsSnapshot, Store,
};
use oncely_testkit::chaos::{CrashPlan, CrashingHandler, CrashingSource, CrashingStore};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How to run a consumer.
#[derive(Clone)]
pub struct RunOptions {
    /// Consumer name (inbox key).
    pub consumer: String,
    /// Stop after this long without a delivery.
    pub idle_exit: Duration,
    /// Deliveries processed at once.
    pub concurrency: usize,
    /// Injected crashes, if any (through oncely-testkit's chaos wrappers).
    pub chaos: Option<CrashPlan>,
    /// Deliveries per transaction (default the library's, group commit; 1: off).
    pub group_commit: usize,
}

impl RunOptions {
    /// Defaults: concurrency 8, idle exit 3 s, no chaos, group commit at the library's default.
    pub fn new(consumer: &str) -> Self {
        Self {
            consumer: consumer.to_owned(),
            idle_exit: Duration::from_secs(3),
            concurrency: 8,
            chaos: None,
            group_commit: oncely_core::DEFAULT_GROUP_COMMIT,
        }
    }
}

/// What a run did.
#[derive(Debug, Clone, Copy)]
pub struct RunSummary {
    /// The consumer's own counters (for information only; checks use the database).
    pub stats: StatsSnapshot,
    /// From start to the last delivery.
    pub busy: Duration,
    /// Highest delivery count the broker reported.
    pub max_attempt: u32,
    /// Crashes injected by [`RunOptions::chaos`].
    pub crashes: u64,
}

impl RunSummary {
    /// Deliveries per second while busy.
    pub fn rate(&self) -> f64 {
        self.stats.received as f64 / self.busy.as_secs_f64().max(1e-3)
    }
}

struct IdleSource<S> {
    inner: S,
    start: Instant,
    last_ms: Arc<AtomicU64>,
    max_attempt: Arc<AtomicU64>,
}

impl<S: Source> Source for IdleSource<S> {
    async fn next(&mut self) -> Result<Option<Delivery>> {
        let next = self.inner.next().await;
        if let Ok(Some(d)) = &next {
            self.max_attempt
                .fetch_max(u64::from(d.attempt()), Ordering::Relaxed);
            self.last_ms
                .store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
        }
        next
    }

    fn read_ahead(&mut self, deliveries: usize) {
        self.inner.read_ahead(deliveries);
    }
}

/// Runs `source` into `db` with the ledger handler until idle for `options.idle_exit`
/// (or `stop` is cancelled).
pub async fn run_until_idle<Src: Source>(
    db: &Db,
    source: Src,
    options: &RunOptions,
    stop: CancellationToken,
) -> Result<RunSummary> {
    let store = db.store().clone();
    match &options.chaos {
        Some(plan) => {
            let store = CrashingStore::new(store, plan.clone());
            let handler = CrashingHandler(db.handler());
            let source = CrashingSource::new(source, plan.clone());
            run_store_until_idle(store, handler, source, options, stop).await
        }
        None => run_store_until_idle(store, db.handler(), source, options, stop).await,
    }
}

/// [`run_until_idle`] with any store and its handler (the Redis store's ledger, say), without
/// chaos.
pub async fn run_store_until_idle<S, H, Src>(
    store: S,
    handler: H,
    source: Src,
    options: &RunOptions,
    stop: CancellationToken,
) -> Result<RunSummary>
where
    S: Store,
    H: Handler<S::Tx>,
    Src: Source,
{
    let consumer = Consumer::new(
        ConsumerName::new(&options.consumer).map_err(oncely_core::Error::config)?,
        store,
        handler,
    )
    .concurrency(options.concurrency)
    .group_commit(options.group_commit)
    .retry(RetryPolicy::default().max_attempts(10));
    let start = Instant::now();
    let last_ms = Arc::new(AtomicU64::new(0));
    let max_attempt = Arc::new(AtomicU64::new(0));
    let source = IdleSource {
        inner: source,
        start,
        last_ms: last_ms.clone(),
        max_attempt: max_attempt.clone(),
    };
    let token = stop.child_token();
    let watchdog = {
        let token = token.clone();
        let idle = options.idle_exit;
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = token.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
                let last = Duration::from_millis(last_ms.load(Ordering::Relaxed));
                if start.elapsed().saturating_sub(last) > idle {
                    token.cancel();
                    return;
                }
            }
        })
    };
    let stats = consumer.run(source, token.clone()).await;
    token.cancel();
    let _ = watchdog.await;
    let busy = start.elapsed().saturating_sub(options.idle_exit);
    Ok(RunSummary {
        stats: stats?,
        busy,
        max_attempt: max_attempt.load(Ordering::Relaxed) as u32,
        crashes: options.chaos.as_ref().map_or(0, CrashPlan::fired),
    })
}
