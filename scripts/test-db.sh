#!/usr/bin/env bash
# Test-owned database servers for oncely's store-fault tests: instances the tests may stop,
# restart or make read-only server-wide without touching the machine's shared servers
# (PostgreSQL 5432, MariaDB 3306), on which other tests run.
#
#   scripts/test-db.sh start   pg|mariadb   create (once) and start; wait until it answers
#   scripts/test-db.sh stop    pg|mariadb   stop (fast); no-op when not running
#   scripts/test-db.sh restart pg|mariadb   stop, then start
#   scripts/test-db.sh status  pg|mariadb   exit 0 when it answers
#
# PostgreSQL: initdb as user postgres, trust auth on loopback, 127.0.0.1:${ONCELY_TEST_PG_PORT:-15432},
#   URL postgres://postgres@127.0.0.1:15432/postgres.
# MariaDB: mariadb-install-db into its own datadir owned by mysql, run as mysql on
#   127.0.0.1:${ONCELY_TEST_MARIADB_PORT:-13306} with its own socket and pid file,
#   URL mysql://root@127.0.0.1:13306/test (root without password).
# Both ports lie below Linux's ephemeral range (32768-60999): a server's port inside it can be
# taken for a moment as the local port of some client's loopback connection, and the server
# then fails to start with "Address already in use" (seen once on 55432 in CI).
# Data lives under ${ONCELY_TEST_DB_DIR:-/var/tmp/oncely-test-db} (readable by the server users).
# Every command is idempotent.
set -euo pipefail

BASE=${ONCELY_TEST_DB_DIR:-/var/tmp/oncely-test-db}
PG_PORT=${ONCELY_TEST_PG_PORT:-15432}
MY_PORT=${ONCELY_TEST_MARIADB_PORT:-13306}
PG_DIR=$BASE/pg-$PG_PORT
MY_DIR=$BASE/mariadb-$MY_PORT

say() { echo "test-db: $*"; }
die() { say "$*" >&2; exit 1; }
# shellcheck source=lib/daemon.sh
. "$(dirname "$0")/lib/daemon.sh"

# Runs a command as `user` (we are root in CI; a non-root user must be that user already).
as() {
  local user=$1; shift
  if [ "$(id -un)" = "$user" ]; then "$@"
  elif [ "$(id -u)" = 0 ]; then runuser -u "$user" -- "$@"
  else die "need root or user $user to run $1"
  fi
}

pg_bin() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -n "$d" ] || die "no /usr/lib/postgresql/*/bin (apt-get install postgresql)"
  echo "$d"
}

pg_status() { "$(pg_bin)/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -t 2; }

pg_start() {
  local bin; bin=$(pg_bin)
  mkdir -p "$BASE"; chmod 755 "$BASE"
  if [ ! -f "$PG_DIR/PG_VERSION" ]; then
    mkdir -p "$PG_DIR"; chown postgres: "$PG_DIR"; chmod 700 "$PG_DIR"
    as postgres "$bin/initdb" -D "$PG_DIR" -U postgres --auth=trust -E UTF8 --no-instructions >/dev/null
    cat >>"$PG_DIR/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$PG_DIR'
max_connections = 200
fsync = off
logging_collector = off
EOF
    say "pg: created $PG_DIR"
  fi
  if ! pg_status; then
    # pg_ctl hands the server /dev/null and the log (-l); stdin is closed here too, so no
    # descriptor of the caller outlives this script.
    as postgres "$bin/pg_ctl" -D "$PG_DIR" -l "$PG_DIR/server.log" -w -t 60 start </dev/null >/dev/null \
      || { tail -20 "$PG_DIR/server.log" >&2; die "pg: did not start"; }
  fi
  for _ in $(seq 1 100); do pg_status && { say "pg: up on 127.0.0.1:$PG_PORT"; return 0; }; sleep 0.2; done
  die "pg: not answering on $PG_PORT"
}

pg_stop() {
  [ -f "$PG_DIR/PG_VERSION" ] || return 0
  as postgres "$(pg_bin)/pg_ctl" -D "$PG_DIR" -m fast -w -t 60 status >/dev/null 2>&1 || { say "pg: not running"; return 0; }
  as postgres "$(pg_bin)/pg_ctl" -D "$PG_DIR" -m fast -w -t 60 stop >/dev/null
  say "pg: stopped"
}

my_status() {
  timeout 5 mariadb-admin --protocol=tcp -h 127.0.0.1 -P "$MY_PORT" -u root --connect-timeout=2 ping >/dev/null 2>&1
}

my_start() {
  mkdir -p "$BASE"; chmod 755 "$BASE"
  if [ ! -d "$MY_DIR/data/mysql" ]; then
    mkdir -p "$MY_DIR/data"; chown -R mysql: "$MY_DIR"
    mariadb-install-db --no-defaults --user=mysql --datadir="$MY_DIR/data" \
      --auth-root-authentication-method=normal --skip-test-db >"$MY_DIR/install.log" 2>&1 \
      || { tail -20 "$MY_DIR/install.log" >&2; die "mariadb: install-db failed"; }
    say "mariadb: created $MY_DIR"
  fi
  if ! my_status; then
    # --no-defaults: none of the machine's server config (port 3306, its socket) applies.
    # The daemon (and the subshell that forks it) get no descriptor of the caller: stdin from
    # /dev/null, stdout and stderr to a log, its own session. A caller reading this script's
    # output through a pipe (`$(...)`, a test's Command::output) sees EOF when it exits.
    (cd / && exec setsid -f mariadbd --no-defaults --user=mysql --datadir="$MY_DIR/data" \
      --bind-address=127.0.0.1 --port="$MY_PORT" --socket="$MY_DIR/mariadb.sock" \
      --pid-file="$MY_DIR/mariadb.pid" --log-error="$MY_DIR/error.log" \
      --innodb-flush-log-at-trx-commit=2 --max-connections=300) \
      </dev/null >>"$MY_DIR/daemon.log" 2>&1
  fi
  for _ in $(seq 1 150); do
    if my_status; then
      # Bounded: a server left read-only or locked by a killed test must not hang CI here.
      timeout 20 mariadb --protocol=tcp -h 127.0.0.1 -P "$MY_PORT" -u root --connect-timeout=5 \
        -e "SET GLOBAL read_only = OFF; CREATE DATABASE IF NOT EXISTS test" \
        || die "mariadb: up but not accepting writes on $MY_PORT"
      say "mariadb: up on 127.0.0.1:$MY_PORT"; return 0
    fi
    sleep 0.2
  done
  tail -20 "$MY_DIR/error.log" >&2 || true
  die "mariadb: not answering on $MY_PORT"
}

my_stop() {
  [ -f "$MY_DIR/mariadb.pid" ] || { say "mariadb: not running"; return 0; }
  local pid
  if pid=$(daemon_pid "$MY_DIR/mariadb.pid" mariadbd "--datadir=$MY_DIR/data"); then
    kill "$pid"
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && die "mariadb: pid $pid did not stop"
  fi
  rm -f "$MY_DIR/mariadb.pid"
  say "mariadb: stopped"
}

cmd=${1:-}; what=${2:-}
case "$what" in
  pg|postgres|postgresql) p=pg ;;
  mariadb|mysql) p=my ;;
  *) die "usage: $0 start|stop|restart|status pg|mariadb" ;;
esac
case "$cmd" in
  start) "${p}_start" ;;
  stop) "${p}_stop" ;;
  restart) "${p}_stop"; "${p}_start" ;;
  status) "${p}_status" ;;
  *) die "usage: $0 start|stop|restart|status pg|mariadb" ;;
esac
