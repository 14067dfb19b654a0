//! The scenarios every database runs: a real server on loopback, reqwest as the client, and
//! orders / outbox / key rows counted by the database.

use super::app::{Orders, router};
use super::{Db, post, post_as, replayed, serve};
use axum::Router;
use axum::http::StatusCode;
use axum::routing::post as post_route;
use oncely_core::Store;
use oncely_http::{IdempotencyKey, IdempotencyLayer, IdempotentTx, TxError};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const BOOK: &str = r#"{"item":"book","quantity":2}"#;

fn layer(db: &Db) -> IdempotencyLayer {
    super::app::layer(db.store.clone())
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
    let show =
        || reqwest::Client::new().get(format!("{base}/orders/{}", id["id"].as_str().unwrap()));
    let shown = show()
        .header("authorization", "Bearer alice")
        .send()
        .await
        .unwrap();
    assert_eq!(shown.status(), StatusCode::OK);
    problem(show().send().await.unwrap(), 401).await;
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
        .header("authorization", "Bearer alice")
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
}

/// A handler answering 5xx after its writes: rolled back, no key kept; the retry runs fresh.
pub async fn server_error_keeps_no_key(db: Db) {
    let fail = Arc::new(AtomicBool::new(true));
    let table = super::app::orders_table(db.store.tables());
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
/// keys within their TTL are kept. The TTL leaves the retry 2 s (CI saw 200 ms pass between
/// two requests on a loaded machine).
pub async fn expired_keys_are_free_and_pruned(db: Db) {
    let short = layer(&db).ttl(Duration::from_secs(2));
    let base = serve(router(Orders::new(db.store.clone()), short)).await;
    assert_eq!(
        post(&base, Some("old"), BOOK).await.status(),
        StatusCode::CREATED
    );
    assert!(
        replayed(&post(&base, Some("old"), BOOK).await),
        "within the TTL"
    );
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let again = post(&base, Some("old"), BOOK).await;
    assert!(!replayed(&again), "expired: the key is free");
    assert_eq!(db.orders().await, 2);
    let kept = serve(router(Orders::new(db.store.clone()), layer(&db))).await;
    assert_eq!(
        post(&kept, Some("new"), BOOK).await.status(),
        StatusCode::CREATED
    );
    tokio::time::sleep(Duration::from_millis(2100)).await;
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
}

/// The Authorization values of the scope tests' clients.
fn bearer(client: &str) -> String {
    format!("Bearer {client}")
}

/// The stored scope of a client, as the layer computes it (hashed `Authorization`).
fn scope_of(client: &str) -> String {
    let (parts, ()) = http::Request::post("/orders")
        .header("authorization", bearer(client))
        .body(())
        .unwrap()
        .into_parts();
    oncely_http::Scope::header("authorization")
        .resolve(&parts)
        .unwrap()
        .to_string()
}

/// Rows of a query, read through the store's `AnyTx` (one spelling for the three databases).
async fn rows(db: &Db, sql: &str, cols: &[oncely_sql::Column]) -> Vec<Vec<oncely_sql::Value>> {
    let mut tx = db.store.begin().await.unwrap();
    let rows = tx.fetch(sql, &[], cols).await.unwrap();
    db.store.rollback(tx).await.unwrap();
    rows
}

/// (scope, key rows) of the key table, counted by the database.
async fn key_rows_per_scope(db: &Db) -> std::collections::BTreeMap<String, i64> {
    use oncely_sql::Column;
    let d = db.store.dialect();
    let sql = format!(
        "SELECT {}, COUNT(*) FROM {} GROUP BY scope",
        d.text("scope"),
        db.store.tables().table("http_keys")
    );
    rows(db, &sql, &[Column::Text, Column::I64])
        .await
        .into_iter()
        .map(|r| (r[0].text(), r[1].i64()))
        .collect()
}

/// The issue's two clients: alice and bob send the same key and body and get two orders;
/// each retry replays the client's own order; without `Authorization` the demo answers 401.
pub async fn two_clients_one_key_two_orders(db: Db) {
    let base = serve(router(Orders::new(db.store.clone()), layer(&db))).await;
    let mut first = std::collections::BTreeMap::new();
    for client in ["alice", "bob"] {
        let r = post_as(&base, Some(&bearer(client)), Some("order-1"), BOOK).await;
        assert_eq!(r.status(), StatusCode::CREATED);
        assert!(!replayed(&r), "{client}: a fresh key in its own scope");
        first.insert(client, r.text().await.unwrap());
    }
    assert_ne!(first["alice"], first["bob"], "two orders");
    for _ in 0..2 {
        for client in ["alice", "bob"] {
            let r = post_as(&base, Some(&bearer(client)), Some("order-1"), BOOK).await;
            assert_eq!(r.status(), StatusCode::CREATED);
            assert!(replayed(&r));
            assert_eq!(
                r.text().await.unwrap(),
                first[client],
                "{client}'s own order"
            );
        }
    }
    // A different body under bob's key is 422 for bob only; carol's same key is fresh.
    let other = r#"{"item":"pen","quantity":1}"#;
    problem(
        post_as(&base, Some(&bearer("bob")), Some("order-1"), other).await,
        422,
    )
    .await;
    let carol = post_as(&base, Some(&bearer("carol")), Some("order-1"), other).await;
    assert_eq!(carol.status(), StatusCode::CREATED);
    assert!(!replayed(&carol));
    let anonymous = post_as(&base, None, Some("order-1"), BOOK).await;
    assert_eq!(
        anonymous.headers()["www-authenticate"],
        "Bearer realm=\"oncely-http-demo\""
    );
    problem(anonymous, 401).await;
    assert_eq!(
        (db.orders().await, db.outbox().await, db.keys().await),
        (3, 3, 3)
    );
    let scopes = key_rows_per_scope(&db).await;
    let expected: std::collections::BTreeMap<_, _> = ["alice", "bob", "carol"]
        .into_iter()
        .map(|c| (scope_of(c), 1))
        .collect();
    assert_eq!(
        scopes, expected,
        "one key row per client, under its hashed scope"
    );
    assert!(
        scopes
            .keys()
            .all(|s| !s.contains("alice") && !s.contains("Bearer")),
        "the Authorization value is not stored in clear"
    );
}

/// Many clients, shared keys, concurrent requests: 8 clients each send the same 6 keys with
/// the same body 3 times, all 144 requests at once (a 409 is retried, as a client would). The
/// handler records the requesting client from its own `Authorization` header. Every answer a
/// client gets names that client; from the database: 6 orders per client, 48 in all, 6 key
/// rows per scope, and every stored response belongs to the scope it is stored under.
pub async fn no_response_crosses_scopes(db: Db) {
    use oncely_sql::Column;
    const CLIENTS: usize = 8;
    const KEYS: usize = 6;
    const ROUNDS: usize = 3;
    let table = db.store.tables().table("scoped_orders");
    let mut tx = db.store.begin().await.unwrap();
    tx.script(&format!(
        "CREATE TABLE IF NOT EXISTS {table} (id VARCHAR(64) NOT NULL PRIMARY KEY, client VARCHAR(64) NOT NULL, idem_key VARCHAR(255) NOT NULL)"
    ))
    .await
    .unwrap();
    db.store.commit(tx).await.unwrap();
    let handler = {
        let table = table.clone();
        move |tx: IdempotentTx,
              headers: axum::http::HeaderMap,
              IdempotencyKey(key): IdempotencyKey| async move {
            let client = headers["authorization"]
                .to_str()
                .unwrap()
                .trim_start_matches("Bearer ")
                .to_owned();
            let id = uuid::Uuid::new_v4().to_string();
            let mut tx = tx.lock().await?;
            let insert = format!("INSERT INTO {table} (id, client, idem_key) VALUES ($1, $2, $3)");
            tx.execute(
                &insert,
                &[
                    id.as_str().into(),
                    client.as_str().into(),
                    key.as_str().into(),
                ],
            )
            .await?;
            tokio::time::sleep(Duration::from_millis(20)).await;
            let body = serde_json::json!({ "id": id, "client": client, "key": key.as_str() });
            Ok::<_, TxError>((StatusCode::CREATED, axum::Json(body)))
        }
    };
    let layer = layer(&db).in_flight_wait(Duration::from_secs(2));
    let base = serve(Router::new().route("/orders", post_route(handler).layer(layer))).await;
    let clients: Vec<String> = (0..CLIENTS).map(|c| format!("client-{c}")).collect();
    let mut tasks = Vec::new();
    for _ in 0..ROUNDS {
        for client in &clients {
            for k in 0..KEYS {
                let (base, client, key) = (base.clone(), client.clone(), format!("shared-{k}"));
                tasks.push(tokio::spawn(async move {
                    for _ in 0..400 {
                        let r = post_as(&base, Some(&bearer(&client)), Some(&key), BOOK).await;
                        if r.status() == StatusCode::CONFLICT {
                            tokio::time::sleep(Duration::from_millis(25)).await;
                            continue;
                        }
                        assert_eq!(r.status(), StatusCode::CREATED, "{client} {key}");
                        let again = replayed(&r);
                        let body: serde_json::Value = r.json().await.unwrap();
                        return (client, key, again, body);
                    }
                    panic!("{client} {key}: still 409 after 400 tries");
                }));
            }
        }
    }
    let mut answers: std::collections::BTreeMap<(String, String), Vec<(bool, String)>> =
        Default::default();
    for t in tasks {
        let (client, key, again, body) = t.await.unwrap();
        assert_eq!(body["client"], client.as_str(), "{client} got {body}");
        assert_eq!(body["key"], key.as_str());
        answers
            .entry((client, key))
            .or_default()
            .push((again, body["id"].as_str().unwrap().to_owned()));
    }
    assert_eq!(answers.len(), CLIENTS * KEYS);
    let orders: std::collections::BTreeMap<String, (String, String)> = rows(
        &db,
        &format!("SELECT id, client, idem_key FROM {table}"),
        &[Column::Text, Column::Text, Column::Text],
    )
    .await
    .into_iter()
    .map(|r| (r[0].text(), (r[1].text(), r[2].text())))
    .collect();
    for ((client, key), got) in &answers {
        assert_eq!(got.len(), ROUNDS);
        assert_eq!(
            got.iter().filter(|(again, _)| !again).count(),
            1,
            "{client} {key}: one fresh"
        );
        let id = &got[0].1;
        assert!(
            got.iter().all(|(_, i)| i == id),
            "{client} {key}: one order {got:?}"
        );
        assert_eq!(
            orders[id],
            (client.clone(), key.clone()),
            "the order is the client's"
        );
    }
    let mut per_client: std::collections::BTreeMap<&str, usize> = Default::default();
    for (client, _) in orders.values() {
        *per_client.entry(client.as_str()).or_default() += 1;
    }
    assert_eq!(orders.len(), CLIENTS * KEYS, "orders in the database");
    assert!(per_client.values().all(|&n| n == KEYS), "{per_client:?}");
    assert_eq!(per_client.len(), CLIENTS);
    let scopes = key_rows_per_scope(&db).await;
    let expected: std::collections::BTreeMap<_, _> =
        clients.iter().map(|c| (scope_of(c), KEYS as i64)).collect();
    assert_eq!(scopes, expected, "key rows per scope");
    // Every stored response names the client whose scope it is stored under.
    let d = db.store.dialect();
    let stored = rows(
        &db,
        &format!(
            "SELECT {}, body FROM {}",
            d.text("scope"),
            db.store.tables().table("http_keys")
        ),
        &[Column::Text, Column::Bytes],
    )
    .await;
    assert_eq!(stored.len(), CLIENTS * KEYS);
    for row in &stored {
        let body: serde_json::Value = serde_json::from_slice(&row[1].bytes()).unwrap();
        let client = body["client"].as_str().unwrap();
        assert_eq!(
            row[0].text(),
            scope_of(client),
            "stored under its own scope"
        );
    }
    eprintln!(
        "scopes: {} requests, {} orders ({} per client), {} key rows in {} scopes",
        CLIENTS * KEYS * ROUNDS,
        orders.len(),
        KEYS,
        stored.len(),
        scopes.len()
    );
}

/// Answers produced before the handler wrote anything leave the key free: a malformed body
/// (400 from the JSON extractor), a missing field (422 from the extractor) and the demo's
/// validation (400 before it takes the transaction) store nothing, and the corrected request
/// with the same key is served fresh.
pub async fn rejections_leave_the_key_free(db: Db) {
    let base = serve(router(Orders::new(db.store.clone()), layer(&db))).await;
    let cases = [
        ("malformed", r#"{"item":"#, StatusCode::BAD_REQUEST),
        (
            "missing-field",
            r#"{"item":"book"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "invalid",
            r#"{"item":"book","quantity":0}"#,
            StatusCode::BAD_REQUEST,
        ),
    ];
    for (n, (key, bad, status)) in cases.into_iter().enumerate() {
        let rejected = post(&base, Some(key), bad).await;
        assert_eq!(rejected.status(), status, "{key}");
        assert!(!replayed(&rejected));
        assert_eq!(
            db.keys().await,
            n as i64,
            "{key}: the rejection kept no key"
        );
        let fixed = post(&base, Some(key), BOOK).await;
        assert_eq!(
            fixed.status(),
            StatusCode::CREATED,
            "{key}: the corrected request"
        );
        assert!(!replayed(&fixed), "{key}: served fresh");
        assert!(replayed(&post(&base, Some(key), BOOK).await));
        // The rejected body again is now a different request for a used key.
        problem(post(&base, Some(key), bad).await, 422).await;
    }
    assert_eq!(
        (db.orders().await, db.outbox().await, db.keys().await),
        (3, 3, 3)
    );
}

/// What a handler answering after it used its transaction gets stored: a 4xx is stored and
/// replayed (the same answer for the same request); a 4xx marked `Rejected` rolls back and
/// keeps no key; `OmitBody` stores the status and headers only, and the replay says so.
pub async fn which_answers_are_stored(db: Db) {
    use axum::Extension;
    use axum::response::IntoResponse;
    use oncely_http::{OmitBody, Rejected};
    let table = super::app::orders_table(db.store.tables());
    let handler = move |tx: IdempotentTx, headers: axum::http::HeaderMap| async move {
        let mut tx = tx.lock().await?;
        let insert =
            format!("INSERT INTO {table} (id, item, quantity, created_at) VALUES ($1, 'x', 1, 0)");
        tx.execute(&insert, &[uuid_ish().into()]).await?;
        let answer = headers["x-answer"].to_str().unwrap().to_owned();
        Ok::<_, TxError>(match answer.as_str() {
            "sold-out" => (StatusCode::CONFLICT, "sold out").into_response(),
            "rejected" => (
                StatusCode::UNPROCESSABLE_ENTITY,
                Extension(Rejected),
                "bad account",
            )
                .into_response(),
            _ => (
                StatusCode::CREATED,
                [("location", "/tokens/1"), ("content-type", "text/plain")],
                Extension(OmitBody),
                "secret-token",
            )
                .into_response(),
        })
    };
    let app = Router::new().route("/orders", post_route(handler).layer(layer(&db)));
    let base = serve(app).await;
    let send = |key: &'static str, answer: &'static str| {
        let base = base.clone();
        async move {
            reqwest::Client::new()
                .post(format!("{base}/orders"))
                .header("authorization", "Bearer alice")
                .header("idempotency-key", key)
                .header("x-answer", answer)
                .body("{}")
                .send()
                .await
                .unwrap()
        }
    };
    let sold = send("sold", "sold-out").await;
    assert_eq!(sold.status(), StatusCode::CONFLICT);
    assert!(!replayed(&sold));
    let again = send("sold", "sold-out").await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    assert!(
        replayed(&again),
        "a 4xx after the handler used its transaction is stored"
    );
    assert_eq!(again.text().await.unwrap(), "sold out");
    assert_eq!((db.orders().await, db.keys().await), (1, 1));
    for _ in 0..2 {
        let r = send("reject", "rejected").await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
        assert!(!replayed(&r), "a marked rejection is never replayed");
    }
    assert_eq!(
        (db.orders().await, db.keys().await),
        (1, 1),
        "rolled back, no key"
    );
    let token = send("token", "omit").await;
    assert_eq!(token.status(), StatusCode::CREATED);
    assert_eq!(token.text().await.unwrap(), "secret-token");
    let replay = send("token", "omit").await;
    assert_eq!(replay.status(), StatusCode::CREATED);
    assert!(replayed(&replay));
    assert_eq!(replay.headers()["idempotent-body"], "omitted");
    assert_eq!(replay.headers()["location"], "/tokens/1");
    assert!(!replay.headers().contains_key("content-type"));
    assert_eq!(replay.text().await.unwrap(), "", "the body was not stored");
    assert_eq!((db.orders().await, db.keys().await), (2, 2));
    let bodies = rows(
        &db,
        &format!(
            "SELECT body FROM {} WHERE status = 201",
            db.store.tables().table("http_keys")
        ),
        &[oncely_sql::Column::Bytes],
    )
    .await;
    assert_eq!(bodies.len(), 1);
    assert!(
        bodies[0][0].bytes().is_empty(),
        "nothing of the token at rest"
    );
}

/// Migration `http` 2 on a key table of version 1 holding rows: the rows get the global scope
/// `''` (a `Scope::global()` layer still replays them, a scoped layer sees a fresh key), the
/// primary key becomes (scope, key) (the same key twice, in two scopes), and `prune_expired`
/// still deletes exactly the expired rows. Run on a second set of tables (`legacy_` prefix)
/// in the test's database.
pub async fn migration_keeps_old_keys_global(db: Db) {
    use oncely_sql::{AnyStore, Column, ConnectOptions, Dialect, MigrationSet, Value};
    let tables = db.store.tables().clone().with_prefix("legacy_").unwrap();
    let options = ConnectOptions {
        tables: tables.clone(),
        ..Default::default()
    };
    let old = AnyStore::connect_with(&db.url, &options).await.unwrap();
    let m = &oncely_http::MIGRATIONS;
    let v1 = MigrationSet::new("http")
        .sqlite(&m.migrations(Dialect::Sqlite)[..1])
        .postgres(&m.migrations(Dialect::Postgres)[..1])
        .mysql(&m.migrations(Dialect::MySql)[..1]);
    let applied = old.migrate_with(&[&v1]).await.unwrap();
    assert_eq!(applied, 1, "version 1 only");
    let mut json = http::HeaderMap::new();
    json.insert("content-type", "application/json".parse().unwrap());
    let print = oncely_http::fingerprint(
        &http::Method::POST,
        &"/orders".parse().unwrap(),
        &json,
        &[http::HeaderName::from_static("content-type")],
        BOOK.as_bytes(),
    );
    let keys = tables.table("http_keys");
    let insert = format!(
        "INSERT INTO {keys} (idem_key, fingerprint, owner, status, headers, body, created_at, expires_at) \
         VALUES ($1, $2, 'old-owner', 201, '[[\"content-type\",\"application/json\"]]', $3, 0, $4)"
    );
    let mut tx = old.begin().await.unwrap();
    for (key, expires) in [("legacy-1", i64::MAX / 2), ("legacy-old", 1)] {
        let args = [
            key.into(),
            print.as_str().into(),
            Value::Bytes(br#"{"legacy":true}"#.to_vec()),
            expires.into(),
        ];
        tx.execute(&insert, &args).await.unwrap();
    }
    old.commit(tx).await.unwrap();
    assert_eq!(
        old.migrate_with(&[&oncely_http::MIGRATIONS]).await.unwrap(),
        1,
        "version 2 ran"
    );
    super::app::setup(&old).await.unwrap();
    let scope_rows = |sql: String| {
        let old = old.clone();
        async move {
            let mut tx = old.begin().await.unwrap();
            let rows = tx
                .fetch(&sql, &[], &[Column::Text, Column::Text])
                .await
                .unwrap();
            old.rollback(tx).await.unwrap();
            rows.into_iter()
                .map(|r| (r[0].text(), r[1].text()))
                .collect::<Vec<_>>()
        }
    };
    let d = old.dialect();
    let list = format!(
        "SELECT {}, {} FROM {keys} ORDER BY idem_key, scope",
        d.text("scope"),
        d.text("idem_key")
    );
    assert_eq!(
        scope_rows(list.clone()).await,
        [
            (String::new(), "legacy-1".to_owned()),
            (String::new(), "legacy-old".to_owned())
        ],
        "existing rows are global"
    );
    let global = IdempotencyLayer::new(old.clone(), oncely_http::Scope::global())
        .require_key(true)
        .fingerprint_headers(["content-type"]);
    let base = serve(router(Orders::new(old.clone()), global)).await;
    let replay = post(&base, Some("legacy-1"), BOOK).await;
    assert_eq!(replay.status(), StatusCode::CREATED);
    assert!(replayed(&replay), "a global layer replays the old row");
    assert_eq!(replay.text().await.unwrap(), r#"{"legacy":true}"#);
    let scoped = serve(router(
        Orders::new(old.clone()),
        super::app::layer(old.clone()),
    ))
    .await;
    let fresh = post(&scoped, Some("legacy-1"), BOOK).await;
    assert_eq!(fresh.status(), StatusCode::CREATED);
    assert!(!replayed(&fresh), "in alice's scope the key is fresh");
    assert_eq!(
        scope_rows(list.clone()).await,
        [
            (String::new(), "legacy-1".to_owned()),
            (scope_of("alice"), "legacy-1".to_owned()),
            (String::new(), "legacy-old".to_owned())
        ],
        "one key in two scopes"
    );
    let (pool, t) = (old.pool(), old.tables().clone());
    assert_eq!(oncely_http::prune_expired(&pool, &t, 10).await.unwrap(), 1);
    assert_eq!(oncely_http::prune_expired(&pool, &t, 10).await.unwrap(), 0);
    assert_eq!(
        scope_rows(list).await.len(),
        2,
        "only the expired row was pruned"
    );
}
