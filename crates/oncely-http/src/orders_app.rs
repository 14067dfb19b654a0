//! The orders app of `oncely http-demo`: `POST /orders` creates an order row and an outbox
//! message in the transaction the layer reserved the key in; `GET /orders/{id}` reads one.
//! Every request needs an `Authorization` header (any value: the demo authenticates no one),
//! and keys are scoped by it: `Bearer alice` and `Bearer bob` never share a key. Without it
//! the answer is 401, `application/problem+json`.
//!
//! A reference application of the layer, behind the feature `orders-app`: the `oncely`
//! binary serves it, and oncely-http's tests and the trace tests drive the layer through it.

use crate::{IdempotencyLayer, IdempotentTx, Scope, TxError};
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use oncely_core::{MessageId, Result, Store};
use oncely_effects::{Outbox, Outgoing};
use oncely_sql::clock::now_ms;
use oncely_sql::{AnyStore, AnyTx, Column, INBOX, Tables};
use std::time::Duration;

/// The outbox destination of the `order created` events.
pub const ORDER_CREATED: &str = "orders.created";

/// The demo's state: the store, the orders table and the outbox.
#[derive(Clone)]
pub struct Orders {
    store: AnyStore,
    table: String,
    outbox: Outbox,
    delay: Duration,
}

/// A new order, as posted.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct NewOrder {
    /// What is ordered.
    pub item: String,
    /// How many (at least 1).
    pub quantity: i64,
}

/// The qualified name of the demo's orders table in `tables`.
///
pub fn orders_table(tables: &Tables) -> String {
    tables.table("demo_orders")
}

/// Creates the tables the demo needs (inbox, effects with the outbox, http keys, orders).
pub async fn setup(store: &AnyStore) -> Result<()> {
    store
        .migrate_with(&[&INBOX, &oncely_effects::MIGRATIONS, &crate::MIGRATIONS])
        .await?;
    let ddl = format!(
        "CREATE TABLE IF NOT EXISTS {} (id VARCHAR(64) NOT NULL PRIMARY KEY, item VARCHAR(255) NOT NULL, quantity BIGINT NOT NULL, created_at BIGINT NOT NULL)",
        orders_table(store.tables())
    );
    let mut tx = store.begin().await?;
    tx.script(&ddl).await?;
    store.commit(tx).await
}

impl Orders {
    /// The app on `store` (after [`setup`]).
    pub fn new(store: AnyStore) -> Self {
        Self {
            table: orders_table(store.tables()),
            outbox: Outbox::new("http-demo", store.tables().clone()),
            store,
            delay: Duration::ZERO,
        }
    }

    /// Makes `POST /orders` wait this long after its writes, before the commit (to show a
    /// crash mid-request: kill the server during the wait).
    pub fn handler_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// The demo's layer on `store`: keys scoped by the `Authorization` header (hashed), required,
/// `content-type` fingerprinted, `content-type` and `location` replayed.
pub fn layer(store: AnyStore) -> IdempotencyLayer {
    IdempotencyLayer::new(store, Scope::header("authorization"))
        .require_key(true)
        .fingerprint_headers(["content-type"])
        .replay_headers(["content-type", "location"])
}

/// `POST /orders` behind `layer`, `GET /orders/{id}`; both answer 401 without an
/// `Authorization` header.
pub fn router(app: Orders, layer: IdempotencyLayer) -> Router {
    Router::new()
        .route("/orders", post(create).layer(layer))
        .route("/orders/{id}", get(show))
        .layer(middleware::from_fn(authenticated))
        .with_state(app)
}

/// The demo's stand-in for an auth layer: a request needs an `Authorization` header.
async fn authenticated(req: Request, next: Next) -> Response {
    if req.headers().contains_key(header::AUTHORIZATION) {
        return next.run(req).await;
    }
    let body = serde_json::json!({
        "type": "urn:oncely:http:demo-unauthorized",
        "title": "Authorization is missing",
        "status": 401,
        "detail": "send an Authorization header (any value, e.g. `Bearer alice`): Idempotency-Keys belong to it",
    });
    let mut response = (StatusCode::UNAUTHORIZED, body.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    headers.insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"oncely-http-demo\""),
    );
    response
}

async fn create(
    State(app): State<Orders>,
    tx: IdempotentTx,
    Json(order): Json<NewOrder>,
) -> std::result::Result<Response, TxError> {
    if order.quantity < 1 || order.item.is_empty() {
        let body = serde_json::json!({ "error": "item must be set and quantity at least 1" });
        return Ok((StatusCode::BAD_REQUEST, Json(body)).into_response());
    }
    let id = uuid::Uuid::new_v4().to_string();
    let mut tx = tx.lock().await?;
    let insert = format!(
        "INSERT INTO {} (id, item, quantity, created_at) VALUES ($1, $2, $3, $4)",
        app.table
    );
    let args = [
        id.as_str().into(),
        order.item.as_str().into(),
        order.quantity.into(),
        now_ms().into(),
    ];
    tx.execute(&insert, &args).await?;
    let created = serde_json::json!({ "id": id, "item": order.item, "quantity": order.quantity });
    let event = Outgoing::new(ORDER_CREATED, id.as_str(), created.to_string());
    let incoming = MessageId::new(&id).map_err(|e| oncely_core::Error::permanent(e.to_string()))?;
    enqueue(&app.outbox, &mut tx, &incoming, &event).await?;
    if !app.delay.is_zero() {
        tracing::info!(order = %id, delay_ms = app.delay.as_millis() as u64, "holding the transaction open");
        tokio::time::sleep(app.delay).await;
    }
    let location = format!("/orders/{id}");
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(created),
    )
        .into_response())
}

/// The outbox message in the request's transaction, on whichever database it is.
async fn enqueue(
    outbox: &Outbox,
    tx: &mut AnyTx,
    incoming: &MessageId,
    event: &Outgoing,
) -> Result<MessageId> {
    outbox.enqueue(tx, incoming, 0, event).await
}

async fn show(
    State(app): State<Orders>,
    Path(id): Path<String>,
) -> std::result::Result<Response, TxError> {
    let mut tx = app.store.begin().await?;
    let select = format!("SELECT id, item, quantity FROM {} WHERE id = $1", app.table);
    let cols = [Column::Text, Column::Text, Column::I64];
    let row = tx.fetch_optional(&select, &[id.into()], &cols).await;
    app.store.rollback(tx).await?;
    Ok(match row? {
        Some(r) => Json(
            serde_json::json!({ "id": r[0].text(), "item": r[1].text(), "quantity": r[2].i64() }),
        )
        .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(serde_json::json!({ "error": "no such order" })),
        )
            .into_response(),
    })
}
