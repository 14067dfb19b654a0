//! The scenarios every database runs: a real server on loopback, reqwest as the client, and
//! orders / outbox / key rows counted by the database.

use super::{Db, post, replayed, serve};
use axum::Router;
use axum::http::StatusCode;
use axum::routing::post as post_route;
use oncely_http::demo::{Orders, router};
use oncely_http::{IdempotencyLayer, IdempotentTx, TxError};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const BOOK: &str = r#"{"item":"book","quantity":2}"#;

fn layer(db: &Db) -> IdempotencyLayer {
    IdempotencyLayer::new(db.store.clone())
        .require_key(true)
        .fingerprint_headers(["content-type"])
        .replay_headers(["content-type", "location"])
}

async fn problem(r: reqwest::Response, status: u16) -> serde_json::Value {
    assert_eq!(r.status().as_u16(), status);
    assert_eq!(
        r.headers()["content-type"],
        "application/problem+json",
        "{status} is a problem document"
    );
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["status"], status);
    assert!(
        body["type"]
            .as_str()
            .unwrap()
            .starts_with("urn:oncely:http:")
    );
    body
}

/// Three tries with one key: one order, one outbox message; the retries get the first
/// response back, marked as replays. Another key makes a second order (the count can move).
pub async fn retries_make_one_order(db: Db) {
    let base = serve(router(Orders::new(db.store.clone()), layer(&db))).await;
    let first = post(&base, Some("order-1"), BOOK).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    assert!(!replayed(&first));
    let location = first.headers()["location"].clone();
    let body = first.text().await.unwrap();
    for _ in 0..2 {
        let again = post(&base, Some("order-1"), BOOK).await;
        assert_eq!(again.status(), StatusCode::CREATED);
        assert!(replayed(&again), "a retry is marked as a replay");
        assert_eq!(again.headers()["location"], location);
        assert_eq!(again.headers()["content-type"], "application/json");
        assert_eq!(again.text().await.unwrap(), body, "the stored body");
    }
    assert_eq!(
        (db.orders().await, db.outbox().await, db.keys().await),
        (1, 1, 1)
    );
    let other = post(&base, Some("order-2"), BOOK).await;
    assert_eq!(other.status(), StatusCode::CREATED);
    assert!(!replayed(&other));
    assert_eq!(
        (db.orders().await, db.outbox().await, db.keys().await),
        (2, 2, 2)
    );
    // The order is readable.
    let id: serde_json::Value = serde_json::from_str(&body).unwrap();
    let shown = reqwest::get(format!("{base}/orders/{}", id["id"].as_str().unwrap()))
        .await
        .unwrap();
    assert_eq!(shown.status(), StatusCode::OK);
    db.drop().await;
}

/// Eight requests with one key at once: exactly one 201 that is not a replay; the others are
/// 409 (with `Retry-After`) or the replay; one order, one outbox message.
pub async fn concurrent_requests_make_one_order(db: Db) {
    let app = Orders::new(db.store.clone()).handler_delay(Duration::from_millis(300));
    let base = serve(router(app, layer(&db))).await;
    let tries = (0..8).map(|_| {
        let base = base.clone();
        tokio::spawn(async move { post(&base, Some("same-key"), BOOK).await })
    });
    let (mut fresh, mut replays, mut conflicts) = (0, 0, 0);
    for t in tries {
        let r = t.await.unwrap();
        match (r.status().as_u16(), replayed(&r)) {
            (201, false) => fresh += 1,
            (201, true) => replays += 1,
            (409, _) => {
                assert!(r.headers().contains_key("retry-after"));
                problem(r, 409).await;
                conflicts += 1;
            }
            (status, _) => panic!("unexpected {status}: {}", r.text().await.unwrap()),
        }
    }
    eprintln!("concurrent: fresh {fresh}, replays {replays}, 409s {conflicts}");
    assert_eq!(fresh, 1, "exactly one request applied");
    assert_eq!(replays + conflicts, 7);
    assert_eq!(
        (db.orders().await, db.outbox().await, db.keys().await),
        (1, 1, 1)
    );
    db.drop().await;
}

/// A request whose first try is still running is answered 409 with `Retry-After` once the
/// in-flight wait passes (PostgreSQL, MySQL/MariaDB; SQLite serializes writers instead, so
/// there the second request waits and gets the replay).
pub async fn in_flight_key_is_409(db: Db) {
    let sqlite = db.store.dialect() == oncely_sql::Dialect::Sqlite;
    let app = Orders::new(db.store.clone()).handler_delay(Duration::from_millis(2500));
    let layer = layer(&db).in_flight_wait(Duration::from_millis(500));
    let base = serve(router(app, layer)).await;
    let first = tokio::spawn({
        let base = base.clone();
        async move { post(&base, Some("slow"), BOOK).await }
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    let second = post(&base, Some("slow"), BOOK).await;
    if sqlite {
        assert_eq!(second.status(), StatusCode::CREATED);
        assert!(
            replayed(&second),
            "SQLite: waited for the writer, then the replay"
        );
    } else {
        assert_eq!(second.headers()["retry-after"], "1");
        problem(second, 409).await;
    }
    let first = first.await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    assert!(!replayed(&first));
    let after = post(&base, Some("slow"), BOOK).await;
    assert!(replayed(&after), "after completion: the replay");
    assert_eq!((db.orders().await, db.outbox().await), (1, 1));
    db.drop().await;
}

/// The key reused with another body (or content type) is 422 and applies nothing; a request
/// without a key (or with an invalid one) is 400.
pub async fn reuse_is_422_and_missing_key_is_400(db: Db) {
    let base = serve(router(Orders::new(db.store.clone()), layer(&db))).await;
    assert_eq!(
        post(&base, Some("k"), BOOK).await.status(),
        StatusCode::CREATED
    );
    let other = post(&base, Some("k"), r#"{"item":"book","quantity":3}"#).await;
    let body = problem(other, 422).await;
    assert!(
        body["detail"].as_str().unwrap().contains("different"),
        "{body}"
    );
    let text = reqwest::Client::new()
        .post(format!("{base}/orders"))
        .header("content-type", "text/plain")
        .header("idempotency-key", "k")
        .body(BOOK)
        .send()
        .await
        .unwrap();
    problem(text, 422).await;
    problem(post(&base, None, BOOK).await, 400).await;
    problem(post(&base, Some(&"x".repeat(256)), BOOK).await, 400).await;
    assert_eq!(
        (db.orders().await, db.outbox().await, db.keys().await),
        (1, 1, 1)
    );
    db.drop().await;
}

/// A handler answering 5xx after its writes: rolled back, no key kept; the retry runs fresh.
pub async fn server_error_keeps_no_key(db: Db) {
    let fail = Arc::new(AtomicBool::new(true));
    let table = oncely_http::demo::orders_table(db.store.tables());
    let handler = {
        let fail = fail.clone();
        move |tx: IdempotentTx| async move {
            let mut tx = tx.lock().await?;
            let insert = format!(
                "INSERT INTO {table} (id, item, quantity, created_at) VALUES ($1, 'x', 1, 0)"
            );
            tx.execute(&insert, &[uuid_ish().into()]).await?;
            if fail.swap(false, Ordering::SeqCst) {
                return Ok::<_, TxError>((StatusCode::INTERNAL_SERVER_ERROR, "boom"));
            }
            Ok((StatusCode::CREATED, "made"))
        }
    };
    let app = Router::new().route("/orders", post_route(handler).layer(layer(&db)));
    let base = serve(app).await;
    let failed = post(&base, Some("flaky"), BOOK).await;
    assert_eq!(failed.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        (db.orders().await, db.keys().await),
        (0, 0),
        "rolled back, no key"
    );
    let retry = post(&base, Some("flaky"), BOOK).await;
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert!(!replayed(&retry), "the retry ran");
    assert_eq!((db.orders().await, db.keys().await), (1, 1));
    db.drop().await;
}

fn uuid_ish() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// After the TTL a key is free again (a new order) and `prune_expired` deletes its row;
/// keys within their TTL are kept.
pub async fn expired_keys_are_free_and_pruned(db: Db) {
    let short = layer(&db).ttl(Duration::from_millis(200));
    let base = serve(router(Orders::new(db.store.clone()), short)).await;
    assert_eq!(
        post(&base, Some("old"), BOOK).await.status(),
        StatusCode::CREATED
    );
    assert!(
        replayed(&post(&base, Some("old"), BOOK).await),
        "within the TTL"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again = post(&base, Some("old"), BOOK).await;
    assert!(!replayed(&again), "expired: the key is free");
    assert_eq!(db.orders().await, 2);
    let kept = serve(router(Orders::new(db.store.clone()), layer(&db))).await;
    assert_eq!(
        post(&kept, Some("new"), BOOK).await.status(),
        StatusCode::CREATED
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (pool, tables) = (db.store.pool(), db.store.tables().clone());
    assert_eq!(
        oncely_http::prune_expired(&pool, &tables, 10)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        oncely_http::prune_expired(&pool, &tables, 10)
            .await
            .unwrap(),
        0
    );
    assert_eq!(db.keys().await, 1, "the key within its TTL stays");
    assert!(replayed(&post(&kept, Some("new"), BOOK).await));
    db.drop().await;
}
