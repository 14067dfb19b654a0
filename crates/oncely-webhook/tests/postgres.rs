//! The receiver's scenarios on PostgreSQL (a fresh schema per test), and a store outage
//! through a fault proxy.

mod common;

use common::suite;
use oncely_testkit::{Fault, FaultProxy};
use std::time::Duration;

macro_rules! on_postgres {
    ($name:ident, $scenario:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            let Some(db) = common::postgres(stringify!($name)).await else {
                return;
            };
            ($scenario)(db).await;
        }
    };
}

on_postgres!(
    postgres_each_provider_applies_once,
    suite::each_provider_applies_once
);
on_postgres!(
    postgres_failures_are_dead_lettered,
    suite::failures_are_dead_lettered
);
on_postgres!(
    postgres_transient_failures_are_503_and_write_nothing,
    suite::transient_failures_are_503_and_write_nothing
);
on_postgres!(
    postgres_rejections_write_nothing,
    suite::rejections_write_nothing
);
on_postgres!(
    postgres_unreadable_body_writes_nothing,
    suite::unreadable_body_writes_nothing
);
on_postgres!(
    postgres_answers_only_after_commit,
    suite::answers_only_after_commit
);
on_postgres!(
    postgres_old_events_are_quarantined,
    suite::old_events_are_quarantined
);
on_postgres!(postgres_concurrent_retries_apply_once, |db| {
    suite::concurrent_retries_apply_once(db, 24, 6)
});

/// The store goes away (every connection cut): the request is held until the deadline and
/// answered 503 with nothing written anywhere; once the store is back, the sender's retry
/// applies the event once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_store_outage_is_503_then_applies_once() {
    let test = "postgres_store_outage_is_503_then_applies_once";
    let pg = oncely_testkit::services::pg_url();
    let rest = pg.split_once("://").map_or(pg.as_str(), |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let target = rest.split(['/', '?']).next().unwrap_or(rest).to_owned();
    let proxy = FaultProxy::start(target.as_str())
        .await
        .expect("proxy starts");
    // A plain TCP proxy, not a pooler: said in the URL.
    let url = pg.replace(&target, &proxy.addr().to_string());
    let url = format!(
        "{url}{}pooler=none",
        if url.contains('?') { '&' } else { '?' }
    );
    let Some(db) = common::postgres_at(test, &url).await else {
        return;
    };
    let verifier = oncely_webhook::Verifier::stripe([common::STRIPE_SECRET]).unwrap();
    let hook = common::endpoint(&db, "stripe", verifier.clone(), common::Ledger::new(&db))
        .deadline(Duration::from_millis(500));
    let base = common::serve(axum::Router::new().route("/", hook.into_route())).await + "/";
    let body = common::event("evt_o", "apply");
    proxy.set(Fault::Drop);
    let headers = verifier.sign("", body.as_bytes(), std::time::SystemTime::now());
    let answer = common::outcome(common::post(&base, &headers, body.clone()).await).await;
    assert_eq!(answer.0, 503, "{answer:?}");
    proxy.set(Fault::Pass);
    let mut answer = (0, String::new());
    for _ in 0..40 {
        answer = common::outcome(common::post(&base, &headers, body.clone()).await).await;
        if answer.0 == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(answer, (200, "applied".into()));
    assert_eq!(db.effects_of("evt_o").await, 1);
    assert_eq!(db.dead_letters().await, 0);
}

/// The server dies mid-stream (its runtime shut down: every task and connection dropped, as a
/// killed process leaves them; PostgreSQL rolls back what was not committed) while concurrent
/// copies of 200 slow events are in flight. A new server on the same database takes the
/// senders' retries of every request that got no 2xx: each event applied exactly once.
#[test]
fn postgres_server_killed_mid_stream_applies_each_once() {
    let test = "postgres_server_killed_mid_stream_applies_each_once";
    let (events, copies) = (200, 3);
    let runtime = |threads| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
            .unwrap()
    };
    let verifier = oncely_webhook::Verifier::stripe([common::STRIPE_SECRET]).unwrap();
    let start = |db: &common::Db| {
        let hook = common::endpoint(db, "stripe", verifier.clone(), common::Ledger::new(db));
        common::serve(axum::Router::new().route("/", hook.into_route()))
    };
    let first = runtime(2);
    let Some(db) = first.block_on(common::postgres(test)) else {
        return;
    };
    let url = first.block_on(start(&db));
    let bodies: Vec<String> = (0..events)
        .map(|e| common::event(&format!("evt_k{e}"), "slow"))
        .collect();

    let senders = runtime(2);
    let mut sent = tokio::task::JoinSet::new();
    for _ in 0..copies {
        for body in &bodies {
            let (url, body) = (url.clone(), body.clone());
            let headers = verifier.sign("", body.as_bytes(), std::time::SystemTime::now());
            sent.spawn_on(
                async move {
                    let mut request = reqwest::Client::new().post(&url).body(body.clone());
                    for (name, value) in &headers {
                        request = request.header(name.as_str(), value.as_bytes());
                    }
                    let ok = matches!(request.send().await, Ok(r) if r.status().is_success());
                    (body, ok)
                },
                senders.handle(),
            );
        }
    }
    // The crash lands once a tenth of the events are committed, with most in flight or queued
    // (at 20 ms each on 16 connections the rest take over 200 ms: a late poll still lands
    // mid-stream).
    first.block_on(async {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while db.effects().await < events as i64 / 10 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    first.shutdown_background();
    let mut unanswered = Vec::new();
    let answered = senders.block_on(async {
        let mut answered = 0;
        while let Some(done) = sent.join_next().await {
            match done.unwrap() {
                (_, true) => answered += 1,
                (body, false) => unanswered.push(body),
            }
        }
        answered
    });

    let second = runtime(2);
    second.block_on(async {
        let db = db.reopen().await;
        let url = start(&db).await;
        for body in &unanswered {
            let headers = verifier.sign("", body.as_bytes(), std::time::SystemTime::now());
            let (status, outcome) =
                common::outcome(common::post(&url, &headers, body.clone()).await).await;
            assert!(
                status == 200 && (outcome == "applied" || outcome == "duplicate"),
                "{status} {outcome}"
            );
        }
        let (effects, distinct) = (db.effects().await, db.events().await);
        assert_eq!(
            (effects - distinct, events as i64 - distinct),
            (0, 0),
            "0 double, 0 lost"
        );
        assert_eq!(db.claims().await, events as i64);
        assert_eq!(db.dead_letters().await, 0);
        eprintln!(
            "{answered} answered before the crash, {} retried after it",
            unanswered.len()
        );
    });
    assert!(
        !unanswered.is_empty(),
        "the crash landed mid-stream ({answered} answered)"
    );
}
