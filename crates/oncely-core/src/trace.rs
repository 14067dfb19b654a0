//! W3C trace context through the brokers: the one place oncely reads and writes
//! `traceparent` / `tracestate` (with OpenTelemetry's [`TraceContextPropagator`]).
//!
//! - The consumer runtime continues the trace a message carries in its headers
//!   ([`Meta::headers`](crate::Meta::headers)): the `oncely.delivery` span's parent is the producer's span, so the
//!   handler's and the effect's spans sit in the producer's trace.
//! - oncely's producers and the outbox call [`inject_current`] (through [`traced`] for a
//!   whole message): a message that carries no `traceparent` gets the current span's.
//! - Anything else that receives a trace context (an HTTP request) calls [`continue_trace`].
//!
//! All of it works through [`tracing`] spans and does nothing until a
//! [`tracing_opentelemetry`] layer is installed in the subscriber (see `docs/tracing.md`).
//! A malformed or hostile `traceparent` is ignored: the span keeps its place and starts a
//! fresh trace if it has no parent; the delivery is processed as usual.

use crate::envelope::RawEnvelope;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::marker::PhantomData;
use tracing_opentelemetry::OpenTelemetrySpanExt;

pub use opentelemetry::Context;

/// The W3C header that carries the parent span: `00-<trace id>-<span id>-<flags>`.
pub const TRACEPARENT: &str = "traceparent";
/// The W3C header that carries vendor trace state alongside [`TRACEPARENT`].
pub const TRACESTATE: &str = "tracestate";

/// Header lookup by name, as the propagator wants it.
struct Lookup<'a, F>(F, PhantomData<&'a str>);

impl<'a, F: Fn(&str) -> Option<&'a str>> Extractor for Lookup<'a, F> {
    fn get(&self, key: &str) -> Option<&str> {
        (self.0)(key)
    }
    fn keys(&self) -> Vec<&str> {
        vec![TRACEPARENT, TRACESTATE]
    }
}

struct Headers<'a>(&'a mut BTreeMap<String, String>);

impl Injector for Headers<'_> {
    fn set(&mut self, key: &str, value: String) {
        if !value.is_empty() {
            self.0.insert(key.to_owned(), value);
        }
    }
}

/// The remote parent a `traceparent` (and `tracestate`) found through `lookup` names, or
/// `None` when there is none or it is malformed.
///
/// ```
/// use oncely_core::trace::{parent_from, TRACEPARENT};
/// use std::collections::BTreeMap;
/// let mut headers = BTreeMap::new();
/// headers.insert(TRACEPARENT.to_owned(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_owned());
/// assert!(parent_from(|name| headers.get(name).map(String::as_str)).is_some());
/// headers.insert(TRACEPARENT.to_owned(), "00-not-a-trace-01".to_owned());
/// assert!(parent_from(|name| headers.get(name).map(String::as_str)).is_none());
/// ```
pub fn parent_from<'a>(lookup: impl Fn(&str) -> Option<&'a str>) -> Option<Context> {
    let cx = TraceContextPropagator::new()
        .extract_with_context(&Context::new(), &Lookup(lookup, PhantomData));
    cx.span().span_context().is_valid().then_some(cx)
}

/// Makes the trace context found through `lookup` the parent of `span`, which must not have
/// been entered yet. Returns `false`, leaving `span` as it was, when there is no valid
/// `traceparent` or no OpenTelemetry layer is installed.
///
/// This is the call for any edge that receives a trace context, e.g. an HTTP layer:
///
/// ```
/// use oncely_core::trace::continue_trace;
/// let incoming: Vec<(&str, &str)> =
///     vec![("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")];
/// let span = tracing::info_span!("http.request");
/// // `false` here: no tracing-opentelemetry layer is installed in this example.
/// let continued = continue_trace(&span, |name| {
///     incoming.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| *v)
/// });
/// assert!(!continued);
/// ```
pub fn continue_trace<'a>(span: &tracing::Span, lookup: impl Fn(&str) -> Option<&'a str>) -> bool {
    parent_from(lookup).is_some_and(|cx| span.set_parent(cx).is_ok())
}

/// Writes the current span's trace context into `headers` (`traceparent`, and `tracestate`
/// when not empty), unless they already carry a `traceparent`: a message keeps the trace
/// it was created in. Does nothing outside a span known to OpenTelemetry.
///
/// ```
/// use oncely_core::trace::{inject_current, TRACEPARENT};
/// use std::collections::BTreeMap;
/// let mut headers = BTreeMap::new();
/// inject_current(&mut headers); // no OpenTelemetry layer here: nothing to write
/// assert!(headers.get(TRACEPARENT).is_none());
/// ```
pub fn inject_current(headers: &mut BTreeMap<String, String>) {
    if header(headers, TRACEPARENT).is_some() {
        return;
    }
    let cx = tracing::Span::current().context();
    TraceContextPropagator::new().inject_context(&cx, &mut Headers(headers));
}

/// `message` with the current trace context in its headers ([`inject_current`]): borrowed
/// when it already carries a `traceparent` or there is no current trace, else a copy.
/// oncely's producers send what this returns.
///
/// ```
/// use oncely_core::RawEnvelope;
/// let message = RawEnvelope::new("m-1", "{}");
/// let sent = oncely_core::trace::traced(&message);
/// assert_eq!(*sent, message); // no current trace here
/// ```
pub fn traced(message: &RawEnvelope) -> Cow<'_, RawEnvelope> {
    if header(&message.meta.headers, TRACEPARENT).is_some() {
        return Cow::Borrowed(message);
    }
    let mut headers = BTreeMap::new();
    inject_current(&mut headers);
    if headers.is_empty() {
        return Cow::Borrowed(message);
    }
    let mut owned = message.clone();
    owned.meta.headers.extend(headers);
    Cow::Owned(owned)
}

/// Sets the parent of a delivery's span from the message's headers; a missing or malformed
/// context leaves the span as it was.
pub(crate) fn set_delivery_parent(span: &tracing::Span, headers: &BTreeMap<String, String>) {
    continue_trace(span, |name| header(headers, name));
}

/// The span context the message's headers carry, for links (a group commit's span).
pub(crate) fn span_context_of(
    headers: &BTreeMap<String, String>,
) -> Option<opentelemetry::trace::SpanContext> {
    parent_from(|name| header(headers, name)).map(|cx| cx.span().span_context().clone())
}

/// The header `name`; if absent, one whose name differs only in ASCII case (a producer that
/// wrote `Traceparent`).
fn header<'a>(headers: &'a BTreeMap<String, String>, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .or_else(|| {
            headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v)
        })
        .map(String::as_str)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use oncely_testkit::otel::in_memory as otel;
    use opentelemetry::trace::{SpanId, TraceId};
    use opentelemetry_sdk::trace::SpanData;
    use proptest::prelude::*;

    pub(crate) fn span<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
        spans
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no span {name} in {spans:?}"))
    }

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    fn headers(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn round_trip_through_headers() {
        let (subscriber, exporter, provider) = otel();
        tracing::subscriber::with_default(subscriber, || {
            let mut carried = BTreeMap::new();
            tracing::info_span!("producer").in_scope(|| inject_current(&mut carried));
            assert!(carried[TRACEPARENT].starts_with("00-"), "{carried:?}");
            assert!(
                !carried.contains_key(TRACESTATE),
                "empty tracestate not written"
            );
            let consumer = tracing::info_span!("consumer");
            assert!(continue_trace(&consumer, |n| carried
                .get(n)
                .map(String::as_str)));
            consumer.in_scope(|| {});
        });
        drop(provider.force_flush());
        let spans = exporter.get_finished_spans().unwrap();
        let (producer, consumer) = (span(&spans, "producer"), span(&spans, "consumer"));
        assert_eq!(
            consumer.span_context.trace_id(),
            producer.span_context.trace_id()
        );
        assert_eq!(consumer.parent_span_id, producer.span_context.span_id());
    }

    #[test]
    fn remote_parent_and_tracestate_are_kept() {
        let (subscriber, exporter, provider) = otel();
        let carried = headers(&[(TRACEPARENT, PARENT), (TRACESTATE, "vendor=abc")]);
        tracing::subscriber::with_default(subscriber, || {
            let delivery = tracing::info_span!("delivery");
            set_delivery_parent(&delivery, &carried);
            delivery.in_scope(|| {
                let mut out = BTreeMap::new();
                inject_current(&mut out);
                assert_eq!(out[TRACESTATE], "vendor=abc", "tracestate travels on");
                let mut kept = carried.clone();
                inject_current(&mut kept);
                assert_eq!(kept, carried, "an existing traceparent is not replaced");
            });
        });
        drop(provider.force_flush());
        let spans = exporter.get_finished_spans().unwrap();
        let delivery = span(&spans, "delivery");
        assert_eq!(
            delivery.span_context.trace_id(),
            TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").unwrap()
        );
        assert_eq!(
            delivery.parent_span_id,
            SpanId::from_hex("b7ad6b7169203331").unwrap()
        );
    }

    #[test]
    fn malformed_traceparent_is_ignored() {
        let (subscriber, exporter, provider) = otel();
        let bad = [
            "",
            "garbage",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "00-\u{1F600}\u{1F600}-b7ad6b7169203331-01",
        ];
        tracing::subscriber::with_default(subscriber, || {
            for value in bad {
                let carried = headers(&[(TRACEPARENT, value), (TRACESTATE, "=,=,\u{0}")]);
                assert!(parent_from(|n| carried.get(n).map(String::as_str)).is_none());
                let delivery = tracing::info_span!("delivery", value);
                set_delivery_parent(&delivery, &carried);
                delivery.in_scope(|| {});
            }
        });
        drop(provider.force_flush());
        let spans = exporter.get_finished_spans().unwrap();
        assert_eq!(spans.len(), bad.len());
        for s in &spans {
            assert_eq!(s.parent_span_id, SpanId::INVALID, "a fresh trace: {s:?}");
            assert!(s.span_context.is_valid());
        }
    }

    #[test]
    fn header_names_match_in_any_case() {
        let carried = headers(&[("Traceparent", PARENT)]);
        assert!(span_context_of(&carried).is_some());
        let mut kept = carried.clone();
        inject_current(&mut kept);
        assert_eq!(kept, carried);
    }

    #[test]
    fn traced_copies_only_when_it_adds_a_context() {
        let (subscriber, _exporter, _provider) = otel();
        let plain = RawEnvelope::new("m-1", "{}");
        let mut carrying = plain.clone();
        carrying
            .meta
            .headers
            .insert(TRACEPARENT.to_owned(), PARENT.to_owned());
        assert!(matches!(traced(&plain), Cow::Borrowed(_)), "no span");
        tracing::subscriber::with_default(subscriber, || {
            tracing::info_span!("send").in_scope(|| {
                assert!(matches!(traced(&carrying), Cow::Borrowed(_)));
                let sent = traced(&plain);
                assert!(sent.meta.headers.contains_key(TRACEPARENT));
                assert_eq!(sent.payload, plain.payload);
            });
        });
    }

    proptest! {
        #[test]
        fn any_header_text_extracts_without_panic(parent in ".{0,80}", state in ".{0,80}") {
            let carried = headers(&[(TRACEPARENT, &parent), (TRACESTATE, &state)]);
            let _ = parent_from(|n| carried.get(n).map(String::as_str));
        }
    }
}
