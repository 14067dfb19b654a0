//! The console over HTTP without a browser: CSRF (403 without the token), roles (401 without a
//! token, 403 for the read-only role), security headers, preview before action, the second
//! confirmation of a forced replay, and the operator sequence of docs/operations.md (replay,
//! prune, replay) through the JSON API — prune included, with its preview and its audit
//! entry — ending with one ledger row per id, on the three databases; a job cancelled.

mod common;

use common::{Dialect, Letter};
use serde_json::{Value, json};
use std::time::Duration;

async fn csrf(http: &reqwest::Client, base: &str, token: &str) -> String {
    let v: Value = http
        .get(format!("{base}/api/csrf"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["csrf"].as_str().unwrap().to_owned()
}

async fn wait(http: &reqwest::Client, base: &str, token: &str, job: &Value) -> Value {
    for _ in 0..300 {
        let v: Value = http
            .get(format!("{base}/api/jobs/{job}"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if v["finished"] == true {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("job {job} did not finish");
}

#[tokio::test]
async fn posts_need_the_csrf_token_and_the_operator_role() {
    let Some(f) = common::fixture("posts_need_csrf", Dialect::Sqlite).await else {
        return;
    };
    let id = f.letter(&Letter::new("billing", "m-1", "permanent")).await;
    let base = common::serve(&f, |c| c.operator_token("act").viewer_token("look")).await;
    let http = reqwest::Client::new();
    let body = json!({ "ids": [id], "confirm": true });

    let r = http
        .get(format!("{base}/api/dead-letters"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "no token");
    let text = r.text().await.unwrap();
    assert!(!text.contains("act") || !text.contains("look"), "{text}");

    let r = http
        .get(format!("{base}/dead-letters"))
        .bearer_auth("look")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let h = r.headers();
    assert!(
        h["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("default-src 'none'")
    );
    assert_eq!(h["x-frame-options"], "DENY");
    let page = r.text().await.unwrap();
    assert!(
        !page.contains("look") || !page.contains("act\""),
        "no credentials on the page"
    );

    let post = |token: &'static str, csrf: Option<String>| {
        let mut r = http
            .post(format!("{base}/api/dead-letters/purge"))
            .bearer_auth(token)
            .json(&body);
        if let Some(c) = csrf {
            r = r.header("x-csrf-token", c);
        }
        r.send()
    };
    assert_eq!(
        post("act", None).await.unwrap().status(),
        403,
        "no CSRF token"
    );
    assert_eq!(
        post("act", Some("0".repeat(64))).await.unwrap().status(),
        403,
        "a wrong CSRF token"
    );
    let token = csrf(&http, &base, "act").await;
    assert_eq!(
        post("look", Some(token.clone())).await.unwrap().status(),
        403,
        "the read-only role"
    );
    // A form POST without its field is refused too.
    let r = http
        .post(format!("{base}/actions/purge"))
        .bearer_auth("act")
        .form(&[("id", id.to_string()), ("confirm", "1".into())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(
        f.dead_letter_rows().await,
        1,
        "nothing purged by a refused request"
    );

    // The operator with the token: preview first, then the job.
    let r = http
        .post(format!("{base}/api/dead-letters/purge"))
        .bearer_auth("act")
        .header("x-csrf-token", &token)
        .json(&json!({ "filter": { "consumer": "billing" } }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["matched"], 1);
    assert_eq!(f.dead_letter_rows().await, 1, "a preview does nothing");
    let r = post("act", Some(token)).await.unwrap();
    assert_eq!(r.status(), 202);
    let job = r.json::<Value>().await.unwrap()["job"].clone();
    let done = wait(&http, &base, "act", &job).await;
    assert_eq!(done["outcomes"]["purged"], 1);
    assert_eq!(f.dead_letter_rows().await, 0);
}

#[tokio::test]
async fn non_loopback_needs_a_token() {
    let Some(f) = common::fixture("non_loopback", Dialect::Sqlite).await else {
        return;
    };
    let console = oncely_console::Console::new(f.store.clone());
    let e = oncely_console::serve(console, "0.0.0.0:0".parse().unwrap())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("not a loopback address"), "{e}");
}

async fn sequence(test: &str, db: Dialect) {
    let Some(f) = common::fixture(test, db).await else {
        return;
    };
    let ids: Vec<String> = (0..5).map(|i| format!("order-{i}")).collect();
    for id in &ids {
        f.letter(&Letter::new("billing", id, "permanent")).await;
    }
    let base = common::serve(&f, |c| c).await;
    let http = reqwest::Client::new();
    let token = csrf(&http, &base, "-").await;
    let replay = |force: bool, confirm_force: bool| {
        http.post(format!("{base}/api/dead-letters/replay"))
            .header("x-csrf-token", &token)
            .json(&json!({ "filter": { "consumer": "billing" }, "confirm": true, "force": force, "confirm_force": confirm_force }))
            .send()
    };
    // 1. Replay: each message applied once.
    let job = replay(false, false)
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap()["job"]
        .clone();
    let done = wait(&http, &base, "-", &job).await;
    assert_eq!(done["outcomes"]["applied"], 5, "{done}");
    assert_eq!(f.ledger_rows().await, 5);
    // The same messages dead-letter again (a redelivery that failed downstream)…
    for id in &ids {
        f.letter(&Letter::new("billing", id, "attempts_exhausted"))
            .await;
    }
    // 2. …an operator prunes everything, through the console: the preview first…
    let prune = |confirm: bool| {
        http.post(format!("{base}/api/prune"))
            .header("x-csrf-token", &token)
            .json(&json!({ "older_than": "0s", "confirm": confirm }))
            .send()
    };
    let inbox = f.count("inbox", "1 = 1", &[]).await;
    assert_eq!(inbox, 5);
    let preview = prune(false).await.unwrap().json::<Value>().await.unwrap();
    assert_eq!(preview["expired"], inbox, "{preview}");
    assert_eq!(
        f.count("inbox", "1 = 1", &[]).await,
        5,
        "a preview prunes nothing"
    );
    let r = prune(true).await.unwrap();
    assert_eq!(r.status(), 202);
    let job = r.json::<Value>().await.unwrap()["job"].clone();
    let done = wait(&http, &base, "-", &job).await;
    assert_eq!(done["action"], "prune");
    assert_eq!(done["outcomes"]["deleted"], 5, "{done}");
    assert_eq!(
        f.count("inbox", "1 = 1", &[]).await,
        0,
        "the inbox is empty"
    );
    // …audited with who ran it, next to oncely-ops' own `prune` cutoff.
    let audit: Value = http
        .get(format!("{base}/api/audit"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let kinds: Vec<&str> = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"console_prune") && kinds.contains(&"prune"),
        "{kinds:?}"
    );
    assert_eq!(
        f.count("ops_events", "kind = 'console_prune'", &[]).await,
        1
    );
    // 3. …and replays: every row refused as possibly pruned, none applied twice.
    let job = replay(false, false)
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap()["job"]
        .clone();
    let done = wait(&http, &base, "-", &job).await;
    assert_eq!(done["outcomes"]["refused_old"], 5, "{done}");
    // A forced replay needs its second confirmation…
    let r = replay(true, false).await.unwrap();
    assert_eq!(r.status(), 409);
    assert_eq!(
        r.json::<Value>().await.unwrap()["needs_force_confirmation"],
        true
    );
    assert_eq!(f.ledger_rows().await, ids.len() as i64, "ledger rows = ids");
    assert_eq!(
        f.dead_letter_rows().await,
        5,
        "the refused rows stay for a decision"
    );
}

#[tokio::test]
async fn replay_prune_replay_sqlite() {
    sequence("replay_prune_replay_sqlite", Dialect::Sqlite).await
}

#[tokio::test]
async fn replay_prune_replay_postgres() {
    sequence("replay_prune_replay_postgres", Dialect::Postgres).await
}

#[tokio::test]
async fn replay_prune_replay_mariadb() {
    sequence("replay_prune_replay_mariadb", Dialect::MySql).await
}

/// A handler that takes its time, so a job is still running when it is cancelled.
#[derive(Clone)]
struct Slow(common::Ledger);

impl oncely_core::Handler<oncely_sql::AnyTx> for Slow {
    async fn handle(
        &self,
        tx: &mut oncely_sql::AnyTx,
        msg: &oncely_core::Envelope,
    ) -> oncely_core::Result<oncely_core::Handled> {
        tokio::time::sleep(Duration::from_millis(100)).await;
        self.0.handle(tx, msg).await
    }
}

#[tokio::test]
async fn a_job_can_be_cancelled() {
    let Some(f) = common::fixture("cancel", Dialect::Sqlite).await else {
        return;
    };
    for i in 0..40 {
        f.letter(&Letter::new("billing", &format!("c-{i}"), "permanent"))
            .await;
    }
    let ledger = common::Ledger(f.table("ledger"));
    let base = common::serve(&f, |c| c.default_handler(Slow(ledger))).await;
    let http = reqwest::Client::new();
    let token = csrf(&http, &base, "-").await;
    let r = http
        .post(format!("{base}/api/dead-letters/replay"))
        .header("x-csrf-token", &token)
        .json(&json!({ "filter": {}, "confirm": true }))
        .send()
        .await
        .unwrap();
    let job = r.json::<Value>().await.unwrap()["job"].clone();
    tokio::time::sleep(Duration::from_millis(350)).await;
    let cancel = |token: Option<&str>| {
        let mut r = http.post(format!("{base}/api/jobs/{job}/cancel"));
        if let Some(t) = token {
            r = r.header("x-csrf-token", t);
        }
        r.send()
    };
    assert_eq!(cancel(None).await.unwrap().status(), 403, "no CSRF token");
    assert_eq!(cancel(Some(&token)).await.unwrap().status(), 202);
    let done = wait(&http, &base, "-", &job).await;
    assert_eq!(done["cancelled"], true, "{done}");
    assert_eq!(done["survives_restart"], false);
    let applied = done["outcomes"]["applied"].as_i64().unwrap();
    let not_run = done["outcomes"]["not_run"].as_i64().unwrap();
    assert!(applied >= 1 && not_run >= 1, "{done}");
    assert_eq!(applied + not_run, 40, "{done}");
    // Counted apart from the job: one ledger row per applied row, the rest still dead letters.
    assert_eq!(f.ledger_rows().await, applied);
    assert_eq!(f.dead_letter_rows().await, 40 - applied);
    assert_eq!(
        cancel(Some(&token)).await.unwrap().status(),
        409,
        "ended already"
    );
    // The audit journal has the job, cancelled.
    let summary = f.count("ops_events", "kind = 'console_replay'", &[]).await;
    assert_eq!(summary, 1);
}
