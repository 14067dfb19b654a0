# Shared by the scripts that run a test-owned server from a pid file (kafka-broker.sh,
# mosquitto.sh, cluster.sh, test-db.sh, pgbouncer.sh, pg-ha.sh). Source it; each script
# defines `say`.

# Prints the pid in PIDFILE (its first line) if that process is alive, runs BIN (a path or a
# name on PATH) and, when MARK is given, has MARK in its command line (its data directory);
# fails otherwise. Every signal these scripts send by pid file goes through it: a pid file
# outlives its process (a SIGKILL in a node-loss test, a reboot), Linux hands the pid out again
# (pid_max is 32768 here and a CI run starts tens of thousands of processes), and `kill -0`
# alone then names someone else's process. A Galera node of the test cluster was once shut
# down by a signal nobody meant for it ("Normal shutdown (initiated by: unknown)").
daemon_pid() { # pidfile bin [mark]
  [ -f "$1" ] || return 1
  local pid exe
  pid=$(head -1 "$1" 2>/dev/null)
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  exe=$(command -v "$2" 2>/dev/null) || exe=$2
  [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$(readlink -f "$exe")" ] || return 1
  [ -z "${3:-}" ] || [[ "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" == *"$3"* ]] || return 1
  echo "$pid"
}

# Stops the server of PIDFILE: SIGTERM, up to 20 waits of STEP seconds, then SIGKILL.
daemon_stop() { # name pidfile bin step
  local name=$1 pidfile=$2 bin=$3 step=$4 pid
  if ! pid=$(daemon_pid "$pidfile" "$bin"); then
    say "no broker started by this script is running on port $PORT"
    rm -f "$pidfile"
    return
  fi
  kill "$pid"
  for _ in $(seq 1 20); do
    kill -0 "$pid" 2>/dev/null || break
    sleep "$step"
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "$name (pid $pid) ignored SIGTERM; sending SIGKILL"
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
  say "stopped $name (pid $pid)"
}
