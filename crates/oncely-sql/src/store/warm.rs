//! Warm transactions (PostgreSQL): the transaction a checked commit opens, kept for the next
//! `begin`.
//!
//! A PostgreSQL commit goes out as one message, `SELECT 1; COMMIT; BEGIN` (see
//! `commit_checked` in crates/oncely-sql/src/store.rs), so after it the connection already holds
//! an open, empty transaction. Dropping it would cost a `ROLLBACK` and the pool's release ping,
//! and the next message a `BEGIN`: two round trips per message that do nothing. The store keeps
//! the handle here instead, and its next `begin` takes it; a handle not taken within
//! [`MAX_AGE`] is rolled back and its connection goes back to the pool.
//!
//! An empty transaction holds no snapshot, no transaction id and no lock (PostgreSQL takes them
//! at the first statement), so keeping it blocks nothing. What it changes: `now()` inside the
//! next transaction is the time of that `BEGIN`, at most [`MAX_AGE`] before the message's
//! first statement (oncely's own tables use `statement_timestamp()`).

use sqlx::{Database, Transaction};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// How long an open, empty transaction waits for the next `begin` before it is rolled back:
/// long enough to bridge the gap between two messages of a busy consumer, short enough that
/// an idle one gives its connections back at once and that `now()` stays close.
pub(crate) const MAX_AGE: Duration = Duration::from_millis(50);

/// Open, empty transactions of one store, newest last.
pub(crate) struct Warm<DB: Database> {
    inner: Mutex<Inner<DB>>,
}

struct Inner<DB: Database> {
    kept: Vec<Kept<DB>>,
    /// A sweeper task is running (it ends when nothing is kept).
    sweeping: bool,
}

struct Kept<DB: Database> {
    at: Instant,
    /// The host of a multi-host URL the connection is on (see [`crate::deploy::failover`]).
    host: Option<usize>,
    tx: Transaction<'static, DB>,
}

impl<DB: Database> Default for Warm<DB> {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Inner {
                kept: Vec::new(),
                sweeping: false,
            }),
        }
    }
}

impl<DB: Database> Warm<DB> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<DB>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The newest kept transaction on `host`, if one is younger than [`MAX_AGE`]; older ones
    /// (and ones on another host) are rolled back.
    pub(crate) fn take(&self, host: Option<usize>) -> Option<Transaction<'static, DB>> {
        let mut stale = Vec::new();
        let found = {
            let mut inner = self.lock();
            loop {
                match inner.kept.pop() {
                    None => break None,
                    Some(k) if k.host == host && k.at.elapsed() < MAX_AGE => break Some(k.tx),
                    Some(k) => stale.push(k),
                }
            }
        };
        drop(stale); // outside the lock: each drop queues a rollback and releases a connection
        found
    }

    /// Keeps `tx` (just opened by a commit on `host`) for the next `begin`, unless `limit`
    /// transactions are kept already or there is no Tokio runtime to sweep them; then `tx` is
    /// dropped (rolled back on release).
    pub(crate) fn keep(
        self: &Arc<Self>,
        tx: Transaction<'static, DB>,
        host: Option<usize>,
        limit: usize,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let start_sweeper = {
            let mut inner = self.lock();
            if inner.kept.len() >= limit {
                drop(inner);
                drop(tx);
                return;
            }
            inner.kept.push(Kept {
                at: Instant::now(),
                host,
                tx,
            });
            !std::mem::replace(&mut inner.sweeping, true)
        };
        if start_sweeper {
            runtime.spawn(sweep(Arc::downgrade(self)));
        }
    }

    /// Rolls every kept transaction back (their host failed).
    pub(crate) fn clear(&self) {
        let all = std::mem::take(&mut self.lock().kept);
        drop(all);
    }
}

/// Rolls back what waited longer than [`MAX_AGE`], every [`MAX_AGE`], until nothing is kept
/// (or the store is gone).
async fn sweep<DB: Database>(warm: Weak<Warm<DB>>) {
    loop {
        tokio::time::sleep(MAX_AGE).await;
        let Some(warm) = warm.upgrade() else { return };
        let (stale, sweeping) = {
            let mut inner = warm.lock();
            // Oldest first: the stale ones are a prefix.
            let old = inner.kept.partition_point(|k| k.at.elapsed() >= MAX_AGE);
            let stale: Vec<_> = inner.kept.drain(..old).collect();
            if inner.kept.is_empty() {
                inner.sweeping = false;
            }
            (stale, inner.sweeping)
        };
        drop(stale);
        if !sweeping {
            return;
        }
    }
}

impl<DB: Database> Drop for Warm<DB> {
    fn drop(&mut self) {
        let kept = std::mem::take(&mut self.lock().kept);
        if tokio::runtime::Handle::try_current().is_ok() {
            drop(kept);
        } else {
            // Releasing a pooled connection needs a runtime; without one (the store outlived
            // it) the process is ending: leave the connections to close with it.
            std::mem::forget(kept);
        }
    }
}
