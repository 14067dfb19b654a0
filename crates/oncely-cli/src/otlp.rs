//! OTLP export of the command's spans (cargo feature `otlp`, see docs/tracing.md): when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, spans go
//! to that collector over OTLP/HTTP (protobuf), service name `oncely` unless
//! `OTEL_SERVICE_NAME` says otherwise; the deliveries continue the producers' traces.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

/// Flushes and shuts the exporter down when dropped (at the end of `main`).
pub struct Guard(SdkTracerProvider);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.shutdown();
    }
}

/// The OpenTelemetry layer exporting over OTLP, if an endpoint is configured (INFO spans).
pub fn layer<S>() -> (Option<impl Layer<S>>, Option<Guard>)
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    let configured = [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some());
    if !configured {
        return (None, None);
    }
    let exporter = match opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
    {
        Ok(exporter) => exporter,
        Err(e) => {
            eprintln!("oncely: OTLP exporter not started: {e}");
            return (None, None);
        }
    };
    let service = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "oncely".into());
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name(service).build())
        .build();
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("oncely"))
        .with_filter(tracing_subscriber::filter::LevelFilter::INFO);
    (Some(layer), Some(Guard(provider)))
}
