//! The providers' own signing code against the receiver, and the receiver's signer against
//! the providers' verifiers: the official Python `standardwebhooks` package (1.1.0) and
//! `stripe` (16.x, `WebhookSignature`) through tests/signers.py, the spec's Rust crate
//! `standardwebhooks`, and GitHub's documented test vector.
//!
//! Python: `ONCELY_WEBHOOK_PYTHON`, else the repository's `.venv/bin/python3` (scripts/setup.sh makes it), else
//! `python3`, whichever imports both packages. None does: the Python tests fail under `CI` /
//! `ONCELY_REQUIRE_SERVICES` and are a loud SKIPPED line otherwise. Install with
//! `python3 -m pip install standardwebhooks==1.1.0 stripe==16.1.0`.

mod common;

use common::{GITHUB_SECRET, STANDARD_SECRET, STRIPE_SECRET, outcome, post, serve};
use http::HeaderMap;
use oncely_webhook::Verifier;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const NEEDS: &str = "Python with standardwebhooks 1.1.0 and stripe 16.x (python3 -m pip install standardwebhooks==1.1.0 stripe==16.1.0)";

fn script() -> PathBuf {
    oncely_testkit::services::workspace_root().join("crates/oncely-webhook/tests/signers.py")
}

/// The first Python that imports both libraries; `None` after reporting it missing.
fn python(test: &str) -> Option<String> {
    let venv = oncely_testkit::services::workspace_root().join(".venv/bin/python3");
    let candidates = std::env::var("ONCELY_WEBHOOK_PYTHON")
        .ok()
        .into_iter()
        .chain([venv.display().to_string(), "python3".to_owned()]);
    let mut tried = Vec::new();
    for python in candidates {
        let ok = Command::new(&python)
            .arg(script())
            .arg("check")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(python);
        }
        tried.push(python);
    }
    oncely_testkit::services::unavailable(test, NEEDS, &format!("tried {}", tried.join(", ")));
    None
}

/// Runs `signers.py args…` with `body` on stdin: `Ok(stdout)` or `Err(stderr)`.
fn run(python: &str, args: &[&str], body: &[u8]) -> Result<String, String> {
    let mut child = Command::new(python)
        .arg(script())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python starts");
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

fn headers_of(json: &str) -> HeaderMap {
    let map: std::collections::BTreeMap<String, String> = serde_json::from_str(json).unwrap();
    let mut headers = HeaderMap::new();
    for (name, value) in map {
        headers.insert(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    headers
}

fn now() -> String {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string()
}

/// The official `standardwebhooks` package signs; the receiver (holding an old and the
/// current secret) applies the event once, and refuses the same signature over another body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_standardwebhooks_signs_the_receiver_accepts() {
    let Some(python) = python("python_standardwebhooks_signs_the_receiver_accepts") else {
        return;
    };
    let db = common::sqlite().await;
    let rotated =
        Verifier::standard_webhooks(["whsec_b2xkLXNlY3JldC1vbGQtc2VjcmV0", STANDARD_SECRET])
            .unwrap();
    let hook = common::endpoint(&db, "standard", rotated, common::Ledger::new(&db));
    let url = serve(axum::Router::new().route("/", hook.into_route())).await + "/";
    let body = br#"{"type":"invoice.paid","data":{"amount":1200}}"#;
    let signed = run(
        &python,
        &["standard-sign", STANDARD_SECRET, "msg_py_1", &now()],
        body,
    )
    .unwrap();
    let headers = headers_of(&signed);
    assert_eq!(
        outcome(post(&url, &headers, body.to_vec()).await).await,
        (200, "applied".into())
    );
    assert_eq!(
        outcome(post(&url, &headers, body.to_vec()).await).await,
        (200, "duplicate".into())
    );
    let forged = br#"{"type":"invoice.paid","data":{"amount":9999}}"#;
    assert_eq!(
        outcome(post(&url, &headers, forged.to_vec()).await).await,
        (401, "bad_signature".into())
    );
    assert_eq!(db.effects_of("msg_py_1").await, 1);
}

/// Stripe's `WebhookSignature.generate_signature_header` signs; the receiver applies the
/// event (id from the body) once, and refuses it under another secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_stripe_signs_the_receiver_accepts() {
    let Some(python) = python("python_stripe_signs_the_receiver_accepts") else {
        return;
    };
    let db = common::sqlite().await;
    let hook = common::endpoint(
        &db,
        "stripe",
        Verifier::stripe([STRIPE_SECRET]).unwrap(),
        common::Ledger::new(&db),
    );
    let url = serve(axum::Router::new().route("/", hook.into_route())).await + "/";
    let body = common::event("evt_py_1", "apply");
    let signed = run(
        &python,
        &["stripe-sign", STRIPE_SECRET, &now()],
        body.as_bytes(),
    )
    .unwrap();
    let headers = headers_of(&signed);
    assert_eq!(
        outcome(post(&url, &headers, body.clone()).await).await,
        (200, "applied".into())
    );
    assert_eq!(
        outcome(post(&url, &headers, body.clone()).await).await,
        (200, "duplicate".into())
    );
    let other = run(
        &python,
        &["stripe-sign", "whsec_other", &now()],
        body.as_bytes(),
    )
    .unwrap();
    assert_eq!(
        outcome(post(&url, &headers_of(&other), body).await).await,
        (401, "bad_signature".into())
    );
    assert_eq!(db.effects_of("evt_py_1").await, 1);
}

/// The receiver's signer is accepted by the providers' verifiers (and a changed body is not).
#[tokio::test]
async fn our_signer_is_accepted_by_the_python_libraries() {
    let Some(python) = python("our_signer_is_accepted_by_the_python_libraries") else {
        return;
    };
    let body = br#"{"id":"evt_rs_1","object":"event"}"#;
    let at = SystemTime::now();

    let standard = Verifier::standard_webhooks([STANDARD_SECRET]).unwrap();
    let headers = standard.sign("msg_rs_1", body, at);
    let json = serde_json::to_string(&serde_json::json!({
        "webhook-id": headers["webhook-id"].to_str().unwrap(),
        "webhook-timestamp": headers["webhook-timestamp"].to_str().unwrap(),
        "webhook-signature": headers["webhook-signature"].to_str().unwrap(),
    }))
    .unwrap();
    assert_eq!(
        run(&python, &["standard-verify", STANDARD_SECRET, &json], body),
        Ok("verified".into())
    );
    let refused = run(&python, &["standard-verify", STANDARD_SECRET, &json], b"{}");
    assert!(refused.unwrap_err().contains("WebhookVerificationError"));

    let stripe = Verifier::stripe([STRIPE_SECRET]).unwrap();
    let header = stripe.sign("", body, at)["stripe-signature"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        run(&python, &["stripe-verify", STRIPE_SECRET, &header], body),
        Ok("verified".into())
    );
    let refused = run(&python, &["stripe-verify", "whsec_other", &header], body);
    assert!(refused.unwrap_err().contains("SignatureVerificationError"));
}

/// The spec's Rust crate `standardwebhooks` and the receiver agree both ways.
#[test]
fn the_standardwebhooks_crate_agrees() {
    let theirs = standardwebhooks::Webhook::new(STANDARD_SECRET).unwrap();
    let ours = Verifier::standard_webhooks([STANDARD_SECRET]).unwrap();
    let body = br#"{"type":"user.created"}"#;
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let signature = theirs.sign("msg_crate_1", secs as i64, body).unwrap();
    let mut headers = HeaderMap::new();
    headers.insert("webhook-id", "msg_crate_1".parse().unwrap());
    headers.insert("webhook-timestamp", secs.to_string().parse().unwrap());
    headers.insert("webhook-signature", signature.parse().unwrap());
    assert_eq!(
        ours.verify(&headers, body).unwrap().id().as_str(),
        "msg_crate_1"
    );
    assert!(ours.verify(&headers, b"{}").is_err());

    let signed = ours.sign("msg_crate_2", body, UNIX_EPOCH + Duration::from_secs(secs));
    theirs.verify(body, &signed).unwrap();
    assert!(theirs.verify(b"{}", &signed).is_err());
}

/// GitHub's documented test vector (secret "It's a Secret to Everybody", payload
/// "Hello, World!") through the receiver over HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_documented_vector_is_applied_once() {
    let db = common::sqlite().await;
    let hook = common::endpoint(
        &db,
        "github",
        Verifier::github([GITHUB_SECRET]).unwrap(),
        common::Ledger::new(&db),
    );
    let url = serve(axum::Router::new().route("/", hook.into_route())).await + "/";
    let mut headers = HeaderMap::new();
    headers.insert(
        "x-hub-signature-256",
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
            .parse()
            .unwrap(),
    );
    headers.insert(
        "x-github-delivery",
        "72d3162e-cc78-11e3-81ab-4c9367dc0958".parse().unwrap(),
    );
    headers.insert("x-github-event", "ping".parse().unwrap());
    assert_eq!(
        outcome(post(&url, &headers, "Hello, World!").await).await,
        (200, "applied".into())
    );
    assert_eq!(
        outcome(post(&url, &headers, "Hello, World!").await).await,
        (200, "duplicate".into())
    );
    assert_eq!(
        outcome(post(&url, &headers, "Hello, World?").await).await,
        (401, "bad_signature".into())
    );
    assert_eq!(
        db.effects_of("72d3162e-cc78-11e3-81ab-4c9367dc0958").await,
        1
    );
}
