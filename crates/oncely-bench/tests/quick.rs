//! `oncely bench --quick` completes and its checker finds 0 double, 0 lost in every cell.
//! No speed is asserted. PostgreSQL cells are skipped (loudly) when no server is reachable,
//! unless `CI` or `ONCELY_REQUIRE_SERVICES` is set.

use clap::Parser;
use oncely_bench::BenchArgs;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_bench_completes_with_zero_double_and_zero_lost() {
    let out = tempfile::tempdir().unwrap();
    let cli = Cli::parse_from([
        "bench",
        "--quick",
        "--json",
        "--out",
        out.path().to_str().unwrap(),
    ]);
    let ok = oncely_bench::run(cli.args)
        .await
        .expect("the quick bench runs");
    assert!(ok, "a checker found double or lost effects");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("bench.json")).unwrap()).unwrap();
    assert_eq!(json["double"], 0);
    assert_eq!(json["lost"], 0);
    for key in [
        "pg_per_message_vs_plain_c16",
        "pg_batch100_vs_per_message_c1",
        "pg_batch100_vs_raw",
        "duplicate_speedup",
        "sqlite_full_vs_normal_b1000",
    ] {
        assert!(json.get(key).is_some(), "missing {key}");
    }
    assert!(json["sqlite_full_vs_normal_b1000"].is_number());
    // The Redis store cells: one per durability setting, each run and exact, or skipped
    // (never under CI: the run fails instead).
    let redis = json["redis_store"].as_array().expect("redis_store cells");
    assert_eq!(redis.len(), 3, "{redis:?}");
    for cell in redis {
        if cell["skipped"].is_string() {
            continue;
        }
        let check = &cell["check"];
        assert_eq!(check["ok"], true, "{cell}");
        assert_eq!(check["double"], 0, "{cell}");
        assert_eq!(check["lost"], 0, "{cell}");
        assert_eq!(check["total_off"], 0, "{cell}");
        assert!(check["conflicts_injected"].as_u64() > Some(0), "{cell}");
        assert_eq!(
            check["conflicts_caught"], check["conflicts_injected"],
            "{cell}"
        );
        assert!(cell["deliveries_per_sec"].is_number(), "{cell}");
    }
    for file in [
        "bench.csv",
        "throughput_vs_concurrency.svg",
        "throughput_vs_batch.svg",
    ] {
        assert!(out.path().join(file).exists(), "missing {file}");
    }
}
