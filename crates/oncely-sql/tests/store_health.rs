//! A real failover: a test-owned PostgreSQL database is switched to
//! `default_transaction_read_only` mid-run and its backends are terminated (every claim then
//! fails with SQLSTATE 25006, the pool's connections with 57P01 / I/O errors), then switched
//! back after ~5 s. The runtime must hold its deliveries instead of nacking them in a loop:
//! 0 double, 0 lost (counted in the database's own ledger rows), no delivery handed back.

mod common;

use common::{missing, pg_url, probe};
use oncely_core::{Consumer, ConsumerName, Envelope, Handled, Handler, MemorySource, RawEnvelope};
use oncely_sql::PgStore;
use oncely_sql::error::db;
use oncely_sql::sqlx::{self, AssertSqlSafe, Postgres, Transaction};
use oncely_testkit::services::unique;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Enough that the run is still going when the database turns read-only: with group commit,
/// 500 messages were sometimes all applied in the moment the switch took (CI, 2026-12-06).
const MESSAGES: usize = 2000;
/// Lanes of the consumer (group commit's groups in flight).
const LANES: usize = 2;
// What the lanes may read ahead is fewer than the messages left when the outage starts.
const _: () = assert!(2 * LANES * oncely_core::DEFAULT_GROUP_COMMIT < MESSAGES - 50);
const READ_ONLY_FOR: Duration = Duration::from_secs(5);

/// One ledger row per applied message, classified by the workspace's error classifier (so a
/// read-only ledger insert is `Unavailable`, not a handler failure).
struct Ledger;

impl Handler<Transaction<'static, Postgres>> for Ledger {
    async fn handle(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        message: &Envelope,
    ) -> oncely_core::Result<Handled> {
        sqlx::query("INSERT INTO ledger (message_id) VALUES ($1)")
            .bind(message.id().as_str())
            .execute(&mut **tx)
            .await
            .map_err(|e| db("ledger insert", e))?;
        Ok(Handled::Applied)
    }
}

/// Runs `sql` on the server's maintenance connection.
async fn admin(sql: String) {
    let url = pg_url();
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&url)
        .await
        .expect("admin connection");
    sqlx::raw_sql(AssertSqlSafe(sql))
        .execute(&mut conn)
        .await
        .expect("admin statement");
}

async fn read_only(database: &str, on: bool) {
    let on = if on { "on" } else { "off" };
    // Two statements, not one multi-statement query: that would run in one implicit
    // transaction, so the backends would reconnect before the ALTER is committed.
    admin(format!(
        "ALTER DATABASE {database} SET default_transaction_read_only = {on}"
    ))
    .await;
    admin(format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}'"
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_read_only_failover_holds_deliveries() {
    let url = pg_url();
    if let Err(e) = probe(&url).await {
        missing("PostgreSQL", "pg_read_only_failover_holds_deliveries", &e);
        return;
    }
    let database = unique("health").replacen("t_", "oncely_health_", 1);
    admin(format!("CREATE DATABASE {database}")).await;
    let db_url = match url.rsplit_once('/') {
        Some((server, _)) => format!("{server}/{database}"),
        None => panic!("no database in {url}"),
    };
    let store = PgStore::connect(&db_url).await.expect("connect");
    store.migrate().await.expect("migrate");
    sqlx::query("CREATE TABLE ledger (message_id TEXT NOT NULL)")
        .execute(store.pool())
        .await
        .expect("ledger table");

    let source = MemorySource::new();
    let published: Vec<String> = (0..MESSAGES).map(|i| format!("m-{i:04}")).collect();
    for id in &published {
        source.publish(RawEnvelope::new(id.clone(), "x"));
    }
    source.close();
    let consumer = Consumer::new(ConsumerName::new("health").unwrap(), store.clone(), Ledger)
        .concurrency(LANES);
    let health = consumer.health();
    let run = tokio::spawn({
        let (consumer, source) = (consumer.clone(), source.clone());
        async move { consumer.run(source, CancellationToken::new()).await }
    });

    let applied = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM ledger")
            .fetch_one(store.pool())
            .await
            .unwrap_or(0)
    };
    let start = Instant::now();
    while applied().await < 100 {
        assert!(start.elapsed() < Duration::from_secs(60), "no progress");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    read_only(&database, true).await;
    let before = source.stats();
    let (probes, failures) = (health.probes(), health.failures());
    tokio::time::sleep(READ_ONLY_FOR / 2).await;
    let held = health.in_flight();
    tokio::time::sleep(READ_ONLY_FOR / 2).await;
    let during = source.stats();
    let (probes, failures) = (health.probes() - probes, health.failures() - failures);
    let was_healthy = health.is_healthy();
    read_only(&database, false).await;
    let stats = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("run finishes after recovery")
        .unwrap()
        .unwrap();
    let total = source.stats();

    let rows: Vec<String> = sqlx::query_scalar("SELECT message_id FROM ledger")
        .fetch_all(store.pool())
        .await
        .expect("ledger");
    let mut counts = std::collections::HashMap::<&str, usize>::new();
    for row in &rows {
        *counts.entry(row.as_str()).or_default() += 1;
    }
    let double = counts.values().filter(|&&n| n > 1).count();
    let lost = published
        .iter()
        .filter(|id| !counts.contains_key(id.as_str()))
        .count();
    let nacks_during = during.requeued - before.requeued;
    let deliveries_during = during.deliveries - before.deliveries;
    println!(
        "read-only {READ_ONLY_FOR:?}: held {held}, deliveries during outage {deliveries_during}, nacks during outage {nacks_during}, \
         probes {probes}, store failures {failures}, outages {}, recoveries {}; \
         total deliveries {} for {MESSAGES} messages ({:.3} per message); double {double}, lost {lost}; {stats:?}",
        health.outages(),
        health.recoveries(),
        total.deliveries,
        total.deliveries as f64 / MESSAGES as f64,
    );
    drop(store);
    admin(format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)")).await;

    assert_eq!((double, lost), (0, 0), "double, lost");
    assert!(!was_healthy, "the breaker opened during the outage");
    assert_eq!(
        nacks_during, 0,
        "no delivery handed back while the store was down"
    );
    // Group commit (the default): while the store fails one group goes in as the probe and
    // the lanes hold at most what the consumer reads ahead (2 × lanes × group), fewer than the
    // messages left, so an intake that did not pause would take them all.
    let read_ahead = (2 * LANES * oncely_core::DEFAULT_GROUP_COMMIT) as u64;
    assert!(
        deliveries_during <= read_ahead,
        "intake paused: {deliveries_during}"
    );
    assert_eq!(total.requeued, 0);
    assert_eq!(
        total.deliveries, MESSAGES as u64,
        "one delivery per message"
    );
    assert!(probes <= 10, "one probe at a time, backing off: {probes}");
    assert_eq!(health.outages(), 1);
    assert_eq!(health.recoveries(), 1);
}

/// The classifier on real servers' read-only errors: PostgreSQL 25006, MariaDB 1792 and
/// `SQLITE_READONLY` are all `Unavailable` (the downcasts to each driver's error work).
#[tokio::test]
async fn read_only_errors_of_each_server_are_unavailable() {
    use oncely_core::ErrorKind;
    use oncely_sql::error::error_kind;
    const TEST: &str = "read_only_errors_of_each_server_are_unavailable";
    let pg = pg_url();
    if let Err(e) = probe(&pg).await {
        missing("PostgreSQL", TEST, &e);
    } else {
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&pg)
            .await
            .expect("connect");
        let e = sqlx::raw_sql("BEGIN READ ONLY; CREATE TEMP TABLE oncely_ro_probe (x int); COMMIT")
            .execute(&mut conn)
            .await
            .expect_err("read-only transaction refuses writes");
        assert_eq!(error_kind(&e), ErrorKind::Unavailable, "{e}");
    }
    let my = common::mysql_url();
    if let Err(e) = probe(&my).await {
        missing("MariaDB", TEST, &e);
    } else {
        let mut conn = <sqlx::MySqlConnection as sqlx::Connection>::connect(&my)
            .await
            .expect("connect");
        let table = unique("ro_probe");
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE TABLE {table} (x INT)")))
            .execute(&mut conn)
            .await
            .expect("create");
        sqlx::raw_sql("START TRANSACTION READ ONLY")
            .execute(&mut conn)
            .await
            .expect("start");
        let e = sqlx::raw_sql(AssertSqlSafe(format!("INSERT INTO {table} VALUES (1)")))
            .execute(&mut conn)
            .await
            .expect_err("read-only transaction refuses writes");
        assert_eq!(error_kind(&e), ErrorKind::Unavailable, "{e}");
        sqlx::raw_sql(AssertSqlSafe(format!("ROLLBACK; DROP TABLE {table}")))
            .execute(&mut conn)
            .await
            .expect("drop");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("ro.db");
    let rw = format!("sqlite:{}?mode=rwc", file.display());
    let mut conn = <sqlx::SqliteConnection as sqlx::Connection>::connect(&rw)
        .await
        .expect("create");
    sqlx::raw_sql("CREATE TABLE t (x INT)")
        .execute(&mut conn)
        .await
        .expect("create table");
    let ro = format!("sqlite:{}?mode=ro", file.display());
    let mut conn = <sqlx::SqliteConnection as sqlx::Connection>::connect(&ro)
        .await
        .expect("open read-only");
    let e = sqlx::raw_sql("INSERT INTO t VALUES (1)")
        .execute(&mut conn)
        .await
        .expect_err("read-only database refuses writes");
    assert_eq!(error_kind(&e), ErrorKind::Unavailable, "{e}");
}
