//! The reconciler: resolves journal rows left `pending` (a crash between record and done, with
//! no redelivery to finish the job) through a user-supplied check.

use crate::journal::{Journal, JournalEntry, Performed};
use oncely_core::{Error, Result};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// What the provider says about a pending effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// The provider performed it: record `done` with its reference.
    Done(String),
    /// The provider has no trace of it: call again with the same idempotency key.
    RetryCall,
    /// It can't be done (rejected, expired): record `failed` with the reason.
    Failed(String),
}

/// The user's side of reconciliation: how to ask the provider about a key, and how to repeat
/// the call.
pub trait Resolve: Send + Sync + 'static {
    /// Asks the provider what became of `entry.key` (e.g. `GET /emails?idempotency_key=…`).
    fn check(&self, entry: &JournalEntry) -> impl Future<Output = Result<Resolution>> + Send;

    /// Repeats the call from `entry.request`, with `entry.key` as idempotency key, and returns
    /// the provider's reference.
    fn call(&self, entry: &JournalEntry) -> impl Future<Output = Result<String>> + Send;
}

/// What one reconciliation pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Pending rows looked at (leased by this reconciler; rows another one held are skipped).
    pub checked: u64,
    /// Marked done from the check.
    pub done: u64,
    /// Called again, then marked done.
    pub recalled: u64,
    /// Marked failed.
    pub failed: u64,
    /// Left pending because the check or the call failed (tried again next pass).
    pub errors: u64,
}

/// Resolves rows pending for longer than a timeout.
///
/// ```no_run
/// # use oncely_effects::*;
/// # async fn f<R: Resolve>(journal: Journal, resolver: R) -> oncely_core::Result<()> {
/// let reconciler = Reconciler::new(journal, resolver).timeout(std::time::Duration::from_secs(300));
/// let report = reconciler.run_once().await?;
/// println!("{} resolved as done", report.done);
/// # Ok(()) }
/// ```
pub struct Reconciler<R> {
    journal: Journal,
    resolver: R,
    timeout: Duration,
    batch: u32,
    holder: String,
}

/// A name for this reconciler's leases, unique per process and instance.
fn holder_name() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{}-{nanos:x}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// Shortest lease, for a zero timeout.
const MIN_LEASE: Duration = Duration::from_secs(30);

impl<R: Resolve> Reconciler<R> {
    /// A reconciler over `journal` (default timeout 5 minutes, 100 rows per pass).
    pub fn new(journal: Journal, resolver: R) -> Self {
        Self {
            journal,
            resolver,
            timeout: Duration::from_secs(300),
            batch: 100,
            holder: holder_name(),
        }
    }

    /// Rows are reconciled once pending for this long since their last change (record or call
    /// start). Choose more than the longest call takes. A reconciler leases each row it works
    /// on for this long (at least 30 s), so other reconcilers leave it alone meanwhile.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Rows per pass.
    pub fn batch(mut self, rows: u32) -> Self {
        self.batch = rows.max(1);
        self
    }

    /// One pass over the rows pending longer than the timeout.
    pub async fn run_once(&self) -> Result<ReconcileReport> {
        let mut report = ReconcileReport::default();
        for entry in self
            .journal
            .pending_older_than(self.timeout, self.batch)
            .await?
        {
            let ttl = self.timeout.max(MIN_LEASE);
            if !self
                .journal
                .lease(&entry.key, &self.holder, self.timeout, ttl)
                .await?
            {
                continue; // another reconciler has it, or it was resolved meanwhile
            }
            report.checked += 1;
            if let Err(e) = self.resolve(&entry, &mut report).await {
                warn!(key = %entry.key, error = %e, "could not reconcile; left pending");
                report.errors += 1;
                if let Err(e) = self.journal.release(&entry.key, &self.holder).await {
                    warn!(key = %entry.key, error = %e, "could not release the lease; it expires");
                }
            }
        }
        Ok(report)
    }

    async fn resolve(&self, entry: &JournalEntry, report: &mut ReconcileReport) -> Result<()> {
        match self.resolver.check(entry).await? {
            Resolution::Done(provider_ref) => {
                self.journal.mark_done(&entry.key, &provider_ref).await?;
                report.done += 1;
            }
            Resolution::RetryCall => {
                self.journal.start_call(&entry.key).await?;
                let provider_ref = self.resolver.call(entry).await?;
                self.journal.mark_done(&entry.key, &provider_ref).await?;
                report.recalled += 1;
            }
            Resolution::Failed(reason) => {
                self.journal.mark_failed(&entry.key, &reason).await?;
                report.failed += 1;
            }
        }
        Ok(())
    }

    /// Runs a pass every `interval` until `shutdown`, summing the reports.
    pub async fn run(
        &self,
        interval: Duration,
        shutdown: CancellationToken,
    ) -> Result<ReconcileReport> {
        let mut total = ReconcileReport::default();
        loop {
            match self.run_once().await {
                Ok(r) => {
                    total.checked += r.checked;
                    total.done += r.done;
                    total.recalled += r.recalled;
                    total.failed += r.failed;
                    total.errors += r.errors;
                }
                Err(e) => warn!(error = %e, "reconciliation pass failed"),
            }
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(total),
                _ = tokio::time::sleep(interval) => {}
            }
        }
    }
}

impl Journal {
    /// [`Journal::perform`] with the call and the check of a [`Resolve`]: when the row is
    /// already `pending` and a call was started before (`entry.calls > 0`, a crash or a lost
    /// answer), the provider is asked first (`check`) and called again only on
    /// [`Resolution::RetryCall`]. Use it for providers that do not deduplicate by key (a
    /// call still racing with the check can then be repeated); with providers that do, it
    /// saves the repeated call.
    pub async fn perform_checked<R: Resolve>(
        &self,
        key: &str,
        kind: &str,
        request: &[u8],
        resolver: &R,
    ) -> Result<Performed> {
        let entry = match self.open(key, kind, request).await? {
            Ok(pending) => pending,
            Err(finished) => return Ok(finished),
        };
        if let Some(resolved) = self.check_before_call(&entry, resolver).await? {
            return Ok(resolved);
        }
        self.start_call(key).await?;
        let provider_ref = resolver.call(&entry).await?;
        self.complete(key, provider_ref).await
    }

    /// The step of [`Journal::perform_checked`] between [`Journal::open`] and the call: for
    /// a row a call was started for before (`entry.calls > 0`), asks `resolver` and records
    /// what it says. `Ok(Some(_))`: resolved, do not call; `Ok(None)`: call now; a provider
    /// that says the effect failed is a permanent error.
    pub async fn check_before_call<R: Resolve>(
        &self,
        entry: &JournalEntry,
        resolver: &R,
    ) -> Result<Option<Performed>> {
        if entry.calls == 0 {
            return Ok(None);
        }
        let key = entry.key.as_str();
        match resolver.check(entry).await? {
            Resolution::Done(provider_ref) => {
                self.mark_done(key, &provider_ref).await?;
                Ok(Some(Performed::AlreadyDone { provider_ref }))
            }
            Resolution::Failed(reason) => {
                self.mark_failed(key, &reason).await?;
                Err(Error::permanent(format!("effect {key} failed: {reason}")))
            }
            Resolution::RetryCall => Ok(None),
        }
    }
}
