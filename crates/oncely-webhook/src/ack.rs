//! The acker of an HTTP delivery: it records how the runtime settled the delivery, so the
//! response can say 2xx only when the runtime acked, which it does only with a `Committed`
//! proof (after the claim and effect, or the dead letter, committed).

use futures::future::BoxFuture;
use oncely_core::{Acker, Result};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

const UNSETTLED: u8 = 0;
const ACKED: u8 = 1;
const NACKED: u8 = 2;

/// How the runtime settled one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    /// Acked after a commit: answer 2xx.
    Acked,
    /// Handed back: answer 5xx, the sender retries.
    Nacked,
    /// Left unsettled (a panic outside the handler): answer 5xx.
    Unsettled,
}

/// Shared between the acker (moved into the delivery) and the request that waits.
#[derive(Debug, Clone, Default)]
pub(crate) struct Settlement(Arc<AtomicU8>);

impl Settlement {
    /// The acker to put in the delivery.
    pub(crate) fn acker(&self) -> Box<dyn Acker> {
        Box::new(HttpAcker(self.0.clone()))
    }

    /// What the runtime did.
    pub(crate) fn get(&self) -> Settled {
        match self.0.load(Ordering::Acquire) {
            ACKED => Settled::Acked,
            NACKED => Settled::Nacked,
            _ => Settled::Unsettled,
        }
    }
}

struct HttpAcker(Arc<AtomicU8>);

impl Acker for HttpAcker {
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        self.0.store(ACKED, Ordering::Release);
        Box::pin(async { Ok(()) })
    }

    fn nack(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        let _ = self
            .0
            .compare_exchange(UNSETTLED, NACKED, Ordering::AcqRel, Ordering::Acquire);
        Box::pin(async { Ok(()) })
    }
}
