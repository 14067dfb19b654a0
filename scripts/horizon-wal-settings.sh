#!/usr/bin/env bash
# The long-horizon mode on PostgreSQL at the server's settings, then again with the settings
# docs/retention.md recommends for a large plain inbox (issue 45: WAL per message at 10^7 ids
# against an empty inbox), one run after the other on the same server:
#
#   1. as configured (this VM: wal_compression off, max_wal_size 1GB);
#   2. wal_compression = zstd and max_wal_size = 8GB (ALTER SYSTEM + reload, no restart),
#      reset when the script ends, however it ends.
#
#   bash scripts/horizon-wal-settings.sh [ROWS]        # ROWS=0,10000000 (about 15 min)
#   MESSAGES=400000 bash scripts/horizon-wal-settings.sh
#
# MESSAGES (default 100,000) is each cell's count. Each cell starts right after a CHECKPOINT,
# so its first claim on each leaf of the primary key writes the whole page: at 10^7 ids (about
# 120,000 leaves) a short cell pays a page for most claims, a longer one spreads those pages
# over more claims, as a consumer at a steady rate does over a checkpoint interval.
#
# Needs the release bench (cargo build --release -p oncely-bench --no-default-features;
# ONCELY_BENCH_BIN overrides), psql, and a PostgreSQL superuser at ONCELY_PG_SUPERUSER
# (default postgres://postgres@127.0.0.1:5432/postgres). Writes horizon.json of each run into
# results/wal-settings/{defaults,tuned}.
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${1:-0,10000000}
MESSAGES=${MESSAGES:-100000}
BENCH=${ONCELY_BENCH_BIN:-${CARGO_TARGET_DIR:-target}/release/oncely-bench}
SUPER=${ONCELY_PG_SUPERUSER:-postgres://postgres@127.0.0.1:5432/postgres}
OUT=results/wal-settings
[ -x "$BENCH" ] || { echo "missing $BENCH (see the header of this script)" >&2; exit 1; }
pg() { psql "$SUPER" -qAtX -c "$1"; }

reset() {
  pg "ALTER SYSTEM RESET wal_compression" && pg "ALTER SYSTEM RESET max_wal_size" &&
    pg "SELECT pg_reload_conf()" >/dev/null
}
trap reset EXIT

run() { # name
  echo "== $1: wal_compression=$(pg 'SHOW wal_compression'), max_wal_size=$(pg 'SHOW max_wal_size')"
  pg "CHECKPOINT"
  "$BENCH" --horizon --no-mariadb --no-sqlite --horizon-rows "$ROWS" --messages "$MESSAGES" --out "$OUT/$1"
}

run defaults
pg "ALTER SYSTEM SET wal_compression = 'zstd'"
pg "ALTER SYSTEM SET max_wal_size = '8GB'"
pg "SELECT pg_reload_conf()" >/dev/null
sleep 1
run tuned
