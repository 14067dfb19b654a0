//! PostgreSQL failover to a streaming replica (`bash scripts/pg-ha.sh start`, issue 23):
//!
//! - two consumer processes share one RabbitMQ queue and consume into a primary with one
//!   streaming replica through the multi-host URL; the primary is SIGKILLed mid-run and the
//!   replica promoted (`pg-ha.sh kill-primary`). Synchronous replication with
//!   `?replication=replicated`: 0 double, 0 lost. Asynchronous replication: the messages
//!   committed (so acked) before the kill and missing after the promotion are counted and
//!   printed; only 0 double and the accounting are asserted. Both print the seconds from the
//!   kill until consuming resumes;
//! - the store never claims on a standby: a URL naming only the standby is refused at start
//!   with an error saying so; a multi-host URL listing the standby first is used from the
//!   primary; `replication=replicated` is refused where `synchronous_standby_names` is empty.
//!
//! Counts come from the database's own ledger rows, against the unique ids published
//! (`oncely_broker_tests::check`). The tests share the one test-owned cluster and run one at
//! a time; each resets it with `pg-ha.sh start MODE` (a rebuild after a kill).

use oncely_broker_tests::check::Report;
use oncely_broker_tests::ledger::Db;
use oncely_broker_tests::procs;
use oncely_broker_tests::services::{AMQP_URL, available, unique};
use oncely_broker_tests::workload::Workload;
use oncely_core::{ConsumerName, MessageId, PayloadHash, Store};
use oncely_sql::sqlx::{self, AssertSqlSafe};
use oncely_sql::{ConnectOptions, PgStore, Replication};
use std::collections::HashSet;
use std::time::{Duration, Instant};
use tokio::process::Child;

const CONSUMER: &str = env!("CARGO_BIN_EXE_oncely-broker-consumer");
const PRIMARY: &str = "127.0.0.1:25432";
const STANDBY: &str = "postgres://postgres@127.0.0.1:25433/postgres";
const BOTH: &str = "postgres://postgres@127.0.0.1:25432,127.0.0.1:25433/postgres";

/// One test at a time on the one cluster.
static CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Runs `scripts/pg-ha.sh args`; its output (never a server's) is captured and printed.
async fn ha(args: &[&str]) -> String {
    let script = oncely_testkit::services::workspace_root().join("scripts/pg-ha.sh");
    let out = tokio::process::Command::new("bash")
        .arg(script)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("bash runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprint!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "pg-ha.sh {args:?} failed");
    text
}

/// Whether the cluster answers (on either node: a failed test may have left node 2 the
/// primary; every test rebuilds the cluster it needs), else the test-server rule of
/// `oncely_testkit::services`: a failure under CI, a loud SKIPPED line elsewhere.
fn ha_available(test: &str) -> bool {
    std::net::TcpStream::connect_timeout(
        &"127.0.0.1:25433".parse().unwrap(),
        Duration::from_secs(2),
    )
    .is_ok()
        || available(test, "PostgreSQL HA (bash scripts/pg-ha.sh start)", PRIMARY)
}

fn cluster_available(test: &str) -> bool {
    available(test, "RabbitMQ", "127.0.0.1:5672") && ha_available(test)
}

async fn counts(db: &Db) -> i64 {
    db.counts().await.map(|(n, _)| n).unwrap_or(-1)
}

async fn ledger_ids(db: &Db) -> HashSet<String> {
    use oncely_sql::{Column, SqlTx};
    let sql = format!("SELECT message_id FROM {}", db.ledger());
    let rows = db.store().pool().fetch(&sql, &[], &[Column::Text]).await;
    rows.expect("ledger ids")
        .iter()
        .map(|r| r[0].text())
        .collect()
}

/// A checker on whichever node is primary now (retried while a promotion finishes).
async fn checker(schema: &str) -> Db {
    for _ in 0..100 {
        if let Ok(db) = Db::open(BOTH, Some(schema)).await {
            return db;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no PostgreSQL primary answers the checker")
}

/// What one failover run measured.
struct Failover {
    report: Report,
    /// Ledger rows read just before the kill.
    committed_before: usize,
    /// Of those, ids missing on the promoted primary.
    missing_after: usize,
    /// Ledger rows the killed primary held when it died (read from its data afterwards):
    /// committed there, so acked or about to be.
    committed_at_kill: usize,
    /// Lost ids the killed primary had committed: acked, then gone with the promotion.
    acked_then_missing: usize,
    /// Lost ids the killed primary never committed either (a loss replication lag does not
    /// explain; none expected).
    unexplained: usize,
    promoted_after: Duration,
    resumed_after: Duration,
}

/// Publishes `n` messages, starts two consumer processes on the multi-host URL (plus
/// `store_query`), kills the primary after `kill_at` ledger rows, waits for the end.
async fn failover_run(mode: &str, store_query: &str, n: usize, kill_at: i64) -> Failover {
    ha(&["start", mode]).await;
    let queue = unique(&format!("ha_{mode}"));
    let schema = unique("t_ha");
    let source = format!("{AMQP_URL}?queue={queue}");
    let workload = Workload::new(&queue, n, 0.2, 2, 23);
    let db = Db::open(BOTH, Some(&schema)).await.expect("primary");
    oncely_amqp::publish(&source, &workload.messages)
        .await
        .expect("publish");
    let store = format!("{BOTH}{store_query}");
    // Idle exit 20 s: longer than the pause of a failover.
    let args = procs::consumer_args(&source, "ha", &store, Some(schema.as_str()), 20);
    let children: Vec<Child> = (0..2).map(|_| procs::spawn(CONSUMER, &args)).collect();
    let start = Instant::now();
    while counts(&db).await < kill_at {
        assert!(start.elapsed() < Duration::from_secs(120), "no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = ledger_ids(&db).await;
    let killed = Instant::now();
    ha(&["kill-primary"]).await;
    let promoted_after = killed.elapsed();
    drop(db);
    let db = checker(&schema).await;
    let after = ledger_ids(&db).await;
    let missing_after = before.difference(&after).count();
    let at_promotion = after.len() as i64;
    let resumed_after = loop {
        if counts(&db).await >= at_promotion + 50 {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(120),
            "consuming did not resume within 120 s of the kill"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for (i, child) in children.into_iter().enumerate() {
        procs::finish(child, &format!("consumer {}", i + 1)).await;
    }
    let mut report = Report::read(&db, &workload).await.expect("report");
    if report.lost > 0 && report.double == 0 && mode == "sync" {
        // Something still in flight at the idle exit: one drain run.
        procs::finish(procs::spawn(CONSUMER, &args), "drain").await;
        report = Report::read(&db, &workload).await.expect("report");
    }
    let applied = ledger_ids(&db).await;
    let lost: HashSet<&str> = workload
        .unique
        .iter()
        .map(|(id, _)| id.as_str())
        .filter(|id| !applied.contains(*id))
        .collect();
    let _ = db.drop_schema().await;
    drop(db);
    // What the killed primary had committed when it died: its data directory, started again
    // on its own (a diverged primary nobody else uses).
    ha(&["start-node", "1"]).await;
    let old = sqlx::PgPool::connect("postgres://postgres@127.0.0.1:25432/postgres")
        .await
        .expect("the old primary");
    let on_old: Vec<String> = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT message_id FROM {schema}.ledger"
    )))
    .fetch_all(&old)
    .await
    .expect("the old primary's ledger");
    old.close().await;
    let on_old: HashSet<String> = on_old.into_iter().collect();
    let acked_then_missing = lost.iter().filter(|id| on_old.contains(**id)).count();
    // A healthy synchronous cluster again (node 1 primary) for whoever comes next.
    ha(&["start", "sync"]).await;
    Failover {
        committed_at_kill: on_old.len(),
        acked_then_missing,
        unexplained: lost.len() - acked_then_missing,
        report,
        committed_before: before.len(),
        missing_after,
        promoted_after,
        resumed_after,
    }
}

fn print(what: &str, f: &Failover) {
    let r = &f.report;
    eprintln!(
        "{what}: published {} ({} unique); ledger rows on the killed primary {} (read {} just \
         before the kill, {} of those missing after promotion); acked on the old primary and \
         missing after promotion {}; lost in all {} ({} unexplained, sample {:?}); double {}; \
         promoted {:.2} s after the kill; consuming resumed {:.2} s after the kill",
        r.published,
        r.unique,
        f.committed_at_kill,
        f.committed_before,
        f.missing_after,
        f.acked_then_missing,
        r.lost,
        f.unexplained,
        r.lost_sample,
        r.double,
        f.promoted_after.as_secs_f64(),
        f.resumed_after.as_secs_f64(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn primary_killed_synchronous_replication_loses_nothing() {
    let test = "primary_killed_synchronous_replication_loses_nothing";
    if !cluster_available(test) {
        return;
    }
    let _one = CLUSTER.lock().await;
    let f = failover_run("sync", "?replication=replicated", 10_000, 3_000).await;
    print("synchronous replication, replication=replicated", &f);
    assert_eq!(f.missing_after, 0, "a synchronous commit went missing");
    assert_eq!(f.acked_then_missing, 0, "a synchronous commit went missing");
    f.report
        .assert_exact("primary SIGKILLed, synchronous standby promoted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn primary_killed_asynchronous_replication_is_counted() {
    let test = "primary_killed_asynchronous_replication_is_counted";
    if !cluster_available(test) {
        return;
    }
    let _one = CLUSTER.lock().await;
    let f = failover_run("async", "", 10_000, 3_000).await;
    print("asynchronous replication (the default)", &f);
    let r = &f.report;
    assert_eq!(r.double, 0, "double effects: {r:#?}");
    assert_eq!(r.valid_dead_lettered, 0, "{r:#?}");
    assert_eq!(
        r.ledger_ids + r.lost,
        r.unique,
        "every unique id is applied once or lost: {r:#?}"
    );
    assert_eq!(r.ledger_rows, r.ledger_ids, "{r:#?}");
    assert!(f.missing_after <= r.lost, "missing ids are lost ids");
    assert_eq!(
        f.unexplained, 0,
        "every lost message was committed on the killed primary (lost with the replication lag)"
    );
    assert_eq!(r.bad_dead_lettered, r.bad_expected, "{r:#?}");
}

#[tokio::test]
async fn the_store_never_claims_on_a_standby() {
    let test = "the_store_never_claims_on_a_standby";
    if !ha_available(test) {
        return;
    }
    let _one = CLUSTER.lock().await;
    ha(&["start", "sync"]).await;

    // The standby alone: refused at start, saying why.
    let e = PgStore::connect(STANDBY).await.err().expect("refused");
    let text = format!("{e} {:?}", std::error::Error::source(&e));
    assert!(e.is_unavailable(), "{text}");
    assert!(text.contains("read-only standby"), "{text}");

    // The standby listed first: the store works on the primary.
    let url = "postgres://postgres@127.0.0.1:25433,127.0.0.1:25432/postgres";
    let store = PgStore::connect(url).await.expect("connects");
    let port: i32 = sqlx::query_scalar("SELECT inet_server_port()")
        .fetch_one(store.pool())
        .await
        .expect("port");
    assert_eq!(port, 25432, "the store's connections go to the primary");
    store.migrate().await.expect("migrate on the primary");
    let consumer = ConsumerName::new(unique("standby")).unwrap();
    let id = MessageId::new("m-1").unwrap();
    let hash = PayloadHash::of(b"x");
    let mut tx = store.begin().await.expect("begin");
    store
        .claim(&mut tx, &consumer, &id, hash)
        .await
        .expect("claim");
    store.commit(tx).await.expect("commit");
    assert!(store.committed_claim(&consumer, &id, hash).await.unwrap());

    // Replicated where synchronous_standby_names is set: accepted; where it is empty: refused.
    let replicated = ConnectOptions {
        replication: Replication::Replicated,
        ..ConnectOptions::default()
    };
    let store = PgStore::connect_with(BOTH, &replicated)
        .await
        .expect("replicated with a synchronous standby");
    assert_eq!(store.replication(), Replication::Replicated);
    let mut tx = store.begin().await.expect("begin");
    let id2 = MessageId::new("m-2").unwrap();
    store
        .claim(&mut tx, &consumer, &id2, hash)
        .await
        .expect("claim");
    store.commit(tx).await.expect("replicated commit");
    ha(&["start", "async"]).await;
    let e = PgStore::connect_with(BOTH, &replicated)
        .await
        .err()
        .expect("replicated refused without synchronous standbys");
    let text = format!("{e} {:?}", std::error::Error::source(&e));
    assert!(
        text.contains("synchronous_standby_names is empty"),
        "{text}"
    );
    let e = PgStore::connect(&format!("{BOTH}?replication=replicated"))
        .await
        .err()
        .expect("the URL option too");
    assert!(
        format!("{e:?}").contains("synchronous_standby_names"),
        "{e:?}"
    );
    // Leave the cluster synchronous for whoever runs next.
    ha(&["start", "sync"]).await;
}
