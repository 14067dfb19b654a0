//! Multi-host URLs: a store opened on `mysql://u@h1:3306,h2:3306,h3:3306/app` (or the same
//! for PostgreSQL) uses one host at a time and moves to the next when the one in use is
//! unavailable (a Galera node killed, a primary gone).
//!
//! sqlx pools connect with one set of options; [`Failover`] swaps them
//! ([`sqlx::Pool::set_connect_options`]) when the store sees the current host fail with
//! [`ErrorKind::Unavailable`] at `begin` or `commit`. Connections to the dead host fail their
//! ping and are replaced by connections to the new one. The failed attempt itself is held and
//! retried by the runtime like any unavailable store; its claim either committed (the retry
//! finds a duplicate) or did not (the retry applies it), so a commit whose outcome is unknown
//! is safe.
//!
//! [`ErrorKind::Unavailable`]: oncely_core::ErrorKind::Unavailable

use crate::url::host_of;
use sqlx::{Connection, Database, Pool};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How long a multi-host store waits for a connection before declaring the host unavailable
/// (single-host stores wait 30 s: there is nowhere else to go).
pub(crate) const FAILOVER_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

type Options<DB> = <<DB as Database>::Connection as Connection>::Options;

/// The hosts of a multi-host URL and which one the pool uses.
pub(crate) struct Failover<DB: Database> {
    hosts: Vec<(String, Options<DB>)>,
    current: AtomicUsize,
}

impl<DB: Database> Failover<DB> {
    /// `hosts`: each host's label (for logs) and connect options, in the URL's order;
    /// `current`: the one the pool was opened on.
    pub(crate) fn new(hosts: Vec<(String, Options<DB>)>, current: usize) -> Self {
        Self {
            hosts,
            current: AtomicUsize::new(current),
        }
    }

    /// The host in use now; pass it to [`Failover::failed`] when an operation begun on it fails.
    pub(crate) fn current(&self) -> usize {
        self.current.load(Ordering::Acquire)
    }

    /// The host `seen` failed: the pool moves to the next host, unless another task already
    /// moved it (so that many failures at once move it one step, not many).
    pub(crate) fn failed(&self, pool: &Pool<DB>, seen: usize) {
        let next = (seen + 1) % self.hosts.len();
        if self
            .current
            .compare_exchange(seen, next, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let (from, to) = (&self.hosts[seen].0, &self.hosts[next].0);
            tracing::warn!(from, to, "database host unavailable; failing over");
            pool.set_connect_options(self.hosts[next].1.clone());
        }
    }
}

/// Each host's label and URL, for [`Failover::new`].
pub(crate) fn labelled(urls: &[String]) -> Vec<(String, &str)> {
    urls.iter().map(|u| (host_of(u), u.as_str())).collect()
}
