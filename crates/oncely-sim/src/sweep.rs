//! Many seeds: runs them in order, counts coverage, folds every run's digest into one, and
//! turns a failure into a bug report (shrunk plan, replay command, short trace).

use crate::plan::Plan;
use crate::plants::Plant;
use crate::run::{RunResult, run_plan};
use crate::world::MARKS;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Runs the shrinker tries at most this many plans.
const SHRINK_BUDGET: usize = 300;

/// A failing seed, shrunk.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// The shrink steps taken (indices into [`Plan::shrinks`], one per step).
    pub path: Vec<usize>,
    /// The shrunk run.
    pub run: RunResult,
}

impl Failure {
    /// The one-line command that replays the shrunk run exactly.
    pub fn replay_command(&self, plant: Option<Plant>) -> String {
        let mut cmd = format!("cargo run -p oncely-sim --release -- --seed {}", self.seed);
        if let Some(p) = plant {
            cmd.push_str(&format!(" --plant {}", p.name()));
        }
        if !self.path.is_empty() {
            let path: Vec<String> = self.path.iter().map(|i| i.to_string()).collect();
            cmd.push_str(&format!(" --shrink {}", path.join(",")));
        }
        cmd + " --trace"
    }
}

/// What a sweep found.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Seeds run.
    pub runs: u64,
    /// Seeds that failed (before shrinking).
    pub failed: Vec<u64>,
    /// The first failure, shrunk.
    pub first_failure: Option<Failure>,
    /// Schedules that reached each crash point and fault.
    pub coverage: BTreeMap<&'static str, u64>,
    /// A digest over every run's trace and outcome, in seed order.
    pub digest: String,
    /// Wall time.
    pub elapsed: Duration,
}

impl Summary {
    /// Seeds per second of wall time.
    pub fn seeds_per_s(&self) -> f64 {
        self.runs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The coverage table: every known mark (zeros included), then any others.
    pub fn coverage_rows(&self) -> Vec<(&'static str, u64)> {
        let mut rows: Vec<(&'static str, u64)> = MARKS
            .iter()
            .map(|m| (*m, self.coverage.get(m).copied().unwrap_or(0)))
            .collect();
        for (m, n) in &self.coverage {
            if !MARKS.contains(m) {
                rows.push((m, *n));
            }
        }
        rows
    }
}

/// The plan of `seed` after the shrink steps `path`.
pub fn plan_at(seed: u64, path: &[usize]) -> Option<Plan> {
    let mut plan = Plan::generate(seed);
    for &i in path {
        plan = plan.shrinks().into_iter().nth(i)?;
    }
    Some(plan)
}

/// Runs seeds `first..first + n`. With `stop_at_failure`, stops at the first failing seed.
/// A failure is shrunk (unless `shrink` is false).
pub fn sweep(
    first: u64,
    n: u64,
    plant: Option<Plant>,
    stop_at_failure: bool,
    shrink: bool,
) -> Summary {
    let started = Instant::now();
    let mut digest = Sha256::new();
    let mut coverage: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut failed = Vec::new();
    let mut first_failure = None;
    let mut runs = 0;
    for seed in first..first.saturating_add(n) {
        let result = run_plan(&Plan::generate(seed), plant);
        runs += 1;
        digest.update(format!(
            "{seed} {} {:?}\n",
            result.digest, result.violations
        ));
        for m in &result.marks {
            *coverage.entry(m).or_default() += 1;
        }
        if !result.passed() {
            failed.push(seed);
            if first_failure.is_none() {
                first_failure = Some(if shrink {
                    shrink_failure(result, plant)
                } else {
                    Failure {
                        seed,
                        path: Vec::new(),
                        run: result,
                    }
                });
            }
            if stop_at_failure {
                break;
            }
        }
    }
    Summary {
        runs,
        failed,
        first_failure,
        coverage,
        digest: hex::encode(digest.finalize()),
        elapsed: started.elapsed(),
    }
}

/// Reduces a failing run: takes the first smaller plan that still fails, again and again,
/// until none does (or the budget is spent).
pub fn shrink_failure(failing: RunResult, plant: Option<Plant>) -> Failure {
    let seed = failing.plan.seed;
    let mut current = failing;
    let mut path = Vec::new();
    let mut tries = 0;
    'outer: while tries < SHRINK_BUDGET {
        for (i, smaller) in current.plan.shrinks().into_iter().enumerate() {
            tries += 1;
            let result = run_plan(&smaller, plant);
            if !result.passed() {
                path.push(i);
                current = result;
                continue 'outer;
            }
            if tries >= SHRINK_BUDGET {
                break 'outer;
            }
        }
        break;
    }
    Failure {
        seed,
        path,
        run: current,
    }
}

/// Seeds among `first..first + n` whose two runs give different digests (there should be
/// none: a difference is a source of nondeterminism to find).
pub fn nondeterministic(first: u64, n: u64, plant: Option<Plant>) -> Vec<u64> {
    (first..first.saturating_add(n))
        .filter(|&seed| {
            let plan = Plan::generate(seed);
            run_plan(&plan, plant).digest != run_plan(&plan, plant).digest
        })
        .collect()
}

/// How one plant fared over a range of seeds.
#[derive(Debug, Clone)]
pub struct PlantReport {
    /// The plant.
    pub plant: Plant,
    /// Seeds run from the first up to and including the first that caught it (`None`:
    /// never caught).
    pub seeds_needed: Option<u64>,
    /// Seeds of the range that caught it.
    pub caught: u64,
    /// The most seeds needed from any start in the range: the longest run of seeds that
    /// missed it, plus one (`None` if a run of misses reached the end of the range).
    pub worst: Option<u64>,
    /// Seeds run.
    pub runs: u64,
}

/// Runs every plant over seeds `first..first + n` (no shrinking) and counts the catches.
pub fn plant_table(first: u64, n: u64) -> Vec<PlantReport> {
    Plant::ALL
        .into_iter()
        .map(|plant| {
            let mut report = PlantReport {
                plant,
                seeds_needed: None,
                caught: 0,
                worst: None,
                runs: n,
            };
            let (mut misses, mut worst) = (0, 0);
            for (i, seed) in (first..first.saturating_add(n)).enumerate() {
                if run_plan(&Plan::generate(seed), Some(plant)).passed() {
                    misses += 1;
                } else {
                    report.caught += 1;
                    report.seeds_needed.get_or_insert(i as u64 + 1);
                    worst = worst.max(misses + 1);
                    misses = 0;
                }
            }
            report.worst = (misses == 0 || report.caught > 0 && misses < worst).then_some(worst);
            report
        })
        .collect()
}
