//! What every wrapper of one run shares: the seed's choices, the virtual clock, the trace,
//! the coverage marks and the violations seen while the run goes on.

use crate::plan::Plan;
use sha2::{Digest, Sha256};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

/// Trace lines kept per run (the digest covers them all).
const TRACE_KEEP: usize = 4000;

/// Crashes one run may inject in all, so that every run ends.
const MAX_CRASHES: u32 = 40;

/// A crash point's injected unwind payload: the task dies as a killed process would.
#[derive(Debug)]
pub struct Crash(pub &'static str);

/// The store's condition at a virtual moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreState {
    /// Answers.
    Up,
    /// Refuses everything.
    Down,
    /// Refuses writes.
    ReadOnly,
}

#[derive(Default)]
struct Inner {
    trace: Vec<String>,
    lines: u64,
    hasher: Sha256,
    marks: BTreeSet<&'static str>,
    counts: HashMap<String, u32>,
    crashes: u32,
    violations: Vec<String>,
    store_state: Option<StoreState>,
}

/// The shared state of one run. Cheap to clone.
#[derive(Clone)]
pub struct World {
    /// The plan being run.
    pub plan: Arc<Plan>,
    start: Instant,
    inner: Arc<Mutex<Inner>>,
}

impl World {
    /// A world for `plan`, its clock starting now (virtual).
    pub fn new(plan: Plan) -> Self {
        Self {
            plan: Arc::new(plan),
            start: Instant::now(),
            inner: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Virtual milliseconds since the start.
    pub fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// The virtual instant `ms` after the start.
    pub fn at(&self, ms: u64) -> Instant {
        self.start + Duration::from_millis(ms)
    }

    /// A number in `[0, 1)` for the `n`-th time `what` is asked: a hash of the seed, so it
    /// does not depend on which task asks first.
    pub fn draw(&self, what: &str, n: u32) -> f64 {
        let mut h = Sha256::new();
        h.update(self.plan.seed.to_le_bytes());
        h.update(what.as_bytes());
        h.update(n.to_le_bytes());
        let d = h.finalize();
        (u64::from_le_bytes(d[..8].try_into().expect("8 bytes")) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Counts one more occurrence of `what` and returns the count (1 the first time).
    pub fn count(&self, what: &str) -> u32 {
        let mut g = self.lock();
        let n = g.counts.entry(what.to_owned()).or_default();
        *n += 1;
        *n
    }

    /// How many times `what` was counted so far.
    pub fn counted(&self, what: &str) -> u32 {
        self.lock().counts.get(what).copied().unwrap_or(0)
    }

    /// True with probability `rate` for the next occurrence of `what` (only its first
    /// `upto` occurrences can be true).
    pub fn chance(&self, what: &str, rate: f64, upto: u32) -> bool {
        if rate <= 0.0 {
            return false;
        }
        let n = self.count(what);
        n <= upto && self.draw(what, n) < rate
    }

    /// Crashes the current task at crash point `point` if the seed says so for this
    /// occurrence of `key` (an id, or a counter for steps that hold no id).
    pub fn maybe_crash(&self, point: &'static str, key: &str) {
        let what = format!("crash:{point}:{key}");
        if !self.chance(&what, self.plan.crash_rate, 3) {
            return;
        }
        {
            let mut g = self.lock();
            if g.crashes >= MAX_CRASHES {
                return;
            }
            g.crashes += 1;
        }
        self.mark(point_mark(point));
        self.event(format!("crash after {point} ({key})"));
        std::panic::resume_unwind(Box::new(Crash(point)));
    }

    /// A virtual latency for the next store call: up to the plan's maximum.
    pub async fn latency(&self) {
        let max = self.plan.max_delay_ms;
        if max == 0 {
            return;
        }
        let n = self.count("latency");
        let ms = (self.draw("latency", n) * (max + 1) as f64) as u64;
        if ms > 0 {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
    }

    /// The store's condition now, by the plan's outages (a change goes to the trace).
    pub fn store_state(&self) -> StoreState {
        let now = self.now_ms();
        let state = self
            .plan
            .outages
            .iter()
            .find(|o| (o.from..o.until).contains(&now))
            .map_or(StoreState::Up, |o| {
                if o.read_only {
                    StoreState::ReadOnly
                } else {
                    StoreState::Down
                }
            });
        let changed = {
            let mut g = self.lock();
            let changed = g.store_state != Some(state);
            g.store_state = Some(state);
            changed
        };
        if changed {
            self.event(format!("store {state:?}"));
            match state {
                StoreState::Down => self.mark("fault: store down"),
                StoreState::ReadOnly => self.mark("fault: store read-only"),
                StoreState::Up => {}
            }
        }
        state
    }

    /// Appends a line to the trace (with the virtual time) and the digest.
    pub fn event(&self, line: impl Into<String>) {
        let line = format!("{:>5}ms {}", self.now_ms(), line.into());
        let mut g = self.lock();
        g.hasher.update(line.as_bytes());
        g.hasher.update(b"\n");
        g.lines += 1;
        if g.trace.len() < TRACE_KEEP {
            g.trace.push(line);
        }
    }

    /// Notes that this run reached `what` (a crash point or a fault), for the coverage table.
    pub fn mark(&self, what: &'static str) {
        self.lock().marks.insert(what);
    }

    /// Records a broken invariant.
    pub fn violation(&self, what: impl Into<String>) {
        let what = what.into();
        self.event(format!("VIOLATION {what}"));
        self.lock().violations.push(what);
    }

    /// Violations so far.
    pub fn violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }

    /// The coverage marks of this run.
    pub fn marks(&self) -> BTreeSet<&'static str> {
        self.lock().marks.clone()
    }

    /// The trace lines kept.
    pub fn trace(&self) -> Vec<String> {
        self.lock().trace.clone()
    }

    /// The digest of every trace line (lower-case hex).
    pub fn digest(&self) -> String {
        hex::encode(self.lock().hasher.clone().finalize())
    }
}

/// Every coverage mark a run can make, in the order the table shows them.
pub const MARKS: &[&str] = &[
    "mode: one per transaction",
    "mode: group commit",
    "crash: receive",
    "crash: begin",
    "crash: claim",
    "crash: effect",
    "crash: commit",
    "crash: ack",
    "crash: dead-letter",
    "crash: dead-lettered",
    "stop: graceful shutdown",
    "stop: process killed",
    "fault: store down",
    "fault: store read-only",
    "fault: store down at start",
    "fault: undecodable envelope",
    "fault: handler write refused",
    "fault: handler transient error",
    "fault: store deadlock",
    "fault: commit answer lost",
    "fault: lost ack",
    "fault: ack failed",
    "fault: broker connection lost",
    "fault: broker duplicate",
    "dead letter: bad_id",
    "dead letter: conflict",
    "dead letter: permanent",
    "dead letter: attempts_exhausted",
    "dead letter: panic",
    "dead letter: late",
    "dead letter: undecodable_envelope",
    "outcome: duplicate",
    "outcome: stale",
    "outcome: conflict",
    "outcome: abandoned",
    "outcome: handed back",
    "path: redelivery",
    "path: two workers",
    "path: inbox read first",
    "path: store hold",
    "path: versioned stale",
    "path: nack at shutdown",
    "path: dead-letter replay during the run",
    "path: group committed whole",
    "path: group fell back to one at a time",
];

/// The coverage name of a crash point.
fn point_mark(point: &'static str) -> &'static str {
    match point {
        "receive" => "crash: receive",
        "begin" => "crash: begin",
        "claim" => "crash: claim",
        "effect" => "crash: effect",
        "commit" => "crash: commit",
        "ack" => "crash: ack",
        "dead-letter" => "crash: dead-letter",
        "dead-lettered" => "crash: dead-lettered",
        _ => "crash: other",
    }
}
