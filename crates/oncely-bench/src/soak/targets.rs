//! The pure half of the soak mode: the phases of a run, the figures of one sample, and the
//! targets judged over the samples (tested without a database, see `tests.rs`).

use crate::cells::Check;
use crate::group::quantile_ms;
use serde::Serialize;
use std::time::Duration;

/// Seconds between two samples.
pub const SAMPLE_SECS: f64 = 10.0;
/// When the idle transaction pins the xmin horizon, as fractions of the run.
pub const PIN: (f64, f64) = (0.25, 0.5);
/// When the repeatable-read readers loop, as fractions of the run.
pub const READERS: (f64, f64) = (0.625, 0.875);
/// Target (a): consumed within this fraction of offered in every interval.
pub const RATE_TOLERANCE: f64 = 0.10;
/// Target (b): the p99 of intervals with a prune at most this times the p99 of the others.
pub const PRUNE_P99_FACTOR: f64 = 2.0;
/// Target (d): seconds after the pin ends within which the backlog is near 0 again; target
/// (c) leaves the same span out as the pin's aftermath.
pub const RECOVERY_SECS: f64 = 120.0;
/// Target (d): a backlog is "near 0" at most this many seconds of offered load.
pub const NEAR_ZERO_SECS: f64 = 1.0;

/// The phase of the run a sample falls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// No fault: before the pin and after the readers.
    Steady,
    /// An idle transaction holds an xid: vacuum cannot remove dead tuples.
    Pinned,
    /// The pin has ended; the readers have not started.
    AfterPin,
    /// Four connections loop repeatable-read `count(*)`s of the inbox.
    Readers,
}

impl Phase {
    /// The phase at `fraction` (0..=1) of the run.
    pub fn at(fraction: f64) -> Self {
        if (PIN.0..PIN.1).contains(&fraction) {
            Self::Pinned
        } else if (PIN.1..READERS.0).contains(&fraction) {
            Self::AfterPin
        } else if (READERS.0..READERS.1).contains(&fraction) {
            Self::Readers
        } else {
            Self::Steady
        }
    }

    /// Its name in the samples: `steady`, `pinned`, `after-pin`, `readers`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Steady => "steady",
            Self::Pinned => "pinned",
            Self::AfterPin => "after-pin",
            Self::Readers => "readers",
        }
    }
}

/// The figures of one interval of the run (of [`SAMPLE_SECS`], the last one maybe shorter).
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Seconds since the start at the end of the interval.
    pub elapsed_secs: f64,
    /// Length of the interval, seconds.
    pub seconds: f64,
    /// The phase at the middle of the interval.
    pub phase: Phase,
    /// Messages published per second.
    pub offered_per_sec: f64,
    /// Messages committed (acked) per second.
    pub consumed_per_sec: f64,
    /// Published and not yet acked, at the end of the interval.
    pub backlog: u64,
    /// Median latency of the messages acked in the interval (publish → ack after commit), ms.
    pub p50_ms: f64,
    /// 99th percentile of the same, ms.
    pub p99_ms: f64,
    /// Prune runs that ended in the interval.
    pub prunes: u32,
    /// Inbox rows those runs deleted.
    pub pruned_rows: u64,
    /// `count(*)` of the inbox at the end of the interval.
    pub inbox_rows: u64,
    /// `n_dead_tup` of the inbox (`pg_stat_user_tables`) at the end of the interval.
    pub dead_tuples: u64,
    /// Vacuums of the inbox so far (`vacuum_count + autovacuum_count`).
    pub vacuums: u64,
    /// WAL bytes written per second (`pg_current_wal_lsn()` difference).
    pub wal_bytes_per_sec: f64,
    /// `n_dead_tup` of the effect's accounts table: with the horizon pinned, the old versions
    /// of its few hundred rows, updated thousands of times a second, cannot be removed either.
    pub accounts_dead_tuples: u64,
    /// Index entries read per second in the inbox's indexes (`idx_tup_read`, dead ones too).
    pub inbox_index_reads_per_sec: f64,
    /// The same in the accounts table's index: with the horizon pinned, each update of an
    /// account walks the versions no vacuum may remove.
    pub accounts_index_reads_per_sec: f64,
}

impl Sample {
    /// Seconds since the start at the beginning of the interval.
    pub fn start_secs(&self) -> f64 {
        self.elapsed_secs - self.seconds
    }
}

/// The latencies of the messages acked in one interval, split by whether a prune run was in
/// progress at the ack.
#[derive(Debug, Clone, Default)]
pub struct Latencies {
    /// Acked while no prune ran.
    pub outside_prune: Vec<Duration>,
    /// Acked while a prune ran.
    pub during_prune: Vec<Duration>,
}

impl Latencies {
    /// Messages acked in the interval.
    pub fn len(&self) -> usize {
        self.outside_prune.len() + self.during_prune.len()
    }

    /// Whether none was acked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every latency, in no order.
    pub fn all(&self) -> impl Iterator<Item = &Duration> {
        self.outside_prune.iter().chain(&self.during_prune)
    }

    /// Every latency, sorted.
    pub fn sorted(&self) -> Vec<Duration> {
        sorted(self.all())
    }
}

fn sorted<'a>(values: impl Iterator<Item = &'a Duration>) -> Vec<Duration> {
    let mut all: Vec<Duration> = values.copied().collect();
    all.sort_unstable();
    all
}

/// What the targets are judged against.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Seconds the load was offered.
    pub seconds: f64,
    /// Offered messages per second.
    pub rate: f64,
    /// Retention window of the pruner, seconds.
    pub window_secs: f64,
}

impl Plan {
    /// Seconds since the start at `fraction` of the run.
    pub fn at(&self, fraction: f64) -> f64 {
        self.seconds * fraction
    }

    /// Target (c)'s bound on dead tuples: one retention window of offered load, the rows the
    /// inbox holds live (autovacuum's default trigger is a fifth of the live rows).
    pub fn dead_tuple_bound(&self) -> u64 {
        (self.rate * self.window_secs).round() as u64
    }
}

/// One target of the soak: reported, never asserted.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// `a` to `e`.
    pub key: &'static str,
    /// What is asked.
    pub goal: &'static str,
    /// Met, missed, or `None` when this run cannot tell (too short, no such intervals).
    pub pass: Option<bool>,
    /// The figures behind the verdict.
    pub detail: String,
}

impl Target {
    /// `PASS`, `FAIL` or `n/a`.
    pub fn verdict(&self) -> &'static str {
        match self.pass {
            Some(true) => "PASS",
            Some(false) => "FAIL",
            None => "n/a",
        }
    }
}

/// Every target of the run: `latencies` are the samples' own, in order.
pub fn evaluate(
    plan: &Plan,
    samples: &[Sample],
    latencies: &[Latencies],
    check: &Check,
) -> Vec<Target> {
    vec![
        throughput(samples),
        prune_latency(samples, latencies),
        dead_tuples(plan, samples),
        recovery(plan, samples),
        exactly_once(check),
    ]
}

/// (a) Consumed within ±10 % of offered in every interval but the first (warm-up).
pub fn throughput(samples: &[Sample]) -> Target {
    let goal = "consumed within ±10 % of offered in every interval (the first excluded: warm-up)";
    let off = |s: &Sample| s.consumed_per_sec / s.offered_per_sec - 1.0;
    let judged: Vec<&Sample> = samples
        .iter()
        .skip(1)
        .filter(|s| s.offered_per_sec > 0.0)
        .collect();
    let Some(worst) = judged
        .iter()
        .max_by(|a, b| off(a).abs().total_cmp(&off(b).abs()))
    else {
        return Target {
            key: "a",
            goal,
            pass: None,
            detail: "no interval after the first".into(),
        };
    };
    let misses = judged
        .iter()
        .filter(|s| off(s).abs() > RATE_TOLERANCE)
        .count();
    Target {
        key: "a",
        goal,
        pass: Some(misses == 0),
        detail: format!(
            "{misses} of {} intervals outside; worst {:+.1} % at {:.0} s ({})",
            judged.len(),
            off(worst) * 100.0,
            worst.elapsed_secs,
            worst.phase.name()
        ),
    }
}

/// (b) In the steady phase before the pin (first interval excluded: warm-up; the steady phase
/// after the readers is left out, it carries their aftermath), the p99 over the intervals in
/// which a prune deleted rows at most twice the p99 over those in which none did (the first
/// window, before any id expires); the split by whether a prune was running at each message's
/// ack is reported beside it.
pub fn prune_latency(samples: &[Sample], latencies: &[Latencies]) -> Target {
    let goal =
        "p99 of intervals with a prune <= 2x p99 of intervals without (steady, before the pin)";
    let steady: Vec<(&Sample, &Latencies)> = samples
        .iter()
        .zip(latencies)
        .skip(1)
        .take_while(|(s, _)| s.phase == Phase::Steady)
        .collect();
    let pooled = |pruned: bool| {
        sorted(
            steady
                .iter()
                .filter(|(s, _)| (s.pruned_rows > 0) == pruned)
                .flat_map(|(_, l)| l.outside_prune.iter().chain(&l.during_prune)),
        )
    };
    let (with, without) = (pooled(true), pooled(false));
    let during = sorted(steady.iter().flat_map(|(_, l)| &l.during_prune));
    let outside = sorted(steady.iter().flat_map(|(_, l)| &l.outside_prune));
    let p99 = |v: &[Duration]| quantile_ms(v, 0.99);
    let by_ack = format!(
        "by ack time: p99 {:.1} ms while a prune ran ({} msgs), {:.1} ms otherwise ({} msgs)",
        p99(&during),
        during.len(),
        p99(&outside),
        outside.len()
    );
    if with.is_empty() || without.is_empty() {
        return Target {
            key: "b",
            goal,
            pass: None,
            detail: format!(
                "{} msgs in intervals with a prune, {} without: nothing to compare; {by_ack}",
                with.len(),
                without.len()
            ),
        };
    }
    Target {
        key: "b",
        goal,
        pass: Some(p99(&with) <= PRUNE_P99_FACTOR * p99(&without)),
        detail: format!(
            "p99 {:.1} ms with a prune ({} msgs) vs {:.1} ms without ({} msgs): {:.2}x; {by_ack}",
            p99(&with),
            with.len(),
            p99(&without),
            without.len(),
            p99(&with) / p99(&without).max(1e-9)
        ),
    }
}

/// (c) Dead tuples of the inbox at most one window of offered load in every sample outside
/// the pin and the [`RECOVERY_SECS`] after it (vacuum's catch-up).
pub fn dead_tuples(plan: &Plan, samples: &[Sample]) -> Target {
    let goal = "n_dead_tup <= window x rate outside the pin (and the 120 s after it)";
    let bound = plan.dead_tuple_bound();
    let (pin_start, pin_end) = (plan.at(PIN.0), plan.at(PIN.1));
    let aftermath = pin_end + RECOVERY_SECS;
    let max = |keep: &dyn Fn(&Sample) -> bool| {
        samples
            .iter()
            .filter(|s| keep(s))
            .map(|s| s.dead_tuples)
            .max()
    };
    let outside = max(&|s| s.elapsed_secs <= pin_start || s.start_secs() >= aftermath);
    let pinned = max(&|s| s.phase == Phase::Pinned).unwrap_or(0);
    let after = max(&|s| s.start_secs() >= pin_end && s.elapsed_secs <= aftermath).unwrap_or(0);
    let Some(outside) = outside else {
        return Target {
            key: "c",
            goal,
            pass: None,
            detail: format!("no sample outside the pin and its aftermath; pinned max {pinned}"),
        };
    };
    Target {
        key: "c",
        goal,
        pass: Some(outside <= bound),
        detail: format!(
            "max {outside} outside (bound {bound}); {pinned} while pinned, {after} in the 120 s after"
        ),
    }
}

/// (d) Once the pin ends, the backlog is near 0 (at most [`NEAR_ZERO_SECS`] of offered load)
/// at the end of a sample within [`RECOVERY_SECS`].
pub fn recovery(plan: &Plan, samples: &[Sample]) -> Target {
    let goal = "backlog near 0 (<= 1 s of load) within 2 min after the pin ends";
    let pin_end = plan.at(PIN.1);
    let near = (plan.rate * NEAR_ZERO_SECS).round() as u64;
    let peak = samples
        .iter()
        .filter(|s| s.phase == Phase::Pinned)
        .map(|s| s.backlog)
        .max()
        .unwrap_or(0);
    let mut after = samples
        .iter()
        .filter(|s| s.start_secs() >= pin_end - 1e-6)
        .peekable();
    if after.peek().is_none() {
        return Target {
            key: "d",
            goal,
            pass: None,
            detail: "no sample after the pin".into(),
        };
    }
    match after.find(|s| s.backlog <= near) {
        Some(s) => {
            let secs = s.elapsed_secs - pin_end;
            Target {
                key: "d",
                goal,
                pass: Some(secs <= RECOVERY_SECS),
                detail: format!(
                    "backlog {} (<= {near}) {secs:.0} s after the pin ended; peak {peak} while pinned",
                    s.backlog
                ),
            }
        }
        None => Target {
            key: "d",
            goal,
            pass: Some(false),
            detail: format!(
                "backlog never back to <= {near} after the pin; peak {peak} while pinned"
            ),
        },
    }
}

/// (e) The checker: 0 double, 0 lost, the balances as published.
pub fn exactly_once(check: &Check) -> Target {
    Target {
        key: "e",
        goal: "0 double, 0 lost (ledger and balances against the published messages)",
        pass: Some(check.ok),
        detail: format!(
            "{} double, {} lost of {} published; {} dead letters; balances {} (expected {})",
            check.double,
            check.lost,
            check.published,
            check.dead_letters,
            check.balance_total,
            check.expected_total
        ),
    }
}
