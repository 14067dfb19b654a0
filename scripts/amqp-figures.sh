#!/usr/bin/env bash
# Issue 37's three RabbitMQ figures, side by side in one run (docs/performance.md):
#
#   1. demo / pika: `oncely demo --consume-only` against a bare pika consumer on the same
#      full quorum queue (scripts/amqp-user-path.sh, REPEAT runs, median of their ratios);
#   2. `amqp_pg_demo_vs_bare_consumer` and 3. `amqp_pg_vs_bare_consumer` from
#      `oncely-bench --json` (BENCH_RUNS runs of the RabbitMQ cells, each key's median printed).
#
#   bash scripts/amqp-figures.sh            # REPEAT=3 BENCH_RUNS=3 N=20000
#
# Needs the release binaries of scripts/amqp-user-path.sh and oncely-bench:
# cargo build --release -p oncely-bench --example amqp_drain --bin oncely-bench
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-20000}
REPEAT=${REPEAT:-3}
BENCH_RUNS=${BENCH_RUNS:-3}
BENCH=${ONCELY_BENCH_BIN:-${CARGO_TARGET_DIR:-target}/release/oncely-bench}
[ -x "$BENCH" ] || { echo "missing $BENCH (see the header of this script)" >&2; exit 1; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

echo "== the user's path: REPEAT=$REPEAT scripts/amqp-user-path.sh $N"
REPEAT=$REPEAT bash scripts/amqp-user-path.sh "$N" | tee "$WORK/user-path.txt"

echo "== the bench: $BENCH_RUNS runs of oncely-bench --brokers-only --brokers amqp"
for run in $(seq 1 "$BENCH_RUNS"); do
  "$BENCH" --brokers-only --brokers amqp --no-sqlite --no-mariadb --json \
    >"$WORK/bench-$run.json" 2>"$WORK/bench-$run.err" ||
    { cat "$WORK/bench-$run.err" >&2; exit 1; }
done
python3 - "$WORK" "$BENCH_RUNS" <<'PY'
import json, statistics, sys
work, runs = sys.argv[1], int(sys.argv[2])
results = [json.load(open(f"{work}/bench-{r}.json")) for r in range(1, runs + 1)]
for key in ["amqp_pg_demo_vs_bare_consumer", "amqp_pg_vs_bare_consumer"]:
    values = [r[key] for r in results if r.get(key) is not None]
    if not values:
        sys.exit(f"bench: no {key} in the runs (were RabbitMQ and PostgreSQL up?)")
    target = next(t["target"] for t in results[0]["targets"] if t["key"] == key) \
        if any(t["key"] == key for t in results[0]["targets"]) else None
    shown = ", ".join(f"{v:.2f}" for v in values)
    print(f"{key}: median {statistics.median(values):.2f} of {shown}"
          + (f" (target {target})" if target is not None else ""))
rates = {}
for r in results:
    for cell, v in r["msgs_per_sec"].items():
        rates.setdefault(cell, []).append(v)
for cell, vs in sorted(rates.items()):
    print(f"  {cell}: median {statistics.median(vs):,.0f} msgs/s")
bad = [r for r in results if r.get("double") or r.get("lost")]
if bad:
    sys.exit("bench: a run counted double or lost effects")
print("check: 0 double, 0 lost in every bench run")
PY
