#!/usr/bin/env bash
# The partitioned inbox's claim at a week of ids, alone, against the plain inbox's (issue 45:
# the partitioned layout stays below 0.9x the plain one at 10^7 ids). pgbench runs one group
# claim of 64 new random-UUID ids per transaction, 4 clients, each variant on an inbox
# prefilled with 10^7 ids spread over the last 7 days:
#
#   plain    the plain inbox's claim (INSERT ... ON CONFLICT DO NOTHING on its primary key);
#   full     the partitioned claim without the sealed days' keys: advisory locks, then an
#            insert that probes every daily partition by its claim-key hash index, per id;
#   sealed   the partitioned claim with them (oncely-ops `sealed`): the keys of the days
#            before today in one UNLOGGED B-tree, so a claim probes it and the partitions from
#            today on (runtime partition pruning on `received_at >= bound`) instead of every day,
#            sent as oncely-sql sent it before the claim function: a statement that takes the
#            locks and sets the planner, the insert, a statement that restores the planner;
#   function the same claim as one call of the layout's inbox_claim function (migration 5),
#            what oncely-sql sends now;
#   bounded  the function with its probe also bounded above at the database's clock + 1 hour,
#            so runtime pruning skips the partitions created ahead (an experiment, not what
#            oncely sends: it is exact only while no row is stored with a later received_at);
#   noprobe  the partitioned insert with no probe at all (the ceiling of the layout's writes:
#            the primary key led by received_at and the claim-key hash index, migration 6,
#            against the plain inbox's primary key and received_at index).
#
#   bash scripts/partitioned-probe.sh          # about 8 min: two prefills, 3 rounds of 10 s cells
#   T=30 ROUNDS=2 bash scripts/partitioned-probe.sh
#   ROWS=1000000 bash scripts/partitioned-probe.sh   # a smaller inbox (default 10^7 ids)
#   VARIANTS="plain function bounded" AHEAD=1 bash scripts/partitioned-probe.sh
#            # some variants only; daily partitions created ahead of today (default 3, as
#            # `oncely prune --days-ahead`)
#
# Every cell inserts its claims, so today's partition grows over a run (about 200,000 rows a
# 10 s cell): rounds alternate the order. Needs psql and pgbench and a PostgreSQL superuser at
# ONCELY_PG_SUPERUSER (default postgres://postgres@127.0.0.1:5432/postgres); creates and drops
# the databases oncely_probe_part and oncely_probe_plain (about 5 GB while it runs).
set -euo pipefail
cd "$(dirname "$0")/.."
SUPER=${ONCELY_PG_SUPERUSER:-postgres://postgres@127.0.0.1:5432/postgres}
T=${T:-10}
ROUNDS=${ROUNDS:-3}
ROWS=${ROWS:-10000000}
WORK=$(mktemp -d)
db_url() { echo "${SUPER%/*}/$1"; }
PART=$(db_url oncely_probe_part)
PLAIN=$(db_url oncely_probe_plain)
cleanup() {
  psql "$SUPER" -qX -c "DROP DATABASE IF EXISTS oncely_probe_part" -c "DROP DATABASE IF EXISTS oncely_probe_plain" || true
  rm -rf "$WORK"
}
trap cleanup EXIT
for db in oncely_probe_part oncely_probe_plain; do
  psql "$SUPER" -qX -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
done

# The ids: $ROWS (10^7) random UUIDs, received_at evenly over the last 7 days; indexes built after.
FILL="SELECT 'bench-consumer', gen_random_uuid()::text, encode(sha256(int8send(g)), 'hex'),
  (extract(epoch from now()) * 1000)::bigint - 604800000 + g * (604800000 / $ROWS) FROM generate_series(1, $ROWS) g"

echo "== prefilling the partitioned inbox (the layout's migrations, 9 daily partitions to today and ${AHEAD:-3} ahead)"
for m in partitioned_inbox partitioned_claim partitioned_key partitioned_sealed partitioned_claim_fn partitioned_time_key; do
  sed -e 's/{schema}//g' -e 's/{prefix}//g' "crates/oncely-ops/migrations/postgres/$m.sql"
done >"$WORK/schema.sql"
psql "$PART" -qX -v ON_ERROR_STOP=1 -f "$WORK/schema.sql"
# The claim function whose probe also stops an hour past the database's clock, so that runtime
# pruning skips the partitions created ahead (and the default one when the range is covered).
sed -e 's/{schema}//g' -e 's/{prefix}//g' -e 's/inbox_claim(/inbox_claim_bounded(/' \
  -e "s/'-9223372036854775808'::bigint)$/&\n AND p.received_at < (extract(epoch from statement_timestamp()) * 1000)::bigint + 3600000/" \
  crates/oncely-ops/migrations/postgres/partitioned_claim_fn.sql >"$WORK/bounded_fn.sql"
psql "$PART" -qX -v ON_ERROR_STOP=1 -f "$WORK/bounded_fn.sql"
psql "$PART" -qX -v ON_ERROR_STOP=1 <<SQL
DO \$\$ DECLARE today int := (extract(epoch from now()) * 1000)::bigint / 86400000; BEGIN
  FOR d IN today - 8 .. today + ${AHEAD:-3} LOOP
    EXECUTE format('CREATE TABLE inbox_p%s PARTITION OF inbox FOR VALUES FROM (%s) TO (%s)', d, d::bigint * 86400000, (d::bigint + 1) * 86400000);
  END LOOP; END \$\$;
ALTER TABLE inbox DISABLE TRIGGER USER;
ALTER TABLE inbox DROP CONSTRAINT inbox_received_at;
DROP INDEX inbox_claim_key;
INSERT INTO inbox $FILL;
SET maintenance_work_mem = '512MB';
ALTER TABLE inbox ADD CONSTRAINT inbox_received_at PRIMARY KEY (received_at, consumer, message_id);
CREATE INDEX inbox_claim_key ON inbox USING hash (hashtextextended(consumer || E'\x1f' || message_id, 1869504356));
ALTER TABLE inbox ENABLE TRIGGER USER;
SQL
psql "$PART" -qX -c "VACUUM ANALYZE"
# The sealed days' keys as oncely_ops::sealed::seal builds them (the migration made the tables).
started=$(date +%s.%N)
psql "$PART" -qX -v ON_ERROR_STOP=1 <<'SQL'
INSERT INTO inbox_sealed_state (one, active, below)
  VALUES (true, 'a', (extract(epoch from now()) * 1000)::bigint / 86400000 * 86400000);
INSERT INTO inbox_sealed_a SELECT hashtextextended(consumer || E'\x1f' || message_id, 1869504356) FROM inbox
  WHERE received_at < (SELECT below FROM inbox_sealed_state) ORDER BY 1;
ANALYZE inbox_sealed_a;
SQL
echo "sealed days' keys built in $(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}') s:" \
  "$(psql "$PART" -qAtX -c "SELECT count(*) FROM inbox_sealed_a") keys," \
  "$(psql "$PART" -qAtX -c "SELECT pg_size_pretty(pg_total_relation_size('inbox_sealed_a'))")"

echo "== prefilling the plain inbox"
psql "$PLAIN" -qX -v ON_ERROR_STOP=1 <<SQL
CREATE TABLE inbox (consumer TEXT NOT NULL, message_id TEXT NOT NULL, payload_hash TEXT NOT NULL, received_at BIGINT NOT NULL);
INSERT INTO inbox $FILL;
SET maintenance_work_mem = '512MB';
ALTER TABLE inbox ADD PRIMARY KEY (consumer, message_id) WITH (fillfactor = 70);
CREATE INDEX inbox_received_at ON inbox (received_at);
ALTER INDEX inbox_pkey RESET (fillfactor);
SQL
psql "$PLAIN" -qX -c "VACUUM ANALYZE"

# The claims (ids: pgbench variable, one array of 64 new UUIDs per transaction).
key() { echo "hashtextextended($1 || E'\\x1f' || $2, 1869504356)"; }
WANTED="ARRAY(SELECT $(key "'bench-consumer'" x) FROM unnest(:ids::text[]) AS x)"
HEAD="SELECT array_agg(gen_random_uuid()::text)::text AS ids FROM generate_series(1, 64) \\gset
BEGIN;"
LOCK="SELECT count(pg_advisory_xact_lock(k)), set_config('oncely.claim_locked', 'on', true)
  FROM (SELECT DISTINCT $(key "'bench-consumer'" id) AS k FROM unnest(:ids::text[]) AS id ORDER BY k OFFSET 0) AS keys;"
INSERT="INSERT INTO inbox (consumer, message_id, payload_hash, received_at)
SELECT 'bench-consumer', m.id, md5(m.id), (extract(epoch from statement_timestamp()) * 1000)::bigint
FROM unnest(:ids::text[]) WITH ORDINALITY AS m(id, n)"
TAIL="ORDER BY m.n ON CONFLICT DO NOTHING RETURNING message_id;
END;"
HELD="m.id NOT IN (SELECT message_id FROM (SELECT consumer, message_id FROM unnest($WANTED) AS k(key),
  LATERAL (SELECT consumer, message_id FROM inbox WHERE $(key consumer message_id) = k.key"
HELD_END="OFFSET 0) AS i OFFSET 0) AS held WHERE consumer = 'bench-consumer')"
BOUND="received_at >= coalesce((SELECT below FROM inbox_sealed_state WHERE one), '-9223372036854775808'::bigint)"
ACTIVE="(SELECT active FROM inbox_sealed_state WHERE one AND below IS NOT NULL)"
SEALED="$(key "'bench-consumer'" m.id) NOT IN (
  SELECT claim_key FROM inbox_sealed_a WHERE $ACTIVE = 'a' AND claim_key = ANY($WANTED)
  UNION ALL SELECT claim_key FROM inbox_sealed_b WHERE $ACTIVE = 'b' AND claim_key = ANY($WANTED))"
printf '%s\n' "$HEAD" "$INSERT" "$TAIL" >"$WORK/plain.sql"
printf '%s\n' "$HEAD" "$LOCK" "$INSERT" "$TAIL" >"$WORK/noprobe.sql"
printf '%s\n' "$HEAD" "$LOCK" "$INSERT" "WHERE $HELD $HELD_END" "$TAIL" >"$WORK/full.sql"
# The planner settings the three-statement claim set and restored around its insert.
SETTINGS="enable_seqscan enable_indexonlyscan enable_bitmapscan enable_hashjoin enable_mergejoin enable_material"
SET=$(for n in $SETTINGS; do printf "set_config('%s', 'off', true), " "$n"; done)
RESTORE=$(for n in $SETTINGS; do printf "set_config('%s', 'on', true), " "$n"; done)
LOCK_SET="SELECT count(pg_advisory_xact_lock(k)), set_config('oncely.claim_locked', 'on', true),
  ${SET}set_config('plan_cache_mode', 'force_generic_plan', true), current_setting('enable_seqscan')
  FROM (SELECT DISTINCT $(key "'bench-consumer'" id) AS k FROM unnest(:ids::text[]) AS id ORDER BY k OFFSET 0) AS keys;"
printf '%s\n' "$HEAD" "$LOCK_SET" "$INSERT" "WHERE $HELD AND $BOUND $HELD_END" "AND $SEALED" \
  "${TAIL%END;}" "SELECT ${RESTORE}set_config('plan_cache_mode', 'auto', true);" "END;" >"$WORK/sealed.sql"
printf '%s\n' "$HEAD" "SELECT claimed_id, stored_hash FROM inbox_claim('bench-consumer', :ids::text[],
  ARRAY(SELECT md5(x) FROM unnest(:ids::text[]) AS x), (extract(epoch from statement_timestamp()) * 1000)::bigint);" \
  "END;" >"$WORK/function.sql"
sed 's/inbox_claim(/inbox_claim_bounded(/' "$WORK/function.sql" >"$WORK/bounded.sql"

# The planner settings of the claim function's SET clauses (partitioned_claim_fn.sql), for the variants
# that send their statements themselves (full, noprobe).
PLANNER="-c enable_seqscan=off -c enable_indexonlyscan=off -c enable_bitmapscan=off -c enable_hashjoin=off -c enable_mergejoin=off -c enable_material=off -c plan_cache_mode=force_generic_plan"
run() { # variant
  local url=$PART options=$PLANNER
  [ "$1" = plain ] && { url=$PLAIN; options=""; }
  # The three-statement claim and the function set the planner themselves.
  [ "$1" = sealed ] || [ "$1" = function ] || [ "$1" = bounded ] && options=""
  psql "$url" -qX -c CHECKPOINT
  local tps
  tps=$(PGOPTIONS="$options" pgbench -n -M prepared -c 4 -j 2 -T "$T" -f "$WORK/$1.sql" "$url" 2>&1 |
    awk '/^tps/ {printf "%.0f", $3}')
  echo "$1 $tps"
}
echo "== groups of 64 claims per second, $T s a cell"
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="${VARIANTS:-plain full sealed function bounded noprobe}"; else order="$(echo "${VARIANTS:-plain full sealed function bounded noprobe}" | tr " " "\n" | tac | tr "\n" " ")"; fi
  line=""
  declare -A tps=()
  for v in $order; do
    read -r name value < <(run "$v")
    tps[$name]=$value
  done
  for v in $order; do
    [ "$v" = plain ] && continue
    line+="$v ${tps[$v]} ($(awk -v a="${tps[$v]}" -v b="${tps[plain]}" 'BEGIN {printf "%.2f", a / b}')x plain)  "
  done
  echo "round $r: plain ${tps[plain]}  $line"
done
