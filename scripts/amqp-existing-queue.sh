#!/usr/bin/env bash
# oncely on a RabbitMQ classic queue that already exists, next to a bare lapin consumer of the
# same queue and the same backlog (issue 24):
#
#   1. declare a classic queue (Python pika, durable, no x-queue-type: a classic queue) and
#      publish N demo messages (500 accounts), confirmed;
#   2. drain them with a bare lapin consumer (consume + ack, prefetch 512: oncely's read-ahead),
#      timed from basic.consume to the last ack;
#   3. publish N more to the same queue; run
#      `oncely demo --consume-only --source amqp://…?queue=Q --store postgres://…` (defaults,
#      plus any extra flags given) into a fresh schema; its rate is N over its wall time minus the
#      idle exit (1 s);
#   4. check the database: N distinct ids, 0 double, balance total = amounts published.
#
#   bash scripts/amqp-existing-queue.sh [N] [extra demo flags…]
#
# Needs the release binaries: cargo build --release -p oncely-cli --features oncely-cli/amqp
# and cargo build --release -p oncely-bench --example amqp_drain (CARGO_TARGET_DIR honoured).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
shift || true
AMQP=${ONCELY_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2f}
PG=${ONCELY_PG_URL:-postgres://postgres@127.0.0.1:5432/test}
Q=oncely-classic-$$
SCHEMA=oncely_classic_$$
TARGET=${CARGO_TARGET_DIR:-target}/release
ONCELY=${ONCELY_BIN:-$TARGET/oncely}
DRAIN=${ONCELY_DRAIN_BIN:-$TARGET/examples/amqp_drain}
for bin in "$ONCELY" "$DRAIN"; do
  [ -x "$bin" ] || { echo "missing $bin (see the header of this script)" >&2; exit 1; }
done

publish() { # prefix -> prints the sum of amounts
  python3 - "$AMQP" "$Q" "$N" "$1" <<'PY'
import json, sys, time, pika
url, queue, n, prefix = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
conn = pika.BlockingConnection(pika.URLParameters(url))
ch = conn.channel()
ch.queue_declare(queue=queue, durable=True)  # a classic queue: no x-queue-type
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

cleanup() {
  python3 - "$AMQP" "$Q" <<'PY' || true
import sys, pika
c = pika.BlockingConnection(pika.URLParameters(sys.argv[1])); c.channel().queue_delete(queue=sys.argv[2]); c.close()
PY
  psql "$PG" -qc "DROP SCHEMA IF EXISTS $SCHEMA CASCADE" >/dev/null 2>&1 || true
}
trap cleanup EXIT

publish bare >/dev/null
echo "classic queue $Q: $N messages published"
"$DRAIN" "$AMQP" "$Q" "$N"

expected=$(publish demo)
echo "classic queue $Q: $N more published (amounts sum to $expected)"
started=$(date +%s.%N)
out=$("$ONCELY" demo --consume-only --source "$AMQP?queue=$Q" --store "$PG" --schema "$SCHEMA" \
  --idle-exit 1 --json "$@")
ended=$(date +%s.%N)
python3 - "$out" "$N" "$expected" "$started" "$ended" <<'PY'
import json, sys
h = json.loads(sys.argv[1]); n, expected = int(sys.argv[2]), int(sys.argv[3])
secs = float(sys.argv[5]) - float(sys.argv[4]) - 1.0  # minus the idle exit
print(f"oncely demo --consume-only: {n} messages in {secs:.2f} s = {n / secs:.0f} msgs/s "
      f"(wall time minus the 1 s idle exit; includes start-up)")
print(f"checker: distinct ids {h['distinct_ids']} of {n}, double {h['double_effects']}, "
      f"total credits {h['total_credits']} (expected {expected}), dead letters {h['dead_letters_by_reason']}")
ok = h["distinct_ids"] == n and h["double_effects"] == 0 and h["total_credits"] == expected
sys.exit(0 if ok else 1)
PY
