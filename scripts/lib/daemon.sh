# Shared by the scripts that run a test-owned server from a pid file (kafka-broker.sh,
# mosquitto.sh). Source it; each script defines `say`.

# Prints the pid in PIDFILE if that process is alive and runs BIN; fails otherwise.
daemon_pid() { # pidfile bin
  [ -f "$1" ] || return 1
  local pid
  pid=$(cat "$1")
  kill -0 "$pid" 2>/dev/null && [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$(readlink -f "$2")" ] \
    && echo "$pid"
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
