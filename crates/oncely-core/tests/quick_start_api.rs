//! The quick start's API: a consumer named by text, a closure handler (`handler_fn`), and
//! `run_until_signal`, which stops on SIGTERM after the deliveries in flight.

mod support;

use oncely_core::{Consumer, ConsumerName, Error, Handled, MemorySource, RawEnvelope, handler_fn};
use std::time::Duration;
use support::{MemStore, MemTx};

fn publish_with_duplicates(source: &MemorySource, n: usize) -> Vec<String> {
    let ids: Vec<String> = (0..n).map(|i| format!("m-{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        source.publish(RawEnvelope::new(id.clone(), "1"));
        if i % 3 == 0 {
            source.publish(RawEnvelope::new(id.clone(), "1"));
        }
    }
    source.publish(RawEnvelope::new("bad", "not a number"));
    ids
}

/// The handler of the quick start, over the test store's transaction.
fn count_effects() -> impl oncely_core::Handler<MemTx> {
    handler_fn(|tx: &mut MemTx, msg| {
        Box::pin(async move {
            let _amount: i64 = std::str::from_utf8(msg.payload())
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| Error::permanent("payload is not an amount"))?;
            tokio::task::yield_now().await; // the future holds `tx` across an await
            tx.effect(msg.id().as_str());
            Ok(Handled::Applied)
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closure_handler_under_a_text_name_applies_each_message_once() {
    let store = MemStore::default();
    let source = MemorySource::new();
    let ids = publish_with_duplicates(&source, 60);
    source.close();
    let consumer = Consumer::new("billing", store.clone(), count_effects()).concurrency(4);
    assert_eq!(consumer.name(), &ConsumerName::new("billing").unwrap());
    let stats = consumer.run_until_signal(source.clone()).await.unwrap();
    let mut ledger = store.ledger();
    ledger.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(
        ledger, want,
        "one effect per id, counted in the store ({stats:?})"
    );
    assert_eq!(store.dead_letters(), vec!["bad".to_owned()]);
    assert_eq!(source.unacked(), 0);
}

#[test]
fn an_invalid_name_as_text_panics_with_the_reason() {
    let caught = std::panic::catch_unwind(|| {
        Consumer::new("", MemStore::default(), count_effects());
    });
    let panic = caught.expect_err("an empty name must not make a consumer");
    let text = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(text.contains("invalid consumer name \"\""), "{text}");
    assert!(text.contains("ConsumerName::new"), "{text}");
    // The fallible spelling returns the same problem as an error.
    assert!(ConsumerName::new("bad\nname").is_err());
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_until_signal_stops_on_sigterm_after_the_deliveries_in_flight() {
    use tokio::signal::unix::{SignalKind, signal};
    // Listening first keeps this test process alive whatever the timing of the signal.
    let mut term = signal(SignalKind::terminate()).expect("listen for SIGTERM");
    let store = MemStore::default();
    let source = MemorySource::new(); // never closed: only the signal ends the run
    let ids = publish_with_duplicates(&source, 20);
    let consumer = Consumer::new("billing", store.clone(), count_effects());
    let run = tokio::spawn({
        let consumer = consumer.clone();
        let source = source.clone();
        async move { consumer.run_until_signal(source).await }
    });
    while store.ledger().len() < ids.len() || source.unacked() > 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await; // the run's listener is up
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &std::process::id().to_string()])
        .status()
        .expect("run kill");
    assert!(kill.success());
    term.recv().await;
    let stats = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the run stops on SIGTERM")
        .unwrap()
        .unwrap();
    assert_eq!(store.ledger().len(), ids.len(), "{stats:?}");
    assert_eq!(source.unacked(), 0);
}
