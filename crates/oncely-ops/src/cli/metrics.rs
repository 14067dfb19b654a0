//! `--metrics-addr`: serves the `metrics` facade's counters, gauges and histograms in the
//! Prometheus text format at `http://ADDR/metrics` while a command runs.

use anyhow::{Context, Result};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use std::io::Read;
use std::net::SocketAddr;

/// Flags to serve metrics.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics at this address (http://ADDR/metrics), e.g. 127.0.0.1:9899.
    #[arg(long, env = "ONCELY_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// After the run, keep serving until stdin is closed or Ctrl-C, so the final values can be scraped.
    #[arg(long, requires = "metrics_addr")]
    pub metrics_hold: bool,
}

/// A running endpoint (or none).
#[derive(Debug)]
pub struct MetricsServer {
    hold: bool,
}

/// Latency buckets (seconds) for the `*_seconds` histograms.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Installs the Prometheus recorder and its HTTP listener when `--metrics-addr` is given.
/// Must run inside the tokio runtime.
pub fn serve(args: &MetricsArgs) -> Result<MetricsServer> {
    let Some(addr) = args.metrics_addr else {
        return Ok(MetricsServer { hold: false });
    };
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), BUCKETS)
        .context("configuring histogram buckets")?
        .install()
        .with_context(|| format!("serving metrics on {addr}"))?;
    eprintln!("metrics: http://{addr}/metrics");
    Ok(MetricsServer {
        hold: args.metrics_hold,
    })
}

impl MetricsServer {
    /// With `--metrics-hold`, waits until stdin reaches end-of-file or Ctrl-C.
    pub async fn hold(self) {
        if !self.hold {
            return;
        }
        eprintln!("metrics: holding; close stdin or press Ctrl-C to exit");
        let stdin_closed = tokio::task::spawn_blocking(|| {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
        });
        tokio::select! {
            _ = stdin_closed => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
}
