#!/usr/bin/env bash
# A test-owned Mosquitto for oncely's MQTT tests: scripts/mosquitto.conf (loopback only,
# max_queued_messages 100000, no persistence) on 127.0.0.1:18830.
#
#   scripts/mosquitto.sh start    start (or reuse one this script started), wait until it answers
#   scripts/mosquitto.sh stop     stop the broker this script started
#   scripts/mosquitto.sh status   exit 0 if an MQTT broker answers on the port
#
# Environment:
#   ONCELY_MOSQUITTO_PORT  port (default 18830); tests read ONCELY_TEST_MQTT_URL
#                          (default mqtt://127.0.0.1:18830)
#   ONCELY_MOSQUITTO_RUN   dir for the pid, log and effective config (default ~/.cache/oncely/mosquitto)
set -euo pipefail

HOST=127.0.0.1
PORT=${ONCELY_MOSQUITTO_PORT:-18830}
RUN=${ONCELY_MOSQUITTO_RUN:-${HOME}/.cache/oncely/mosquitto}
CONF_SRC=$(cd "$(dirname "$0")" && pwd)/mosquitto.conf
CONF=$RUN/mosquitto-$PORT.conf
PIDFILE=$RUN/mosquitto-$PORT.pid
LOG=$RUN/mosquitto-$PORT.log

. "$(dirname "$0")/lib/daemon.sh"

say() { echo "mosquitto: $*"; }

bin() {
  command -v mosquitto 2>/dev/null || { [ -x /usr/sbin/mosquitto ] && echo /usr/sbin/mosquitto; } || {
    say "mosquitto is not installed (apt-get install mosquitto)" >&2
    exit 1
  }
}

tcp_answers() { timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$PORT" 2>/dev/null; }

# An MQTT answer (CONNACK to a publish), not just an open port.
mqtt_answers() {
  tcp_answers || return 1
  if command -v mosquitto_pub >/dev/null; then
    timeout 5 mosquitto_pub -h "$HOST" -p "$PORT" -q 0 -t oncely/ping -m ping >/dev/null 2>&1
  fi
}

our_pid() { daemon_pid "$PIDFILE" "$(bin)"; }

start() {
  local mosquitto pid
  mosquitto=$(bin)
  if tcp_answers; then
    if mqtt_answers; then
      if pid=$(our_pid); then
        say "already running on $HOST:$PORT (pid $pid)"
      else
        say "an MQTT broker already answers on $HOST:$PORT (not started by this script); reusing it"
      fi
      return
    fi
    say "port $PORT is taken by something that is not an MQTT broker" >&2
    exit 1
  fi
  mkdir -p "$RUN"
  sed "s/^listener 18830 /listener $PORT /" "$CONF_SRC" >"$CONF"
  say "starting $mosquitto on $HOST:$PORT (config $CONF_SRC), log $LOG"
  nohup "$mosquitto" -c "$CONF" >>"$LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 50); do
    if mqtt_answers; then
      say "answers on $HOST:$PORT (pid $(cat "$PIDFILE"))"
      return
    fi
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      say "mosquitto exited; its log:" >&2
      tail -n 30 "$LOG" >&2 || true
      rm -f "$PIDFILE"
      exit 1
    fi
    sleep 0.2
  done
  say "mosquitto did not answer on $HOST:$PORT within 10 s; its log:" >&2
  tail -n 30 "$LOG" >&2 || true
  exit 1
}

stop() { daemon_stop mosquitto "$PIDFILE" "$(bin)" 0.25; }

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) if mqtt_answers; then say "answers on $HOST:$PORT"; else say "not answering on $HOST:$PORT"; exit 1; fi ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
