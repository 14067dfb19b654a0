//! A server that cannot be reached is reported with its cause at once, not as a pool time-out
//! 30 s later (issue 45). Port 1 on loopback refuses connections: no server is needed.

use oncely_sql::{MySqlStore, PgStore};
use std::error::Error as _;
use std::time::{Duration, Instant};

/// The error and its sources, joined as a user sees them.
fn chain(e: &oncely_core::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        next = cause.source();
    }
    text
}

fn check(result: oncely_core::Result<()>, started: Instant) {
    let error = result.expect_err("nothing listens on port 1");
    let text = chain(&error);
    assert!(
        text.to_lowercase().contains("refused"),
        "the cause is named: {text}"
    );
    assert!(!text.contains("pool timed out"), "{text}");
    // Far below the pool's 30 s acquire timeout that used to hide the cause.
    assert!(started.elapsed() < Duration::from_secs(15), "{text}");
}

#[tokio::test]
async fn postgres_refused_is_reported_with_its_cause() {
    let started = Instant::now();
    let result = PgStore::connect("postgres://postgres@127.0.0.1:1/test?pooler=none").await;
    check(result.map(drop), started);
}

#[tokio::test]
async fn mysql_refused_is_reported_with_its_cause() {
    let started = Instant::now();
    let result = MySqlStore::connect("mysql://root@127.0.0.1:1/test").await;
    check(result.map(drop), started);
}
