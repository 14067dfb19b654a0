# Everything the tests need, set up once per run: sourced (not run) by scripts/test.sh (the
# README's test command) and by .ci/run, so a newcomer's run and CI's check the same things.
#
#   - the machine's services on loopback (PostgreSQL, MariaDB, Redis, RabbitMQ, Mosquitto,
#     NATS JetStream), started when they do not answer;
#   - Debian packages: PgBouncer, Chromium and its WebDriver (when root with apt-get);
#   - the Python clients of the cross-language tests, in the project's venv `.venv`
#     (put first on PATH, so the tests' `python3` is the venv's);
#   - the test-owned servers, stopped when the sourcing script exits: PgBouncer, a Mosquitto
#     with the project's config, a PostgreSQL and a MariaDB the fault tests may restart, the
#     Galera and NATS clusters, a PostgreSQL primary with a streaming replica; and a
#     Kafka-compatible broker (tansu), whose first build takes ~11 min: under CI (or with
#     ONCELY_KAFKA=1) it is built, otherwise it is started only when already built, and the
#     Kafka tests are SKIPPED with a line saying how to include them.
#
# Sets ONCELY_SETUP_DONE=1 so a script it calls does not set up again.

answers() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

ensure_service() { # name port start-command...
  local name=$1 port=$2; shift 2
  if answers "$port"; then echo "setup: $name answers on $port"; return; fi
  echo "setup: starting $name"
  "$@" || echo "setup: start command for $name returned $?"
  for _ in $(seq 1 90); do
    if answers "$port"; then echo "setup: $name is up"; return; fi
    sleep 1
  done
  echo "setup: $name did not come up on port $port" >&2
  exit 1
}

ensure_service PostgreSQL 5432 bash -c 'pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start'
ensure_service MariaDB 3306 start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
ensure_service Redis 6379 redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log
ensure_service RabbitMQ 5672 rabbitmq-server -detached
ensure_service Mosquitto 1883 mosquitto -d -c /etc/mosquitto/mosquitto.conf
ensure_service NATS 4222 start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log

# RabbitMQ accepts TCP before it accepts AMQP logins; give it a moment to finish booting.
if command -v rabbitmqctl >/dev/null; then timeout 120 rabbitmqctl await_startup >/dev/null 2>&1 || true; fi

# Debian packages beyond the services: PgBouncer (the pooler tests), Chromium and its
# WebDriver (the console's browser tests, crates/oncely-console/tests/browser.rs).
need_pkgs=()
command -v /usr/sbin/pgbouncer >/dev/null || need_pkgs+=(pgbouncer)
command -v chromium >/dev/null || need_pkgs+=(chromium)
command -v chromedriver >/dev/null || need_pkgs+=(chromium-driver)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing ${need_pkgs[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
  else
    echo "setup: *** missing ${need_pkgs[*]} (install them as root: apt-get install ${need_pkgs[*]}); their tests will be SKIPPED ***"
  fi
fi

# Python clients of the cross-language tests (scripts/python_producers.py, the webhook
# signers) and the bare client of scripts/mariadb-user-path.sh, pinned where a test checks a
# library's exact behaviour.
PY_VENV=${ONCELY_VENV:-$PWD/.venv}
PY_PKGS=(pika pymysql nats-py redis paho-mqtt standardwebhooks==1.1.0 stripe==16.1.0)
if [ ! -x "$PY_VENV/bin/python3" ]; then
  echo "setup: creating the Python venv $PY_VENV"
  python3 -m venv "$PY_VENV" || echo "setup: *** python3 -m venv failed (apt-get install python3-venv); the Python tests will be SKIPPED ***"
fi
if [ -x "$PY_VENV/bin/python3" ]; then
  "$PY_VENV/bin/python3" -m pip install --quiet --disable-pip-version-check "${PY_PKGS[@]}" ||
    echo "setup: *** pip could not install ${PY_PKGS[*]}; the Python tests will be SKIPPED ***"
  export PATH="$PY_VENV/bin:$PATH"
fi

# Test-owned servers, stopped when the sourcing script exits: a Kafka-compatible broker, a
# Mosquitto with the project's own config (scripts/mosquitto.conf), PgBouncer, and a PostgreSQL
# and a MariaDB instance that the store-fault tests may restart or make read-only (never the
# machine's shared 5432/3306); the Galera and NATS clusters; the PostgreSQL HA pair.
setup_cleanup() {
  bash scripts/kafka-broker.sh stop || true
  bash scripts/pgbouncer.sh stop || true
  bash scripts/mosquitto.sh stop || true
  bash scripts/test-db.sh stop pg || true
  bash scripts/test-db.sh stop mariadb || true
  bash scripts/cluster.sh stop galera || true
  bash scripts/cluster.sh stop nats || true
  bash scripts/pg-ha.sh stop || true
}
trap setup_cleanup EXIT

if [ -n "${CI:-}" ] || [ "${ONCELY_KAFKA:-}" = 1 ] || bash scripts/kafka-broker.sh installed 2>/dev/null; then
  bash scripts/kafka-broker.sh start
else
  echo "setup: *** Kafka tests SKIPPED: the broker (tansu) is not built yet, a one-time ~11 min build; include them with ONCELY_KAFKA=1 bash scripts/test.sh ***"
fi
export ONCELY_KAFKA_BROKERS=127.0.0.1:9092
# PgBouncer in transaction pooling mode in front of 5432 (docs/postgres-production.md).
bash scripts/pgbouncer.sh start
export ONCELY_TEST_PGBOUNCER_URL=postgres://postgres@127.0.0.1:16432/test
bash scripts/mosquitto.sh start
bash scripts/test-db.sh start pg
bash scripts/test-db.sh start mariadb
# Test-owned clusters (issue 16): 3 MariaDB Galera nodes, 3 NATS JetStream servers.
bash scripts/cluster.sh start galera
bash scripts/cluster.sh start nats
# Test-owned PostgreSQL primary + streaming replica (issue 23), for the failover tests (group ha).
bash scripts/pg-ha.sh start sync

export ONCELY_SETUP_DONE=1
