//! `oncely-sim`: runs seeds through the deterministic simulator and reports.
//!
//! ```text
//! cargo run -p oncely-sim --release -- --seeds 20000 [--seed S] [--plant NAME] [--json]
//! cargo run -p oncely-sim --release -- --list-plants
//! cargo run -p oncely-sim --release -- --seed 42 --shrink 3,0 --trace   # replay one run
//! ```

use clap::Parser;
use oncely_sim::{Plant, Summary, plan_at, run_plan, sweep};
use std::process::ExitCode;

/// The deterministic simulator of oncely's runtime.
#[derive(Parser, Debug)]
#[command(name = "oncely-sim", version)]
struct Args {
    /// How many seeds to run (from --seed on); without it, --seed runs that one seed.
    #[arg(long)]
    seeds: Option<u64>,
    /// The first seed (default 0).
    #[arg(long)]
    seed: Option<u64>,
    /// Run with this planted fault: stops at the first seed that catches it, exits 1.
    #[arg(long)]
    plant: Option<String>,
    /// Print one JSON object (with the digest) instead of the table.
    #[arg(long)]
    json: bool,
    /// List the planted faults, one name a line.
    #[arg(long)]
    list_plants: bool,
    /// Shrink steps to apply to --seed's plan (from a failure's replay command).
    #[arg(long, value_delimiter = ',')]
    shrink: Vec<usize>,
    /// Print the whole trace of the run (one seed).
    #[arg(long)]
    trace: bool,
    /// Report a failure without shrinking it.
    #[arg(long)]
    no_shrink: bool,
    /// Run every plant over the seeds (default 1000) and print how soon and how often each
    /// is caught (exit 1 if one is never caught).
    #[arg(long)]
    plants: bool,
    /// Run every seed twice and list the seeds whose two runs differ (exit 1 if any).
    #[arg(long)]
    check_determinism: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.list_plants {
        for p in Plant::ALL {
            println!("{}", p.name());
        }
        return ExitCode::SUCCESS;
    }
    let plant = match args.plant.as_deref().map(|n| (n, Plant::parse(n))) {
        None => None,
        Some((_, Some(p))) => Some(p),
        Some((n, None)) => {
            eprintln!("oncely-sim: no plant named {n:?} (see --list-plants)");
            return ExitCode::from(2);
        }
    };
    if args.trace || !args.shrink.is_empty() {
        return replay(args.seed.unwrap_or(0), &args.shrink, plant);
    }
    let (first, n) = match (args.seed, args.seeds) {
        (Some(s), None) => (s, 1),
        (s, n) => (s.unwrap_or(0), n.unwrap_or(1000)),
    };
    if args.plants {
        return plants(args.seed.unwrap_or(0), args.seeds.unwrap_or(1000));
    }
    if args.check_determinism {
        let differ = oncely_sim::sweep::nondeterministic(first, n, plant);
        println!(
            "{} of {n} seeds differ between two runs: {differ:?}",
            differ.len()
        );
        return if differ.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let summary = sweep(first, n, plant, plant.is_some(), !args.no_shrink);
    if args.json {
        println!("{}", json(&summary, first, plant));
    } else {
        print_table(&summary, first, plant);
    }
    let failed = !summary.failed.is_empty();
    match plant {
        None if failed => ExitCode::FAILURE,
        None => ExitCode::SUCCESS,
        // A plant: exit non-zero when it is caught (and 0, with a complaint, when it is not).
        Some(_) if failed => ExitCode::FAILURE,
        Some(p) => {
            eprintln!("oncely-sim: plant {} NOT caught in {n} seeds", p.name());
            ExitCode::SUCCESS
        }
    }
}

/// `--plants`: every plant over the same seeds.
fn plants(first: u64, n: u64) -> ExitCode {
    let started = std::time::Instant::now();
    let table = oncely_sim::sweep::plant_table(first, n);
    println!(
        "{:<24} {:>13} {:>13} {:>22}",
        "plant", "seeds needed", "worst start", "caught"
    );
    let mut missed = false;
    for r in &table {
        let needed = r
            .seeds_needed
            .map_or("NOT CAUGHT".to_owned(), |s| s.to_string());
        missed |= r.seeds_needed.is_none();
        let pct = 100.0 * r.caught as f64 / r.runs.max(1) as f64;
        let worst = r.worst.map_or("-".to_owned(), |w| w.to_string());
        println!(
            "{:<24} {needed:>13} {worst:>13} {:>7} / {:<6} ({pct:.0}%)",
            r.plant.name(),
            r.caught,
            r.runs
        );
    }
    println!(
        "({} plants x {n} seeds from {first} in {:.1} s)",
        table.len(),
        started.elapsed().as_secs_f64()
    );
    if missed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Runs one plan and prints its whole trace.
fn replay(seed: u64, path: &[usize], plant: Option<Plant>) -> ExitCode {
    let Some(plan) = plan_at(seed, path) else {
        eprintln!("oncely-sim: shrink path {path:?} does not apply to seed {seed}");
        return ExitCode::from(2);
    };
    let result = run_plan(&plan, plant);
    for line in &result.trace {
        println!("{line}");
    }
    println!("digest {}", result.digest);
    if result.passed() {
        println!("seed {seed}: passed");
        ExitCode::SUCCESS
    } else {
        for v in &result.violations {
            println!("VIOLATION {v}");
        }
        ExitCode::FAILURE
    }
}

fn print_table(s: &Summary, first: u64, plant: Option<Plant>) {
    let last = first + s.runs.saturating_sub(1);
    println!(
        "oncely-sim: {} seeds ({first}..={last}) in {:.1} s, {:.0} seeds/s; {} failed",
        s.runs,
        s.elapsed.as_secs_f64(),
        s.seeds_per_s(),
        s.failed.len()
    );
    if plant.is_none() || s.failed.is_empty() {
        println!("coverage (schedules that reached each crash point, fault and path):");
        for (what, n) in s.coverage_rows() {
            println!("  {what:<42} {n:>8}");
        }
    }
    if let Some(f) = &s.first_failure {
        match plant {
            Some(p) => println!(
                "plant {} caught at seed {} ({} seeds needed)",
                p.name(),
                f.seed,
                s.runs
            ),
            None => println!(
                "FAILED seeds ({}): {:?}{}",
                s.failed.len(),
                &s.failed[..s.failed.len().min(20)],
                if s.failed.len() > 20 { " …" } else { "" }
            ),
        }
        println!("seed {} shrunk: {}", f.seed, f.run.plan);
        for v in &f.run.violations {
            println!("  violation: {v}");
        }
        println!("replay: {}", f.replay_command(plant));
        println!("trace (last lines):");
        let skip = f.run.trace.len().saturating_sub(25);
        for line in &f.run.trace[skip..] {
            println!("  {line}");
        }
    }
    println!("digest {}", s.digest);
}

fn json(s: &Summary, first: u64, plant: Option<Plant>) -> String {
    let coverage: serde_json::Map<String, serde_json::Value> = s
        .coverage_rows()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.into()))
        .collect();
    let failure = s.first_failure.as_ref().map(|f| {
        serde_json::json!({
            "seed": f.seed,
            "violations": f.run.violations,
            "plan": f.run.plan.to_string(),
            "replay": f.replay_command(plant),
        })
    });
    serde_json::json!({
        "first_seed": first,
        "seeds": s.runs,
        "plant": plant.map(|p| p.name()),
        "failed": s.failed,
        "caught": plant.map(|_| !s.failed.is_empty()),
        "first_failure": failure,
        "coverage": coverage,
        "digest": s.digest,
        "elapsed_s": s.elapsed.as_secs_f64(),
        "seeds_per_s": s.seeds_per_s(),
    })
    .to_string()
}
