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
    let table = oncely_http::demo::orders_table(db.store.tables());
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
