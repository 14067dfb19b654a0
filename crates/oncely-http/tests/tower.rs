//! The layer without axum: a plain tower service over `http_body_util::Full<Bytes>` (as a hyper
//! stack would use), the transaction taken from the request extensions.

mod common;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use oncely_http::{IdempotencyLayer, IdempotentTx, Scope};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tower_layer::Layer;
use tower_service::Service;

/// Inserts one order per call through the request's transaction.
#[derive(Clone)]
struct Handler {
    table: String,
}

impl Service<Request<Full<Bytes>>> for Handler {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Full<Bytes>>) -> Self::Future {
        let table = self.table.clone();
        Box::pin(async move {
            let tx = req.extensions().get::<IdempotentTx>().unwrap().clone();
            let mut tx = tx.lock().await.unwrap();
            let n = format!("{:?}", std::time::Instant::now());
            let sql = format!(
                "INSERT INTO {table} (id, item, quantity, created_at) VALUES ($1, 'pen', 1, 0)"
            );
            tx.execute(&sql, &[n.into()]).await.unwrap();
            let mut response = Response::new(Full::from("made"));
            *response.status_mut() = StatusCode::CREATED;
            Ok(response)
        })
    }
}

fn request(key: &str) -> Request<Full<Bytes>> {
    Request::post("/pens")
        .header("idempotency-key", key)
        .body(Full::from("one pen"))
        .unwrap()
}

#[tokio::test]
async fn a_plain_tower_stack_replays() {
    let db = common::sqlite().await;
    let table = common::app::orders_table(db.store.tables());
    let mut service =
        IdempotencyLayer::new(db.store.clone(), Scope::global()).layer(Handler { table });
    let first = service.call(request("pen-1")).await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    assert!(!first.headers().contains_key("idempotent-replayed"));
    let again = service.call(request("pen-1")).await.unwrap();
    assert_eq!(again.status(), StatusCode::CREATED);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let body = again.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "made");
    assert_eq!(db.orders().await, 1);
    // Without a key (optional by default) the handler runs every time, still in a transaction.
    let plain = || Request::post("/pens").body(Full::from("one pen")).unwrap();
    service.call(plain()).await.unwrap();
    service.call(plain()).await.unwrap();
    assert_eq!((db.orders().await, db.keys().await), (3, 1));
}

/// `Scope::extension` behind an axum auth middleware that inserts the user: two users' same
/// key is two orders and two key rows, each replayed to its user. With the layers in the
/// wrong order (the idempotency layer outside the auth layer) a keyed request is refused with
/// 500 and nothing runs, rather than served in a global scope.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extension_scope_behind_an_auth_layer() {
    use crate::common::app::{Orders, router};
    use axum::routing::post;
    #[derive(Clone)]
    struct User(String);
    async fn auth(
        mut req: axum::extract::Request,
        next: axum::middleware::Next,
    ) -> axum::response::Response {
        if let Some(user) = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
        {
            let user = User(user.trim_start_matches("Bearer ").to_owned());
            req.extensions_mut().insert(user);
        }
        next.run(req).await
    }
    let db = common::sqlite().await;
    let scope = || Scope::extension(|u: &User| format!("user:{}", u.0));
    let layer = IdempotencyLayer::new(db.store.clone(), scope()).require_key(true);
    let app = router(Orders::new(db.store.clone()), layer).layer(axum::middleware::from_fn(auth));
    let base = common::serve(app).await;
    let book = r#"{"item":"book","quantity":2}"#;
    let mut first = Vec::new();
    for user in ["Bearer alice", "Bearer bob"] {
        let r = common::post_as(&base, Some(user), Some("k-1"), book).await;
        assert_eq!(r.status(), StatusCode::CREATED);
        assert!(!common::replayed(&r));
        first.push(r.text().await.unwrap());
    }
    for (user, body) in ["Bearer alice", "Bearer bob"].iter().zip(&first) {
        let r = common::post_as(&base, Some(user), Some("k-1"), book).await;
        assert!(common::replayed(&r));
        assert_eq!(&r.text().await.unwrap(), body);
    }
    assert_ne!(first[0], first[1]);
    assert_eq!((db.orders().await, db.keys().await), (2, 2));

    // Misordered: the idempotency layer wraps the auth layer, so it runs before the user is known.
    let handler = |tx: IdempotentTx| async move {
        let _ = tx.lock().await;
        (StatusCode::CREATED, "ran")
    };
    let layer = IdempotencyLayer::new(db.store.clone(), scope());
    let wrong = axum::Router::new()
        .route("/orders", post(handler))
        .layer(axum::middleware::from_fn(auth))
        .layer(layer);
    let base = common::serve(wrong).await;
    let r = common::post_as(&base, Some("Bearer alice"), Some("k-2"), book).await;
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        body["type"],
        "urn:oncely:http:idempotency-scope-unavailable"
    );
    assert!(body["detail"].as_str().unwrap().contains("User"), "{body}");
    assert_eq!((db.orders().await, db.keys().await), (2, 2), "nothing ran");
}
