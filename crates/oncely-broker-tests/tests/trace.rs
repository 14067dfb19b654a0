//! One trace across the outbox and a real broker (W3C `traceparent`), checked with the
//! OpenTelemetry SDK's in-memory exporter:
//!
//! ```text
//! checkout                         (root: the span that enqueues, e.g. an HTTP handler)
//! ├── oncely.outbox.publish        (the relay; parent = the context stored with the row)
//! └── oncely.delivery              (the consumer; parent = the `traceparent` the message carries)
//!     └── ledger.effect            (the handler's effect)
//! ```
//!
//! The message carries the *enqueuing* span's context (the creation context, as the
//! OpenTelemetry messaging conventions have it), so the relay's publish span and the
//! delivery are siblings under it. A re-published copy continues the same trace and ends as
//! `Duplicate` (one ledger row); a malformed `traceparent` starts a fresh trace and is
//! applied as usual.
//!
//! The same from an HTTP request: the `Idempotency-Key` layer's `idempotency` span continues
//! the client's `traceparent`, the handler enqueues inside it, and the relay's publish and the
//! delivery hang under the request span, in the client's trace.

/// The orders app of `oncely http-demo` (oncely-http's feature `orders-app`).
use oncely_http::orders_app as demo;

use oncely_amqp::AmqpProducer;
use oncely_broker_tests::services::{AMQP_URL, REDIS_URL, available, unique};
use oncely_core::trace::TRACEPARENT;
use oncely_core::{
    Consumer, ConsumerName, Envelope, Error, Handled, Handler, MessageId, Outcome, RawEnvelope,
    Source,
};
use oncely_effects::{OutboxMessage, Outgoing, Publisher, Relay};
use oncely_sql::{AnyStore, SqliteStore};
use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use sqlx::{Sqlite, Transaction};
use std::sync::OnceLock;
use std::time::Duration;
use tracing::Instrument;

/// The process-wide subscriber with an OpenTelemetry layer exporting into memory (global, so
/// spans from every runtime thread are seen; each test picks its spans by trace id).
fn otel() -> &'static (InMemorySpanExporter, SdkTracerProvider) {
    static OTEL: OnceLock<(InMemorySpanExporter, SdkTracerProvider)> = OnceLock::new();
    OTEL.get_or_init(|| {
        let (subscriber, exporter, provider) = oncely_testkit::otel::in_memory();
        tracing::subscriber::set_global_default(subscriber).expect("one global subscriber");
        (exporter, provider)
    })
}

fn finished() -> Vec<SpanData> {
    let (exporter, provider) = otel();
    drop(provider.force_flush());
    exporter.get_finished_spans().expect("spans")
}

/// The finished spans once `done` holds of them (at most 5 s): a span ends when its last
/// handle drops, which on a server or runtime thread may come just after the test saw the
/// response.
async fn finished_when(done: impl Fn(&[SpanData]) -> bool) -> Vec<SpanData> {
    for _ in 0..100 {
        let all = finished();
        if done(&all) {
            return all;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    finished()
}

fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.as_str().into_owned())
}

/// The spans named `name` whose attribute `key` is `value`.
fn spans<'a>(all: &'a [SpanData], name: &str, key: &str, value: &str) -> Vec<&'a SpanData> {
    all.iter()
        .filter(|s| s.name == name && attr(s, key).as_deref() == Some(value))
        .collect()
}

fn show(s: &SpanData) -> String {
    format!(
        "{} span={} parent={} trace={}",
        s.name,
        s.span_context.span_id(),
        s.parent_span_id,
        s.span_context.trace_id()
    )
}

/// The effect: one ledger row per applied message (no unique key, so a double effect would
/// show as two rows), written in a span of its own.
struct LedgerEffect;

impl Handler<Transaction<'static, Sqlite>> for LedgerEffect {
    async fn handle(
        &self,
        tx: &mut Transaction<'static, Sqlite>,
        msg: &Envelope,
    ) -> oncely_core::Result<Handled> {
        let span = tracing::info_span!("ledger.effect", message_id = msg.id().as_str());
        sqlx::query("INSERT INTO ledger (message_id) VALUES (?1)")
            .bind(msg.id().as_str())
            .execute(&mut **tx)
            .instrument(span)
            .await
            .map_err(Error::transient)?;
        Ok(Handled::Applied)
    }
}

/// The relay's publisher: RabbitMQ through oncely's producer.
struct Rabbit(AmqpProducer);

impl Publisher for Rabbit {
    async fn publish(&self, message: &OutboxMessage) -> oncely_core::Result<()> {
        self.0.send(&message.to_raw()).await
    }
}

async fn sqlite() -> (SqliteStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("trace.db").display());
    let store = SqliteStore::connect(&url).await.unwrap();
    store
        .migrate_with(&[&oncely_sql::INBOX, &oncely_effects::MIGRATIONS])
        .await
        .unwrap();
    sqlx::query("CREATE TABLE ledger (message_id TEXT NOT NULL)")
        .execute(store.pool())
        .await
        .unwrap();
    (store, dir)
}

async fn ledger_rows(store: &SqliteStore, id: &str) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM ledger WHERE message_id = ?1")
        .bind(id)
        .fetch_one(store.pool())
        .await
        .unwrap()
}

/// Takes `n` deliveries from `source` and processes each (the runtime's per-message path).
async fn consume(
    consumer: &Consumer<SqliteStore, LedgerEffect>,
    source: &mut impl Source,
    n: usize,
) -> Vec<(String, String)> {
    let mut seen = Vec::new();
    for _ in 0..n {
        let delivery = tokio::time::timeout(Duration::from_secs(20), source.next())
            .await
            .expect("a delivery within 20 s")
            .expect("source")
            .expect("not closed");
        let id = delivery.message().display_id().unwrap_or_default();
        let outcome: Outcome = consumer.process(delivery).await;
        seen.push((id, outcome.name().to_owned()));
    }
    seen.sort();
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbox_relay_rabbitmq_consumer_is_one_trace() {
    if !available(
        "outbox_relay_rabbitmq_consumer_is_one_trace",
        "RabbitMQ",
        "127.0.0.1:5672",
    ) {
        return;
    }
    otel();
    let (store, _dir) = sqlite().await;
    let queue = unique("trace");
    let url = format!("{AMQP_URL}?queue={queue}");

    // 1. The root span enqueues into the outbox inside a database transaction.
    let outbox = oncely_effects::Outbox::new("checkout", store.tables().clone());
    let incoming = MessageId::new("order-42:paid").unwrap();
    let root = tracing::info_span!("checkout");
    let sent_id = async {
        let mut tx = store.pool().begin().await.unwrap();
        let event = Outgoing::new(&queue, "acct-17", br#"{"account":"acct-17","amount":5}"#);
        let id = outbox.enqueue(&mut tx, &incoming, 0, &event).await.unwrap();
        tx.commit().await.unwrap();
        id
    }
    .instrument(root.clone())
    .await;
    drop(root);

    // 2. The relay publishes the row to RabbitMQ (outside any span of the test).
    let producer = AmqpProducer::connect(AMQP_URL, &queue, "quorum")
        .await
        .expect("producer");
    let relay = Relay::new(
        store.pool().clone(),
        store.tables().clone(),
        Rabbit(producer),
    );
    let report = relay.dispatch_once().await.expect("dispatch");
    assert_eq!(report.dispatched, 1);
    // The same row published again (as after a relay crash between publish and mark), and
    // a message whose traceparent is garbage.
    let row =
        &oncely_effects::outbox_rows(&mut store.pool().acquire().await.unwrap(), store.tables())
            .await
            .unwrap()[0];
    let mut hostile = RawEnvelope::new("hostile-1", r#"{"account":"acct-9","amount":1}"#);
    hostile.meta.headers.insert(
        TRACEPARENT.into(),
        "00-ffffffffffffffffffffffffffffffffffffffff-zz-01\u{1}".into(),
    );
    let producer = AmqpProducer::connect(AMQP_URL, &queue, "quorum")
        .await
        .unwrap();
    producer.send(&row.to_raw()).await.unwrap();
    producer.send(&hostile).await.unwrap();

    // 3. An oncely consumer takes all three from RabbitMQ.
    let consumer = Consumer::new(
        ConsumerName::new("ledger").unwrap(),
        store.clone(),
        LedgerEffect,
    );
    let mut source = oncely_amqp::connect_source(&url, "ledger")
        .await
        .expect("source");
    let seen = consume(&consumer, &mut source, 3).await;
    let sent = sent_id.as_str().to_owned();
    let mut expected = vec![
        ("hostile-1".to_owned(), "applied".to_owned()),
        (sent.clone(), "applied".to_owned()),
        (sent.clone(), "duplicate".to_owned()),
    ];
    expected.sort();
    assert_eq!(seen, expected);
    assert_eq!(
        ledger_rows(&store, &sent).await,
        1,
        "the effect happened once"
    );
    assert_eq!(ledger_rows(&store, "hostile-1").await, 1);

    // 4. The spans: one trace from the enqueuing span to the effect. A delivery span ends
    // when its last handle drops (the ack may hold one a moment after `process` returned).
    let all = finished_when(|all| {
        spans(all, "oncely.delivery", "message_id", "hostile-1").len() == 1
            && spans(all, "oncely.delivery", "message_id", &sent).len() == 2
            && spans(all, "ledger.effect", "message_id", &sent).len() == 1
    })
    .await;
    let root = all
        .iter()
        .find(|s| s.name == "checkout")
        .expect("root span");
    let trace = root.span_context.trace_id();
    let mine: Vec<&SpanData> = all
        .iter()
        .filter(|s| s.span_context.trace_id() == trace)
        .collect();
    eprintln!("span tree of trace {trace}:");
    for s in &mine {
        eprintln!("  {}", show(s));
    }
    assert_eq!(root.parent_span_id, SpanId::INVALID, "checkout is the root");
    let root_id = root.span_context.span_id();

    let publish = spans(&all, "oncely.outbox.publish", "message_id", &sent);
    assert_eq!(publish.len(), 1, "{publish:?}");
    assert_eq!(publish[0].span_context.trace_id(), trace);
    assert_eq!(
        publish[0].parent_span_id, root_id,
        "relay span under the enqueuer"
    );

    let deliveries = spans(&all, "oncely.delivery", "message_id", &sent);
    assert_eq!(deliveries.len(), 2, "the copy and the re-published copy");
    for d in &deliveries {
        assert_eq!(d.span_context.trace_id(), trace, "{}", show(d));
        assert_eq!(d.parent_span_id, root_id, "delivery under the enqueuer");
    }
    let applied = deliveries
        .iter()
        .find(|d| attr(d, "outcome").as_deref() == Some("applied"))
        .expect("the applied delivery");
    let effects = spans(&all, "ledger.effect", "message_id", &sent);
    assert_eq!(effects.len(), 1, "one effect: the duplicate ran no handler");
    assert_eq!(effects[0].span_context.trace_id(), trace);
    assert_eq!(effects[0].parent_span_id, applied.span_context.span_id());
    assert_eq!(mine.len(), 5, "checkout, publish, 2 deliveries, effect");

    // The malformed traceparent: applied, in a fresh trace of its own.
    let fresh = spans(&all, "oncely.delivery", "message_id", "hostile-1");
    assert_eq!(fresh.len(), 1);
    assert_eq!(fresh[0].parent_span_id, SpanId::INVALID);
    assert_ne!(fresh[0].span_context.trace_id(), trace);
    assert_ne!(fresh[0].span_context.trace_id(), TraceId::INVALID);
    source.close_connection().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_fields_carry_the_trace() {
    if !available("redis_fields_carry_the_trace", "Redis", "127.0.0.1:6379") {
        return;
    }
    otel();
    let (store, _dir) = sqlite().await;
    let stream = unique("trace");
    let url = format!("{REDIS_URL}/0?stream={stream}&group=ledger&block_ms=200");
    let message = RawEnvelope::new("r-1", r#"{"account":"acct-1","amount":2}"#);
    let producer = tracing::info_span!("redis.producer");
    oncely_redis::publish(&url, std::slice::from_ref(&message))
        .instrument(producer.clone())
        .await
        .expect("publish");
    drop(producer);
    let consumer = Consumer::new(
        ConsumerName::new("ledger").unwrap(),
        store.clone(),
        LedgerEffect,
    );
    let mut source = oncely_redis::connect_source(&url, "ledger")
        .await
        .expect("source");
    let seen = consume(&consumer, &mut source, 1).await;
    assert_eq!(seen, [("r-1".to_owned(), "applied".to_owned())]);
    assert_eq!(ledger_rows(&store, "r-1").await, 1);

    let all = finished_when(|all| {
        !spans(all, "oncely.delivery", "message_id", "r-1").is_empty()
            && !spans(all, "ledger.effect", "message_id", "r-1").is_empty()
    })
    .await;
    let producer = all
        .iter()
        .find(|s| s.name == "redis.producer")
        .expect("producer span");
    let delivery = spans(&all, "oncely.delivery", "message_id", "r-1");
    assert_eq!(delivery.len(), 1);
    assert_eq!(
        delivery[0].span_context.trace_id(),
        producer.span_context.trace_id()
    );
    assert_eq!(delivery[0].parent_span_id, producer.span_context.span_id());
    let effect = spans(&all, "ledger.effect", "message_id", "r-1");
    assert_eq!(effect[0].parent_span_id, delivery[0].span_context.span_id());
}

/// `POST {base}/orders` of the demo app with an `Idempotency-Key` and a `traceparent`.
async fn post_order(base: &str, key: &str, traceparent: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{base}/orders"))
        .header("content-type", "application/json")
        .header("authorization", "Bearer trace-test")
        .header("idempotency-key", key)
        .header(TRACEPARENT, traceparent)
        .body(r#"{"item":"book","quantity":2}"#)
        .send()
        .await
        .expect("request")
}

async fn outbox_messages(store: &SqliteStore) -> Vec<OutboxMessage> {
    let mut conn = store.pool().acquire().await.unwrap();
    oncely_effects::outbox_rows(&mut conn, store.tables())
        .await
        .unwrap()
}

/// A client's HTTP request → the Idempotency-Key layer → the demo's `POST /orders` (order row
/// and outbox message in the key's SQLite transaction) → relay → RabbitMQ → an oncely consumer
/// → effect: one trace, the client's, with the layer's `idempotency` span under the client's
/// span. A retry with the same key is a replay (no second outbox message); a request with a
/// malformed `traceparent` is served as usual in a fresh trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_request_outbox_rabbitmq_consumer_is_one_trace() {
    if !available(
        "http_request_outbox_rabbitmq_consumer_is_one_trace",
        "RabbitMQ",
        "127.0.0.1:5672",
    ) {
        return;
    }
    otel();
    let (store, _dir) = sqlite().await;
    let any = AnyStore::from(store.clone());
    demo::setup(&any).await.expect("demo tables");
    let app = demo::router(demo::Orders::new(any.clone()), demo::layer(any));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    // 1. The client's trace: a known trace id, the client's span as the parent.
    let trace_hex = uuid::Uuid::new_v4().simple().to_string();
    let client_hex = &uuid::Uuid::new_v4().simple().to_string()[..16];
    let retry_hex = &uuid::Uuid::new_v4().simple().to_string()[..16];
    let trace = TraceId::from_hex(&trace_hex).unwrap();
    let client = SpanId::from_hex(client_hex).unwrap();
    let key = unique("order");
    let first = post_order(&base, &key, &format!("00-{trace_hex}-{client_hex}-01")).await;
    assert_eq!(first.status(), reqwest::StatusCode::CREATED);
    let body = first.text().await.unwrap();
    let rows = outbox_messages(&store).await;
    assert_eq!(rows.len(), 1, "one outbox message");
    let sent = rows[0].id.as_str().to_owned();
    assert!(
        rows[0].headers[TRACEPARENT].contains(&trace_hex),
        "the outbox row stores the request's trace: {:?}",
        rows[0].headers
    );

    // 2. The client retries (a new client span in the same trace): the stored response.
    let retry = post_order(&base, &key, &format!("00-{trace_hex}-{retry_hex}-01")).await;
    assert_eq!(retry.status(), reqwest::StatusCode::CREATED);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(retry.text().await.unwrap(), body);
    assert_eq!(
        outbox_messages(&store).await.len(),
        1,
        "the replay adds none"
    );

    // 3. The relay publishes the row to RabbitMQ; an oncely consumer applies it.
    let queue = unique("trace_http");
    let producer = AmqpProducer::connect(AMQP_URL, &queue, "quorum")
        .await
        .expect("producer");
    let relay = Relay::new(
        store.pool().clone(),
        store.tables().clone(),
        Rabbit(producer),
    );
    assert_eq!(relay.dispatch_once().await.expect("dispatch").dispatched, 1);
    let consumer = Consumer::new(
        ConsumerName::new("ledger").unwrap(),
        store.clone(),
        LedgerEffect,
    );
    let url = format!("{AMQP_URL}?queue={queue}");
    let mut source = oncely_amqp::connect_source(&url, "ledger")
        .await
        .expect("source");
    let seen = consume(&consumer, &mut source, 1).await;
    assert_eq!(seen, [(sent.clone(), "applied".to_owned())]);
    assert_eq!(
        ledger_rows(&store, &sent).await,
        1,
        "the effect happened once"
    );

    // 4. A malformed traceparent changes nothing but the trace: served, in a fresh trace.
    let other = unique("order");
    let bad = post_order(&base, &other, "00-not-a-trace-id-zz").await;
    assert_eq!(bad.status(), reqwest::StatusCode::CREATED);

    // 5. The spans: the client's trace from the request to the effect.
    let all = finished_when(|all| {
        let n = all.iter().filter(|s| s.span_context.trace_id() == trace);
        n.count() >= 5 && !spans(all, "idempotency", "key", &other).is_empty()
    })
    .await;
    let mine: Vec<&SpanData> = all
        .iter()
        .filter(|s| s.span_context.trace_id() == trace)
        .collect();
    eprintln!("span tree of trace {trace} (client span {client}, retry span {retry_hex}):");
    for s in &mine {
        eprintln!(
            "  {} outcome={}",
            show(s),
            attr(s, "outcome").unwrap_or_default()
        );
    }
    let requests = spans(&all, "idempotency", "key", &key);
    assert_eq!(requests.len(), 2, "the request and its retry");
    let request = requests
        .iter()
        .find(|s| attr(s, "outcome").as_deref() == Some("stored"))
        .expect("the first request's span");
    assert_eq!(request.span_context.trace_id(), trace);
    assert_eq!(request.parent_span_id, client, "under the client's span");
    let replayed = requests
        .iter()
        .find(|s| attr(s, "outcome").as_deref() == Some("replayed"))
        .expect("the retry's span");
    assert_eq!(replayed.span_context.trace_id(), trace);
    assert_eq!(
        replayed.parent_span_id,
        SpanId::from_hex(retry_hex).unwrap()
    );
    let request_id = request.span_context.span_id();

    let publish = spans(&all, "oncely.outbox.publish", "message_id", &sent);
    assert_eq!(publish.len(), 1, "{publish:?}");
    assert_eq!(publish[0].span_context.trace_id(), trace);
    assert_eq!(
        publish[0].parent_span_id, request_id,
        "relay under the request"
    );
    let delivery = spans(&all, "oncely.delivery", "message_id", &sent);
    assert_eq!(delivery.len(), 1, "{delivery:?}");
    assert_eq!(delivery[0].span_context.trace_id(), trace);
    assert_eq!(
        delivery[0].parent_span_id, request_id,
        "delivery under the request"
    );
    let effect = spans(&all, "ledger.effect", "message_id", &sent);
    assert_eq!(effect.len(), 1, "{effect:?}");
    assert_eq!(effect[0].span_context.trace_id(), trace);
    assert_eq!(effect[0].parent_span_id, delivery[0].span_context.span_id());
    assert_eq!(mine.len(), 5, "request, retry, publish, delivery, effect");

    let fresh = spans(&all, "idempotency", "key", &other);
    assert_eq!(fresh.len(), 1);
    assert_eq!(fresh[0].parent_span_id, SpanId::INVALID, "a fresh trace");
    assert_ne!(fresh[0].span_context.trace_id(), trace);
    source.close_connection().await;
}
