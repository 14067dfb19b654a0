#!/usr/bin/env bash
# Runs every test of the workspace: builds all test targets once, then runs the groups below
# in parallel (they share no database, queue or stream names; each test makes its own), each
# into its own log, and prints the logs one after another with a closing summary.
#
#   bash scripts/test.sh              all groups
#   bash scripts/test.sh faults core  only these groups
#
# Same tests as `cargo test --workspace`, which also works (one group after another).
# Environment: ONCELY_TEST_JOBS (groups at once, default 3), ONCELY_TEST_LOGS (log dir).
set -uo pipefail
cd "$(dirname "$0")/.."

declare -A GROUPS=(
  [core]="--workspace --exclude oncely-broker-tests --exclude oncely-cli --exclude oncely-kafka"
  [cli]="-p oncely-cli"
  [brokers]="-p oncely-broker-tests --lib --bins $(for f in crates/oncely-broker-tests/tests/*.rs; do
    t=$(basename "$f" .rs); [ "$t" = store_faults ] || printf -- '--test %s ' "$t"; done)"
  [faults]="-p oncely-broker-tests --test store_faults"
  [kafka]="-p oncely-kafka"
)
ORDER=(faults brokers cli kafka core)
[ $# -gt 0 ] && ORDER=("$@")

jobs_max=${ONCELY_TEST_JOBS:-3}
logs=${ONCELY_TEST_LOGS:-$(mktemp -d)}
mkdir -p "$logs"

echo "test: building every test target once"
cargo test --workspace --no-run --quiet || { echo "test: build failed"; exit 1; }

declare -A PIDS STARTED
for group in "${ORDER[@]}"; do
  [ -n "${GROUPS[$group]:-}" ] || { echo "test: no group named $group" >&2; exit 2; }
  [ "$group" = faults ] && [ ! -f crates/oncely-broker-tests/tests/store_faults.rs ] && continue
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
  echo "test: group $group starts"
  STARTED[$group]=$SECONDS
  # shellcheck disable=SC2086
  ( cargo test ${GROUPS[$group]} > "$logs/$group.log" 2>&1; echo $? > "$logs/$group.rc";
    echo "test: group $group done in $((SECONDS - ${STARTED[$group]})) s" ) &
  PIDS[$group]=$!
done
wait

passed=0 failed=0 ignored=0 bad=()
for group in "${!PIDS[@]}"; do
  echo; echo "================ group $group ================"
  cat "$logs/$group.log"
  rc=$(cat "$logs/$group.rc" 2>/dev/null || echo 1)
  [ "$rc" = 0 ] || bad+=("$group")
  while read -r p f i; do
    passed=$((passed + p)) failed=$((failed + f)) ignored=$((ignored + i))
  done < <(sed -nE 's/^test result: [A-Za-z]+\. ([0-9]+) passed; ([0-9]+) failed; ([0-9]+) ignored.*/\1 \2 \3/p' "$logs/$group.log")
done
echo
[ ${#bad[@]} -eq 0 ] || echo "test: failing groups: ${bad[*]} (logs in $logs)"
echo "tests: $passed passed, $failed failed, $ignored skipped"
[ ${#bad[@]} -eq 0 ]
