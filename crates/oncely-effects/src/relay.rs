//! The relay: dispatches committed outbox rows to a [`Publisher`], marks them dispatched,
//! retries failures with backoff, and keeps order per entity key. Several relays may run:
//! rows are locked while dispatched (`FOR UPDATE SKIP LOCKED` on PostgreSQL and MySQL 8 /
//! MariaDB 10.6+; SQLite's single writer serializes relays).

use crate::EffectTables;
use crate::outbox::channel;
use crate::outbox::{ROW_COLS, ROW_TYPES, message_of};
use crate::publisher::Publisher;
use oncely_core::{Error, Result};
use oncely_sql::clock::now_ms;
use oncely_sql::{AnyPool, Column, SqlTx, Tables, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

/// What one dispatch pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DispatchReport {
    /// Rows taken (locked) in this pass.
    pub taken: u64,
    /// Published and marked dispatched.
    pub dispatched: u64,
    /// Failed to publish: rescheduled with backoff.
    pub failed: u64,
}

/// Dispatches the outbox of `tables` to a publisher.
///
/// ```no_run
/// # use oncely_effects::Relay;
/// # async fn f(pool: sqlx::PgPool, broker: oncely_core::MemorySource) -> oncely_core::Result<()> {
/// let relay = Relay::new(pool, oncely_sql::Tables::default(), broker).listen_notify();
/// let shutdown = tokio_util::sync::CancellationToken::new();
/// relay.run(shutdown).await?;
/// # Ok(()) }
/// ```
///
/// The relay reads what the database can do from its pool's
/// [`Engine`](oncely_sql::Engine): pass the store's (`store.pool()` of an `AnyStore`, or
/// `SqlStore::any_pool`), and in portable mode it polls without being told.
pub struct Relay<P> {
    pool: AnyPool,
    tables: Tables,
    publisher: Arc<P>,
    batch: u32,
    poll: Duration,
    base_backoff: Duration,
    max_backoff: Duration,
    publish_timeout: Duration,
    wake: Arc<Notify>,
    listen: bool,
}

impl<P> Clone for Relay<P> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            tables: self.tables.clone(),
            publisher: self.publisher.clone(),
            batch: self.batch,
            poll: self.poll,
            base_backoff: self.base_backoff,
            max_backoff: self.max_backoff,
            publish_timeout: self.publish_timeout,
            wake: self.wake.clone(),
            listen: self.listen,
        }
    }
}

impl<P: Publisher> Relay<P> {
    /// A relay over the outbox of `tables` in `pool`, publishing to `publisher`. Defaults: 32
    /// rows per pass, polling every second, backoff from 100 ms doubling to 60 s, a 30 s
    /// publish timeout.
    pub fn new(pool: impl Into<AnyPool>, tables: Tables, publisher: impl Into<Arc<P>>) -> Self {
        Self {
            pool: pool.into(),
            tables,
            publisher: publisher.into(),
            batch: 32,
            poll: Duration::from_secs(1),
            base_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(60),
            publish_timeout: Duration::from_secs(30),
            wake: Arc::new(Notify::new()),
            listen: false,
        }
    }

    /// Wakes on PostgreSQL `LISTEN`/`NOTIFY` ([`crate::Outbox::enqueue`] notifies at commit)
    /// where the pool's engine has them ([`Engine::notifies`](oncely_sql::Engine::notifies));
    /// polling stays on as the fallback (a lost connection, a missed notification). Elsewhere
    /// (SQLite, MySQL, portable mode: CockroachDB, YugabyteDB, Citus, a transaction pooler)
    /// the relay says so once and polls ([`Relay::poll_interval`]).
    ///
    /// ```no_run
    /// # async fn f(store: oncely_sql::AnyStore) {
    /// let relay = oncely_effects::Relay::new(store.pool(), store.tables().clone(), oncely_core::MemorySource::new())
    ///     .poll_interval(std::time::Duration::from_millis(200))
    ///     .listen_notify();
    /// # }
    /// ```
    pub fn listen_notify(mut self) -> Self {
        self.listen = true;
        self
    }

    /// Rows locked and dispatched per pass.
    pub fn batch(mut self, rows: u32) -> Self {
        self.batch = rows.max(1);
        self
    }

    /// How often to look for rows when nothing wakes the relay (the fallback to NOTIFY).
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll = every;
        self
    }

    /// Backoff of a failed row: `base` doubling per failure, capped at `max`, jittered.
    pub fn backoff(mut self, base: Duration, max: Duration) -> Self {
        self.base_backoff = base;
        self.max_backoff = max.max(base);
        self
    }

    /// A publish that takes longer counts as failed (the row's lock is held meanwhile).
    pub fn publish_timeout(mut self, timeout: Duration) -> Self {
        self.publish_timeout = timeout;
        self
    }

    /// Wakes the relay from its poll sleep; call it after committing an enqueue in-process
    /// (PostgreSQL does this by itself with [`Relay::listen_notify`]).
    pub fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    fn backoff_after(&self, failures: u32) -> Duration {
        let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(20));
        let full = self
            .base_backoff
            .saturating_mul(factor)
            .min(self.max_backoff);
        full.mul_f64(0.5 + rand::random::<f64>() / 2.0)
    }

    fn select_sql(&self) -> String {
        let d = self.pool.dialect();
        let t = self.tables.outbox();
        let cols = ROW_COLS
            .split(", ")
            .map(|c| format!("o.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let lock = d.skip_locked("o");
        // Only the oldest undispatched row of each entity key is eligible, so order holds per
        // key even while an earlier row is locked by another relay or waits out its backoff.
        format!(
            "SELECT {cols} FROM {t} o WHERE o.dispatched_at IS NULL AND o.next_attempt_at <= {} \
             AND NOT EXISTS (SELECT 1 FROM {t} e WHERE e.entity_key = o.entity_key \
             AND e.dispatched_at IS NULL AND e.id < o.id) ORDER BY o.id LIMIT {}{lock}",
            d.param(1),
            d.param(2)
        )
    }

    /// One pass: in one transaction, locks up to `batch` eligible rows, publishes each,
    /// marks it dispatched (or reschedules it), and commits. Each publish runs in a span
    /// `oncely.outbox.publish` whose parent is the trace context stored with the row by
    /// [`crate::Outbox::enqueue`]; the message goes out with that stored `traceparent`. A relay killed mid-pass rolls
    /// back: its rows are dispatched again, with the same ids.
    pub async fn dispatch_once(&self) -> Result<DispatchReport> {
        let d = self.pool.dialect();
        let t = self.tables.outbox();
        let mut report = DispatchReport::default();
        let mut tx = self.pool.begin().await?;
        let rows = tx
            .fetch(
                &self.select_sql(),
                &[now_ms().into(), i64::from(self.batch).into()],
                ROW_TYPES,
            )
            .await?;
        for row in rows {
            report.taken += 1;
            let message = message_of(&row)?;
            let span = info_span!(
                "oncely.outbox.publish",
                message_id = %message.id,
                destination = %message.destination,
                attempt = message.attempts + 1,
            );
            // The trace the message was enqueued in (its stored `traceparent`) is the parent.
            oncely_core::trace::continue_trace(&span, |name| {
                message.headers.get(name).map(String::as_str)
            });
            let publish = self.publisher.publish(&message).instrument(span);
            let published = match tokio::time::timeout(self.publish_timeout, publish).await {
                Ok(result) => result,
                Err(_) => Err(Error::transient("publish timed out")),
            };
            match published {
                Ok(()) => {
                    let sql = format!(
                        "UPDATE {t} SET dispatched_at = {} WHERE id = {}",
                        d.param(1),
                        d.param(2)
                    );
                    tx.execute(&sql, &[now_ms().into(), message.seq.into()])
                        .await?;
                    report.dispatched += 1;
                }
                Err(e) => {
                    let delay = self.backoff_after(message.attempts + 1);
                    debug!(id = %message.id, error = %e, ?delay, "publish failed; backing off");
                    let sql = format!(
                        "UPDATE {t} SET attempts = attempts + 1, next_attempt_at = {}, last_error = {} WHERE id = {}",
                        d.param(1),
                        d.param(2),
                        d.param(3)
                    );
                    let next = now_ms() + delay.as_millis() as i64;
                    let args = vec![next.into(), Value::Text(e.to_string()), message.seq.into()];
                    tx.execute(&sql, &args).await?;
                    report.failed += 1;
                }
            }
        }
        tx.commit().await?;
        Ok(report)
    }

    /// Rows not yet dispatched.
    pub async fn undispatched(&self) -> Result<u64> {
        let sql = format!(
            "SELECT COUNT(*) FROM {} WHERE dispatched_at IS NULL",
            self.tables.outbox()
        );
        let rows = self.pool.clone().fetch(&sql, &[], &[Column::I64]).await?;
        Ok(rows.first().map_or(0, |r| r[0].i64().max(0) as u64))
    }

    /// Dispatches until `shutdown`: a pass whenever woken (NOTIFY or [`Relay::waker`]), after
    /// each full batch, and every poll interval. Returns the summed reports.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<DispatchReport> {
        let stop_listening = shutdown.child_token();
        if self.listen {
            if self.pool.engine().notifies() {
                let (pool, channel) = (self.pool.clone(), channel(&self.tables));
                tokio::spawn(listen(
                    pool,
                    channel,
                    self.wake.clone(),
                    stop_listening.clone(),
                ));
            } else {
                info!(outbox = %self.tables.outbox(), "no LISTEN/NOTIFY on this database (portable mode, or not PostgreSQL): the relay polls");
            }
        }
        let mut total = DispatchReport::default();
        while !shutdown.is_cancelled() {
            match self.dispatch_once().await {
                Ok(r) => {
                    total.taken += r.taken;
                    total.dispatched += r.dispatched;
                    total.failed += r.failed;
                    if r.taken == u64::from(self.batch) && r.failed == 0 {
                        continue;
                    }
                }
                Err(e) => {
                    warn!(error = %e, "outbox dispatch failed; retrying after the poll interval")
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(self.poll) => {}
            }
        }
        stop_listening.cancel();
        Ok(total)
    }
}

/// Wakes the relay on every notification of `channel` until `stop`; reconnects after a lost
/// connection (and wakes the relay then, for what was committed meanwhile).
async fn listen(pool: AnyPool, channel: String, wake: Arc<Notify>, stop: CancellationToken) {
    while !stop.is_cancelled() {
        let mut listener = match pool.listen(&channel).await {
            Ok(Some(l)) => l,
            Ok(None) => return,
            Err(e) => {
                // Never a tight loop: a database refusing LISTEN is asked again each second.
                warn!(error = %e, "LISTEN failed; polling meanwhile");
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                }
            }
        };
        // Anything committed while we were not listening is found by this pass.
        wake.notify_one();
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                n = listener.recv() => match n {
                    Ok(()) => wake.notify_one(),
                    Err(e) => {
                        warn!(error = %e, "LISTEN connection lost; reconnecting");
                        break;
                    }
                },
            }
        }
    }
}
