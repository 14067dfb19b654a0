#!/usr/bin/env bash
# oncely into MariaDB through RabbitMQ beside a bare client doing the same work (issue 45: what
# is MariaDB's and what is ours). One quorum queue, filled first, then drained, by two
# consumers side by side in one run, each into its own fresh database on the same server:
#
#   1. bare:   Python pika + PyMySQL, no oncely: takes the ready deliveries (prefetch 512, up to
#              GROUP = 64 at a time), writes them with three multi-row statements (INSERT IGNORE
#              of the claims into a table shaped as oncely's inbox, the ledger rows, one upsert
#              of the summed balances), commits, then acks the group (multiple=True). Ids the
#              INSERT IGNORE did not insert are looked up and their effects skipped, so the
#              client is a correct, if minimal, idempotent consumer.
#   2. oncely: `oncely demo --consume-only --crash-rate 0 --source "$AMQP?queue=$Q"
#              --store "$MARIADB/test" --schema <db> --idle-exit 1 --json` at its defaults; its
#              rate is N over its wall time minus the 1 s idle exit (start-up included).
#
# Both are checked from the database: N distinct ids in the ledger, 0 double, total credits =
# the amounts published (exit 1 if not). PREFILL=k first fills both inboxes with k claims of
# random UUID-shaped ids spread over 7 days (MariaDB's sequence engine, 10^6 rows a statement,
# in key order: see prefill below). REPEAT=k runs both k times, in reverse order every other
# time, and prints the medians and the median of the per-repetition ratios oncely/bare.
#
#   bash scripts/mariadb-user-path.sh [N]              # N=100000, PREFILL=0, REPEAT=1
#   PREFILL=1000000 REPEAT=3 bash scripts/mariadb-user-path.sh 100000
#
# Use N of 100,000 or more: a stall that begins after tens of thousands of messages (as the
# statement-cache one of docs/performance.md did) does not show in a shorter run.
#
# Needs the release binary (cargo build --release -p oncely-cli --features oncely-cli/amqp;
# ONCELY_BIN overrides), the mariadb client, and python3 with pika and pymysql (the venv of
# scripts/setup.sh has both).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-100000}
AMQP=${ONCELY_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2f}
# The server (no database: each consumer gets its own; oncely's URL names `test`).
MARIADB=${ONCELY_MARIADB_SERVER:-mysql://root@127.0.0.1:3306}
PREFILL=${PREFILL:-0}
REPEAT=${REPEAT:-1}
Q=oncely-mariadb-path-$$
BARE_DB=oncely_bare_$$
ONCELY_DB=oncely_mpath_$$
ONCELY=${ONCELY_BIN:-${CARGO_TARGET_DIR:-target}/release/oncely}
[ -x "$ONCELY" ] || { echo "missing $ONCELY (see the header of this script)" >&2; exit 1; }
python3 -c 'import pika, pymysql' 2>/dev/null ||
  { echo "needs python3 with pika and pymysql (pip install pika pymysql)" >&2; exit 1; }
WORK=$(mktemp -d)
sql() { mariadb -h 127.0.0.1 -P 3306 -u root -N -e "$1"; }

cleanup() {
  python3 - "$AMQP" "$Q" <<'PY' || true
import sys, pika
c = pika.BlockingConnection(pika.URLParameters(sys.argv[1])); c.channel().queue_delete(queue=sys.argv[2]); c.close()
PY
  sql "DROP DATABASE IF EXISTS $BARE_DB; DROP DATABASE IF EXISTS $ONCELY_DB" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

python3 - "$AMQP" "$Q" <<'PY'
import sys, pika
conn = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
conn.channel().queue_declare(queue=sys.argv[2], durable=True, arguments={"x-queue-type": "quorum"})
conn.close()
PY

publish() { # prints the sum of amounts (the demo's wire format, random UUID ids)
  python3 - "$AMQP" "$Q" "$N" <<'PY'
import json, sys, uuid, pika
url, queue, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
conn = pika.BlockingConnection(pika.URLParameters(url))
ch = conn.channel()
ch.confirm_delivery()
total = 0
for i in range(n):
    amount = 1 + i % 97
    total += amount
    body = json.dumps({"account": f"acct-{(i * 7919) % 500}", "amount": amount})
    props = pika.BasicProperties(message_id=str(uuid.uuid4()), delivery_mode=2)
    ch.basic_publish(exchange="", routing_key=queue, body=body.encode(), properties=props)
conn.close()
print(total)
PY
}

# Fills `db`.`table` (an inbox: consumer, message_id, payload_hash, received_at) with PREFILL
# claims of `consumer`: ids shaped and spread as random UUIDs (lowercase hex: the first 8 digits
# step evenly through the key space, the other 24 are random), written in key order, so InnoDB
# appends to its clustered index instead of splitting random pages (10^7 in a few minutes, not
# the quarter of an hour random order takes). The pages start full, so the first claims of a run
# split them: both consumers pay that alike.
prefill() { # db table consumer
  [ "$PREFILL" -gt 0 ] || return 0
  local started=$SECONDS done=0 chunk
  while [ "$done" -lt "$PREFILL" ]; do
    chunk=$((PREFILL - done < 1000000 ? PREFILL - done : 1000000))
    sql "INSERT INTO $1.$2 (consumer, message_id, payload_hash, received_at)
         SELECT '$3', INSERT(INSERT(INSERT(INSERT(CONCAT(
                  LPAD(LOWER(HEX(FLOOR((seq + $done) * 4294967296 / ($PREFILL + 1)))), 8, '0'),
                  SUBSTR(MD5(CONCAT(seq + $done, '-', RAND())), 9)), 9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-'),
                SHA2(seq + $done, 256),
                CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) - 604800000 + (seq + $done) * (604800000 DIV $PREFILL)
         FROM $1.seq_1_to_$chunk ORDER BY seq"
    done=$((done + chunk))
  done
  sql "ANALYZE TABLE $1.$2" >/dev/null
  echo "  prefilled $1.$2 with $PREFILL claims in $((SECONDS - started)) s" >&2
}

setup_bare() {
  sql "DROP DATABASE IF EXISTS $BARE_DB; CREATE DATABASE $BARE_DB;
       CREATE TABLE $BARE_DB.inbox (consumer VARBINARY(128) NOT NULL, message_id VARBINARY(255) NOT NULL,
         payload_hash CHAR(64) NOT NULL, received_at BIGINT NOT NULL, PRIMARY KEY (consumer, message_id),
         KEY inbox_received_at (received_at)) ENGINE=InnoDB;
       CREATE TABLE $BARE_DB.accounts (account VARCHAR(255) PRIMARY KEY, balance BIGINT NOT NULL) ENGINE=InnoDB;
       CREATE TABLE $BARE_DB.ledger (seq BIGINT AUTO_INCREMENT PRIMARY KEY, message_id VARCHAR(255) NOT NULL,
         account VARCHAR(255) NOT NULL, amount BIGINT NOT NULL) ENGINE=InnoDB"
  prefill "$BARE_DB" inbox bare
}

setup_oncely() {
  sql "DROP DATABASE IF EXISTS $ONCELY_DB"
  # An empty run creates the schema (migrations and the demo's tables), then the prefill.
  "$ONCELY" demo --consume-only --source "$AMQP?queue=$Q" --store "$MARIADB/test" \
    --schema "$ONCELY_DB" --idle-exit 1 --json >/dev/null
  prefill "$ONCELY_DB" oncely_inbox demo
}

# Checks `db`: ledger ids against N and the balances against `expected`; prints a line.
check() { # who db ledger accounts expected
  local row
  row=$(sql "SELECT COUNT(*), COUNT(DISTINCT message_id), (SELECT COALESCE(SUM(balance), 0) FROM $2.$4) FROM $2.$3")
  read -r rows distinct credits <<<"$row"
  echo "    checker ($1): ledger rows $rows, distinct ids $distinct of $N, double $((rows - distinct)), total credits $credits (expected $5)" >&2
  [ "$distinct" -eq "$N" ] && [ "$rows" -eq "$N" ] && [ "$credits" -eq "$5" ] ||
    { echo "    CHECK FAILED ($1)" >&2; exit 1; }
}

run_bare() {
  local expected
  setup_bare
  expected=$(publish)
  python3 - "$AMQP" "$Q" "$N" "$BARE_DB" >>"$WORK/bare" <<'PY'
import hashlib, json, sys, time, pika, pymysql
url, queue, n, db = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
GROUP = 64
conn = pika.BlockingConnection(pika.URLParameters(url))
ch = conn.channel()
ch.basic_qos(prefetch_count=512)
my = pymysql.connect(host="127.0.0.1", port=3306, user="root", database=db, autocommit=False)
cur = my.cursor()

def insert_claims(group):
    cur.execute("INSERT IGNORE INTO inbox (consumer, message_id, payload_hash, received_at) VALUES "
                + ", ".join(["(%s, %s, %s, CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED))"] * len(group)),
                [v for _, p, b in group for v in ("bare", p.message_id, hashlib.sha256(b).hexdigest())])
    return cur.rowcount

def write(group):
    fresh = group
    if insert_claims(group) != len(group):  # some were claimed before: skip their effects
        my.rollback()
        ids = [p.message_id for _, p, _ in group]
        cur.execute("SELECT message_id FROM inbox WHERE consumer = 'bare' AND message_id IN ("
                    + ", ".join(["%s"] * len(ids)) + ")", ids)
        old = {r[0].decode() for r in cur.fetchall()}
        fresh = [m for m in group if m[1].message_id not in old]
        if fresh and insert_claims(fresh) != len(fresh):
            raise SystemExit("bare: claims changed under a single consumer")
    credits = [(p.message_id, json.loads(b)) for _, p, b in fresh]
    if credits:
        cur.execute("INSERT INTO ledger (message_id, account, amount) VALUES "
                    + ", ".join(["(%s, %s, %s)"] * len(credits)),
                    [v for i, c in credits for v in (i, c["account"], c["amount"])])
        sums = {}
        for _, c in credits:
            sums[c["account"]] = sums.get(c["account"], 0) + c["amount"]
        rows = sorted(sums.items())
        cur.execute("INSERT INTO accounts (account, balance) VALUES "
                    + ", ".join(["(%s, %s)"] * len(rows))
                    + " ON DUPLICATE KEY UPDATE balance = balance + VALUES(balance)",
                    [v for r in rows for v in r])
    my.commit()
    ch.basic_ack(delivery_tag=group[-1][0].delivery_tag, multiple=True)

seen, group, started = 0, [], None
for method, props, body in ch.consume(queue, inactivity_timeout=0.001):
    if method is not None:
        started = started or time.monotonic()
        group.append((method, props, body))
        if len(group) < GROUP:
            continue
    if group:  # GROUP ready, or nothing more ready right now
        write(group)
        seen += len(group)
        group = []
        if seen >= n:
            break
secs = time.monotonic() - started
ch.cancel()
conn.close()
print(f"{n / secs:.1f}")
print(f"  bare pika + PyMySQL (groups of up to {GROUP}, 3 statements + commit, ack multiple): "
      f"{n} messages in {secs:.2f} s = {n / secs:.0f} msgs/s", file=sys.stderr)
PY
  check bare "$BARE_DB" ledger accounts "$expected"
}

run_oncely() {
  local expected started ended
  setup_oncely
  expected=$(publish)
  started=$(date +%s.%N)
  "$ONCELY" demo --consume-only --crash-rate 0 --source "$AMQP?queue=$Q" --store "$MARIADB/test" \
    --schema "$ONCELY_DB" --idle-exit 1 --json >/dev/null
  ended=$(date +%s.%N)
  python3 -c "import sys; n, s = int(sys.argv[1]), float(sys.argv[3]) - float(sys.argv[2]) - 1.0
print(f'{n / s:.1f}')
print(f'  oncely demo --consume-only --crash-rate 0: {n} messages in {s:.2f} s = {n / s:.0f} msgs/s '
      '(wall time minus the 1 s idle exit; start-up included)', file=sys.stderr)" \
    "$N" "$started" "$ended" >>"$WORK/oncely"
  check oncely "$ONCELY_DB" demo_ledger demo_accounts "$expected"
}

echo "quorum queue $Q; MariaDB $MARIADB; N=$N per consumer, PREFILL=$PREFILL, REPEAT=$REPEAT"
for ((r = 0; r < REPEAT; r++)); do
  order=(bare oncely)
  if ((r % 2 == 1)); then order=(oncely bare); fi
  echo "run $((r + 1)) of $REPEAT (${order[*]}):"
  for who in "${order[@]}"; do "run_$who"; done
done
python3 - "$WORK" <<'PY'
import statistics, sys
rates = {w: [float(x) for x in open(f"{sys.argv[1]}/{w}")] for w in ("bare", "oncely")}
ratio = statistics.median(o / b for o, b in zip(rates["oncely"], rates["bare"]))
print(f"summary: bare {statistics.median(rates['bare']):.0f} msgs/s, "
      f"oncely {statistics.median(rates['oncely']):.0f} msgs/s, oncely/bare = {ratio:.2f}")
PY
