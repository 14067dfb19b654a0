//! Per-message vs batch throughput on SQLite, PostgreSQL and MariaDB.
//!
//! ```text
//! cargo run -p oncely-bench --example batch_bench -- [messages] [postgres-url] [mysql-url]
//! ```
//!
//! Each run drains `messages` deliveries (10 % published twice) through a handler that writes
//! one ledger row per message in the store's transaction (`*_multi` runs: one multi-row INSERT
//! per batch through `Handler::handle_batch`), then checks the ledger holds exactly one row per
//! id. Servers that can't be reached are skipped.

use oncely_core::{
    Claim, Consumer, ConsumerName, Envelope, Error, Handled, Handler, MessageId, PayloadHash,
    RawEnvelope, Result, StatsSnapshot, Store,
};
use oncely_sql::sqlx::{self, AssertSqlSafe};
use oncely_sql::{
    AnyStore, AnyTx, ConnectOptions, MySqlStore, PgStore, SqliteStore, Tables, Value,
};
use oncely_testkit::services::unique;
use oncely_testkit::{FaultySource, SourceFaults};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

#[derive(Clone)]
struct Ledger {
    insert: String,
    table: String,
    run: &'static str,
    /// Write a batch's effects with one multi-row INSERT (`Handler::handle_batch`).
    multi_row: bool,
}

impl Ledger {
    fn multi_row_sql(&self, rows: usize) -> String {
        let values: Vec<String> = (0..rows)
            .map(|i| format!("(${}, ${})", 2 * i + 1, 2 * i + 2))
            .collect();
        format!(
            "INSERT INTO {} (message_id, run) VALUES {}",
            self.table,
            values.join(", ")
        )
    }
}

impl Handler<AnyTx> for Ledger {
    async fn handle(&self, tx: &mut AnyTx, msg: &Envelope) -> Result<Handled> {
        tx.execute(&self.insert, &[msg.id().as_str().into(), self.run.into()])
            .await
            .map_err(|e| Error::transient(e.to_string()))?;
        Ok(Handled::Applied)
    }

    async fn handle_batch(&self, tx: &mut AnyTx, messages: &[Envelope]) -> Result<Vec<Handled>> {
        if !self.multi_row {
            let mut handled = Vec::with_capacity(messages.len());
            for message in messages {
                handled.push(self.handle(tx, message).await?);
            }
            return Ok(handled);
        }
        let args: Vec<Value> = messages
            .iter()
            .flat_map(|m| [m.id().as_str().into(), self.run.into()])
            .collect();
        tx.execute(&self.multi_row_sql(messages.len()), &args)
            .await
            .map_err(|e| Error::transient(e.to_string()))?;
        Ok(vec![Handled::Applied; messages.len()])
    }
}

fn source(n: usize, run: &str) -> FaultySource {
    let source = FaultySource::new(SourceFaults {
        seed: 1,
        duplicate_rate: 0.1,
        reorder_window: 1,
        lost_ack_rate: 0.0,
    });
    for i in 0..n {
        source.publish(RawEnvelope::new(
            format!("{run}-{i:06}"),
            format!("credit {i}"),
        ));
    }
    source.close();
    source
}

#[derive(Clone, Copy)]
enum Mode {
    PerMessage(usize),
    Batch(usize, bool),
}

const RUNS: [(&str, Mode); 6] = [
    ("per_message_c1", Mode::PerMessage(1)),
    ("per_message_c8", Mode::PerMessage(8)),
    ("batch_100", Mode::Batch(100, false)),
    ("batch_500", Mode::Batch(500, false)),
    ("batch_100_multi", Mode::Batch(100, true)),
    ("batch_500_multi", Mode::Batch(500, true)),
];

macro_rules! bench {
    ($store:expr, $ledger:expr, $n:expr, $label:expr) => {{
        let store = $store;
        let any = AnyStore::from(store.clone());
        let ledger: String = $ledger;
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE TABLE {ledger} (message_id VARCHAR(255) NOT NULL, run VARCHAR(32) NOT NULL)"
        )))
        .execute(store.pool())
        .await
        .expect("ledger table");
        for (run, mode) in RUNS {
            let handler = Ledger {
                insert: format!("INSERT INTO {ledger} (message_id, run) VALUES ($1, $2)"),
                table: ledger.clone(),
                run,
                multi_row: matches!(mode, Mode::Batch(_, true)),
            };
            let name = ConsumerName::new(run).unwrap();
            let src = source($n, run);
            let stop = CancellationToken::new();
            let started = Instant::now();
            let mut batches = String::new();
            let stats: StatsSnapshot = match mode {
                Mode::PerMessage(c) => Consumer::new(name, any.clone(), handler)
                    .concurrency(c)
                    .run(src, stop)
                    .await
                    .unwrap(),
                Mode::Batch(size, _) => {
                    let consumer = Consumer::new(name, any.clone(), handler)
                        .group_commit(size)
                        .linger(Duration::from_millis(2))
                        .concurrency(1);
                    let stats = consumer.run(src, stop).await.unwrap();
                    let b = consumer.group_commit_stats();
                    batches = format!(", batches {} committed / {} fell back", b.committed, b.fallbacks);
                    stats
                }
            };
            let secs = started.elapsed().as_secs_f64();
            let (rows, ids): (i64, i64) = sqlx::query_as(AssertSqlSafe(format!(
                "SELECT COUNT(*), COUNT(DISTINCT message_id) FROM {ledger} WHERE run = '{run}'"
            )))
            .fetch_one(store.pool())
            .await
            .unwrap();
            assert_eq!((rows, ids), ($n as i64, $n as i64), "one effect per id");
            println!(
                "{:<11} {run:<15} {:>6} deliveries {:>8.0} deliveries/s {:>8.0} messages/s  (applied {}, duplicates {}, effects {rows}, distinct ids {ids}{batches})",
                $label,
                stats.received,
                stats.received as f64 / secs,
                $n as f64 / secs,
                stats.applied,
                stats.duplicates,
            );
        }
        // The claims alone: 500 fresh ids one by one vs. one claim_batch, one transaction each.
        let c = ConsumerName::new("claims_only").unwrap();
        let items: Vec<(MessageId, PayloadHash)> = (0..500)
            .map(|i| (MessageId::new(format!("c-{i:05}")).unwrap(), PayloadHash::of(b"x")))
            .collect();
        let started = Instant::now();
        let mut tx = store.begin().await.unwrap();
        for (id, hash) in &items {
            store.claim(&mut tx, &c, id, *hash).await.unwrap();
        }
        store.commit(tx).await.unwrap();
        let single = started.elapsed();
        let c = ConsumerName::new("claims_batch").unwrap();
        let started = Instant::now();
        let mut tx = store.begin().await.unwrap();
        let claims = store.claim_batch(&mut tx, &c, &items).await.unwrap();
        store.commit(tx).await.unwrap();
        let batch = started.elapsed();
        assert!(claims.iter().all(|c| *c == Claim::Fresh));
        println!(
            "{:<11} claims only: 500 ids one by one {:>7.1} ms, one claim_batch {:>7.1} ms",
            $label,
            single.as_secs_f64() * 1e3,
            batch.as_secs_f64() * 1e3
        );
    }};
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(2000);
    let pg = args
        .get(2)
        .cloned()
        .unwrap_or("postgres://postgres@127.0.0.1/test".into());
    let my = args
        .get(3)
        .cloned()
        .unwrap_or("mysql://root@127.0.0.1/test".into());
    println!("{n} messages per run, 10 % published twice; dev profile unless --release");

    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("bench.db").display());
    let store = SqliteStore::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    bench!(store, "bench_ledger".to_owned(), n, "sqlite");

    let schema = unique("bench_pg");
    let options = ConnectOptions {
        tables: Tables::default().with_schema(&schema).unwrap(),
        ..ConnectOptions::default()
    };
    match PgStore::connect_with(&pg, &options).await {
        Ok(store) => {
            store.migrate().await.unwrap();
            bench!(store.clone(), format!("{schema}.ledger"), n, "postgres");
            let drop = format!("DROP SCHEMA {schema} CASCADE");
            let _ = sqlx::raw_sql(AssertSqlSafe(drop))
                .execute(store.pool())
                .await;
        }
        Err(e) => println!("postgres skipped: {e}"),
    }

    let database = unique("bench_my");
    let options = ConnectOptions {
        tables: Tables::default().with_schema(&database).unwrap(),
        ..ConnectOptions::default()
    };
    match MySqlStore::connect_with(&my, &options).await {
        Ok(store) => {
            store.migrate().await.unwrap();
            bench!(store.clone(), format!("{database}.ledger"), n, "mariadb");
            let drop = format!("DROP DATABASE {database}");
            let _ = sqlx::raw_sql(AssertSqlSafe(drop))
                .execute(store.pool())
                .await;
        }
        Err(e) => println!("mariadb skipped: {e}"),
    }
}
