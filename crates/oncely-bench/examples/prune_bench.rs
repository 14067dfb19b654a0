//! Measures pruning 1,000,000 expired ids on PostgreSQL, for the batched path and the
//! partitioned path: WAL written (`pg_current_wal_lsn()` difference) and the throughput of a
//! consumer running on the same database during the prune, against its throughput without.
//!
//! ```text
//! ONCELY_BENCH_PG=postgres://postgres@127.0.0.1:5432/test \
//!   cargo run --release -p oncely-bench --example prune_bench -- [ROWS] [BASELINE_SECS]
//! ```
//! Uses (and drops) the schemas `oncely_bench_batched` and `oncely_bench_partitioned`.

use oncely_core::{
    Acker, Consumer, ConsumerName, Delivery, Envelope, Error, Handled, Handler, RawEnvelope,
    Result, Source,
};
use oncely_ops::prune::{PruneOptions, prune};
use oncely_ops::{Ops, partition};
use oncely_sql::clock::now_ms;
use oncely_sql::sqlx::{self, AssertSqlSafe, PgPool, Postgres, Transaction};
use oncely_sql::{ConnectOptions, PgStore, Tables};
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const DAY: i64 = 86_400_000;

/// Endless fresh messages, acked into the void.
struct Endless(u64);
struct NoAck;
impl Acker for NoAck {
    fn ack(self: Box<Self>) -> Pin<Box<dyn Future<Output = Result<()>> + Send>> {
        Box::pin(async { Ok(()) })
    }
    fn nack(self: Box<Self>) -> Pin<Box<dyn Future<Output = Result<()>> + Send>> {
        Box::pin(async { Ok(()) })
    }
}
impl Source for Endless {
    async fn next(&mut self) -> Result<Option<Delivery>> {
        self.0 += 1;
        let raw = RawEnvelope::new(format!("live-{}-{}", now_ms(), self.0), b"{}".to_vec());
        Ok(Some(Delivery::new(raw, 1, Box::new(NoAck))))
    }
}

#[derive(Clone)]
struct Effect(String);
impl Handler<Transaction<'static, Postgres>> for Effect {
    async fn handle(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        m: &Envelope,
    ) -> Result<Handled> {
        sqlx::query(AssertSqlSafe(self.0.clone()))
            .bind(m.id().as_str())
            .execute(&mut **tx)
            .await
            .map_err(|e| Error::transient(format!("effect: {e}")))?;
        Ok(Handled::Applied)
    }
}

async fn exec(pool: &PgPool, sql: String) {
    sqlx::raw_sql(AssertSqlSafe(sql.clone()))
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn lsn(pool: &PgPool) -> String {
    sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
        .fetch_one(pool)
        .await
        .expect("lsn")
}

async fn wal_bytes(pool: &PgPool, from: &str, to: &str) -> i64 {
    sqlx::query_scalar("SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint")
        .bind(to)
        .bind(from)
        .fetch_one(pool)
        .await
        .expect("lsn diff")
}

/// Inserts `rows` expired ids spread over the days 10..8 ago (triggers off for the bulk load).
async fn fill(store: &PgStore, rows: i64) {
    let inbox = store.tables().inbox();
    let start = now_ms() - 10 * DAY;
    let sql = format!(
        "SET session_replication_role = replica;
         INSERT INTO {inbox} (consumer, message_id, payload_hash, received_at)
         SELECT 'bench', 'old-' || g, md5(g::text) || md5(g::text), {start} + (g::bigint * {span} / {rows})
         FROM generate_series(1, {rows}) g;
         SET session_replication_role = origin;
         ANALYZE {inbox};",
        span = 2 * DAY
    );
    let mut conn = store.pool().acquire().await.expect("conn");
    sqlx::raw_sql(AssertSqlSafe(sql))
        .execute(&mut *conn)
        .await
        .expect("fill");
}

struct Run {
    path: &'static str,
    rows: i64,
    deleted: u64,
    prune_secs: f64,
    wal_bytes: i64,
    baseline_rate: f64,
    control_rate: f64,
    during_rate: f64,
    loaded_prune_secs: f64,
    window_secs: f64,
}

async fn bench(url: &str, partitioned: bool, rows: i64, baseline: Duration) -> Run {
    let path = if partitioned {
        "partitioned"
    } else {
        "batched"
    };
    let schema = format!("oncely_bench_{path}");
    let admin = PgPool::connect(url).await.expect("connect");
    exec(&admin, format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).await;
    let tables = Tables::default().with_schema(&schema).expect("schema");
    let options = ConnectOptions {
        tables,
        max_connections: 12,
        ..ConnectOptions::default()
    };
    let store = PgStore::connect_with(url, &options).await.expect("store");
    let ops = Ops::from(&store);
    if partitioned {
        partition::install(&ops, 3).await.expect("install");
        partition::ensure(&ops, now_ms() - 11 * DAY, 3)
            .await
            .expect("ensure");
    }
    store.migrate().await.expect("migrate");
    exec(
        &admin,
        format!("CREATE TABLE {schema}.effects (message_id TEXT PRIMARY KEY)"),
    )
    .await;
    let effect = Effect(format!(
        "INSERT INTO {schema}.effects (message_id) VALUES ($1)"
    ));
    let prune_options = PruneOptions {
        batch_size: 5_000,
        pause: Duration::from_millis(10),
        ..PruneOptions::default()
    };

    // A: prune alone, WAL measured.
    fill(&store, rows).await;
    exec(&admin, "CHECKPOINT".into()).await;
    let before = lsn(&admin).await;
    let started = Instant::now();
    let report = prune(&ops, &prune_options, &mut |_| {})
        .await
        .expect("prune");
    let prune_secs = started.elapsed().as_secs_f64();
    let after = lsn(&admin).await;
    let wal = wal_bytes(&admin, &before, &after).await;
    let deleted = if partitioned {
        rows as u64
    } else {
        report.deleted
    };
    assert!(report.ran);
    if partitioned {
        assert!(
            !report.partitions_dropped.is_empty(),
            "nothing dropped: {report:?}"
        );
    } else {
        assert_eq!(report.deleted, rows as u64);
    }
    let left: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM {schema}.oncely_inbox WHERE received_at < {}",
        report.cutoff_ms
    )))
    .fetch_one(&admin)
    .await
    .expect("count");
    assert_eq!(left, 0, "expired rows left after the prune");

    // B: consumer alone. C: consumer while pruning a fresh million (recreating the old
    // days' partitions first, or the refill would land in the default partition).
    if partitioned {
        partition::ensure(&ops, now_ms() - 11 * DAY, 3)
            .await
            .expect("ensure");
    }
    fill(&store, rows).await;
    let consumer =
        Consumer::new(ConsumerName::new("bench").unwrap(), store.clone(), effect).concurrency(4);
    let stats = consumer.stats();
    let stop = CancellationToken::new();
    let running = {
        let (c, stop) = (consumer.clone(), stop.clone());
        tokio::spawn(async move { c.run(Endless(0), stop).await })
    };
    tokio::time::sleep(Duration::from_secs(2)).await; // warm-up
    // Two windows without pruning (the second shows the drift of an unpruned run), then
    // a window of the same length that starts with the prune.
    let mut rates = Vec::new();
    for _ in 0..2 {
        let a = stats.snapshot().applied;
        let t = Instant::now();
        tokio::time::sleep(baseline).await;
        rates.push((stats.snapshot().applied - a) as f64 / t.elapsed().as_secs_f64());
    }
    let a1 = stats.snapshot().applied;
    let t1 = Instant::now();
    let during = prune(&ops, &prune_options, &mut |_| {})
        .await
        .expect("prune under load");
    assert!(during.ran);
    if partitioned {
        assert!(
            !during.partitions_dropped.is_empty(),
            "nothing dropped under load: {during:?}"
        );
        assert_eq!(during.deleted, 0, "{during:?}");
    }
    let loaded_prune_secs = t1.elapsed().as_secs_f64();
    tokio::time::sleep(baseline.saturating_sub(t1.elapsed())).await;
    let window_secs = t1.elapsed().as_secs_f64();
    let during_rate = (stats.snapshot().applied - a1) as f64 / window_secs;
    stop.cancel();
    running.await.expect("join").expect("consumer");
    exec(&admin, format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).await;
    Run {
        path,
        rows,
        deleted,
        prune_secs,
        wal_bytes: wal,
        baseline_rate: rates[0],
        control_rate: rates[1],
        during_rate,
        loaded_prune_secs,
        window_secs,
    }
}

#[tokio::main]
async fn main() {
    let url = std::env::var("ONCELY_BENCH_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let mut args = std::env::args().skip(1);
    let rows: i64 = args
        .next()
        .map(|a| a.parse().expect("ROWS"))
        .unwrap_or(1_000_000);
    let baseline = Duration::from_secs(args.next().map(|a| a.parse().expect("SECS")).unwrap_or(15));
    println!(
        "| path | ids pruned | prune time alone | WAL written | WAL per id | consumer msg/s, window 1 (no prune) | window 2 (no prune) | window 3 (starts with the prune) | prune time under load | window 3 vs 2 |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let only = args.next();
    for partitioned in [false, true] {
        if only.as_deref().is_some_and(|o| {
            o != if partitioned {
                "partitioned"
            } else {
                "batched"
            }
        }) {
            continue;
        }
        let r = bench(&url, partitioned, rows, baseline).await;
        println!(
            "| {} | {} | {:.2} s | {:.1} MiB | {:.0} B | {:.0} | {:.0} | {:.0} ({:.1} s) | {:.2} s | {:+.1}% |",
            r.path,
            r.deleted,
            r.prune_secs,
            r.wal_bytes as f64 / 1_048_576.0,
            r.wal_bytes as f64 / r.rows as f64,
            r.baseline_rate,
            r.control_rate,
            r.during_rate,
            r.window_secs,
            r.loaded_prune_secs,
            (r.during_rate / r.control_rate - 1.0) * 100.0
        );
    }
}
