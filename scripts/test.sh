#!/usr/bin/env bash
# Runs every test of the workspace: builds all test targets once (one feature resolution, so
# nothing is built twice), then runs the test executables in groups, the groups in parallel
# (they share no database, queue or stream names; each test makes its own), each into its own
# log, and prints the logs one after another with a closing summary.
#
#   bash scripts/test.sh              all groups
#   bash scripts/test.sh faults core  only these groups
#
# Groups: faults (store-fault tests), brokers (the other broker tests), cli (admin commands and
# the demo through the binary), kafka, core (everything else), cluster (Galera and NATS
# clusters of scripts/cluster.sh, node kills included), ha (PostgreSQL primary killed and its
# streaming replica promoted, scripts/pg-ha.sh), doc (doc tests).
# Same tests as `cargo test --workspace --features oncely-cli/brokers,oncely-cli/kafka`, which
# also works (one after another).
# Environment: ONCELY_TEST_JOBS (groups at once, default 3), ONCELY_TEST_LOGS (log dir).
# The brokers of the `oncely` binary are opt-in features; the tests that run it through every
# broker need them, so the build (and the doc tests, for the same feature resolution) says so.
set -uo pipefail
cd "$(dirname "$0")/.."

# Services, packages, the Python venv and the test-owned servers (stopped when this script
# exits), unless the caller (.ci/run) has set them up already.
# shellcheck source=setup.sh
[ "${ONCELY_SETUP_DONE:-}" = 1 ] || . scripts/setup.sh

ORDER=(faults brokers cli kafka core cluster ha doc)
FEATURES=(--features oncely-cli/brokers,oncely-cli/kafka)
[ $# -gt 0 ] && ORDER=("$@")
jobs_max=${ONCELY_TEST_JOBS:-3}
logs=${ONCELY_TEST_LOGS:-$(mktemp -d)}
mkdir -p "$logs"

echo "test: building every test target once"
cargo test --workspace "${FEATURES[@]}" --no-run --message-format=json-render-diagnostics > "$logs/build.json" ||
  { echo "test: build failed"; exit 1; }

# One line per test executable: group, package dir, executable.
python3 - "$logs/build.json" > "$logs/targets.tsv" <<'PY'
import json, os, sys
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
        continue
    pkg_dir = os.path.dirname(m["manifest_path"])
    pkg, target = os.path.basename(pkg_dir), m["target"]["name"]
    if (pkg, target) in (("oncely-broker-tests", "cluster"), ("oncely-sql", "galera")):
        group = "cluster"
    elif (pkg, target) == ("oncely-broker-tests", "failover"):
        group = "ha"
    elif pkg == "oncely-broker-tests" and target.startswith("kafka"):
        group = "kafka"
    elif pkg == "oncely-broker-tests":
        group = "faults" if target == "store_faults" else "brokers"
    elif pkg in ("oncely-cli", "oncely-kafka"):
        group = pkg.removeprefix("oncely-")
    else:
        group = "core"
    print(f"{group}\t{pkg_dir}\t{m['executable']}")
    if (pkg, target) == ("oncely-sql", "conformance_mysql"):
        # The store conformance suite once more, on a Galera node (see scripts/cluster.sh).
        print(f"cluster\t{pkg_dir}\t{m['executable']}\tONCELY_TEST_MYSQL_URL=mysql://root@127.0.0.1:23306/test")
PY

run_group() { # group: runs its executables one after another, or the doc tests
  local group=$1 rc=0
  if [ "$group" = doc ]; then
    cargo test --workspace "${FEATURES[@]}" --doc || rc=1
  else
    while IFS=$'\t' read -r g dir exe env; do
      [ "$g" = "$group" ] || continue
      echo "     Running $(basename "$exe") (${dir##*/}) ${env}"
      (cd "$dir" && env ${env} "$exe" < /dev/null) || rc=1
    done < "$logs/targets.tsv"
  fi
  return $rc
}

declare -A STARTED
ran=()
for group in "${ORDER[@]}"; do
  case $group in faults|brokers|cli|kafka|core|cluster|ha|doc) ;; *) echo "test: no group named $group" >&2; exit 2 ;; esac
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
  echo "test: group $group starts"
  STARTED[$group]=$SECONDS
  ( run_group "$group" > "$logs/$group.log" 2>&1; echo $? > "$logs/$group.rc"
    echo "test: group $group done in $((SECONDS - STARTED[$group])) s" ) &
  ran+=("$group")
done
wait

# Skipped = ignored + tests that returned early for a missing server or tool: libtest counts
# those as passed, so each one's SKIPPED banner (oncely_testkit::services::SKIPPED_BANNER, a
# line of its own) moves one test from passed to skipped.
passed=0 failed=0 ignored=0 banners=0 bad=()
for group in "${ran[@]}"; do
  echo; echo "================ group $group ================"
  cat "$logs/$group.log"
  [ "$(cat "$logs/$group.rc" 2>/dev/null || echo 1)" = 0 ] || bad+=("$group")
  while read -r p f i; do
    passed=$((passed + p)) failed=$((failed + f)) ignored=$((ignored + i))
  done < <(sed -nE 's/^test result: [A-Za-z]+\. ([0-9]+) passed; ([0-9]+) failed; ([0-9]+) ignored.*/\1 \2 \3/p' "$logs/$group.log")
  banners=$((banners + $(grep -c '^\*\*\* SKIPPED ' "$logs/$group.log")))
done
echo
[ ${#bad[@]} -eq 0 ] || echo "test: failing groups: ${bad[*]} (logs in $logs)"
[ "$banners" -eq 0 ] || echo "test: $banners tests returned early (their SKIPPED banners are in the logs above)"
[ "$banners" -le "$passed" ] || banners=$passed
echo "tests: $((passed - banners)) passed, $failed failed, $((ignored + banners)) skipped"
[ ${#bad[@]} -eq 0 ]
