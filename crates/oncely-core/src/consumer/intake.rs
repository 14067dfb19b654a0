//! Where the run loop takes deliveries from. One delivery per transaction: straight from the
//! source. With group commit: from a reader task that keeps reading the source ahead into a
//! buffer of `max_batch` deliveries, so "what is ready" is what the buffer holds, and a
//! pending `Source::next` is never dropped halfway through a read (which would strand the
//! deliveries it was receiving until the broker's redelivery timeout).

use crate::id::ConsumerName;
use crate::source::{Delivery, Source};
use futures::FutureExt;
use std::panic::AssertUnwindSafe;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::warn;

const SOURCE_RETRY: Duration = Duration::from_millis(200);

pub(super) enum Intake<Src> {
    Direct {
        source: Src,
        name: ConsumerName,
    },
    Buffered {
        ready: mpsc::Receiver<Delivery>,
        reader: JoinHandle<()>,
        stop: CancellationToken,
    },
}

impl<Src: Source> Intake<Src> {
    /// Reads `source` directly (`max_batch` 1) or through a reader task.
    pub(super) fn new(
        source: Src,
        name: ConsumerName,
        max_batch: usize,
        shutdown: &CancellationToken,
    ) -> Self {
        if max_batch <= 1 {
            return Self::Direct { source, name };
        }
        let (tx, ready) = mpsc::channel(max_batch);
        let stop = shutdown.child_token();
        let reader = tokio::spawn(read_ahead(source, name, tx, stop.clone()));
        Self::Buffered {
            ready,
            reader,
            stop,
        }
    }

    /// The next delivery, waiting for it; `None` once the source has ended. Source errors are
    /// logged and retried after 200 ms.
    pub(super) async fn next(&mut self) -> Option<Delivery> {
        match self {
            Self::Direct { source, name } => next_retrying(source, name).await,
            Self::Buffered { ready, .. } => ready.recv().await,
        }
    }

    /// Adds to `group`, up to `max`, the deliveries that are ready, then what arrives before
    /// `linger` has passed (zero: only what is ready).
    pub(super) async fn fill(
        &mut self,
        group: &mut Vec<Delivery>,
        max: usize,
        linger: Duration,
        shutdown: &CancellationToken,
    ) {
        let Self::Buffered { ready, .. } = self else {
            return;
        };
        let deadline = Instant::now() + linger;
        while group.len() < max {
            if let Ok(delivery) = ready.try_recv() {
                group.push(delivery);
                continue;
            }
            if linger.is_zero() {
                return;
            }
            // `recv` is cancel-safe: a timeout never loses a delivery.
            let next = tokio::select! {
                biased;
                _ = shutdown.cancelled() => return,
                next = tokio::time::timeout_at(deadline, ready.recv()) => next,
            };
            match next {
                Ok(Some(delivery)) => group.push(delivery),
                _ => return,
            }
        }
    }

    /// Stops the reader; deliveries still buffered are dropped unsettled (the broker
    /// redelivers them).
    pub(super) async fn close(self) {
        if let Self::Buffered {
            ready,
            reader,
            stop,
        } = self
        {
            stop.cancel();
            drop(ready);
            let _ = reader.await;
        }
    }
}

/// The next delivery of `source`, `None` once it has ended; errors (and panics) are logged
/// and retried after 200 ms.
async fn next_retrying<Src: Source>(source: &mut Src, name: &ConsumerName) -> Option<Delivery> {
    loop {
        match guarded_next(source).await {
            Ok(next) => return next,
            Err(e) => {
                warn!(consumer = %name, error = %e, "source failed; retrying in 200 ms");
                tokio::time::sleep(SOURCE_RETRY).await;
            }
        }
    }
}

/// `Source::next`, with a panic inside it turned into an error (logged and retried like one),
/// so a buggy adapter never takes the consumer down.
async fn guarded_next<Src: Source>(source: &mut Src) -> crate::Result<Option<Delivery>> {
    AssertUnwindSafe(source.next())
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| {
            Err(crate::Error::transient(format!(
                "the source panicked: {}",
                crate::panic_message(&*panic)
            )))
        })
}

async fn read_ahead<Src: Source>(
    mut source: Src,
    name: ConsumerName,
    ready: mpsc::Sender<Delivery>,
    stop: CancellationToken,
) {
    loop {
        let next = tokio::select! {
            _ = stop.cancelled() => return,
            next = next_retrying(&mut source, &name) => next,
        };
        let Some(delivery) = next else { return };
        let sent = tokio::select! {
            _ = stop.cancelled() => return,
            sent = ready.send(delivery) => sent,
        };
        if sent.is_err() {
            return;
        }
    }
}
