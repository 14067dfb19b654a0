//! PostgreSQL behind PgBouncer in transaction pooling mode (the test-owned PgBouncer of
//! `scripts/pgbouncer.sh`, `ONCELY_TEST_PGBOUNCER_URL`): the check that finds the pooler,
//! statements that never cross between clients, and the store conformance suite, all with
//! the plain URL a user has (no `?pooler=` option).
//!
//! The pooler is a fact of each store's [`Engine`](oncely_sql::Engine), not of the process:
//! `each_pool_keeps_its_own_statement_caching` opens a store through PgBouncer, a direct one
//! and a SQLite one in one process and checks that only the first prepares unnamed.

mod common;

use common::harness::SqlHarness;
use common::pg_url;
use oncely_sql::sqlx::{self, AssertSqlSafe, Connection, Postgres};
use oncely_sql::{
    AnyPool, ConnectOptions, PgStore, SqlDatabase, SqlStore, SqlTx, SqliteStore, Value,
};
use oncely_testkit::{ExerciseOptions, services};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The test-owned PgBouncer (transaction pooling) in front of the machine's PostgreSQL.
fn bouncer_url(database: &str) -> String {
    let base = services::pgbouncer_url();
    match base.rsplit_once('/') {
        Some((server, _)) => format!("{server}/{database}"),
        None => base,
    }
}

/// Whether the test-owned PgBouncer and the PostgreSQL behind it answer (see
/// `services::available`: a failure under CI, a loud skip elsewhere).
async fn bouncer_and_server_up(test: &str) -> bool {
    services::available(
        test,
        "PgBouncer (scripts/pgbouncer.sh start)",
        &bouncer_url("test"),
    )
    .await
        && services::available(test, "PostgreSQL", &pg_url()).await
}

const CLIENTS: u64 = 24;
const ROUNDS: u64 = 100;

/// Each client runs its own statement (`SELECT $1 * 1000 + k`, one parameter like every other
/// client's) `ROUNDS` times outside any transaction of its own, through `run`. Returns
/// (right answers, wrong answers, errors): a wrong answer is another client's SQL run with
/// this client's value.
async fn crossing_load<F, Fut>(run: F) -> (u64, u64, u64)
where
    F: Fn(u64, i64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = std::result::Result<i64, String>> + Send,
{
    let (right, wrong, failed) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut tasks = Vec::new();
    for k in 0..CLIENTS {
        let (run, right, wrong, failed) =
            (run.clone(), right.clone(), wrong.clone(), failed.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS as i64 {
                match run(k, round).await {
                    Ok(got) if got == round * 1000 + k as i64 => {
                        right.fetch_add(1, Ordering::Relaxed)
                    }
                    Ok(_) => wrong.fetch_add(1, Ordering::Relaxed),
                    Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (
        right.load(Ordering::Relaxed),
        wrong.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn through_pgbouncer_in_transaction_mode() {
    let test = "through_pgbouncer_in_transaction_mode";
    if !bouncer_and_server_up(test).await {
        return;
    }

    // 1. The check at connect: PgBouncer in transaction mode is found, a direct server is not.
    assert!(
        oncely_sql::pooler::detect_transaction_pooler(&bouncer_url("test"))
            .await
            .unwrap()
    );
    assert!(
        !oncely_sql::pooler::detect_transaction_pooler(&pg_url())
            .await
            .unwrap()
    );

    // 2. The hazard, with sqlx's defaults (named, cached statements): through the pooler
    //    statements fail ("prepared statement sqlx_s_1 already exists", "does not exist") or
    //    run another client's SQL. If this ever stops failing, the test below proves nothing.
    let raw = sqlx::postgres::PgPoolOptions::new()
        .max_connections(CLIENTS as u32)
        .connect_with(
            bouncer_url("test")
                .parse::<sqlx::postgres::PgConnectOptions>()
                .unwrap()
                .extra_float_digits(None),
        )
        .await
        .unwrap();
    let (right, wrong, failed) = crossing_load(move |k, round| {
        let raw = raw.clone();
        async move {
            sqlx::query_scalar::<_, i64>(AssertSqlSafe(format!("SELECT $1::bigint * 1000 + {k}")))
                .bind(round)
                .fetch_one(&raw)
                .await
                .map_err(|e| e.to_string())
        }
    })
    .await;
    eprintln!("sqlx defaults through PgBouncer: {right} right, {wrong} wrong, {failed} failed");
    assert!(
        wrong + failed > 0,
        "named statements through a transaction pooler went unnoticed"
    );

    // 3. A store opened with the plain URL finds the pooler and turns the mode on.
    let store = PgStore::connect(&bouncer_url("test")).await.unwrap();
    let engine = store.engine();
    assert!(engine.behind_transaction_pooler() && !engine.caches_statements());
    assert!(
        store.portable(),
        "behind a transaction pooler oncely uses lease locks and polling"
    );

    // 4. oncely's statements through the same pooler: the erased layer on a bare pooled
    //    connection, and the typed wrappers in an Autocommit. Not one wrong, not one failed.
    let pool = store.pool().clone();
    let (right, wrong, failed) = crossing_load(move |k, round| {
        let pool = pool.clone();
        async move {
            let sql = format!("SELECT $1::bigint * 1000 + {k}");
            if k % 2 == 0 {
                let mut conn = pool.acquire().await.map_err(|e| e.to_string())?;
                let rows = Postgres::fetch(
                    &mut *conn,
                    engine,
                    &sql,
                    &[Value::I64(round)],
                    &[oncely_sql::Column::I64],
                )
                .await
                .map_err(|e| e.to_string())?;
                Ok(rows[0][0].i64())
            } else {
                let mut conn = oncely_sql::pooler::Autocommit::begin(&pool, engine)
                    .await
                    .map_err(|e| e.to_string())?;
                let got = engine
                    .query_scalar::<_, i64>(AssertSqlSafe(sql))
                    .bind(round)
                    .fetch_one(&mut *conn)
                    .await
                    .map_err(|e| e.to_string())?;
                conn.commit().await.map_err(|e| e.to_string())?;
                Ok(got)
            }
        }
    })
    .await;
    eprintln!("oncely through PgBouncer: {right} right, {wrong} wrong, {failed} failed");
    assert_eq!((right, wrong, failed), (CLIENTS * ROUNDS, 0, 0));

    // 5. The store conformance suite (claims, duplicates, conflicts, crashes after every
    //    step, concurrent copies, bad input, dead letters), effects counted from the ledger.
    //    Each case a database of its own, so the suite's static `add_effect` finds its ledger
    //    without a session `search_path`, which a transaction pooler cannot keep.
    SqlHarness::<PgStore>::through_pgbouncer()
        .exercise(
            test,
            ExerciseOptions {
                crash_seeds: 4,
                crash_messages: 60,
            },
        )
        .await;
}

/// The statements a query through `store`'s own pool left cached on its one connection.
async fn cached_after_a_query<DB: SqlDatabase + sqlx::database::HasStatementCache>(
    store: &SqlStore<DB>,
) -> usize
where
    AnyPool: From<sqlx::Pool<DB>>,
{
    let mut pool = store.any_pool();
    let n = pool.fetch_i64("SELECT $1 + 1", &[41.into()]).await.unwrap();
    assert_eq!(n, Some(42));
    let conn = store.pool().acquire().await.unwrap();
    sqlx::Connection::cached_statements_size(&*conn)
}

/// A store through PgBouncer, a direct PostgreSQL store and a SQLite store in one process:
/// each keeps its own statement caching. The pooled one is opened first, so a process-wide
/// pooler flag (what oncely had before the facts moved into each store's `Engine`) would
/// turn caching off for the two that follow; this test failed then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_pool_keeps_its_own_statement_caching() {
    let test = "each_pool_keeps_its_own_statement_caching";
    if !bouncer_and_server_up(test).await {
        return;
    }
    // One connection each, so the connection checked is the one the query ran on.
    let one = ConnectOptions {
        max_connections: 1,
        ..ConnectOptions::default()
    };
    let bounced = PgStore::connect_with(&bouncer_url("test"), &one)
        .await
        .unwrap();
    let direct = PgStore::connect_with(&pg_url(), &one).await.unwrap();
    let sqlite = SqliteStore::connect_with("sqlite::memory:", &one)
        .await
        .unwrap();

    assert!(bounced.engine().behind_transaction_pooler() && bounced.portable());
    assert!(!direct.engine().behind_transaction_pooler() && !direct.portable());
    assert!(direct.engine().caches_statements() && sqlite.engine().caches_statements());
    assert_eq!(bounced.any_pool().engine(), bounced.engine());

    assert_eq!(
        cached_after_a_query(&bounced).await,
        0,
        "behind PgBouncer: unnamed statements only"
    );
    assert!(
        cached_after_a_query(&direct).await >= 1,
        "the direct PostgreSQL pool caches its statements"
    );
    assert!(
        cached_after_a_query(&sqlite).await >= 1,
        "the SQLite pool caches its statements"
    );
    // And the pooled one still does not, after the others ran.
    assert_eq!(cached_after_a_query(&bounced).await, 0);
}

/// The check at connect finds PgBouncer while other clients keep it busy (they take the
/// server connection one question released before the next question comes), and takes a
/// plain TCP proxy in front of PostgreSQL for a pooler (the safe side) unless the URL says
/// `pooler=none`. Before the port check, the first case missed PgBouncer under the HTTP
/// layer's parallel tests and their statements collided (`sqlx_s_1 already exists`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_check_finds_a_busy_pooler_and_takes_a_proxy_for_one() {
    let test = "the_check_finds_a_busy_pooler_and_takes_a_proxy_for_one";
    if !bouncer_and_server_up(test).await {
        return;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (0..8)
        .map(|_| {
            let stop = stop.clone();
            tokio::spawn(async move {
                let options = bouncer_url("test")
                    .parse::<sqlx::postgres::PgConnectOptions>()
                    .unwrap()
                    .extra_float_digits(None);
                let mut conn = sqlx::PgConnection::connect_with(&options).await.unwrap();
                let mut ran = 0_u64;
                while !stop.load(Ordering::Relaxed) {
                    sqlx::raw_sql("SELECT pg_backend_pid()")
                        .execute(&mut conn)
                        .await
                        .unwrap();
                    ran += 1;
                }
                ran
            })
        })
        .collect();
    let mut found = 0;
    for _ in 0..10 {
        found += u32::from(
            oncely_sql::pooler::detect_transaction_pooler(&bouncer_url("test"))
                .await
                .unwrap(),
        );
    }
    stop.store(true, Ordering::Relaxed);
    let mut statements = 0;
    for task in busy {
        statements += task.await.unwrap();
    }
    assert!(statements > 0, "the other clients ran");
    assert_eq!(
        found, 10,
        "PgBouncer found by every check beside {statements} statements"
    );

    let server = pg_url()
        .parse::<sqlx::postgres::PgConnectOptions>()
        .unwrap();
    let proxy = oncely_testkit::FaultProxy::start((server.get_host(), server.get_port()))
        .await
        .unwrap();
    let via_proxy = format!("postgres://postgres@{}/test", proxy.addr());
    assert!(
        oncely_sql::pooler::detect_transaction_pooler(&via_proxy)
            .await
            .unwrap(),
        "a proxy is taken for a transaction pooler"
    );
    let said = PgStore::connect(&format!("{via_proxy}?pooler=none"))
        .await
        .unwrap();
    assert!(
        said.engine().caches_statements(),
        "?pooler=none is believed"
    );
    let direct = PgStore::connect(&pg_url()).await.unwrap();
    assert!(
        direct.engine().caches_statements(),
        "a direct server is no pooler"
    );
}
