//! The dead-letter groups a page shows, without making the page wait for them: the `GROUP BY`
//! over every matching row is linear in them (1.37 s at 1,000,000 rows on SQLite), so a page
//! waits at most [`BUDGET`] for it. Past that, the query finishes in the background and the
//! page shows the last groups computed for the same filter (with their age) or says they are
//! being counted; a reload shows them. Results are kept [`FRESH`] per filter.

use crate::Console;
use oncely_ops::browse::{self, Group, Query};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long a page waits for its groups.
pub const BUDGET: Duration = Duration::from_millis(150);
/// How long computed groups are shown without counting again.
pub const FRESH: Duration = Duration::from_secs(10);
/// Filters remembered (the oldest entries go first).
const KEPT: usize = 64;

/// Groups as a page shows them.
pub(crate) enum Shown {
    /// Computed `age` ago (zero: just now).
    Ready(Arc<Vec<Group>>, Duration),
    /// Still being counted, nothing older to show.
    Counting,
    /// The query failed (logged).
    Failed,
}

#[derive(Default)]
struct Entry {
    done: Option<(Instant, Arc<Vec<Group>>)>,
    running: Option<watch::Receiver<bool>>,
    failed: bool,
}

/// Groups per filter.
#[derive(Default)]
pub(crate) struct Groups {
    by_filter: Mutex<HashMap<String, Entry>>,
    /// Bumped by [`Groups::clear`]: a count begun before is not kept.
    generation: std::sync::atomic::AtomicU64,
}

impl Groups {
    /// Forgets every result (after an action changed the rows).
    pub fn clear(&self) {
        if let Ok(mut all) = self.by_filter.lock() {
            self.generation
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            all.values_mut().for_each(|e| e.done = None);
        }
    }

    /// The groups of `q`, waiting at most [`BUDGET`].
    pub async fn get(&self, console: &Console, q: &Query) -> Shown {
        let key = serde_json::to_string(q).unwrap_or_default();
        let mut wait = {
            let Ok(mut all) = self.by_filter.lock() else {
                return Shown::Failed;
            };
            if all.len() > KEPT && !all.contains_key(&key) {
                let oldest = all
                    .iter()
                    .min_by_key(|(_, e)| e.done.as_ref().map(|(t, _)| *t))
                    .map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    all.remove(&k);
                }
            }
            let entry = all.entry(key.clone()).or_default();
            if let Some((at, g)) = &entry.done
                && at.elapsed() < FRESH
            {
                return Shown::Ready(g.clone(), at.elapsed());
            }
            match &entry.running {
                Some(rx) => rx.clone(),
                None => {
                    let (tx, rx) = watch::channel(false);
                    entry.running = Some(rx.clone());
                    entry.failed = false;
                    let (console, q, key) = (console.clone(), q.clone(), key.clone());
                    let generation = self.generation.load(std::sync::atomic::Ordering::SeqCst);
                    tokio::spawn(async move {
                        let result = browse::groups(&console.inner.ops, &q).await;
                        let groups = &console.inner.groups;
                        if let Ok(mut all) = groups.by_filter.lock() {
                            let current =
                                groups.generation.load(std::sync::atomic::Ordering::SeqCst);
                            let entry = all.entry(key).or_default();
                            entry.running = None;
                            match result {
                                Ok(g) if generation == current => {
                                    entry.done = Some((Instant::now(), Arc::new(g)))
                                }
                                Ok(_) => {}
                                Err(e) => {
                                    tracing::warn!("console: grouping dead letters: {e}");
                                    entry.failed = true;
                                }
                            }
                        }
                        let _ = tx.send(true);
                    });
                    rx
                }
            }
        };
        let _ = tokio::time::timeout(BUDGET, wait.wait_for(|done| *done)).await;
        let Ok(all) = self.by_filter.lock() else {
            return Shown::Failed;
        };
        match all.get(&key) {
            Some(Entry {
                done: Some((at, g)),
                ..
            }) => Shown::Ready(g.clone(), at.elapsed()),
            Some(Entry { failed: true, .. }) => Shown::Failed,
            // Still running, or counted before an action changed the rows (a reload recounts).
            _ => Shown::Counting,
        }
    }
}
