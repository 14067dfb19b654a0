//! A schedule's shape, drawn from one seed: the messages and their copies, the consumer's
//! settings, and how hard each fault fires. The run itself draws every later choice from
//! the same seed (see [`crate::world::World::chance`]), so a plan and its seed replay a run
//! exactly; the shrinker makes smaller plans with the same seed.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::fmt;

/// One message: a distinct id and what the producer sent for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg {
    /// The producer's id (`""` or one with a control character when `bad_id`).
    pub id: String,
    /// The amount the effect writes.
    pub amount: i64,
    /// Copies of the same payload published (at least 1).
    pub copies: u32,
    /// One more copy with the same id and another payload (amount + 1000).
    pub conflict: bool,
    /// The entity key (the lock key of group commit's lanes) and, if versioned, its version.
    pub key: Option<String>,
    /// Versioned apply: a newer version of the key wins, an older one is `Stale`.
    pub version: Option<i64>,
    /// The source time is far past the retention window: a fresh claim is quarantined `late`.
    pub late: bool,
    /// An unusable id: dead-lettered `bad_id`.
    pub bad_id: bool,
    /// The handler fails permanently on it (dead-lettered `permanent`).
    pub poison: bool,
    /// The handler panics on it (dead-lettered `panic`).
    pub panics: bool,
    /// The broker's envelope cannot be mapped (dead-lettered `undecodable_envelope`).
    pub hostile: bool,
}

/// Interruptions of the consumer process before its last run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Graceful shutdown (the token is cancelled, in-flight work finishes).
    Shutdown,
    /// The process dies: the run is dropped mid-flight, nothing settles.
    Kill,
}

/// A store fault window, in virtual milliseconds from the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outage {
    /// Start (ms).
    pub from: u64,
    /// End (ms, exclusive).
    pub until: u64,
    /// Read-only (writes refused) rather than down (everything refused).
    pub read_only: bool,
}

/// Everything a run is made of, except the choices drawn while it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The seed every choice comes from.
    pub seed: u64,
    /// The messages.
    pub msgs: Vec<Msg>,
    /// Group commit size (1: one transaction per delivery).
    pub group_commit: usize,
    /// Deliveries (or lanes, with group commit) in flight.
    pub concurrency: usize,
    /// Consumer processes sharing the source and the store (same consumer name).
    pub workers: usize,
    /// `Consumer::check_inbox_first`.
    pub inbox_first: bool,
    /// Group commit linger (ms).
    pub linger_ms: u64,
    /// Retry attempts for transient failures.
    pub attempts: u32,
    /// Broker: reorder window, duplicate and lost-ack rates.
    pub reorder: usize,
    /// Broker duplicate rate.
    pub dup_rate: f64,
    /// Broker lost-ack rate.
    pub lost_ack_rate: f64,
    /// Crash rate at each crash point.
    pub crash_rate: f64,
    /// Transient handler failure rate.
    pub transient_rate: f64,
    /// Store errors: deadlocks on claim and commit, and commits whose answer is lost
    /// (landed, but the caller sees an error).
    pub store_error_rate: f64,
    /// Broker faults: `Source::next` failing (a dropped connection) and acks failing.
    pub broker_fault_rate: f64,
    /// Store outages and read-only phases.
    pub outages: Vec<Outage>,
    /// Store call latency up to this (ms): varies the interleavings.
    pub max_delay_ms: u64,
    /// Interruptions before the last run, at these virtual times (ms).
    pub stops: Vec<(u64, Stop)>,
    /// Some copies are published while the consumer runs, up to this late (ms).
    pub publish_spread_ms: u64,
    /// A dead-letter replay runs at this time (ms), while messages are processed.
    pub replay_at: Option<u64>,
}

impl Plan {
    /// The plan of `seed`.
    pub fn generate(seed: u64) -> Plan {
        let mut r = ChaCha8Rng::seed_from_u64(seed);
        let n = r.random_range(1..=12);
        let keys = r.random_range(1..=4);
        let versioned = r.random_bool(0.3);
        let mut next_version = vec![0i64; keys];
        let msgs = (0..n)
            .map(|i| {
                let k = r.random_range(0..keys + 1);
                let key = (k < keys).then(|| format!("k{k}"));
                let version = match (versioned, k < keys) {
                    (true, true) => {
                        next_version[k] += 1;
                        Some(next_version[k])
                    }
                    _ => None,
                };
                let bad_id = r.random_bool(0.04);
                Msg {
                    id: match (bad_id, i % 2) {
                        (false, _) => format!("m{i}"),
                        (true, 0) => String::new(),
                        (true, _) => format!("m{i}\u{1}"),
                    },
                    amount: i as i64 * 10 + 1,
                    copies: r.random_range(1..=3),
                    conflict: r.random_bool(0.12),
                    key,
                    version,
                    late: r.random_bool(0.05),
                    bad_id,
                    poison: r.random_bool(0.04),
                    panics: r.random_bool(0.03),
                    hostile: false,
                }
            })
            .collect();
        let batch = r.random_bool(0.5);
        let outages = (0..r.random_range(0..=2))
            .map(|_| {
                let from = r.random_range(0..400);
                Outage {
                    from,
                    until: from + r.random_range(1..300),
                    read_only: r.random_bool(0.4),
                }
            })
            .collect();
        let stops = (0..r.random_range(0..=2))
            .map(|_| {
                let at = r.random_range(1..300);
                let stop = if r.random_bool(0.5) {
                    Stop::Kill
                } else {
                    Stop::Shutdown
                };
                (at, stop)
            })
            .collect();
        let mut plan = Plan {
            seed,
            msgs,
            group_commit: if batch { r.random_range(2..=8) } else { 1 },
            concurrency: r.random_range(1..=4),
            workers: r.random_range(1..=2),
            inbox_first: r.random_bool(0.3),
            linger_ms: if r.random_bool(0.3) { 2 } else { 0 },
            attempts: r.random_range(2..=4),
            reorder: r.random_range(1..=4),
            dup_rate: pick(&mut r, &[0.0, 0.1, 0.3]),
            lost_ack_rate: pick(&mut r, &[0.0, 0.05, 0.2]),
            crash_rate: pick(&mut r, &[0.0, 0.05, 0.15, 0.3]),
            transient_rate: pick(&mut r, &[0.0, 0.1, 0.3]),
            store_error_rate: pick(&mut r, &[0.0, 0.0, 0.05, 0.2]),
            broker_fault_rate: pick(&mut r, &[0.0, 0.0, 0.05, 0.15]),
            outages,
            max_delay_ms: r.random_range(0..=3),
            stops,
            publish_spread_ms: pick(&mut r, &[0, 0, 50, 200]) as u64,
            replay_at: r.random_bool(0.2).then(|| r.random_range(1..400)),
        };
        // Drawn last, so the plans of earlier versions keep every other choice.
        for m in &mut plan.msgs {
            m.hostile = r.random_bool(0.03);
        }
        if r.random_bool(0.05) {
            // The store is down when the consumer starts (its start check fails).
            let until = r.random_range(20..200);
            plan.outages.push(Outage {
                from: 0,
                until,
                read_only: false,
            });
        }
        plan
    }

    /// Smaller plans with the same seed, most reducing first: each drops one message,
    /// one fault or one interruption, or turns a knob down.
    pub fn shrinks(&self) -> Vec<Plan> {
        let mut out = Vec::new();
        let mut with = |f: &dyn Fn(&mut Plan)| {
            let mut p = self.clone();
            f(&mut p);
            if p != *self {
                out.push(p);
            }
        };
        for i in 0..self.msgs.len() {
            with(&|p| {
                if p.msgs.len() > 1 {
                    p.msgs.remove(i);
                }
            });
        }
        for i in 0..self.stops.len() {
            with(&|p| {
                p.stops.remove(i);
            });
        }
        for i in 0..self.outages.len() {
            with(&|p| {
                p.outages.remove(i);
            });
        }
        with(&|p| p.replay_at = None);
        with(&|p| p.crash_rate = 0.0);
        with(&|p| p.transient_rate = 0.0);
        with(&|p| p.broker_fault_rate = 0.0);
        with(&|p| p.store_error_rate = 0.0);
        with(&|p| p.dup_rate = 0.0);
        with(&|p| p.lost_ack_rate = 0.0);
        with(&|p| p.publish_spread_ms = 0);
        with(&|p| p.max_delay_ms = 0);
        with(&|p| p.workers = 1);
        with(&|p| p.concurrency = 1);
        with(&|p| p.reorder = 1);
        with(&|p| p.linger_ms = 0);
        with(&|p| p.inbox_first = false);
        for i in 0..self.msgs.len() {
            with(&|p| p.msgs[i].copies = 1);
            with(&|p| p.msgs[i].conflict = false);
            with(&|p| p.msgs[i].late = false);
            with(&|p| p.msgs[i].poison = false);
            with(&|p| p.msgs[i].panics = false);
            with(&|p| p.msgs[i].hostile = false);
        }
        out
    }
}

fn pick<T: Copy>(r: &mut ChaCha8Rng, from: &[T]) -> T {
    from[r.random_range(0..from.len())]
}

impl fmt::Display for Plan {
    /// One line: the settings and faults, then the messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "batch={} conc={} workers={} inbox_first={} linger={}ms attempts={} reorder={} dup={} lost_ack={} crash={} transient={} store_errors={} broker_faults={} delay<={}ms spread={}ms",
            self.group_commit,
            self.concurrency,
            self.workers,
            self.inbox_first,
            self.linger_ms,
            self.attempts,
            self.reorder,
            self.dup_rate,
            self.lost_ack_rate,
            self.crash_rate,
            self.transient_rate,
            self.store_error_rate,
            self.broker_fault_rate,
            self.max_delay_ms,
            self.publish_spread_ms
        )?;
        for o in &self.outages {
            let kind = if o.read_only { "read-only" } else { "down" };
            write!(f, " {kind}@{}..{}ms", o.from, o.until)?;
        }
        for (at, stop) in &self.stops {
            write!(f, " {stop:?}@{at}ms")?;
        }
        if let Some(at) = self.replay_at {
            write!(f, " replay@{at}ms")?;
        }
        write!(f, " | msgs:")?;
        for m in &self.msgs {
            write!(f, " {:?}x{}", m.id, m.copies)?;
            let flags = [
                (m.conflict, "+conflict"),
                (m.late, "+late"),
                (m.poison, "+poison"),
                (m.panics, "+panic"),
                (m.hostile, "+hostile"),
            ];
            for (on, name) in flags {
                if on {
                    write!(f, "{name}")?;
                }
            }
            if let (Some(k), Some(v)) = (&m.key, m.version) {
                write!(f, "@{k}v{v}")?;
            }
        }
        Ok(())
    }
}
