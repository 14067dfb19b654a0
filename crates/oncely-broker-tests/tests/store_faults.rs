//! Real store faults under real brokers: 1,000 messages, the store down for 10 s in the
//! middle (read-only database, connection cut or stalled by a TCP fault proxy, database
//! restart), then back. Each case checks 0 double, 0 lost, every message applied after
//! recovery, and fewer than 5 deliveries of any message while the store was down.
//!
//! `cargo test -p oncely-broker-tests --test store_faults -- --nocapture` prints one
//! `FIGURES` line per case. Server-wide faults (restart, MariaDB `read_only`) only ever hit
//! the test-owned instances of `scripts/test-db.sh` (ports 15432, 13306); on the shared
//! PostgreSQL (5432) the faults are per database.

use oncely_broker_tests::brokers;
use oncely_broker_tests::fixture::Broker;
use oncely_broker_tests::kafka;
use oncely_broker_tests::ledger::Db;
use oncely_broker_tests::services::{AMQP_URL, NATS_URL, available, unique};
use oncely_broker_tests::store_faults::{Measured, Plan, Stores, outage_run};
use oncely_sql::sqlx::{self, AssertSqlSafe, Connection, PgConnection};
use oncely_testkit::{Fault, FaultProxy};
use std::future::Future;
use std::process::Command;

/// The shared PostgreSQL server (per-database faults only).
const PG_SERVER: &str = "127.0.0.1:5432";
/// The test-owned PostgreSQL of `scripts/test-db.sh` (may be restarted).
const OWN_PG_PORT: u16 = 15432;

/// A per-test queue / stream / topic on `broker` (the fixture's), at the broker's defaults
/// but for what the outage needs.
fn url(broker: Broker, name: &str) -> String {
    match broker {
        Broker::RabbitMq => format!("{AMQP_URL}?queue={name}"),
        // Default ack_wait (30 s): longer than the outage, as in production.
        Broker::Nats => format!(
            "{NATS_URL}?stream={}&subject={name}&dup_window_ms=100",
            name.to_uppercase()
        ),
        // One record per producer batch: see `oncely_broker_tests::kafka::url` (tansu fetch
        // quirk).
        Broker::Kafka => format!(
            "kafka://{}/{name}?partitions=1&session.timeout.ms=6000&heartbeat.interval.ms=500&batch.num.messages=1",
            kafka::brokers()
        ),
        other => unreachable!("no store-fault cases on {other:?}"),
    }
}

/// Runs [`outage_run`] with `broker` as the source.
async fn run<D, DF, U, UF>(
    broker: Broker,
    label: &str,
    consumer_db: &Db,
    check_db: &Db,
    down: D,
    up: U,
) -> Measured
where
    D: FnOnce() -> DF,
    DF: Future<Output = ()>,
    U: FnOnce() -> UF,
    UF: Future<Output = ()>,
{
    let name = unique(&format!("sf_{broker:?}").to_lowercase());
    let url = url(broker, &name);
    let plan = Plan::default();
    let stores = Stores {
        consumer: consumer_db,
        check: check_db,
    };
    match broker {
        Broker::RabbitMq | Broker::Nats => {
            let source = brokers::connect_source(&url, "faults")
                .await
                .expect("connect");
            let publish = move |m: Vec<_>| {
                let url = url.clone();
                async move { brokers::publish(&url, &m).await }
            };
            outage_run(label, stores, source, publish, &plan, down, up).await
        }
        Broker::Kafka => {
            oncely_kafka::create_topic(&kafka::brokers(), &name, 1, &[])
                .await
                .expect("topic");
            let source = oncely_kafka::connect_source(&url, "faults")
                .await
                .expect("connect");
            let publish = move |m: Vec<_>| {
                let url = url.clone();
                async move { oncely_kafka::publish(&url, &m).await }
            };
            outage_run(label, stores, source, publish, &plan, down, up).await
        }
        other => unreachable!("no store-fault cases on {other:?}"),
    }
}

// ---- PostgreSQL helpers -------------------------------------------------------------

async fn pg_admin(server: &str) -> PgConnection {
    PgConnection::connect(&format!("postgres://postgres@{server}/postgres"))
        .await
        .expect("admin connection")
}

async fn pg_exec(server: &str, sql: String) {
    let mut c = pg_admin(server).await;
    sqlx::raw_sql(AssertSqlSafe(sql))
        .execute(&mut c)
        .await
        .expect("admin statement");
}

/// A fresh database on `server`; returns its name and URL.
async fn pg_fresh_db(server: &str) -> (String, String) {
    let name = unique("oncely_sf");
    pg_exec(server, format!("CREATE DATABASE {name}")).await;
    let url = format!("postgres://postgres@{server}/{name}");
    (name, url)
}

async fn pg_drop_db(server: &str, name: &str) {
    pg_exec(
        server,
        format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
    )
    .await;
}

/// Ends every session of database `name` (as a failover does): sessions opened afterwards
/// see the database's new settings.
async fn pg_terminate(server: &str, name: &str) -> i64 {
    let mut c = pg_admin(server).await;
    sqlx::query_scalar(
        "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE datname = $1 AND pid <> pg_backend_pid()",
    )
    .bind(name)
    .fetch_one(&mut c)
    .await
    .expect("terminate")
}

/// `default_transaction_read_only` on or off for database `name`, then its sessions ended.
async fn pg_read_only(server: &str, name: &str, on: bool) {
    let value = if on { "on" } else { "off" };
    pg_exec(
        server,
        format!("ALTER DATABASE {name} SET default_transaction_read_only = {value}"),
    )
    .await;
    let n = pg_terminate(server, name).await;
    eprintln!("{name}: read-only {value}, {n} session(s) terminated");
}

fn pg_up(test: &str) -> bool {
    available(test, "PostgreSQL", PG_SERVER)
}

// ---- PostgreSQL read-only (failover), all brokers -------------------------------------

async fn pg_read_only_case(broker: Broker, test: &str) {
    if !pg_up(test) || !broker.up(test) {
        return;
    }
    let (name, url) = pg_fresh_db(PG_SERVER).await;
    let consumer_db = Db::open(&url, None).await.expect("store");
    let check_db = Db::open(&url, None).await.expect("checker");
    let measured = run(
        broker,
        test,
        &consumer_db,
        &check_db,
        || pg_read_only(PG_SERVER, &name, true),
        || pg_read_only(PG_SERVER, &name, false),
    )
    .await;
    drop((consumer_db, check_db));
    pg_drop_db(PG_SERVER, &name).await;
    measured.assert_held(test);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_read_only_amqp() {
    pg_read_only_case(Broker::RabbitMq, "pg_read_only_amqp").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_read_only_nats() {
    pg_read_only_case(Broker::Nats, "pg_read_only_nats").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_read_only_kafka() {
    pg_read_only_case(Broker::Kafka, "pg_read_only_kafka").await;
}

// ---- connection cut / stalled by the fault proxy ------------------------------------

/// `fault` for the outage; at its end, if `reset`, every connection is closed (a partition
/// that outlived the connections: the state a NAT or firewall kept is gone) before traffic
/// passes again.
async fn pg_proxy_case(broker: Broker, fault: Fault, reset: bool, test: &str) {
    if !pg_up(test) || !broker.up(test) {
        return;
    }
    let (name, url) = pg_fresh_db(PG_SERVER).await;
    let proxy = FaultProxy::start(PG_SERVER).await.expect("proxy");
    // A plain TCP proxy, not a pooler: said in the URL (oncely would take the proxy's port
    // for a transaction pooler's, the safe side).
    let via_proxy = format!("postgres://postgres@{}/{name}?pooler=none", proxy.addr());
    let consumer_db = Db::open(&via_proxy, None).await.expect("store via proxy");
    let check_db = Db::open(&url, None).await.expect("checker");
    let measured = run(
        broker,
        test,
        &consumer_db,
        &check_db,
        || async { proxy.set(fault) },
        || async {
            if reset {
                proxy.set(Fault::Drop);
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            }
            proxy.set(Fault::Pass)
        },
    )
    .await;
    eprintln!("{test}: proxy {:?}", proxy.stats());
    drop((consumer_db, check_db, proxy));
    pg_drop_db(PG_SERVER, &name).await;
    measured.assert_held(test);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_connection_dropped_amqp() {
    pg_proxy_case(
        Broker::RabbitMq,
        Fault::Drop,
        false,
        "pg_connection_dropped_amqp",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_connection_dropped_nats() {
    pg_proxy_case(
        Broker::Nats,
        Fault::Drop,
        false,
        "pg_connection_dropped_nats",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_connection_blackholed_amqp() {
    pg_proxy_case(
        Broker::RabbitMq,
        Fault::Blackhole,
        false,
        "pg_connection_blackholed_amqp",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_connection_blackholed_then_reset_amqp() {
    pg_proxy_case(
        Broker::RabbitMq,
        Fault::Blackhole,
        true,
        "pg_connection_blackholed_then_reset_amqp",
    )
    .await;
}

/// How long one store call waits in a blackhole that does not end: a new call waits for the
/// pool's acquire timeout; a statement on a connection already in use has no client-side
/// bound at all (PostgreSQL's `statement_timeout` runs on the server, which never sees it).
/// Prints the figures; asserts only that a new call gives up (within the 30 s acquire
/// timeout + margin).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_blackhole_bounds_of_a_store_call() {
    use oncely_core::Store;
    use std::time::{Duration, Instant};
    let test = "pg_blackhole_bounds_of_a_store_call";
    if !pg_up(test) {
        return;
    }
    let (name, _url) = pg_fresh_db(PG_SERVER).await;
    let proxy = FaultProxy::start(PG_SERVER).await.expect("proxy");
    let url = format!("postgres://postgres@{}/{name}?pooler=none", proxy.addr());
    let db = Db::open(&url, None).await.expect("store");
    let store = db.store().clone();
    let mut tx = store.begin().await.expect("begin");
    proxy.set(Fault::Blackhole);
    let in_tx = tokio::spawn(async move {
        let t = Instant::now();
        let r = tokio::time::timeout(
            Duration::from_secs(45),
            oncely_sql::SqlTx::execute(&mut tx, "SELECT 1", &[]),
        )
        .await;
        (t.elapsed(), r.map(|r| r.map(|_| ())))
    });
    let t = Instant::now();
    let fresh = tokio::time::timeout(Duration::from_secs(45), store.begin()).await;
    let fresh_took = t.elapsed();
    let (in_tx_took, in_tx) = in_tx.await.expect("join");
    fn outcome<T, E: std::fmt::Display, L>(r: &Result<Result<T, E>, L>) -> String {
        match r {
            Ok(Ok(_)) => "ok".to_owned(),
            Ok(Err(e)) => format!("error: {e}"),
            Err(_) => "no answer".to_owned(),
        }
    }
    eprintln!(
        "FIGURES {test}: new store call (begin): {} after {:.1} s; statement on an open transaction: {} after {:.1} s",
        outcome(&fresh),
        fresh_took.as_secs_f64(),
        outcome(&in_tx),
        in_tx_took.as_secs_f64()
    );
    drop((store, proxy));
    pg_drop_db(PG_SERVER, &name).await;
    assert!(
        matches!(fresh, Ok(Err(_))),
        "{test}: a new store call in a blackhole must fail, not hang"
    );
}

/// A long-running consumer meets a silent network: mid-run every connection its store has
/// open goes silent for good (no RST, no FIN: a NAT or firewall that dropped its state) while
/// new connections work. The transactions in flight end at the consumer's attempt timeout,
/// the pool closes each silent connection at its bounded ping and opens another; every
/// message is applied once, and afterwards the store's own pool answers at once (it used to
/// fail with `pool timed out`, its slots held by the silent connections).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_connections_stranded_mid_run() {
    let test = "pg_connections_stranded_mid_run";
    if !pg_up(test) {
        return;
    }
    let (name, url) = pg_fresh_db(PG_SERVER).await;
    let proxy = FaultProxy::start(PG_SERVER).await.expect("proxy");
    // The server ends the stranded sessions' transactions after 4 s idle (oncely's default
    // is 60 s, kept when the URL or the server sets none), so their claims' locks go.
    let via_proxy = format!(
        "postgres://postgres@{}/{name}?pooler=none&options=-c%20idle_in_transaction_session_timeout%3D4s",
        proxy.addr()
    );
    let db = Db::open(&via_proxy, None).await.expect("store via proxy");
    let check = Db::open(&url, None).await.expect("checker");
    stranded_mid_run(test, &proxy, db, check).await;
    pg_drop_db(PG_SERVER, &name).await;
}

/// The same on MariaDB: the store's connections go silent mid-run; `idle_transaction_timeout`
/// (set by oncely per session, here 4 s through `ConnectOptions`) ends the stranded
/// transactions on the server, the bounded ping closes the silent connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_connections_stranded_mid_run() {
    let test = "mariadb_connections_stranded_mid_run";
    let server = "127.0.0.1:3306";
    if !available(test, "MariaDB", server) {
        return;
    }
    let name = unique("oncely_sf");
    mariadb_admin(server, &format!("CREATE DATABASE {name}")).await;
    let proxy = FaultProxy::start(server).await.expect("proxy");
    let options = oncely_sql::ConnectOptions {
        idle_in_transaction_timeout: std::time::Duration::from_secs(4),
        ..Default::default()
    };
    let via_proxy = format!("mysql://root@{}/{name}", proxy.addr());
    let db = Db::open_with(&via_proxy, None, options)
        .await
        .expect("store via proxy");
    let check = Db::open(&format!("mysql://root@{server}/{name}"), None)
        .await
        .expect("checker");
    stranded_mid_run(test, &proxy, db, check).await;
    mariadb_admin(server, &format!("DROP DATABASE IF EXISTS {name}")).await;
}

/// Runs `sql` as root on the MariaDB at `server`.
async fn mariadb_admin(server: &str, sql: &str) {
    use oncely_sql::sqlx::MySqlConnection;
    let mut c = MySqlConnection::connect(&format!("mysql://root@{server}/test"))
        .await
        .expect("MariaDB root connection");
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
        .execute(&mut c)
        .await
        .expect("MariaDB admin statement");
}

/// Runs 3,000 messages into `db` (reached through `proxy`), strands every open connection
/// after 300 rows, and checks with `check` (a direct connection): every message applied once,
/// the consumer done within 90 s of the strand, its pool answering afterwards.
async fn stranded_mid_run(test: &str, proxy: &FaultProxy, db: Db, check: Db) {
    use oncely_broker_tests::check::Report;
    use oncely_broker_tests::faults::wait_for_rows;
    use oncely_broker_tests::workload::Workload;
    use oncely_core::{CancellationToken, Consumer, MemorySource};
    use oncely_sql::SqlTx;
    use std::time::{Duration, Instant};
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            "warn,oncely_core=info,oncely_sql=debug",
        ))
        .with_test_writer()
        .try_init();
    let workload = Workload::new("strand", 3_000, 0.05, 0, 23);
    let source = MemorySource::new();
    let publisher = {
        let (source, messages) = (source.clone(), workload.messages.clone());
        tokio::spawn(async move {
            for part in messages.chunks(100) {
                part.iter().for_each(|m| source.publish(m.clone()));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            source.close();
        })
    };
    let consumer = Consumer::new("stranded", db.store().clone(), db.handler())
        .attempt_timeout(Duration::from_secs(3));
    let run = tokio::spawn(async move { consumer.run(source, CancellationToken::new()).await });
    wait_for_rows(&check, 300).await;
    proxy.strand();
    let stranded_at = Instant::now();
    let ran = tokio::time::timeout(Duration::from_secs(90), run).await;
    let finished_after = stranded_at.elapsed();
    publisher.await.expect("publisher");
    let stats = ran
        .expect("the consumer finished within 90 s of the strand")
        .expect("consumer task")
        .expect("run");
    let one = format!("SELECT {}", db.store().dialect().cast_i64("1"));
    let t = Instant::now();
    let read = tokio::time::timeout(
        Duration::from_secs(20),
        db.store().pool().fetch_i64(&one, &[]),
    )
    .await;
    let read_took = t.elapsed();
    let report = Report::read(&check, &workload).await.expect("report");
    let stranded = proxy.stats().stranded;
    eprintln!(
        "FIGURES {test}: {stranded} connections stranded; the consumer finished {:.1} s after the strand ({} applied, {} duplicates); a read on its pool afterwards answered in {:.2} s",
        finished_after.as_secs_f64(),
        stats.applied,
        stats.duplicates,
        read_took.as_secs_f64()
    );
    drop((db, check));
    report.assert_exact(test);
    assert!(stranded > 0, "{test}: the strand caught no open connection");
    assert!(
        matches!(read, Ok(Ok(Some(1)))),
        "{test}: the store's pool must answer after the strand: {read:?}"
    );
}

// ---- restart of the test-owned PostgreSQL -------------------------------------------

fn test_db(args: &[&str]) -> bool {
    let script = oncely_testkit::services::workspace_root().join("scripts/test-db.sh");
    let out = Command::new("bash").arg(script).args(args).output();
    match out {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            eprintln!(
                "test-db.sh {args:?} failed: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            false
        }
        Err(e) => {
            eprintln!("test-db.sh {args:?}: {e}");
            false
        }
    }
}

/// Starts a test-owned server with `scripts/test-db.sh`; false (or a panic under CI) when
/// that is not possible here.
fn own_server(test: &str, which: &str) -> bool {
    if test_db(&["start", which]) {
        return true;
    }
    // Fails under CI / ONCELY_REQUIRE_SERVICES, else the one SKIPPED banner scripts/test.sh counts.
    oncely_testkit::services::unavailable(
        test,
        &format!("the test-owned {which}"),
        &format_args!("scripts/test-db.sh start {which} failed"),
    );
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_restart_amqp() {
    let test = "pg_restart_amqp";
    if !Broker::RabbitMq.up(test) || !own_server(test, "pg") {
        return;
    }
    let server = format!("127.0.0.1:{OWN_PG_PORT}");
    let (name, url) = pg_fresh_db(&server).await;
    let consumer_db = Db::open(&url, None).await.expect("store");
    let check_db = Db::open(&url, None).await.expect("checker");
    let measured = run(
        Broker::RabbitMq,
        test,
        &consumer_db,
        &check_db,
        || async {
            let stopped = tokio::task::spawn_blocking(|| test_db(&["stop", "pg"]));
            assert!(stopped.await.expect("join"), "stopping the test PostgreSQL");
        },
        || async {
            let started = tokio::task::spawn_blocking(|| test_db(&["start", "pg"]));
            assert!(started.await.expect("join"), "starting the test PostgreSQL");
        },
    )
    .await;
    drop((consumer_db, check_db));
    pg_drop_db(&server, &name).await;
    measured.assert_held(test);
}

// ---- MariaDB read_only (test-owned instance) ------------------------------------------

/// The test-owned MariaDB of `scripts/test-db.sh`; root may set `read_only` server-wide.
const OWN_MARIADB: &str = "127.0.0.1:13306";

async fn mariadb_exec(sql: &str) {
    mariadb_admin(OWN_MARIADB, sql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_read_only_amqp() {
    let test = "mariadb_read_only_amqp";
    if !Broker::RabbitMq.up(test) || !own_server(test, "mariadb") {
        return;
    }
    // root holds READ ONLY ADMIN (via ALL PRIVILEGES) and would write through read_only:
    // the consumer connects as a user with rights on its own database only.
    let db = unique("oncely_sf");
    let user = "oncely_sf";
    mariadb_exec(&format!(
        "SET GLOBAL read_only = 0; CREATE DATABASE {db}; \
         CREATE USER IF NOT EXISTS '{user}'@'%'; CREATE USER IF NOT EXISTS '{user}'@'localhost'; \
         GRANT ALL PRIVILEGES ON {db}.* TO '{user}'@'%'; GRANT ALL PRIVILEGES ON {db}.* TO '{user}'@'localhost'"
    ))
    .await;
    let consumer_db = Db::open(&format!("mysql://{user}@{OWN_MARIADB}/{db}"), None)
        .await
        .expect("store");
    let check_db = Db::open(&format!("mysql://root@{OWN_MARIADB}/{db}"), None)
        .await
        .expect("checker");
    let measured = run(
        Broker::RabbitMq,
        test,
        &consumer_db,
        &check_db,
        || mariadb_exec("SET GLOBAL read_only = 1"),
        || mariadb_exec("SET GLOBAL read_only = 0"),
    )
    .await;
    drop((consumer_db, check_db));
    mariadb_exec(&format!("DROP DATABASE IF EXISTS {db}")).await;
    measured.assert_held(test);
}
