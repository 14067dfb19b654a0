//! The README's quick start runs unchanged on SQLite and PostgreSQL: one `impl Handler<AnyTx>`,
//! a source that delivers duplicates and loses acks, and the balance read back from the
//! database (not from the consumer's counters) equal to one effect per message.

#[path = "../examples/quickstart.rs"]
#[allow(dead_code)]
mod quickstart;

use oncely::RawEnvelope;
use oncely::sql::{AnyPool, SqlTx, Tables};
use oncely_testkit::services;
use oncely_testkit::{FaultySource, SourceFaults};

const MESSAGES: usize = 200;

fn source() -> FaultySource {
    let source = FaultySource::new(SourceFaults {
        seed: 7,
        duplicate_rate: 0.3,
        reorder_window: 8,
        lost_ack_rate: 0.1,
    });
    for i in 0..MESSAGES {
        source.publish(RawEnvelope::new(format!("m-{i}"), format!("{}", i % 7 + 1)));
    }
    source.publish(RawEnvelope::new("bad", "not a number"));
    source.close();
    source
}

/// Counts the rows of oncely's table `name` (default naming, as the quick start uses).
fn count(name: &str) -> String {
    format!("SELECT COUNT(*) FROM {}", Tables::default().table(name))
}

fn expected_credits() -> i64 {
    (0..MESSAGES).map(|i| (i % 7 + 1) as i64).sum()
}

/// Runs the quick start against `url` and checks the database: the balance, one inbox row
/// per message and one dead letter.
async fn quick_start_on(url: &str) {
    quickstart::create_accounts(url)
        .await
        .expect("accounts table");
    let source = source();
    let stats = quickstart::consume(url, source.clone())
        .await
        .expect("consume");
    assert!(
        stats.duplicates > 0,
        "the source delivered duplicates: {stats:?}"
    );
    assert_eq!(source.unacked(), 0, "every delivery acked");

    let mut pool = AnyPool::connect(url).await.expect("pool");
    let mut read = [0; 3];
    let queries = [
        "SELECT credits FROM accounts WHERE id = 'a'".to_owned(),
        count("inbox"),
        count("dead_letters"),
    ];
    for (n, sql) in read.iter_mut().zip(queries) {
        *n = pool.fetch_i64(&sql, &[]).await.unwrap().expect("a row");
    }
    let [credits, inbox, dead] = read;
    pool.close().await;
    assert_eq!(
        credits,
        expected_credits(),
        "one effect per message ({stats:?})"
    );
    assert_eq!(inbox, MESSAGES as i64, "one claim per message");
    assert_eq!(dead, 1, "the undecodable amount is dead-lettered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_start_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("app.db").display());
    quick_start_on(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_start_on_postgres() {
    let base = services::pg_url();
    let admin = match AnyPool::connect(&base).await {
        Ok(pool) => pool,
        Err(e) => {
            services::unavailable("quick_start_on_postgres", "PostgreSQL", &e);
            return;
        }
    };
    // A schema of its own, first on the search path: the quick start's unqualified tables
    // (accounts, inbox, dead_letters) land there.
    let schema = format!("t_quickstart_{}", std::process::id());
    let run = |sql: String| {
        let mut admin = admin.clone();
        async move {
            admin.script(&sql).await.unwrap();
        }
    };
    run(format!(
        "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
    ))
    .await;
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options=-c%20search_path%3D{schema}");
    quick_start_on(&url).await;
    run(format!("DROP SCHEMA {schema} CASCADE")).await;
    admin.close().await;
}

/// The README's quick start shows this example's code, line for line.
#[test]
fn readme_shows_the_example() {
    // The package's directory at run time (tests run there), not a compiled-in path.
    let root = std::env::current_dir().unwrap();
    let readme = std::fs::read_to_string(root.join("../../README.md")).unwrap();
    let example = std::fs::read_to_string(root.join("examples/quickstart.rs")).unwrap();
    let section = readme
        .split("## Quick start")
        .nth(1)
        .expect("a quick start section");
    let code = section
        .split("```rust,ignore")
        .nth(1)
        .and_then(|c| c.split("```").next())
        .expect("a rust block");
    let lines: Vec<&str> = example.lines().map(str::trim).collect();
    let mut shown = 0;
    for line in code.lines().map(str::trim).filter(|l| !l.is_empty()) {
        assert!(
            lines.contains(&line),
            "README line not in the example: {line}"
        );
        shown += 1;
    }
    assert!(
        shown > 10,
        "the quick start block is too short ({shown} lines)"
    );
}
