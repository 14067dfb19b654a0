//! The simulator's own tests: seeds pass with a stable digest, every plant is caught, a
//! failure shrinks and replays exactly, the seeds that found bugs pass, and the CI budget
//! passes (see [`budget`]).

use oncely_sim::{Plan, Plant, plan_at, run_plan, sweep};

/// Seeds the budget test runs: CI's fixed budget, 10,000 in the debug test profile (about
/// 20 s of CPU, 75 s of wall time on the 2-core CI machine under load) and 20,000 when built
/// with optimizations (about 12 s); `ONCELY_SIM_SEEDS` sets another (a soak: more).
fn budget() -> u64 {
    let default = if cfg!(debug_assertions) {
        10_000
    } else {
        20_000
    };
    std::env::var("ONCELY_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[test]
fn five_hundred_seeds_pass_with_the_same_digest_twice() {
    let a = sweep(0, 500, None, false, true);
    assert!(
        a.failed.is_empty(),
        "failing seeds {:?}; first: {:?}",
        a.failed,
        a.first_failure
            .map(|f| (f.replay_command(None), f.run.violations))
    );
    let b = sweep(0, 500, None, false, false);
    assert_eq!(a.digest, b.digest, "two sweeps of the same seeds differ");
    assert_ne!(a.digest, sweep(1, 500, None, false, false).digest);
    // Every mark the coverage table knows: 500 seeds reach each at least 25 times.
    for point in oncely_sim::world::MARKS {
        assert!(
            a.coverage.get(point).copied().unwrap_or(0) > 0,
            "no schedule reached {point}"
        );
    }
}

#[test]
fn every_plant_is_caught_within_sixty_seeds() {
    for plant in Plant::ALL {
        let s = sweep(0, 60, Some(plant), true, false);
        assert!(
            !s.failed.is_empty(),
            "plant {} not caught in 60 seeds",
            plant.name()
        );
    }
}

#[test]
fn a_failure_shrinks_and_its_replay_command_reproduces_it() {
    let s = sweep(0, 20, Some(Plant::ClaimOwnTx), true, true);
    let f = s.first_failure.expect("caught");
    let original = Plan::generate(f.seed);
    assert!(f.run.plan.msgs.len() <= original.msgs.len());
    assert!(!f.path.is_empty(), "nothing was shrunk");
    let again = run_plan(
        &plan_at(f.seed, &f.path).expect("path applies"),
        Some(Plant::ClaimOwnTx),
    );
    assert_eq!(again.violations, f.run.violations);
    assert_eq!(again.digest, f.run.digest);
    let cmd = f.replay_command(Some(Plant::ClaimOwnTx));
    assert!(
        cmd.contains(&format!("--seed {}", f.seed)) && cmd.contains("--shrink"),
        "{cmd}"
    );
}

#[test]
fn ci_budget_of_seeds_passes() {
    let n = budget();
    let s = sweep(1_000_000, n, None, false, true);
    assert!(
        s.failed.is_empty(),
        "{} of {n} seeds failed: {:?}; first: {:?}",
        s.failed.len(),
        &s.failed[..s.failed.len().min(20)],
        s.first_failure
            .map(|f| (f.replay_command(None), f.run.violations))
    );
    println!(
        "oncely-sim budget: {n} seeds in {:.1} s ({:.0} seeds/s), digest {}",
        s.elapsed.as_secs_f64(),
        s.seeds_per_s(),
        s.digest
    );
}

/// Seeds that found runtime bugs, kept: each must pass from now on (and failed before its
/// fix; checked when the seed was added).
#[test]
fn seeds_that_found_bugs_pass() {
    // 419 and 466: a last commit whose answer was lost after it landed was dead-lettered
    // attempts_exhausted; 145488: the same when the store went down before the inbox read
    // that now decides it (both fixed in oncely-core, tests/commit_answer_lost.rs).
    for seed in [419, 466, 145_488] {
        let run = run_plan(&Plan::generate(seed), None);
        assert!(run.passed(), "seed {seed}: {:?}", run.violations);
    }
}
