#!/usr/bin/env bash
# A Kafka-compatible broker for oncely's Kafka tests: tansu (crates.io), memory storage,
# on loopback.
#
#   scripts/kafka-broker.sh install   build tansu into the cache unless it is there
#   scripts/kafka-broker.sh start     install (or reuse), start on 127.0.0.1:9092, wait until it answers
#   scripts/kafka-broker.sh stop      stop the broker this script started
#   scripts/kafka-broker.sh status    exit 0 if a Kafka broker answers on the port
#   scripts/kafka-broker.sh installed exit 0 if tansu is built (start would not build it)
#
# Environment:
#   ONCELY_TANSU_DIR   cache dir of the tansu binary (default ~/.cache/oncely/tansu); the
#                      build (~11 min on 2 cores) happens once per machine, later runs reuse it
#   ONCELY_KAFKA_PORT  port (default 9092); tests read ONCELY_KAFKA_BROKERS (default 127.0.0.1:9092)
#   ONCELY_KAFKA_RUN   dir for the pid and log files (default $ONCELY_TANSU_DIR/run)
set -euo pipefail

TANSU_VERSION=0.6.0
HOST=127.0.0.1
PORT=${ONCELY_KAFKA_PORT:-9092}
CACHE=${ONCELY_TANSU_DIR:-${HOME}/.cache/oncely/tansu}
BIN=$CACHE/bin/tansu
RUN=${ONCELY_KAFKA_RUN:-$CACHE/run}
PIDFILE=$RUN/tansu-$PORT.pid
LOG=$RUN/tansu-$PORT.log

. "$(dirname "$0")/lib/daemon.sh"

say() { echo "kafka-broker: $*"; }

tcp_answers() { timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$PORT" 2>/dev/null; }

# A Kafka-protocol answer (metadata request), not just an open port.
kafka_answers() {
  tcp_answers && timeout 10 "$BIN" topic list --broker "tcp://$HOST:$PORT" >/dev/null 2>&1
}

installed() {
  [ -x "$BIN" ] && "$BIN" --version 2>/dev/null | grep -q "$TANSU_VERSION"
}

install() {
  if installed; then
    say "reusing $BIN ($("$BIN" --version))"
    return
  fi
  say "building tansu $TANSU_VERSION into $CACHE (once per machine; ~11 min on 2 cores)"
  mkdir -p "$CACHE"
  local started=$SECONDS
  # dynostore: without it, memory:// storage fails to start.
  cargo install tansu --version "$TANSU_VERSION" --locked --features dynostore --root "$CACHE"
  say "tansu built in $((SECONDS - started)) s"
}

our_pid() { daemon_pid "$PIDFILE" "$BIN"; }

start() {
  install
  if tcp_answers; then
    if kafka_answers; then
      say "a Kafka broker already answers on $HOST:$PORT; reusing it"
      return
    fi
    say "port $PORT is taken by something that is not a Kafka broker" >&2
    exit 1
  fi
  mkdir -p "$RUN"
  say "starting tansu on $HOST:$PORT (memory storage), log $LOG"
  nohup "$BIN" broker \
    --listener-url "tcp://$HOST:$PORT" \
    --advertised-listener-url "tcp://$HOST:$PORT" \
    --storage-engine "memory://tansu/" \
    >"$LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 60); do
    if kafka_answers; then
      say "tansu answers on $HOST:$PORT (pid $(cat "$PIDFILE"))"
      return
    fi
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      say "tansu exited; its log:" >&2
      tail -n 30 "$LOG" >&2 || true
      exit 1
    fi
    sleep 1
  done
  say "tansu did not answer on $HOST:$PORT within 60 s; its log:" >&2
  tail -n 30 "$LOG" >&2 || true
  exit 1
}

stop() { daemon_stop tansu "$PIDFILE" "$BIN" 0.5; }

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  installed) installed ;;
  status) if tcp_answers && kafka_answers; then say "answers on $HOST:$PORT"; else say "not answering on $HOST:$PORT"; exit 1; fi ;;
  *) echo "usage: $0 install|start|stop|status|installed" >&2; exit 2 ;;
esac
