//! The MySQL store on a 3-node MariaDB Galera cluster (`bash scripts/cluster.sh start galera`):
//! concurrent duplicate claims on two nodes (certification conflict at commit), a commit
//! whose outcome the client never learns, and a multi-host URL failing over when its node
//! is lost. Also the unknown-commit case on the machine's single MariaDB. Every case counts
//! the effects in the database's own ledger rows.

mod common;

use common::{Ledger, missing, mysql_url, probe};
use oncely_core::{
    Claim, Consumer, ConsumerName, MemorySource, MessageId, PayloadHash, RawEnvelope,
    StatsSnapshot, Store,
};
use oncely_sql::sqlx::{self, AssertSqlSafe};
use oncely_sql::{AnyStore, MySqlStore};
use oncely_testkit::cluster::{self, galera_urls};
use oncely_testkit::services::unique;
use oncely_testkit::{Fault, FaultProxy};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// `url` with database `db` instead of its own.
fn with_db(url: &str, db: &str) -> String {
    let base = url.rsplit_once('/').map_or(url, |(b, _)| b);
    format!("{base}/{db}")
}

async fn admin(url: &str, sql: &str) {
    let mut conn = <sqlx::MySqlConnection as sqlx::Connection>::connect(url)
        .await
        .expect("admin connection");
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
        .execute(&mut conn)
        .await
        .expect("admin statement");
}

/// A fresh database on the server of `url` (replicated to every node on Galera), migrated,
/// with a ledger table; returns its name.
async fn fresh_database(url: &str, test: &str) -> String {
    let db = unique(test);
    admin(url, &format!("CREATE DATABASE {db}")).await;
    let store = MySqlStore::connect(&with_db(url, &db))
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    sqlx::raw_sql(
        "CREATE TABLE ledger (seq BIGINT AUTO_INCREMENT PRIMARY KEY, message_id VARCHAR(255) NOT NULL, payload TEXT NOT NULL, instance VARCHAR(32) NOT NULL) ENGINE=InnoDB",
    )
    .execute(store.pool())
    .await
    .expect("ledger table");
    store.pool().close().await;
    // DDL reaches the other Galera nodes in total order, but one may not have applied it yet.
    let nodes = galera_urls();
    if nodes.iter().any(|n| url.contains(&cluster::host_port(n))) {
        for node in nodes {
            let start = Instant::now();
            while MySqlStore::connect(&with_db(&node, &db)).await.is_err() {
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "{db} not on {node}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    db
}

/// Ledger rows per message id, read on the server of `url`.
async fn ledger_counts(url: &str) -> HashMap<String, usize> {
    let store = MySqlStore::connect(url).await.expect("connect");
    let rows: Vec<String> = sqlx::query_scalar("SELECT message_id FROM ledger")
        .fetch_all(store.pool())
        .await
        .expect("ledger");
    let mut counts = HashMap::new();
    for id in rows {
        *counts.entry(id).or_default() += 1;
    }
    counts
}

/// Asserts that each of `ids` has exactly one ledger row and nothing else has one.
fn assert_exact(counts: &HashMap<String, usize>, ids: &[String], what: &str) {
    let double = counts.values().filter(|&&n| n > 1).count();
    let lost = ids.iter().filter(|id| !counts.contains_key(*id)).count();
    let extra = counts.len() + lost - ids.len();
    eprintln!(
        "{what}: {} messages, {} ledger rows, {double} double, {lost} lost",
        ids.len(),
        counts.values().sum::<usize>()
    );
    assert_eq!((double, lost, extra), (0, 0, 0), "{what}");
}

async fn cluster_up(test: &str) -> bool {
    cluster::available(test, "galera", &galera_urls()).await
}

/// A claim on node 1 and a duplicate claim on node 2 both succeed locally (neither sees the
/// other's uncommitted row); at commit Galera certifies the first and aborts the second with
/// error 1213, which the store reports as transient. The retried claim on node 2 waits for
/// the node to apply the winner (`wsrep_sync_wait`) and ends as `Duplicate`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn galera_concurrent_duplicate_claims_on_two_nodes() {
    let test = "galera_concurrent_duplicate_claims_on_two_nodes";
    if !cluster_up(test).await {
        return;
    }
    let nodes = galera_urls();
    let db = fresh_database(&nodes[0], "galera_dup").await;
    let one = MySqlStore::connect(&with_db(&nodes[0], &db)).await.unwrap();
    let two = MySqlStore::connect(&with_db(&nodes[1], &db)).await.unwrap();
    let consumer = ConsumerName::new("galera").unwrap();
    let insert = "INSERT INTO ledger (message_id, payload, instance) VALUES (?, 'x', ?)";
    let (mut certification_failures, ids) = (0, 20);
    for i in 0..ids {
        let id = MessageId::new(format!("m-{i}")).unwrap();
        let hash = PayloadHash::of(b"x");
        let mut t1 = one.begin().await.unwrap();
        let mut t2 = two.begin().await.unwrap();
        assert_eq!(
            one.claim(&mut t1, &consumer, &id, hash).await.unwrap(),
            Claim::Fresh
        );
        assert_eq!(
            two.claim(&mut t2, &consumer, &id, hash).await.unwrap(),
            Claim::Fresh
        );
        for (t, node) in [(&mut t1, "one"), (&mut t2, "two")] {
            sqlx::query(insert)
                .bind(id.as_str())
                .bind(node)
                .execute(&mut **t)
                .await
                .unwrap();
        }
        one.commit(t1).await.expect("the first commit is certified");
        // The second either fails at commit (certification) or earlier, when the applier
        // aborted it; either way with a transient error and nothing of it committed.
        match two.commit(t2).await {
            Ok(()) => panic!("{id}: both duplicate claims committed"),
            Err(e) => {
                assert!(e.is_transient(), "{id}: {e} should be transient (retried)");
                certification_failures += 1;
            }
        }
        let mut retry = two.begin().await.unwrap();
        assert_eq!(
            two.claim(&mut retry, &consumer, &id, hash).await.unwrap(),
            Claim::Duplicate,
            "{id}: the retry on node 2 must see node 1's committed claim"
        );
        two.rollback(retry).await.unwrap();
    }
    let expected: Vec<String> = (0..ids).map(|i| format!("m-{i}")).collect();
    for node in &nodes {
        assert_exact(&ledger_counts(&with_db(node, &db)).await, &expected, node);
    }
    eprintln!("{certification_failures} certification failures, all retried as duplicates");
    assert_eq!(certification_failures, ids);
    admin(&nodes[0], &format!("DROP DATABASE {db}")).await;
}

/// Consumes `ids` from memory into `store` (one delivery at a time), until drained.
async fn consume(store: AnyStore, ids: &[String], instance: &'static str) -> StatsSnapshot {
    let source = MemorySource::new();
    for id in ids {
        source.publish(RawEnvelope::new(id.clone(), "x"));
    }
    source.close();
    let consumer = Consumer::new(
        ConsumerName::new("unknown-commit").unwrap(),
        store,
        Ledger::new("ledger", instance),
    )
    .concurrency(1);
    tokio::time::timeout(
        Duration::from_secs(120),
        consumer.run(source, CancellationToken::new()),
    )
    .await
    .expect("the consumer drains the source")
    .expect("run")
}

/// The connection is cut when the client sends `COMMIT`: with `deliver` after the server got
/// it (the transaction commits, the client sees a lost connection), without `deliver` before.
/// The runtime holds the delivery as "store unavailable" and retries: the retry finds the
/// committed claim (a duplicate, acked) or applies it. Once each, either way.
async fn unknown_commit(server: &str, db: &str, deliver: bool) {
    let target = cluster::host_port(server);
    let proxy = FaultProxy::start(target.as_str()).await.expect("proxy");
    let url = with_db(server, db).replacen(&target, &proxy.addr().to_string(), 1);
    let store = AnyStore::connect(&url).await.expect("connect");
    let ids: Vec<String> = (0..20).map(|i| format!("{deliver}-{i}")).collect();
    proxy.set(Fault::CutAtCommit { deliver });
    let stats = consume(store, &ids, "unknown").await;
    let counts = ledger_counts(&with_db(server, db)).await;
    let counts: HashMap<_, _> = counts
        .into_iter()
        .filter(|(id, _)| ids.contains(id))
        .collect();
    assert_eq!(proxy.stats().cut_at_commit, 1, "the cut fired once");
    eprintln!("deliver={deliver}: {stats:?}");
    assert_exact(
        &counts,
        &ids,
        &format!("unknown commit (delivered: {deliver}) on {target}"),
    );
    assert_eq!(stats.dead_lettered, 0);
    // The failed commit was seen: the runtime asked the store whether the claim committed
    // (delivered: it had, so the delivery is acked as applied) or held and retried it.
    assert!(stats.store_retries >= 1, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn galera_commit_outcome_unknown_is_safe() {
    if !cluster_up("galera_commit_outcome_unknown_is_safe").await {
        return;
    }
    let node = &galera_urls()[0];
    let db = fresh_database(node, "galera_unknown").await;
    unknown_commit(node, &db, true).await;
    unknown_commit(node, &db, false).await;
    admin(node, &format!("DROP DATABASE {db}")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_commit_outcome_unknown_is_safe() {
    let url = mysql_url();
    if let Err(e) = probe(&url).await {
        missing("MariaDB", "mysql_commit_outcome_unknown_is_safe", &e);
        return;
    }
    let db = fresh_database(&url, "my_unknown").await;
    unknown_commit(&url, &db, true).await;
    unknown_commit(&url, &db, false).await;
    admin(&url, &format!("DROP DATABASE {db}")).await;
}

/// A store on `mysql://…@node1,node2/…` (node 1 behind a proxy) loses node 1 mid-run: the
/// store moves to node 2 and the run ends with every message applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn galera_multi_host_url_fails_over() {
    if !cluster_up("galera_multi_host_url_fails_over").await {
        return;
    }
    let nodes = galera_urls();
    let db = fresh_database(&nodes[0], "galera_failover").await;
    let proxy = FaultProxy::start(cluster::host_port(&nodes[0]).as_str())
        .await
        .unwrap();
    // A dead host first: opening skips it.
    let url = format!(
        "mysql://root@127.0.0.1:1,{},{}/{db}",
        proxy.addr(),
        cluster::host_port(&nodes[1])
    );
    let store = AnyStore::connect(&url).await.expect("connect");
    let ids: Vec<String> = (0..2000).map(|i| format!("f-{i}")).collect();
    let source = MemorySource::new();
    for id in &ids {
        source.publish(RawEnvelope::new(id.clone(), "x"));
    }
    source.close();
    let consumer = Consumer::new(
        ConsumerName::new("failover").unwrap(),
        store,
        Ledger::new("ledger", "failover"),
    )
    .concurrency(8);
    let run = tokio::spawn(async move { consumer.run(source, CancellationToken::new()).await });
    let node2 = MySqlStore::connect(&with_db(&nodes[1], &db)).await.unwrap();
    let applied = || async {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM ledger")
            .fetch_one(node2.pool())
            .await
            .unwrap()
    };
    let start = Instant::now();
    while applied().await < 300 {
        assert!(start.elapsed() < Duration::from_secs(60), "no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.set(Fault::Drop);
    let (lost_at, at) = (applied().await, Instant::now());
    while applied().await < lost_at + 100 {
        assert!(
            at.elapsed() < Duration::from_secs(60),
            "no progress after the node loss"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "node 1 lost at {lost_at} applied; 100 more within {:?}",
        at.elapsed()
    );
    let stats = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("run finishes")
        .unwrap()
        .unwrap();
    eprintln!("{stats:?}");
    assert_exact(
        &ledger_counts(&with_db(&nodes[2], &db)).await,
        &ids,
        "failover",
    );
    assert_eq!(stats.dead_lettered, 0);
    admin(&nodes[0], &format!("DROP DATABASE {db}")).await;
}

/// Portable mode is detected on Galera (any node of `scripts/cluster.sh start galera`). It
/// lives here, in the `cluster` test group, because the node-loss tests kill nodes while the
/// other groups run.
#[tokio::test]
async fn detection_is_true_on_galera() {
    let nodes = oncely_testkit::cluster::galera_urls();
    if !oncely_testkit::cluster::available("detection_is_true_on_galera", "galera", &nodes).await {
        return;
    }
    // Every node in one multi-host URL: the cluster tests may have killed node 1 meanwhile.
    let hosts: Vec<String> = nodes
        .iter()
        .map(|n| oncely_testkit::cluster::host_port(n))
        .collect();
    let url = format!("mysql://root@{}/test", hosts.join(","));
    let store = MySqlStore::connect(&url)
        .await
        .expect("the Galera node answers");
    assert!(store.portable(), "connect resolved to portable on Galera");
    assert!(
        store.any_pool().engine().portable(),
        "its pool holds the same fact"
    );
}
