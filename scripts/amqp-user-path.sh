#!/usr/bin/env bash
# The user's path through RabbitMQ (issue: `oncely demo --consume-only` measured 0.32x a bare
# pika consumer while the bench's `amqp_pg_vs_bare_consumer` said 0.78): one queue that
# already exists, filled first, then drained, by three consumers side by side in one run:
#
#   1. declare the queue with Python pika (QUEUE_TYPE=quorum, the default: durable,
#      `x-queue-type: quorum`; QUEUE_TYPE=classic: durable, no x-queue-type);
#   2. pika:   publish N demo messages (pika, confirmed, `{"account": "acct-K", "amount": A}`,
#              500 accounts, a message_id each), then drain them with a bare pika consumer
#              (basic_consume, manual ack per message, prefetch PIKA_PREFETCH, default 1000),
#              timed from basic_consume to the last ack;
#   3. lapin:  publish N, then drain them with the bare lapin example `amqp_drain` (consume +
#              ack per message, prefetch 512: oncely's read-ahead), timed the same way;
#   4. oncely: publish N, then run
#              `oncely demo --consume-only --crash-rate 0 --source "$AMQP?queue=$Q"
#               --store "$PG" --schema S --idle-exit 1 --json` (defaults otherwise, plus any
#              extra flags given) into a fresh schema; its rate is N over its wall time minus
#              the 1 s idle exit (start-up, migration and the final read-back included, as a
#              user sees it); then the database is checked: N distinct ids, 0 double, total
#              credits = the amounts published (exit 1 if not).
#
# It prints each rate and the ratios oncely/pika and oncely/lapin. REPEAT=k runs the three
# k times, in reverse order every other time, and prints the median rates and the median of
# each repetition's ratios. The bench's figure for the same path is the key
# `amqp_pg_demo_vs_bare_consumer` of `oncely-bench --json` (docs/performance.md).
#
#   bash scripts/amqp-user-path.sh [N] [extra demo flags…]
#   QUEUE_TYPE=classic REPEAT=3 bash scripts/amqp-user-path.sh 20000
#
# Needs the release binaries: cargo build --release -p oncely-cli --features oncely-cli/amqp
# and cargo build --release -p oncely-bench --example amqp_drain (CARGO_TARGET_DIR honoured;
# ONCELY_BIN and ONCELY_DRAIN_BIN override), python3 with pika, and psql.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
shift || true
AMQP=${ONCELY_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2f}
PG=${ONCELY_PG_URL:-postgres://postgres@127.0.0.1:5432/test}
QUEUE_TYPE=${QUEUE_TYPE:-quorum}
REPEAT=${REPEAT:-1}
PIKA_PREFETCH=${PIKA_PREFETCH:-1000}
case "$QUEUE_TYPE" in
  quorum | classic) ;;
  *) echo "QUEUE_TYPE must be quorum or classic, not $QUEUE_TYPE" >&2; exit 2 ;;
esac
Q=oncely-userpath-$QUEUE_TYPE-$$
SCHEMA=oncely_userpath_$$
TARGET=${CARGO_TARGET_DIR:-target}/release
ONCELY=${ONCELY_BIN:-$TARGET/oncely}
DRAIN=${ONCELY_DRAIN_BIN:-$TARGET/examples/amqp_drain}
for bin in "$ONCELY" "$DRAIN"; do
  [ -x "$bin" ] || { echo "missing $bin (see the header of this script)" >&2; exit 1; }
done
WORK=$(mktemp -d)

declare_queue() {
  python3 - "$AMQP" "$Q" "$QUEUE_TYPE" <<'PY'
import sys, pika
url, queue, kind = sys.argv[1:4]
conn = pika.BlockingConnection(pika.URLParameters(url))
args = {"x-queue-type": "quorum"} if kind == "quorum" else None
conn.channel().queue_declare(queue=queue, durable=True, arguments=args)
conn.close()
PY
}

publish() { # prefix -> prints the sum of amounts
  python3 - "$AMQP" "$Q" "$N" "$1" <<'PY'
import json, sys, time, pika
url, queue, n, prefix = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
conn = pika.BlockingConnection(pika.URLParameters(url))
ch = conn.channel()
ch.queue_declare(queue=queue, passive=True)  # declared once, by declare_queue
ch.confirm_delivery()
total = 0
for i in range(n):
    amount = 1 + i % 97
    total += amount
    body = json.dumps({"account": f"acct-{(i * 7919) % 500}", "amount": amount})
    props = pika.BasicProperties(message_id=f"{prefix}-{i}", delivery_mode=2,
                                 headers={"oncely-source-time": int(time.time() * 1000)})
    ch.basic_publish(exchange="", routing_key=queue, body=body.encode(), properties=props)
conn.close()
print(total)
PY
}

# Empties the queue before a runner publishes: a bare consumer closes its connection once it
# has seen N, and deliveries it was pushed beyond them (or whose acks were still unsent) go
# back to the queue; left there, the next runner would consume them too.
purge() {
  python3 - "$AMQP" "$Q" <<'PY'
import sys, pika
c = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
left = c.channel().queue_purge(queue=sys.argv[2]).method.message_count
c.close()
if left:
    print(f"  ({left} messages left in the queue by the previous consumer, purged)", file=sys.stderr)
PY
}

cleanup() {
  python3 - "$AMQP" "$Q" <<'PY' || true
import sys, pika
c = pika.BlockingConnection(pika.URLParameters(sys.argv[1])); c.channel().queue_delete(queue=sys.argv[2]); c.close()
PY
  psql "$PG" -qc "DROP SCHEMA IF EXISTS $SCHEMA CASCADE" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# Each runner publishes N, drains them, and appends its rate (msgs/s) to $WORK/<name>.
run_pika() {
  purge
  publish pika >/dev/null
  python3 - "$AMQP" "$Q" "$N" "$PIKA_PREFETCH" >>"$WORK/pika" <<'PY'
import sys, time, pika
url, queue, n, prefetch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
conn = pika.BlockingConnection(pika.URLParameters(url))
ch = conn.channel()
ch.basic_qos(prefetch_count=prefetch)
seen = 0
def on_message(ch, method, properties, body):
    global seen
    ch.basic_ack(delivery_tag=method.delivery_tag)
    seen += 1
    if seen == n:
        ch.stop_consuming()
started = time.monotonic()
ch.basic_consume(queue=queue, on_message_callback=on_message, auto_ack=False)
ch.start_consuming()  # returns after the n-th ack (sent before stop_consuming)
conn.process_data_events(time_limit=0)  # flush the last acks
secs = time.monotonic() - started
conn.close()
print(f"{n / secs:.1f}")
print(f"  pika   (basic_consume, manual ack per message, prefetch {prefetch}): {n} messages in "
      f"{secs:.2f} s = {n / secs:.0f} msgs/s", file=sys.stderr)
PY
}

run_lapin() {
  purge
  publish lapin >/dev/null
  local line
  line=$("$DRAIN" "$AMQP" "$Q" "$N")
  echo "  $line" >&2
  sed -E 's/.*= ([0-9.]+) msgs\/s.*/\1/' <<<"$line" >>"$WORK/lapin"
}

run_oncely() {
  local expected started ended out
  psql "$PG" -qc "DROP SCHEMA IF EXISTS $SCHEMA CASCADE" >/dev/null 2>&1 || true
  purge
  expected=$(publish "oncely-$RANDOM")
  started=$(date +%s.%N)
  out=$("$ONCELY" demo --consume-only --crash-rate 0 --source "$AMQP?queue=$Q" --store "$PG" \
    --schema "$SCHEMA" --idle-exit 1 --json "$@")
  ended=$(date +%s.%N)
  python3 - "$out" "$N" "$expected" "$started" "$ended" >>"$WORK/oncely" <<'PY'
import json, sys
h = json.loads(sys.argv[1]); n, expected = int(sys.argv[2]), int(sys.argv[3])
secs = float(sys.argv[5]) - float(sys.argv[4]) - 1.0  # minus the idle exit
print(f"{n / secs:.1f}")
print(f"  oncely demo --consume-only --crash-rate 0: {n} messages in {secs:.2f} s = "
      f"{n / secs:.0f} msgs/s (wall time minus the 1 s idle exit; start-up included)",
      file=sys.stderr)
print(f"    checker: distinct ids {h['distinct_ids']} of {n}, double {h['double_effects']}, "
      f"total credits {h['total_credits']} (expected {expected}), "
      f"dead letters {h['dead_letters_by_reason']}", file=sys.stderr)
ok = h["distinct_ids"] == n and h["double_effects"] == 0 and h["total_credits"] == expected
if not ok:
    print("    CHECK FAILED", file=sys.stderr)
    print("check-failed")
PY
  if grep -q check-failed "$WORK/oncely"; then exit 1; fi
}

declare_queue
echo "$QUEUE_TYPE queue $Q (declared by pika, durable); N=$N per consumer, REPEAT=$REPEAT"
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 0; r < REPEAT; r++)); do
  order=(pika lapin oncely)
  if ((r % 2 == 1)); then order=(oncely lapin pika); fi
  echo "run $((r + 1)) of $REPEAT (${order[*]}):"
  for who in "${order[@]}"; do
    "run_$who" "$@"
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$WORK" "$REPEAT" <<'PY'
import statistics, sys
work, k = sys.argv[1], int(sys.argv[2])
rates = {w: [float(x) for x in open(f"{work}/{w}")] for w in ("pika", "lapin", "oncely")}
med = {w: statistics.median(v) for w, v in rates.items()}
over = lambda a, b: statistics.median(x / y for x, y in zip(rates[a], rates[b]))
label = "median of %d runs" % k if k > 1 else "one run"
print(f"summary ({label}): pika {med['pika']:.0f} msgs/s, lapin {med['lapin']:.0f} msgs/s, "
      f"oncely {med['oncely']:.0f} msgs/s")
print(f"oncely/pika  = {over('oncely', 'pika'):.2f}")
print(f"oncely/lapin = {over('oncely', 'lapin'):.2f}")
PY
