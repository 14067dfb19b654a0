#!/usr/bin/env bash
# A test-owned PostgreSQL primary with a streaming replica, for oncely's failover tests
# (issue 23): the machine's PostgreSQL binaries, loopback only, trust auth, never the
# machine's own cluster on 5432.
#
#   scripts/pg-ha.sh start [sync|async]  build (if needed) and start: node 1 primary on 25432,
#                                        node 2 streaming replica on 25433; wait until the replica
#                                        streams. Mode (default ${ONCELY_PG_HA_MODE:-sync}):
#                                        sync  synchronous_standby_names = '*' on the primary:
#                                              a commit returns once the replica flushed it;
#                                        async synchronous_standby_names = '' (PostgreSQL's
#                                              default): a commit returns once it is on the
#                                              primary's disk, the replica follows a moment later.
#                                        A healthy cluster in another mode is switched in place
#                                        (reload, no restart); anything else (a node down, a
#                                        promoted replica) is rebuilt from scratch (about 3 s).
#   scripts/pg-ha.sh stop                stop every node (fast); no-op when none runs
#   scripts/pg-ha.sh status              one line per node (port, role, mode); exit 0 when a
#                                        primary answers
#   scripts/pg-ha.sh urls                line 1: the multi-host URL reaching whichever node is
#                                        primary (postgres://postgres@127.0.0.1:25432,127.0.0.1:25433/postgres);
#                                        line 2: the current primary alone; then each standby alone
#   scripts/pg-ha.sh kill-primary        SIGKILL the primary's postmaster and every backend of it
#                                        (a crashed machine, no shutdown checkpoint, no last WAL
#                                        sent), then promote the replica and wait until it
#                                        accepts writes
#   scripts/pg-ha.sh start-node N        start node N as its data directory is (for a test reading
#                                        what a killed primary had committed: it comes back as a
#                                        diverged primary of its own; `start` rebuilds afterwards)
#
# Promotion is done by this script (`pg_ctl promote`), not by Patroni: Patroni needs etcd (or
# Consul, ZooKeeper) running beside it, its leader election takes a TTL (30 s by default) to
# notice a dead primary, and when it happens depends on timers; CI here has no etcd to run.
# A promotion the script performs is deterministic (the test decides the moment), fast
# (under a second) and exercises the same thing on oncely's side: the old primary's
# connections die, the other host of the URL starts accepting writes.
#
# Synchronous mode and failover: synchronous_standby_names lives in each node's own
# `ha.conf` (included by postgresql.conf, rewritten by this script), set on the primary only;
# a replica's ha.conf says ''. The promoted replica therefore does not wait for a standby:
# with its only standby gone (the old primary), a new primary with synchronous names set
# would make every commit wait forever. After `kill-primary` the cluster is one primary with
# no replica (no durability beyond its own disk) until the next `start` rebuilds it.
#
# Data lives under ${ONCELY_PG_HA_DIR:-/var/tmp/oncely-pg-ha}. Every daemon's stdin, stdout and
# stderr are redirected (to /dev/null or a log file), so a caller reading this script's output
# through a pipe never waits on a server. Every command is idempotent.
set -euo pipefail

BASE=${ONCELY_PG_HA_DIR:-/var/tmp/oncely-pg-ha}
PORTS=(25432 25433)
MODE_FILE=$BASE/mode

say() { echo "pg-ha: $*"; }
die() { say "$*" >&2; exit 1; }
# shellcheck source=lib/daemon.sh
. "$(dirname "$0")/lib/daemon.sh"

as_pg() { # runs a command as postgres (we are root in CI; else we must be postgres)
  if [ "$(id -un)" = postgres ]; then "$@"
  elif [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"
  else die "need root or user postgres to run $1"
  fi
}

bin() {
  local d=${ONCELY_PG_BIN:-/usr/lib/postgresql/15/bin}
  [ -x "$d/postgres" ] || d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -n "$d" ] && [ -x "$d/postgres" ] || die "no PostgreSQL binaries (apt-get install postgresql-15)"
  echo "$d"
}
BIN=$(bin)

dir_of() { echo "$BASE/n$1"; }           # node number (1-based) -> data directory
port_of() { echo "${PORTS[$(($1 - 1))]}"; }
nodes() { seq 1 ${#PORTS[@]}; }

# A bounded query (psql never waits more than 5 s); prints the value or nothing.
q() { # node sql
  timeout 5 "$BIN/psql" -X -q -At -h 127.0.0.1 -p "$(port_of "$1")" -U postgres -d postgres \
    -c "$2" </dev/null 2>/dev/null || true
}

role() { # node -> primary | standby | down
  case "$(q "$1" "SELECT pg_is_in_recovery()")" in
    f) echo primary ;;
    t) echo standby ;;
    *) echo down ;;
  esac
}

primary() { local n; for n in $(nodes); do [ "$(role "$n")" = primary ] && { echo "$n"; return 0; }; done; return 1; }

# The node's postmaster runs (not some process that got the pid of one killed earlier: pg_ctl
# would signal whatever holds the pid its postmaster.pid names; see daemon_pid).
running() { daemon_pid "$(dir_of "$1")/postmaster.pid" "$BIN/postgres" "-D $(dir_of "$1")" >/dev/null; }

ctl() { # node pg_ctl-args... (every descriptor of the server redirected: -l log, stdin /dev/null)
  local d; d=$(dir_of "$1"); shift
  as_pg "$BIN/pg_ctl" -D "$d" -l "$d/server.log" "$@" </dev/null >>"$d/ctl.log" 2>&1
}

names_for() { [ "$1" = sync ] && echo "'*'" || echo "''"; }

write_ha_conf() { # node synchronous_standby_names-literal: the node's own settings
  printf "port = %s\nsynchronous_standby_names = %s\n" "$(port_of "$1")" "$2" \
    | as_pg tee "$(dir_of "$1")/ha.conf" >/dev/null
}

wait_for() { # description command... (up to 30 s)
  local what=$1; shift
  for _ in $(seq 1 150); do "$@" && return 0; sleep 0.2; done
  die "timed out waiting for $what"
}

streaming() { [ "$(q 1 "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")" = "$((${#PORTS[@]} - 1))" ]; }
answers() { [ "$(role "$1")" != down ]; }
is_primary() { [ "$(role "$1")" = primary ]; }

healthy() { # node 1 primary, every other node a streaming standby
  [ "$(role 1)" = primary ] || return 1
  local n; for n in $(nodes); do [ "$n" = 1 ] || [ "$(role "$n")" = standby ] || return 1; done
  streaming
}

stop_all() {
  local n
  for n in $(nodes); do
    running "$n" && { ctl "$n" -m immediate -w -t 30 stop || true; }
  done
  return 0
}

build() { # mode: a fresh primary and replica(s)
  local mode=$1 n d
  stop_all
  rm -rf "$BASE"; mkdir -p "$BASE"; chmod 755 "$BASE"
  d=$(dir_of 1)
  mkdir -p "$d"; chown postgres: "$d"; chmod 700 "$d"
  as_pg "$BIN/initdb" -D "$d" -U postgres --auth=trust -E UTF8 --no-instructions -N </dev/null >"$BASE/initdb.log" 2>&1 \
    || { tail -20 "$BASE/initdb.log" >&2; die "initdb failed"; }
  cat >>"$d/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
max_connections = 300
wal_level = replica
max_wal_senders = 10
wal_keep_size = 256MB
hot_standby = on
fsync = off
full_page_writes = off
logging_collector = off
include_if_exists = 'ha.conf'
EOF
  echo "host replication postgres 127.0.0.1/32 trust" >>"$d/pg_hba.conf"
  write_ha_conf 1 "$(names_for "$mode")"
  ctl 1 -w -t 60 start || { tail -20 "$d/server.log" >&2; die "node 1 did not start"; }
  for n in $(nodes); do
    [ "$n" = 1 ] && continue
    d=$(dir_of "$n")
    mkdir -p "$d"; chown postgres: "$d"; chmod 700 "$d"
    as_pg "$BIN/pg_basebackup" -h 127.0.0.1 -p "$(port_of 1)" -U postgres -D "$d" -X stream -c fast -N \
      </dev/null >"$BASE/basebackup-$n.log" 2>&1 || { tail -20 "$BASE/basebackup-$n.log" >&2; die "pg_basebackup of node $n failed"; }
    rm -f "$d"/server.log "$d"/ctl.log
    as_pg touch "$d/standby.signal"
    # application_name: the name synchronous_standby_names and pg_stat_replication show.
    echo "primary_conninfo = 'host=127.0.0.1 port=$(port_of 1) user=postgres application_name=n$n'" \
      | as_pg tee -a "$d/postgresql.auto.conf" >/dev/null
    write_ha_conf "$n" "''"
    ctl "$n" -w -t 60 start || { tail -20 "$d/server.log" >&2; die "node $n did not start"; }
  done
  echo "$mode" >"$MODE_FILE"
  wait_for "the replica to stream" streaming
}

set_mode() { # mode on a healthy cluster: rewrite the primary's ha.conf and reload
  write_ha_conf 1 "$(names_for "$1")"
  ctl 1 reload
  echo "$1" >"$MODE_FILE"
  wait_for "synchronous_standby_names to apply" mode_applied "$1"
}

mode_applied() { [ "$(q 1 "SHOW synchronous_standby_names")" = "$(names_for "$1" | tr -d "'")" ]; }

cmd_start() {
  local mode=${1:-${ONCELY_PG_HA_MODE:-sync}}
  case "$mode" in sync|async) ;; *) die "mode must be sync or async, not $mode" ;; esac
  if healthy; then
    [ "$(cat "$MODE_FILE" 2>/dev/null)" = "$mode" ] || set_mode "$mode"
  else
    build "$mode"
  fi
  say "up ($mode): primary 127.0.0.1:$(port_of 1), standby 127.0.0.1:$(port_of 2)"
}

cmd_status() {
  local n r ok=1
  for n in $(nodes); do
    r=$(role "$n")
    [ "$r" = primary ] && ok=0
    echo "node $n 127.0.0.1:$(port_of "$n") $r"
  done
  echo "mode $(cat "$MODE_FILE" 2>/dev/null || echo none)"
  return $ok
}

cmd_urls() {
  local hosts=() n p
  for n in $(nodes); do hosts+=("127.0.0.1:$(port_of "$n")"); done
  (IFS=,; echo "postgres://postgres@${hosts[*]}/postgres")
  p=$(primary) || die "no primary answers"
  echo "postgres://postgres@127.0.0.1:$(port_of "$p")/postgres"
  for n in $(nodes); do
    [ "$(role "$n")" = standby ] && echo "postgres://postgres@127.0.0.1:$(port_of "$n")/postgres"
  done
  return 0
}

cmd_kill_primary() {
  local p s n pm kids
  p=$(primary || true)
  s=
  for n in $(nodes); do [ "$(role "$n")" = standby ] && { s=$n; break; }; done
  # Never kill the last node: without a standby there is nothing to fail over to.
  [ -n "$s" ] || die "no standby to promote (status: $(cmd_status | tr '\n' ' '))"
  if [ -n "$p" ]; then
    pm=$(daemon_pid "$(dir_of "$p")/postmaster.pid" "$BIN/postgres" "-D $(dir_of "$p")") \
      || die "node $p answers as the primary but its postmaster.pid names no postmaster of it"
    kids=$(ps -o pid= --ppid "$pm" || true)
    # The postmaster and all its processes at once, as a machine crash would.
    kill -9 "$pm" $kids 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pm" 2>/dev/null || break; sleep 0.05; done
    say "SIGKILLed node $p (127.0.0.1:$(port_of "$p"), postmaster $pm)"
  fi
  # ha.conf of a standby already says synchronous_standby_names = '': the new primary does
  # not wait for a standby it does not have.
  write_ha_conf "$s" "''"
  ctl "$s" -w -t 60 promote || die "promoting node $s failed"
  wait_for "node $s to accept writes" is_primary "$s"
  say "promoted node $s (127.0.0.1:$(port_of "$s")): it is the primary now"
}

cmd_start_node() {
  local n=${1:-}
  [ -n "$n" ] && [ -f "$(dir_of "$n")/PG_VERSION" ] || die "no node ${n:-?}"
  answers "$n" || ctl "$n" -w -t 60 start || die "node $n did not start"
  wait_for "node $n to answer" answers "$n"
  say "node $n (127.0.0.1:$(port_of "$n")) is $(role "$n")"
}

case "${1:-}" in
  start) cmd_start "${2:-}" ;;
  start-node) cmd_start_node "${2:-}" ;;
  stop) stop_all; say "stopped" ;;
  status) cmd_status ;;
  urls) cmd_urls ;;
  kill-primary) cmd_kill_primary ;;
  *) die "usage: $0 start [sync|async] | stop | status | urls | kill-primary | start-node N" ;;
esac
