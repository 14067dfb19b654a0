#!/usr/bin/env bash
# A test-owned PgBouncer in transaction pooling mode in front of the machine's PostgreSQL
# (127.0.0.1:5432), for the pooler tests (docs/postgres-production.md).
#
#   scripts/pgbouncer.sh start    write the config (once), start, wait until it answers
#   scripts/pgbouncer.sh stop     stop; no-op when not running
#   scripts/pgbouncer.sh status   exit 0 when it answers
#   scripts/pgbouncer.sh url      print the URL of database `test` through it
#
# Port ${ONCELY_PGBOUNCER_PORT:-16432}; every database of the server is reachable as
# postgres://postgres@127.0.0.1:16432/NAME. The settings are PgBouncer's defaults except
# what a test-owned instance needs: pool_mode = transaction, trust auth, its own port, pid
# and log file, room for the tests' many clients and a cap on
# server connections (max_user_connections). In particular ignore_startup_parameters
# is left empty (oncely must connect through a PgBouncer configured as it ships) and
# server_reset_query_always stays 0 (so nothing hides a statement that outlives its
# transaction). Debian's package (apt-get install pgbouncer) provides /usr/sbin/pgbouncer.
# Daemons never keep the caller's stdout open: everything goes to the log file.
set -euo pipefail

PORT=${ONCELY_PGBOUNCER_PORT:-16432}
DIR=${ONCELY_PGBOUNCER_DIR:-/var/tmp/oncely-pgbouncer}-$PORT
BIN=${PGBOUNCER_BIN:-/usr/sbin/pgbouncer}

say() { echo "pgbouncer: $*"; }
# shellcheck source=lib/daemon.sh
. "$(dirname "$0")/lib/daemon.sh"

answers() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$PORT" 2>/dev/null; }

as_postgres() {
  if [ "$(id -un)" = postgres ]; then "$@"; else runuser -u postgres -- "$@"; fi
}

start() {
  if answers; then say "answers on $PORT"; return; fi
  [ -x "$BIN" ] || { say "no $BIN (apt-get install pgbouncer)" >&2; exit 1; }
  mkdir -p "$DIR"; chown postgres: "$DIR"
  cat > "$DIR/pgbouncer.ini" <<INI
[databases]
* = host=127.0.0.1 port=5432

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PORT
unix_socket_dir =
auth_type = trust
auth_file = $DIR/userlist.txt
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 20
; The tests open a database per case: cap the server connections of all of them together
; (PgBouncer closes idle ones of other databases to stay under it), well inside the
; machine server's max_connections = 100, which other tests share.
max_user_connections = 40
server_idle_timeout = 10
logfile = $DIR/pgbouncer.log
pidfile = $DIR/pgbouncer.pid
INI
  echo '"postgres" ""' > "$DIR/userlist.txt"
  chown postgres: "$DIR/pgbouncer.ini" "$DIR/userlist.txt"
  as_postgres "$BIN" -d "$DIR/pgbouncer.ini" </dev/null >>"$DIR/daemon.out" 2>&1
  for _ in $(seq 1 50); do
    if answers; then say "up on 127.0.0.1:$PORT (transaction pooling)"; return; fi
    sleep 0.2
  done
  say "did not come up on $PORT; see $DIR/pgbouncer.log" >&2
  tail -5 "$DIR/pgbouncer.log" >&2 || true
  exit 1
}

stop() {
  local pid
  pid=$(daemon_pid "$DIR/pgbouncer.pid" "$BIN" "$DIR/" || true)
  if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    say "stopped"
  fi
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) answers ;;
  url) echo "postgres://postgres@127.0.0.1:$PORT/test" ;;
  *) echo "usage: $0 start|stop|status|url" >&2; exit 2 ;;
esac
