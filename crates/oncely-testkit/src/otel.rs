//! An OpenTelemetry pipeline that exports into memory, for tests of trace context: the spans
//! oncely's `tracing` spans become, read back with their trace and parent ids.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use tracing_subscriber::layer::SubscriberExt;

/// A subscriber with an OpenTelemetry layer whose spans go to the returned exporter; flush
/// the provider before reading them.
///
/// ```
/// let (subscriber, exporter, provider) = oncely_testkit::otel::in_memory();
/// tracing::subscriber::with_default(subscriber, || {
///     let _span = tracing::info_span!("claim").entered();
/// });
/// provider.force_flush().unwrap();
/// let spans = exporter.get_finished_spans().unwrap();
/// assert_eq!(spans[0].name, "claim");
/// ```
pub fn in_memory() -> (
    impl tracing::Subscriber + Send + Sync,
    InMemorySpanExporter,
    SdkTracerProvider,
) {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("oncely-test"));
    (
        tracing_subscriber::registry().with(layer),
        exporter,
        provider,
    )
}
