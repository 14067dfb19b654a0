//! Settling a delivery, in one place for every path of the runtime: ack after a commit,
//! dead-letter (then ack), hand back (nack), hold while the store fails.

use super::Consumer;
use crate::error::{Error, Result};
use crate::handler::Handler;
use crate::health::Probe;
use crate::outcome::{DeadLetterReason, Outcome};
use crate::retry::Backoff;
use crate::source::Delivery;
use crate::store::{Committed, DeadLetter, Store};
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;
use tracing::warn;

impl<S: Store, H: Handler<S::Tx>> Consumer<S, H> {
    /// Acks a delivery whose effect (or dead letter) `proof` says is committed.
    pub(super) async fn ack(
        &self,
        delivery: Delivery,
        proof: Committed,
        outcome: Outcome,
    ) -> Outcome {
        self.ack_committed(delivery, proof).await;
        outcome
    }

    /// [`Self::ack`] for a delivery whose outcome is already counted.
    pub(super) async fn ack_committed(&self, delivery: Delivery, proof: Committed) {
        let limit = self.config.attempt_timeout;
        match tokio::time::timeout(limit, delivery.ack(proof)).await {
            Ok(Ok(())) => {}
            // Committed but not acked: the redelivery will be a Duplicate. Nothing is lost.
            Ok(Err(e)) => {
                warn!(error = %e, "ack failed after commit; the broker will redeliver a duplicate");
                self.stats.ack_failed();
            }
            Err(_) => {
                self.broker_too_slow("an ack");
                self.stats.ack_failed();
            }
        }
    }

    /// Hands a delivery back to the broker (shutdown while it could not be settled).
    pub(super) async fn nack(&self, delivery: Delivery, error: Error) -> Outcome {
        warn!(error = %error, "shutting down before the delivery could be settled; handed back to the broker");
        match tokio::time::timeout(self.config.attempt_timeout, delivery.nack()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %e, "nack failed; the broker redelivers after its timeout"),
            Err(_) => self.broker_too_slow("a hand-back (nack)"),
        }
        Outcome::Retry(error)
    }

    /// The broker did not take `what` within [`Consumer::attempt_timeout`]: given up (the
    /// broker redelivers the message). At WARN once a minute (a stranded connection leaves
    /// every delivery in hand unacked at once), at DEBUG in between.
    fn broker_too_slow(&self, what: &str) {
        let limit = self.config.attempt_timeout;
        if let Some(held_back) = self.ack_timeouts_logged.turn() {
            warn!(
                consumer = %self.name,
                timeout_s = limit.as_secs_f64(),
                held_back,
                "the broker did not take {what} within {limit:?}; given up, the broker will redeliver (a committed message comes back as a Duplicate); a broker connection stranded by the network? (Consumer::attempt_timeout; {held_back} more since the last such line; further ones this minute at DEBUG)"
            );
        } else {
            tracing::debug!(consumer = %self.name, "the broker did not take {what} within {limit:?}; given up");
        }
    }

    /// Holds a delivery after the store failed (see [`crate::StoreHealth`]); `None` on
    /// shutdown.
    pub(super) async fn hold(
        &self,
        error: &Error,
        backoff: &mut Backoff,
        stop: &CancellationToken,
    ) -> Option<Probe<'_>> {
        if error.is_transient() {
            self.stats.retried();
            crate::metrics::retry(&self.name);
        } else {
            self.stats.store_retried();
        }
        self.health.hold(error, backoff, stop).await
    }

    /// Stores a dead letter and acks; while the store refuses it, the delivery is held. A
    /// payload conflict comes out as [`Outcome::Conflict`], every other reason as
    /// [`Outcome::DeadLettered`].
    pub(super) async fn dead_letter(
        &self,
        delivery: Delivery,
        reason: DeadLetterReason,
        attempts: u32,
        stop: &CancellationToken,
    ) -> Outcome {
        let letter = DeadLetter {
            consumer: self.name.clone(),
            message: delivery.message().clone(),
            reason,
            attempts,
        };
        match self.store_dead_letter(&letter, stop).await {
            Ok(proof) => {
                warn!(reason = letter.reason.code(), detail = %letter.reason, "dead-lettered");
                let outcome = match letter.reason {
                    DeadLetterReason::Conflict { stored, received } => {
                        Outcome::Conflict { stored, received }
                    }
                    reason => Outcome::DeadLettered(reason),
                };
                self.ack(delivery, proof, outcome).await
            }
            Err(e) => self.nack(delivery, e).await,
        }
    }

    /// Inserts `letter`, holding and retrying while the store fails; fails only on shutdown.
    /// The proof stands for the stored dead letter.
    async fn store_dead_letter(
        &self,
        letter: &DeadLetter,
        stop: &CancellationToken,
    ) -> Result<Committed> {
        self.held(
            stop,
            |_| true,
            || async { self.store_call(self.store.dead_letter(letter)).await },
        )
        .await
        .map(|()| Committed::new())
    }

    /// Runs one store call (an attempt's transaction, a dead letter's insert, an inbox read)
    /// within [`Consumer::attempt_timeout`]; past it the future is dropped, which rolls a
    /// transaction back, and the store is reported unavailable (held, retried with backoff).
    /// Every call the runtime makes to the store goes through here: one without a bound, on
    /// a connection the network stranded, would wait forever and say nothing.
    /// Boxed: the attempt's future is deep, and a timer around it in every caller's state
    /// would push the callers past the compiler's type-layout depth.
    pub(super) fn within_attempt_timeout<'a, T: Send + 'a>(
        &'a self,
        attempt: impl Future<Output = T> + Send + 'a,
    ) -> futures::future::BoxFuture<'a, Result<T>> {
        let limit = self.config.attempt_timeout;
        Box::pin(async move {
            tokio::time::timeout(limit, attempt).await.map_err(|_| {
                warn!(
                    consumer = %self.name,
                    timeout_s = limit.as_secs_f64(),
                    "a store call did not finish within {limit:?}; given up (a transaction rolled back) and retried (a database connection stranded by the network, or a handler waiting on something? Consumer::attempt_timeout)"
                );
                Error::unavailable(format!(
                    "the store call did not finish within {limit:?} (Consumer::attempt_timeout)"
                ))
            })
        })
    }

    /// A store call that returns a `Result`, within [`Consumer::attempt_timeout`]
    /// ([`Self::within_attempt_timeout`]): its own error and the timeout's are one error.
    /// Not an `async fn`: its state would hold `call`'s (deep) type unboxed.
    pub(super) fn store_call<'a, T: Send + 'a>(
        &'a self,
        call: impl Future<Output = Result<T>> + Send + 'a,
    ) -> impl Future<Output = Result<T>> + Send + 'a {
        use futures::FutureExt;
        self.within_attempt_timeout(call)
            .map(|bounded| bounded.and_then(|result| result))
    }

    /// Runs `op` until it succeeds or fails with an error `holds` does not cover; an error it
    /// covers holds the delivery ([`Self::hold`]) and `op` runs again, as the only probe
    /// while the store is unhealthy. Fails with a covered error only on shutdown.
    pub(super) async fn held<T, Fut>(
        &self,
        stop: &CancellationToken,
        holds: impl Fn(&Error) -> bool,
        mut op: impl FnMut() -> Fut,
    ) -> Result<T>
    where
        Fut: Future<Output = Result<T>>,
    {
        let mut backoff = Backoff::store();
        let mut probe: Probe<'_> = None;
        loop {
            let started = self.health.stamp();
            let result = op().await;
            drop(probe.take());
            match result {
                Err(e) if holds(&e) => match self.hold(&e, &mut backoff, stop).await {
                    Some(turn) => probe = turn,
                    None => return Err(e),
                },
                other => {
                    if other.is_ok() {
                        self.health.succeeded(started);
                    }
                    return other;
                }
            }
        }
    }
}

/// How far ahead of this host's clock a source time may be before it is logged as skew.
const MAX_CLOCK_SKEW: Duration = Duration::from_secs(300);

/// The age of a message sent at `sent`. A source time in the future (the producer's clock is
/// ahead) counts as "now", so it is never late; beyond [`MAX_CLOCK_SKEW`] it is logged.
pub(crate) fn age(sent: SystemTime) -> Duration {
    match SystemTime::now().duration_since(sent) {
        Ok(age) => age,
        Err(ahead) => {
            let ahead = ahead.duration();
            if ahead > MAX_CLOCK_SKEW {
                warn!(
                    ahead_s = ahead.as_secs(),
                    "source time is {} s in the future (clock skew beyond {} s); treated as now",
                    ahead.as_secs(),
                    MAX_CLOCK_SKEW.as_secs()
                );
            }
            Duration::ZERO
        }
    }
}

pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn future_source_times_count_as_now() {
        let hour = Duration::from_secs(3600);
        assert_eq!(age(SystemTime::now() + hour), Duration::ZERO);
        assert_eq!(
            age(SystemTime::now() + Duration::from_secs(10)),
            Duration::ZERO
        );
        assert!(age(SystemTime::now() - hour) >= hour);
    }
}
