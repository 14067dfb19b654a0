#!/usr/bin/env bash
# Test-owned clusters on loopback, outside the machine's own services:
#
#   scripts/cluster.sh start  galera|nats   create (once), start every node that is down, wait until formed
#   scripts/cluster.sh stop   galera|nats   stop every node (no-op when none runs)
#   scripts/cluster.sh status galera|nats   exit 0 when all three nodes answer and the cluster is formed
#   scripts/cluster.sh kill   galera|nats N SIGKILL node N (1-3): the node-loss tests use it
#   scripts/cluster.sh urls   galera|nats   print the client URL of each node, one per line
#   scripts/cluster.sh reset  galera|nats   stop, delete the data, start afresh (a cluster left inconsistent)
#
# MariaDB Galera: three mariadbd processes run as user mysql, each with its own datadir (owned by
#   mysql: the rsync state transfer runs unprivileged), node 1 bootstraps when no node runs, the
#   others join. SQL ports 23306-23308 (mysql://root@127.0.0.1:2330N/test, root without password),
#   group communication 24567/24577/24587, IST 24568/24578/24588, SST 24444/24454/24464.
# NATS: three nats-server processes with JetStream, routed to each other: clients on
#   14222-14224, routes on 16222-16224, monitoring on 18222-18224, server names n1-n3.
# Data lives under ${ONCELY_CLUSTER_DIR:-/var/tmp/oncely-cluster}. Every command is idempotent.
set -euo pipefail

BASE=${ONCELY_CLUSTER_DIR:-/var/tmp/oncely-cluster}
NODES=(1 2 3)
GALERA_LIB=${ONCELY_GALERA_LIB:-/usr/lib/galera/libgalera_smm.so}

say() { echo "cluster: $*"; }
# shellcheck source=lib/daemon.sh
. "$(dirname "$0")/lib/daemon.sh"
die() { say "$*" >&2; exit 1; }

# ---------------------------------------------------------------- Galera
sql_port() { echo $((23305 + $1)); }
gcomm_port() { echo $((24557 + 10 * $1)); }
ist_port() { echo $((24558 + 10 * $1)); }
sst_port() { echo $((24434 + 10 * $1)); }
gdir() { echo "$BASE/galera-$1"; }

g_sql() { # node sql...
  local n=$1; shift
  timeout 20 mariadb --protocol=tcp -h 127.0.0.1 -P "$(sql_port "$n")" -u root --connect-timeout=2 -N -B -e "$*"
}

# The node's mariadbd, only if the pid file still names it (see daemon_pid).
g_pid() { daemon_pid "$(gdir "$1")/mariadb.pid" mariadbd "--datadir=$(gdir "$1")/data"; }

# The node answers SQL and is a synced member of the primary component.
g_ready() {
  [ "$(g_sql "$1" "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'wsrep_ready'" 2>/dev/null)" = ON ] &&
    [ "$(g_sql "$1" "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'wsrep_local_state_comment'" 2>/dev/null)" = Synced ]
}

g_size() { g_sql "$1" "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'wsrep_cluster_size'" 2>/dev/null; }

g_init() {
  local d; d=$(gdir "$1")
  [ -d "$d/data/mysql" ] && return 0
  mkdir -p "$d/data"; chown -R mysql: "$d"
  mariadb-install-db --no-defaults --user=mysql --datadir="$d/data" \
    --auth-root-authentication-method=normal --skip-test-db >"$d/install.log" 2>&1 \
    || { tail -20 "$d/install.log" >&2; die "galera: install-db of node $1 failed"; }
}

g_launch() { # node [--wsrep-new-cluster]
  local n=$1 d; d=$(gdir "$1"); shift
  local members="gcomm://127.0.0.1:$(gcomm_port 1),127.0.0.1:$(gcomm_port 2),127.0.0.1:$(gcomm_port 3)"
  # A pid file left by a killed node (g_pid found no node behind it) goes; the server, run as
  # mysql, could not write its own over one that root wrote.
  rm -f "$d/mariadb.pid"
  # --no-defaults: none of the machine's server config (port 3306, its socket) applies.
  (cd / && exec setsid -f runuser -u mysql -- mariadbd --no-defaults "$@" --datadir="$d/data" \
    --bind-address=127.0.0.1 --port="$(sql_port "$n")" --socket="$d/mariadb.sock" \
    --pid-file="$d/mariadb.pid" --log-error="$d/error.log" --max-connections=300 \
    --innodb-flush-log-at-trx-commit=2 --binlog-format=ROW --default-storage-engine=InnoDB \
    --innodb-autoinc-lock-mode=2 --wsrep-on=ON --wsrep-provider="$GALERA_LIB" \
    --wsrep-cluster-name=oncely --wsrep-cluster-address="$members" --wsrep-node-name="node$n" \
    --wsrep-node-address="127.0.0.1:$(gcomm_port "$n")" \
    --wsrep-provider-options="gmcast.listen_addr=tcp://127.0.0.1:$(gcomm_port "$n");ist.recv_addr=127.0.0.1:$(ist_port "$n")" \
    --wsrep-sst-method=rsync --wsrep-sst-receive-address="127.0.0.1:$(sst_port "$n")" \
    >/dev/null 2>&1 </dev/null)
}

g_wait() { # node seconds
  for _ in $(seq 1 $((5 * $2))); do g_ready "$1" && return 0; sleep 0.2; done
  tail -30 "$(gdir "$1")/error.log" >&2 || true
  die "galera: node $1 did not become Synced within $2 s"
}

galera_start() {
  [ -x "$GALERA_LIB" ] || [ -f "$GALERA_LIB" ] || die "no Galera library at $GALERA_LIB (apt-get install galera-4)"
  mkdir -p "$BASE"; chmod 755 "$BASE"
  local n running=()
  for n in "${NODES[@]}"; do g_init "$n"; g_ready "$n" && running+=("$n"); done
  if [ ${#running[@]} -eq 0 ]; then
    # No member runs: bootstrap a new cluster from node 1 (test data; safe to force).
    for n in "${NODES[@]}"; do [ -z "$(g_pid "$n")" ] || kill -9 "$(g_pid "$n")" 2>/dev/null || true; done
    sed -i 's/^safe_to_bootstrap: 0/safe_to_bootstrap: 1/' "$(gdir 1)/data/grastate.dat" 2>/dev/null || true
    g_launch 1 --wsrep-new-cluster
    g_wait 1 60
    g_sql 1 "CREATE DATABASE IF NOT EXISTS test"
    running=(1)
  fi
  for n in "${NODES[@]}"; do
    g_ready "$n" && continue
    [ -z "$(g_pid "$n")" ] && g_launch "$n"
  done
  for n in "${NODES[@]}"; do g_wait "$n" 120; done
  local size; size=$(g_size 1)
  [ "$size" = 3 ] || die "galera: wsrep_cluster_size is $size, not 3"
  say "galera: 3 nodes synced on 127.0.0.1:$(sql_port 1),$(sql_port 2),$(sql_port 3)"
}

galera_stop() {
  local n pid
  for n in 3 2 1; do
    pid=$(g_pid "$n") || continue
    kill "$pid"
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    say "galera: stopped node $n"
  done
  return 0
}

galera_status() {
  local n
  for n in "${NODES[@]}"; do g_ready "$n" || return 1; done
  [ "$(g_size 1)" = 3 ]
}

galera_kill() {
  local pid; pid=$(g_pid "$1") || die "galera: node $1 is not running"
  kill -9 "$pid"; say "galera: killed node $1 (pid $pid)"
}

galera_urls() { local n; for n in "${NODES[@]}"; do echo "mysql://root@127.0.0.1:$(sql_port "$n")/test"; done; }

# ---------------------------------------------------------------- NATS
client_port() { echo $((14221 + $1)); }
route_port() { echo $((16221 + $1)); }
monitor_port() { echo $((18221 + $1)); }
ndir() { echo "$BASE/nats-$1"; }

n_pid() { daemon_pid "$(ndir "$1")/nats.pid" nats-server "-sd $(ndir "$1")/js"; }

# The node's JetStream is up and it sees a meta leader (the cluster has formed).
n_ready() {
  local body
  body=$(timeout 3 curl -fsS "http://127.0.0.1:$(monitor_port "$1")/jsz" 2>/dev/null) || return 1
  python3 -c 'import json,sys; m=json.loads(sys.argv[1]).get("meta_cluster") or {}; sys.exit(0 if m.get("leader") and m.get("cluster_size")==3 else 1)' "$body"
}

nats_start() {
  command -v nats-server >/dev/null || die "no nats-server (apt-get install nats-server)"
  mkdir -p "$BASE"; chmod 755 "$BASE"
  local n d routes="nats://127.0.0.1:$(route_port 1),nats://127.0.0.1:$(route_port 2),nats://127.0.0.1:$(route_port 3)"
  for n in "${NODES[@]}"; do
    [ -n "$(n_pid "$n")" ] && continue
    d=$(ndir "$n"); mkdir -p "$d"
    (cd / && exec setsid -f nats-server -n "n$n" -a 127.0.0.1 -p "$(client_port "$n")" -m "$(monitor_port "$n")" \
      -js -sd "$d/js" --cluster_name oncely --cluster "nats://127.0.0.1:$(route_port "$n")" \
      --routes "$routes" -P "$d/nats.pid" -l "$d/nats.log" >/dev/null 2>&1 </dev/null)
  done
  for _ in $(seq 1 300); do
    if nats_status; then say "nats: 3 nodes with JetStream on 127.0.0.1:$(client_port 1),$(client_port 2),$(client_port 3)"; return 0; fi
    sleep 0.2
  done
  tail -20 "$(ndir 1)/nats.log" >&2 || true
  # Seen once after a run cut short (the disk filled): the nodes' JetStream state from that
  # run kept the cluster from forming. The state is this script's own: start clean, once.
  if [ "${1:-}" != again ]; then
    say "nats: cluster did not form within 60 s; wiping its JetStream state and starting once more"
    nats_stop; rm -rf "${BASE:?}"/nats-[123]
    nats_start again
    return
  fi
  die "nats: cluster did not form within 60 s"
}

nats_stop() {
  local n pid
  for n in "${NODES[@]}"; do
    pid=$(n_pid "$n") || continue
    kill "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    say "nats: stopped node $n"
  done
  return 0
}

nats_status() { local n; for n in "${NODES[@]}"; do n_ready "$n" || return 1; done; }

nats_kill() {
  local pid; pid=$(n_pid "$1") || die "nats: node $1 is not running"
  kill -9 "$pid"; say "nats: killed node $1 (pid $pid)"
}

nats_urls() { local n; for n in "${NODES[@]}"; do echo "nats://127.0.0.1:$(client_port "$n")"; done; }

# ---------------------------------------------------------------- main
usage() { die "usage: $0 start|stop|status|urls|reset galera|nats, or $0 kill galera|nats N"; }
reset() { "${1}_stop"; rm -rf "${BASE:?}/$1"-[123]; "${1}_start"; }
cmd=${1:-}; what=${2:-}
case "$what" in galera|nats) ;; *) usage ;; esac
case "$cmd" in
  start|stop|status|urls) "${what}_$cmd" ;;
  reset) reset "$what" ;;
  kill) [[ "${3:-}" =~ ^[123]$ ]] || usage; "${what}_kill" "$3" ;;
  *) usage ;;
esac
