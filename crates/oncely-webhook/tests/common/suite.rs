//! The receiver's scenarios, each written once and run on every database (tests/sqlite.rs,
//! tests/postgres.rs). Every count comes from the database: the ledger (one row per
//! effect, no unique key), the inbox and the dead letters.

use super::*;
use http::HeaderMap;
use oncely_webhook::Rejection;
use std::time::Duration;

/// Signs `body` for event `id` with `verifier`'s first secret, `offset_s` seconds from now.
fn signed(verifier: &Verifier, id: &str, body: &str, offset_s: i64) -> HeaderMap {
    let now = SystemTime::now();
    let at = if offset_s >= 0 {
        now + Duration::from_secs(offset_s as u64)
    } else {
        now - Duration::from_secs(offset_s.unsigned_abs())
    };
    verifier.sign(id, body.as_bytes(), at)
}

fn standard() -> Verifier {
    Verifier::standard_webhooks([STANDARD_SECRET]).unwrap()
}

fn stripe() -> Verifier {
    Verifier::stripe([STRIPE_SECRET]).unwrap()
}

fn github() -> Verifier {
    Verifier::github([GITHUB_SECRET]).unwrap()
}

/// Each provider: the first delivery applies (200 after the commit), its retries (the same
/// request replayed, a fresh timestamp) are duplicates; a replay outside the tolerance is
/// refused; one GitHub delivery id sent to two sources applies once in each.
pub async fn each_provider_applies_once(db: Db) {
    let ledger = Ledger::new(&db);
    let app = axum::Router::new()
        .route(
            "/standard",
            endpoint(&db, "standard", standard(), ledger.clone()).into_route(),
        )
        .route(
            "/stripe",
            endpoint(&db, "stripe", stripe(), ledger.clone()).into_route(),
        )
        .route(
            "/github",
            endpoint(&db, "github", github(), ledger.clone()).into_route(),
        )
        .route(
            "/github-2",
            endpoint(&db, "github-2", github(), ledger.clone()).into_route(),
        );
    let base = serve(app).await;
    let cases = [
        ("standard", standard(), "msg_1"),
        ("stripe", stripe(), "evt_1"),
        ("github", github(), "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
    ];
    for (path, verifier, id) in &cases {
        let url = format!("{base}/{path}");
        let body = event(id, "apply");
        let headers = signed(verifier, id, &body, 0);
        assert_eq!(
            outcome(post(&url, &headers, body.clone()).await).await,
            (200, "applied".into()),
            "{path}"
        );
        assert_eq!(
            outcome(post(&url, &headers, body.clone()).await).await,
            (200, "duplicate".into()),
            "{path} replayed"
        );
        let retry = signed(verifier, id, &body, 2);
        assert_eq!(
            outcome(post(&url, &retry, body.clone()).await).await,
            (200, "duplicate".into()),
            "{path} retried"
        );
        if *path != "github" {
            // GitHub signs no timestamp; the others refuse a replay outside the tolerance.
            let old = signed(verifier, id, &body, -400);
            assert_eq!(
                outcome(post(&url, &old, body.clone()).await).await,
                (401, "stale_timestamp".into()),
                "{path} stale replay"
            );
        }
        assert_eq!(db.effects_of(id).await, 1, "{path}: one effect");
    }
    // The same GitHub delivery id at a second source: its own inbox key, its own effect.
    let (_, _, gh_id) = &cases[2];
    let body = event(gh_id, "apply");
    let headers = signed(&github(), gh_id, &body, 0);
    assert_eq!(
        outcome(post(&format!("{base}/github-2"), &headers, body).await).await,
        (200, "applied".into())
    );
    assert_eq!(db.effects_of(gh_id).await, 2, "one effect per source");
    assert_eq!(db.effects().await, 4);
    assert_eq!(db.events().await, 3);
    assert_eq!(db.claims().await, 4);
    assert_eq!(db.dead_letters().await, 0);
}

/// A conflict (same id, another body), a permanent failure and a panic are dead-lettered
/// with their reason and answered 200 (the sender must stop); none leaves an effect, and a
/// retry of the permanent failure stores no second row.
pub async fn failures_are_dead_lettered(db: Db) {
    let ledger = Ledger::new(&db);
    let url = serve(
        axum::Router::new().route("/", endpoint(&db, "stripe", stripe(), ledger).into_route()),
    )
    .await
        + "/";
    let first = event("evt_c", "apply");
    assert_eq!(
        outcome(post(&url, &signed(&stripe(), "", &first, 0), first).await).await,
        (200, "applied".into())
    );
    let changed = r#"{"id":"evt_c","object":"event","created":1,"act":"apply","amount":999}"#;
    assert_eq!(
        outcome(post(&url, &signed(&stripe(), "", changed, 0), changed).await).await,
        (200, "conflict".into())
    );
    assert_eq!(db.dead_letters_of("evt_c", "conflict").await, 1);
    assert_eq!(
        db.effects_of("evt_c").await,
        1,
        "the conflicting copy is not applied"
    );

    let permanent = event("evt_p", "permanent");
    for _ in 0..2 {
        let response = post(
            &url,
            &signed(&stripe(), "", &permanent, 0),
            permanent.clone(),
        )
        .await;
        assert_eq!(outcome(response).await, (200, "dead_lettered".into()));
    }
    assert_eq!(
        db.dead_letters_of("evt_p", "permanent").await,
        1,
        "one row per (message, hash, reason)"
    );

    let panics = event("evt_x", "panic");
    assert_eq!(
        outcome(post(&url, &signed(&stripe(), "", &panics, 0), panics).await).await,
        (200, "dead_lettered".into())
    );
    assert_eq!(db.dead_letters_of("evt_x", "panic").await, 1);
    assert_eq!(
        db.effects_of("evt_x").await,
        0,
        "the panicking handler's insert rolled back"
    );
    assert_eq!(db.effects_of("evt_p").await, 0);
    assert_eq!(db.claims().await, 1, "only the applied event is claimed");
    assert_eq!(db.dead_letters().await, 3);
}

/// A transient failure (and a dependency the handler reports unavailable) is retried within
/// the request until the deadline, then answered 503 with `Retry-After`: nothing claimed,
/// nothing dead-lettered. Once the failure is gone, the sender's retry applies.
pub async fn transient_failures_are_503_and_write_nothing(db: Db) {
    let ledger = Ledger::new(&db);
    let hook = endpoint(&db, "stripe", stripe(), ledger.clone())
        .deadline(Duration::from_millis(300))
        .retry_after(Duration::from_secs(7));
    let url = serve(axum::Router::new().route("/", hook.into_route())).await + "/";
    for (id, act) in [("evt_t", "transient"), ("evt_u", "unavailable")] {
        let body = event(id, act);
        let response = post(&url, &signed(&stripe(), "", &body, 0), body.clone()).await;
        assert_eq!(response.headers()["retry-after"], "7", "{act}");
        assert_eq!(outcome(response).await, (503, "retry".into()), "{act}");
        assert_eq!(db.rows().await, (0, 0, 0), "{act}: nothing written");
    }
    ledger.flaky.store(false, Ordering::SeqCst);
    for (id, act) in [("evt_t", "transient"), ("evt_u", "unavailable")] {
        let body = event(id, act);
        // The first request after the outage is the store's probe and goes through.
        let response = post(&url, &signed(&stripe(), "", &body, 0), body.clone()).await;
        assert_eq!(
            outcome(response).await,
            (200, "applied".into()),
            "{act} after recovery"
        );
        assert_eq!(db.effects_of(id).await, 1);
    }
    assert_eq!(db.dead_letters().await, 0);
}

/// Every kind of bad request is refused with its status and reason and writes nothing.
pub async fn rejections_write_nothing(db: Db) {
    let ledger = Ledger::new(&db);
    let app = axum::Router::new()
        .route(
            "/standard",
            endpoint(&db, "standard", standard(), ledger.clone())
                .body_limit(1024)
                .into_route(),
        )
        .route(
            "/stripe",
            endpoint(&db, "stripe", stripe(), ledger.clone()).into_route(),
        )
        .route(
            "/github",
            endpoint(&db, "github", github(), ledger.clone()).into_route(),
        );
    let base = serve(app).await;
    let body = event("msg_bad", "apply");
    let good = signed(&standard(), "msg_bad", &body, 0);
    let other_secret =
        Verifier::standard_webhooks(["whsec_b3RoZXItc2VjcmV0LW90aGVyLXNlY3JldA=="]).unwrap();
    let without = |name: &str| {
        let mut h = good.clone();
        h.remove(name);
        h
    };
    let with = |name: &'static str, value: &str| {
        let mut h = good.clone();
        h.insert(name, value.parse().unwrap());
        h
    };
    let long_id = "i".repeat(300);
    let big = format!(r#"{{"id":"msg_big","pad":"{}"}}"#, "x".repeat(2048));
    let stripe_no_id = r#"{"object":"event","act":"apply"}"#;
    let stripe_body = event("evt_bad", "apply");
    let gh_body = event("gh_bad", "apply");
    let cases: Vec<(&str, HeaderMap, String, u16, &str)> = vec![
        (
            "standard",
            without("webhook-signature"),
            body.clone(),
            401,
            "missing_signature",
        ),
        (
            "standard",
            signed(&other_secret, "msg_bad", &body, 0),
            body.clone(),
            401,
            "bad_signature",
        ),
        (
            "standard",
            good.clone(),
            body.replace("apply", "APPLY"),
            401,
            "bad_signature",
        ),
        (
            "standard",
            signed(&standard(), "msg_bad", &body, -400),
            body.clone(),
            401,
            "stale_timestamp",
        ),
        (
            "standard",
            signed(&standard(), "msg_bad", &body, 400),
            body.clone(),
            401,
            "future_timestamp",
        ),
        (
            "standard",
            without("webhook-id"),
            body.clone(),
            400,
            "missing_header",
        ),
        (
            "standard",
            with("webhook-timestamp", "soon"),
            body.clone(),
            400,
            "malformed_header",
        ),
        (
            "standard",
            signed(&standard(), &long_id, &body, 0),
            body.clone(),
            400,
            "bad_id",
        ),
        (
            "standard",
            signed(&standard(), "msg_big", &big, 0),
            big.clone(),
            413,
            "body_too_large",
        ),
        (
            "stripe",
            HeaderMap::new(),
            stripe_body.clone(),
            401,
            "missing_signature",
        ),
        (
            "stripe",
            header("stripe-signature", "v1=00"),
            stripe_body.clone(),
            400,
            "malformed_header",
        ),
        (
            "stripe",
            signed(
                &Verifier::stripe(["whsec_other"]).unwrap(),
                "",
                &stripe_body,
                0,
            ),
            stripe_body.clone(),
            401,
            "bad_signature",
        ),
        (
            "stripe",
            signed(&stripe(), "", stripe_no_id, 0),
            stripe_no_id.to_owned(),
            400,
            "bad_id",
        ),
        (
            "github",
            without_id(signed(&github(), "gh_bad", &gh_body, 0)),
            gh_body.clone(),
            400,
            "missing_header",
        ),
        (
            "github",
            header("x-hub-signature-256", "sha1=00"),
            gh_body.clone(),
            400,
            "malformed_header",
        ),
        (
            "github",
            signed(&Verifier::github(["other"]).unwrap(), "gh_bad", &gh_body, 0),
            gh_body.clone(),
            401,
            "bad_signature",
        ),
    ];
    for (n, (path, headers, body, status, code)) in cases.into_iter().enumerate() {
        let got = outcome(post(&format!("{base}/{path}"), &headers, body).await).await;
        assert_eq!(got, (status, code.to_owned()), "case {n} ({path} {code})");
    }
    assert_eq!(
        db.rows().await,
        (0, 0, 0),
        "a refused request writes nothing"
    );
}

fn header(name: &'static str, value: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(name, value.parse().unwrap());
    h
}

fn without_id(mut h: HeaderMap) -> HeaderMap {
    h.remove("x-github-delivery");
    h
}

/// A body that breaks off is refused as unreadable (through `Endpoint::receive`: an HTTP
/// client that aborts its body never reads the answer).
pub async fn unreadable_body_writes_nothing(db: Db) {
    let hook = endpoint(&db, "stripe", stripe(), Ledger::new(&db));
    let chunks: Vec<Result<bytes::Bytes, std::io::Error>> = vec![
        Ok(bytes::Bytes::from_static(b"{\"id\":")),
        Err(std::io::Error::other("connection reset")),
    ];
    let body = axum::body::Body::from_stream(futures_stream(chunks));
    let request = http::Request::post("/").body(body).unwrap();
    let response = hook.receive(request).await;
    assert_eq!(response.status(), Rejection::Unreadable.status());
    assert_eq!(db.rows().await, (0, 0, 0));
}

fn futures_stream<T: Send + 'static>(
    items: Vec<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::iter(items)
}

/// The 200 is sent only after the commit: while the handler holds its transaction open
/// (its row written), the request has no answer and the database shows no row; right after
/// the answer it shows one. A sender that hangs up mid-request does not cut the delivery
/// short: its retry is a duplicate.
pub async fn answers_only_after_commit(db: Db) {
    let ledger = Ledger::new(&db);
    let url = serve(axum::Router::new().route(
        "/",
        endpoint(&db, "stripe", stripe(), ledger.clone()).into_route(),
    ))
    .await
        + "/";
    let body = event("evt_g", "gate");
    let headers = signed(&stripe(), "", &body, 0);
    let request = tokio::spawn({
        let (url, headers, body) = (url.clone(), headers.clone(), body.clone());
        async move { outcome(post(&url, &headers, body).await).await }
    });
    tokio::time::timeout(Duration::from_secs(10), ledger.entered.notified())
        .await
        .expect("handler entered");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !request.is_finished(),
        "no answer while the transaction is open"
    );
    assert_eq!(
        (db.effects().await, db.claims().await),
        (0, 0),
        "nothing committed yet"
    );
    ledger.release.add_permits(1);
    assert_eq!(request.await.unwrap(), (200, "applied".into()));
    assert_eq!(
        (db.effects().await, db.claims().await),
        (1, 1),
        "committed before the answer"
    );

    // The sender gives up mid-request; the delivery still commits, and the retry is a duplicate.
    let body = event("evt_h", "gate");
    let headers = signed(&stripe(), "", &body, 0);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let mut hung_up = client.post(&url).body(body.clone());
    for (name, value) in &headers {
        hung_up = hung_up.header(name.as_str(), value.as_bytes());
    }
    let sent = tokio::spawn(hung_up.send());
    tokio::time::timeout(Duration::from_secs(10), ledger.entered.notified())
        .await
        .expect("handler entered");
    assert!(sent.await.unwrap().is_err(), "the client timed out");
    ledger.release.add_permits(1);
    let retry = signed(&stripe(), "", &body, 1);
    let mut answer = (0, String::new());
    for _ in 0..50 {
        answer = outcome(post(&url, &retry, body.clone()).await).await;
        if answer.0 == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(answer, (200, "duplicate".into()));
    assert_eq!(db.effects_of("evt_h").await, 1);
}

/// Concurrent retries of the same events (each copy with a fresh timestamp, as senders
/// retry): every event applied exactly once, counted from the ledger; every copy answered
/// 200, exactly one per event as `applied`.
pub async fn concurrent_retries_apply_once(db: Db, events: usize, copies: usize) {
    let url = serve(axum::Router::new().route(
        "/",
        endpoint(&db, "standard", standard(), Ledger::new(&db)).into_route(),
    ))
    .await
        + "/";
    let mut requests = tokio::task::JoinSet::new();
    for copy in 0..copies {
        for e in 0..events {
            let id = format!("msg_{e}");
            let body = format!(r#"{{"id":"{id}","created":0,"act":"apply"}}"#);
            let headers = signed(&standard(), &id, &body, copy as i64 % 3);
            let url = url.clone();
            requests.spawn(async move { outcome(post(&url, &headers, body).await).await });
        }
    }
    let (mut applied, mut duplicate) = (0, 0);
    while let Some(answer) = requests.join_next().await {
        match answer.unwrap() {
            (200, o) if o == "applied" => applied += 1,
            (200, o) if o == "duplicate" => duplicate += 1,
            other => panic!("unexpected answer {other:?}"),
        }
    }
    assert_eq!((applied, duplicate), (events, events * (copies - 1)));
    let (effects, distinct) = (db.effects().await, db.events().await);
    let double = effects - distinct;
    let lost = events as i64 - distinct;
    assert_eq!(
        (double, lost),
        (0, 0),
        "0 double, 0 lost ({effects} effects of {distinct} events)"
    );
    assert_eq!(db.claims().await, events as i64);
    assert_eq!(db.dead_letters().await, 0);
}

/// A Stripe event whose `created` is older than the prune window (a resend of an old event)
/// may have lost its claim to the pruner: it is quarantined as `late` (dead letter, 200),
/// never applied.
pub async fn old_events_are_quarantined(db: Db) {
    let day = Duration::from_secs(86_400);
    let hook = endpoint(&db, "stripe", stripe(), Ledger::new(&db)).prune_window(4 * day);
    let url = serve(axum::Router::new().route("/", hook.into_route())).await + "/";
    let created = now_secs() - 5 * 86_400;
    let old = format!(r#"{{"id":"evt_old","created":{created},"act":"apply"}}"#);
    let answer = post(&url, &signed(&stripe(), "", &old, 0), old.clone()).await;
    let body: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(
        body,
        serde_json::json!({"outcome": "dead_lettered", "reason": "late"})
    );
    let recent = event("evt_new", "apply");
    assert_eq!(
        outcome(post(&url, &signed(&stripe(), "", &recent, 0), recent).await).await,
        (200, "applied".into())
    );
    assert_eq!(db.dead_letters_of("evt_old", "late").await, 1);
    assert_eq!(
        (
            db.effects_of("evt_old").await,
            db.effects_of("evt_new").await
        ),
        (0, 1)
    );
}
