//! What an operator sees of refused requests and of a short prune window: the counter
//! `oncely_webhook_rejected_total{consumer, reason}` (a recorder installed for this test
//! binary), one WARN per 10 s per source however many requests are refused, and the WARN of
//! a prune window shorter than the sender's retry horizon. The store is the testkit's
//! reference `MemoryStore`: the endpoint works over any oncely store.

use axum::body::Body;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use oncely_core::{Envelope, Error, Handled, Handler};
use oncely_testkit::{MemoryStore, MemoryTx};
use oncely_webhook::{Endpoint, Verifier};
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

/// Counters by `name{label=value,…}`.
#[derive(Default)]
struct Counters(Mutex<BTreeMap<String, Arc<AtomicU64>>>);

impl Counters {
    fn get(&self, key: &str) -> u64 {
        let map = self.0.lock().unwrap();
        map.get(key).map_or(0, |c| c.load(Ordering::SeqCst))
    }
}

impl Recorder for Counters {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        let counter = self.0.lock().unwrap().entry(name).or_default().clone();
        Counter::from_arc(counter)
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

fn counters() -> &'static Counters {
    static COUNTERS: OnceLock<&'static Counters> = OnceLock::new();
    COUNTERS.get_or_init(|| {
        let counters: &'static Counters = Box::leak(Box::default());
        metrics::set_global_recorder(counters).expect("the only recorder of this test binary");
        counters
    })
}

/// Log lines written through a subscriber of this thread.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    fn matching(&self, needle: &str) -> usize {
        let text = String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned();
        text.lines()
            .filter(|l| l.contains("WARN") && l.contains(needle))
            .count()
    }
}

fn capture() -> (Lines, tracing::subscriber::DefaultGuard) {
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    (lines, tracing::subscriber::set_default(subscriber))
}

struct Nothing;
impl Handler<MemoryTx> for Nothing {
    async fn handle(&self, _: &mut MemoryTx, _: &Envelope) -> Result<Handled, Error> {
        Ok(Handled::Applied)
    }
}

#[tokio::test(flavor = "current_thread")]
async fn refusals_are_counted_and_logged_once_per_interval() {
    let counters = counters();
    let (lines, _guard) = capture();
    let store = MemoryStore::new();
    let verifier = Verifier::github(["right"]).unwrap();
    let hook = Endpoint::new("gh-observed", store.clone(), Nothing, verifier);
    let forger = Verifier::github(["wrong"]).unwrap();
    for n in 0..5 {
        let headers = forger.sign(&format!("d-{n}"), b"{}", SystemTime::now());
        let mut request = http::Request::post("/").body(Body::from("{}")).unwrap();
        *request.headers_mut() = headers;
        assert_eq!(hook.receive(request).await.status(), 401);
    }
    let key = "oncely_webhook_rejected_total{consumer=gh-observed,reason=bad_signature}";
    assert_eq!(counters.get(key), 5);
    assert_eq!(
        lines.matching("webhook request refused"),
        1,
        "rate-limited to one line"
    );
    assert!(store.effects().is_empty(), "nothing applied");
}

#[tokio::test(flavor = "current_thread")]
async fn a_prune_window_shorter_than_the_retry_horizon_warns_at_start() {
    let (lines, _guard) = capture();
    let verifier = Verifier::stripe(["whsec_x"]).unwrap();
    let day = Duration::from_secs(86_400);
    let _ok = Endpoint::new("stripe-7d", MemoryStore::new(), Nothing, verifier.clone())
        .prune_window(7 * day);
    assert_eq!(lines.matching("shorter than the sender's retry horizon"), 0);
    let _short =
        Endpoint::new("stripe-1d", MemoryStore::new(), Nothing, verifier).prune_window(day);
    assert_eq!(lines.matching("shorter than the sender's retry horizon"), 1);
}
