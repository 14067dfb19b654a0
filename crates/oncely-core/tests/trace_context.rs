//! W3C trace context through the consumer runtime, with the SDK's in-memory exporter: the
//! delivery span continues the producer's trace (`traceparent` in the headers), the handler's
//! spans sit under it, a malformed `traceparent` starts a fresh trace and the message is
//! applied as usual; a group commit's span links to every message's producer.

mod support;

use oncely_core::trace::{TRACEPARENT, TRACESTATE, inject_current};
use oncely_core::{
    CancellationToken, Consumer, ConsumerName, Envelope, Error, Handled, Handler, MemorySource,
    Outcome, RawEnvelope, Source,
};
use oncely_testkit::otel::in_memory as otel;
use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::trace::SpanData;
use support::{MemStore, MemTx};

/// Records its effect inside a span of its own, as a user's handler would.
struct Effect;

impl Handler<MemTx> for Effect {
    async fn handle(&self, tx: &mut MemTx, msg: &Envelope) -> Result<Handled, Error> {
        let _span = tracing::info_span!("effect", id = msg.id().as_str()).entered();
        tx.effect(msg.id().as_str());
        Ok(Handled::Applied)
    }
}

const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const PARENT: &str = "b7ad6b7169203331";

fn with_header(id: &str, pairs: &[(&str, &str)]) -> RawEnvelope {
    let mut m = RawEnvelope::new(id, format!("{{\"id\":\"{id}\"}}"));
    for (k, v) in pairs {
        m.meta.headers.insert((*k).into(), (*v).into());
    }
    m
}

fn by_attr<'a>(spans: &'a [SpanData], name: &str, key: &str, value: &str) -> &'a SpanData {
    spans
        .iter()
        .find(|s| {
            s.name == name
                && s.attributes
                    .iter()
                    .any(|kv| kv.key.as_str() == key && kv.value.as_str() == value)
        })
        .unwrap_or_else(|| panic!("no {name} span with {key}={value}: {spans:#?}"))
}

#[tokio::test(flavor = "current_thread")]
async fn delivery_span_continues_the_producers_trace() {
    let (subscriber, exporter, provider) = otel();
    let _guard = tracing::subscriber::set_default(subscriber);
    let store = MemStore::default();
    let consumer = Consumer::new(ConsumerName::new("traced").unwrap(), store.clone(), Effect);
    let mut source = MemorySource::new();
    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    source.publish(with_header(
        "remote",
        &[(TRACEPARENT, &traceparent), (TRACESTATE, "v=1")],
    ));
    source.publish(with_header(
        "hostile",
        &[(TRACEPARENT, "00-zz-\u{0}-01"), (TRACESTATE, "\u{7f}")],
    ));
    source.publish(with_header("plain", &[]));
    // A message produced inside a local span: the producer injects the current context.
    let producer = tracing::info_span!("producer");
    let mut local = with_header("local", &[]);
    producer.in_scope(|| inject_current(&mut local.meta.headers));
    drop(producer);
    source.publish(local);
    source.close();
    let mut outcomes = Vec::new();
    while let Some(delivery) = source.next().await.unwrap() {
        outcomes.push(consumer.process(delivery).await);
    }
    assert!(
        outcomes.iter().all(|o| matches!(o, Outcome::Applied)),
        "{outcomes:?}"
    );
    let mut ledger = store.ledger();
    ledger.sort();
    assert_eq!(ledger, ["hostile", "local", "plain", "remote"]);

    drop(provider.force_flush());
    let spans = exporter.get_finished_spans().unwrap();
    let delivery = |id| by_attr(&spans, "oncely.delivery", "message_id", id);
    let effect = |id| by_attr(&spans, "effect", "id", id);

    let remote = delivery("remote");
    assert_eq!(
        remote.span_context.trace_id(),
        TraceId::from_hex(TRACE).unwrap()
    );
    assert_eq!(remote.parent_span_id, SpanId::from_hex(PARENT).unwrap());
    assert_eq!(remote.span_context.trace_state().header(), "v=1");
    assert_eq!(
        effect("remote").parent_span_id,
        remote.span_context.span_id()
    );
    assert_eq!(
        effect("remote").span_context.trace_id(),
        remote.span_context.trace_id()
    );

    let producer = spans.iter().find(|s| s.name == "producer").unwrap();
    let local = delivery("local");
    assert_eq!(
        local.span_context.trace_id(),
        producer.span_context.trace_id()
    );
    assert_eq!(local.parent_span_id, producer.span_context.span_id());

    for id in ["hostile", "plain"] {
        let fresh = delivery(id);
        assert_eq!(fresh.parent_span_id, SpanId::INVALID, "{id}: a new trace");
        assert_ne!(
            fresh.span_context.trace_id(),
            remote.span_context.trace_id()
        );
        assert_eq!(effect(id).parent_span_id, fresh.span_context.span_id());
    }
}

#[tokio::test(flavor = "current_thread")]
async fn group_commit_span_links_to_each_producer() {
    let (subscriber, exporter, provider) = otel();
    let _guard = tracing::subscriber::set_default(subscriber);
    let store = MemStore::default();
    let consumer =
        Consumer::new(ConsumerName::new("traced").unwrap(), store.clone(), Effect).group_commit(8);
    let source = MemorySource::new();
    let parents = ["1111111111111111", "2222222222222222", "3333333333333333"];
    for (i, parent) in parents.iter().enumerate() {
        let tp = format!("00-{TRACE}-{parent}-01");
        source.publish(with_header(&format!("b-{i}"), &[(TRACEPARENT, &tp)]));
    }
    source.publish(with_header("b-bad", &[(TRACEPARENT, "nonsense")]));
    source.close();
    let stats = consumer
        .run(source, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(stats.applied, 4);
    assert_eq!(store.ledger().len(), 4);

    drop(provider.force_flush());
    let spans = exporter.get_finished_spans().unwrap();
    let batches: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "oncely.group_commit")
        .collect();
    assert!(!batches.is_empty(), "a group commit ran: {spans:#?}");
    let mut linked: Vec<String> = batches
        .iter()
        .flat_map(|b| b.links.iter())
        .map(|l| l.span_context.span_id().to_string())
        .collect();
    linked.sort();
    // Every producer linked (a group of one goes through `oncely.delivery` with a parent).
    let delivered: Vec<String> = spans
        .iter()
        .filter(|s| s.name == "oncely.delivery" && s.parent_span_id != SpanId::INVALID)
        .map(|s| s.parent_span_id.to_string())
        .collect();
    let mut all = [linked, delivered].concat();
    all.sort();
    assert_eq!(all, parents, "the malformed one is not linked");
}
