//! The soak's pure parts: phases by elapsed fraction, and each target passing, failing, or
//! saying it cannot tell.

use super::targets::{
    Latencies, Phase, Plan, Sample, dead_tuples, evaluate, exactly_once, prune_latency, recovery,
    throughput,
};
use crate::bed::Counts;
use crate::cells::Check;
use std::time::Duration;

/// A 20-minute plan at 2,000 msgs/s, window 120 s: pin 300-600 s, readers 750-1050 s.
const PLAN: Plan = Plan {
    seconds: 1200.0,
    rate: 2000.0,
    window_secs: 120.0,
};

/// 120 samples of 10 s at the offered rate: no backlog, no prune, few dead tuples.
fn steady_run() -> Vec<Sample> {
    (1..=120u32)
        .map(|k| {
            let end = f64::from(k) * 10.0;
            Sample {
                elapsed_secs: end,
                seconds: 10.0,
                phase: Phase::at((end - 5.0) / PLAN.seconds),
                offered_per_sec: 2000.0,
                consumed_per_sec: 2000.0,
                backlog: 40,
                p50_ms: 5.0,
                p99_ms: 20.0,
                prunes: 0,
                pruned_rows: 0,
                inbox_rows: 240_000,
                dead_tuples: 30_000,
                vacuums: u64::from(k) / 6,
                wal_bytes_per_sec: 1e6,
                accounts_dead_tuples: 1_000,
                inbox_index_reads_per_sec: 200_000.0,
                accounts_index_reads_per_sec: 4_000.0,
            }
        })
        .collect()
}

fn ms(values: &[u64]) -> Vec<Duration> {
    values.iter().map(|&v| Duration::from_millis(v)).collect()
}

/// 100 latencies: 98 of `low` ms and 2 of `high` ms (p99 is `high`).
fn interval(low: u64, high: u64) -> Latencies {
    let mut values = vec![low; 98];
    values.extend([high, high]);
    Latencies {
        outside_prune: ms(&values),
        during_prune: Vec::new(),
    }
}

#[test]
fn the_phase_follows_the_elapsed_fraction() {
    let at = |f: f64| Phase::at(f).name();
    assert_eq!(at(0.0), "steady");
    assert_eq!(at(0.249), "steady");
    assert_eq!(at(0.25), "pinned");
    assert_eq!(at(0.499), "pinned");
    assert_eq!(at(0.5), "after-pin");
    assert_eq!(at(0.624), "after-pin");
    assert_eq!(at(0.625), "readers");
    assert_eq!(at(0.874), "readers");
    assert_eq!(at(0.875), "steady");
    assert_eq!(at(1.0), "steady");
    let phases: Vec<Phase> = steady_run().iter().map(|s| s.phase).collect();
    assert_eq!(phases.iter().filter(|p| **p == Phase::Pinned).count(), 30);
    assert_eq!(phases.iter().filter(|p| **p == Phase::AfterPin).count(), 15);
    assert_eq!(phases.iter().filter(|p| **p == Phase::Readers).count(), 30);
}

#[test]
fn throughput_excludes_only_the_warm_up_interval() {
    let mut run = steady_run();
    run[0].consumed_per_sec = 500.0;
    run[50].consumed_per_sec = 1810.0;
    assert_eq!(throughput(&run).pass, Some(true), "{:?}", throughput(&run));
    run[60].consumed_per_sec = 1750.0;
    let t = throughput(&run);
    assert_eq!(t.pass, Some(false));
    assert!(
        t.detail
            .starts_with("1 of 119 intervals outside; worst -12.5 % at 610 s (after-pin)"),
        "{}",
        t.detail
    );
    assert_eq!(throughput(&run[..1]).pass, None);
}

#[test]
fn prune_latency_compares_intervals_with_and_without_a_prune() {
    let mut run = steady_run();
    let mut lat: Vec<Latencies> = run.iter().map(|_| interval(5, 20)).collect();
    // No prune deleted anything yet: nothing to compare.
    assert_eq!(prune_latency(&run, &lat).pass, None);
    for s in &mut run[12..] {
        (s.prunes, s.pruned_rows) = (1, 20_000);
    }
    for l in &mut lat[12..] {
        *l = interval(5, 40);
    }
    assert_eq!(prune_latency(&run, &lat).pass, Some(true));
    for l in &mut lat[12..] {
        *l = interval(5, 41);
    }
    let t = prune_latency(&run, &lat);
    assert_eq!(t.pass, Some(false));
    assert!(
        t.detail
            .starts_with("p99 41.0 ms with a prune (1800 msgs) vs 20.0 ms without (1100 msgs)"),
        "{}",
        t.detail
    );
    for l in &mut lat[12..] {
        *l = interval(5, 40);
    }
    // Only the steady phase before the pin counts: a slow pinned interval changes nothing, nor
    // does the steady phase after the readers.
    lat[40] = interval(5, 900);
    assert_eq!(run[40].phase, Phase::Pinned);
    for l in &mut lat[105..] {
        *l = interval(5, 900);
    }
    assert_eq!(run[105].phase, Phase::Steady);
    assert_eq!(prune_latency(&run, &lat).pass, Some(true));
    // Nor does the warm-up interval: 10,000 fast messages there would bring the p99 without
    // a prune down to 1 ms.
    lat[0] = Latencies {
        outside_prune: ms(&[1; 10_000]),
        during_prune: Vec::new(),
    };
    assert_eq!(prune_latency(&run, &lat).pass, Some(true));
}

#[test]
fn dead_tuples_are_bounded_outside_the_pin_and_its_aftermath() {
    assert_eq!(PLAN.dead_tuple_bound(), 240_000);
    let mut run = steady_run();
    // Piling up while pinned, and for vacuum's catch-up after it: allowed.
    for s in &mut run[30..72] {
        s.dead_tuples = 700_000;
    }
    let t = dead_tuples(&PLAN, &run);
    assert_eq!(t.pass, Some(true), "{}", t.detail);
    assert!(t.detail.contains("700000 while pinned"), "{}", t.detail);
    run[72].dead_tuples = 240_001;
    assert_eq!(dead_tuples(&PLAN, &run).pass, Some(false));
    run[72].dead_tuples = 0;
    run[29].dead_tuples = 250_000;
    assert_eq!(dead_tuples(&PLAN, &run).pass, Some(false));
    // A run that is all pin and aftermath cannot tell.
    assert_eq!(dead_tuples(&PLAN, &run[30..72]).pass, None);
}

#[test]
fn recovery_is_timed_from_the_end_of_the_pin() {
    let mut run = steady_run();
    // Behind through the sample that ends at 710 s.
    for s in &mut run[40..71] {
        s.backlog = 50_000;
    }
    // The sample that ends at 720 s has caught up: 120 s after the pin ended.
    let t = recovery(&PLAN, &run);
    assert_eq!(t.pass, Some(true), "{}", t.detail);
    assert!(t.detail.contains(" 120 s after"), "{}", t.detail);
    assert!(
        t.detail.ends_with("peak 50000 while pinned"),
        "{}",
        t.detail
    );
    run[70].backlog = 2_000;
    assert!(recovery(&PLAN, &run).detail.contains(" 110 s after"));
    run[70].backlog = 50_000;
    run[71].backlog = 2_001;
    assert_eq!(recovery(&PLAN, &run).pass, Some(false));
    for s in &mut run[71..] {
        s.backlog = 10_000;
    }
    let never = recovery(&PLAN, &run);
    assert_eq!(never.pass, Some(false));
    assert!(never.detail.contains("never"), "{}", never.detail);
    assert_eq!(recovery(&PLAN, &run[..60]).pass, None);
}

#[test]
fn the_checker_of_a_pruned_inbox_counts_the_ledger_not_the_inbox() {
    let counts = Counts {
        ledger_rows: 1000,
        ledger_ids: 1000,
        balance_total: 5000,
        inbox_rows: 120,
        dead_letters: 0,
    };
    let check = Check::pruned(1000, 5000, counts);
    assert!(check.ok);
    assert_eq!(check.inbox_rows, 120);
    assert_eq!(exactly_once(&check).pass, Some(true));
    let doubled = Check::pruned(
        1000,
        5000,
        Counts {
            ledger_rows: 1001,
            balance_total: 5007,
            ..counts
        },
    );
    assert_eq!((doubled.double, doubled.lost), (1, 0));
    assert_eq!(exactly_once(&doubled).pass, Some(false));
    let lost = Check::pruned(1001, 5000, counts);
    assert_eq!((lost.double, lost.lost), (0, 1));
    assert_eq!(exactly_once(&lost).pass, Some(false));
    let run = steady_run();
    let lat: Vec<Latencies> = run.iter().map(|_| interval(5, 20)).collect();
    let keys: Vec<&str> = evaluate(&PLAN, &run, &lat, &check)
        .iter()
        .map(|t| t.key)
        .collect();
    assert_eq!(keys, ["a", "b", "c", "d", "e"]);
}
