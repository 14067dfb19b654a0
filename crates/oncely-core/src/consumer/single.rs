//! One message in its own transaction: begin → claim → handler → commit, with the retry
//! policy for transient failures and the store hold for outages. Batches fall back to it.

use super::{Consumer, LatePolicy, settle::age, settle::panic_message};
use crate::envelope::{Envelope, PayloadHash};
use crate::error::{Error, ErrorKind};
use crate::handler::Handler;
use crate::health::Probe;
use crate::id::MessageId;
use crate::outcome::{DeadLetterReason, Handled, Outcome};
use crate::retry::Backoff;
use crate::source::Delivery;
use crate::store::{Claim, Committed, Store};
use futures::FutureExt;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info_span};

/// What one pass of the transaction came to.
enum Attempt {
    Done(Outcome, Committed),
    Conflict(PayloadHash),
    Late(Duration, Duration),
    /// `landed`: the commit itself failed (transiently) after the handler ran; its answer
    /// may have been lost after the commit landed, with this outcome.
    Failed {
        error: Error,
        in_handler: bool,
        landed: Option<Outcome>,
    },
    Panicked(String),
}

impl<S: Store, H: Handler<S::Tx>> Consumer<S, H> {
    /// Settles one delivery through the whole contract, in a span of its own (`oncely.delivery`)
    /// whose parent is the trace context the message carries, if any.
    pub(super) async fn settle_one(&self, delivery: Delivery, stop: &CancellationToken) -> Outcome {
        let span = info_span!(
            "oncely.delivery",
            consumer = %self.name,
            message_id = delivery.message().display_id().unwrap_or_default(),
            attempt = delivery.attempt(),
            outcome = tracing::field::Empty,
        );
        // The producer's span (W3C `traceparent` in the headers) is the parent, if valid.
        crate::trace::set_delivery_parent(&span, &delivery.message().meta.headers);
        let outcome = self.settle(delivery, stop).instrument(span.clone()).await;
        span.record("outcome", outcome.name());
        span.in_scope(|| debug!(outcome = outcome.name(), "delivery settled"));
        outcome
    }

    async fn settle(&self, delivery: Delivery, stop: &CancellationToken) -> Outcome {
        let envelope = match self.screen(&delivery) {
            Ok(envelope) => envelope,
            Err(reason) => return self.dead_letter(delivery, reason, 1, stop).await,
        };
        let mut delays = self.config.retry.delays();
        let mut attempt = 1;
        let mut store_backoff = Backoff::store();
        let mut probe: Probe<'_> = None;
        loop {
            let started = self.health.stamp();
            let result = match self.within_attempt_timeout(self.attempt(&envelope)).await {
                Ok(result) => result,
                Err(error) => Attempt::Failed {
                    error,
                    in_handler: false,
                    landed: None,
                },
            };
            drop(probe.take());
            if !matches!(result, Attempt::Failed { .. }) {
                self.health.succeeded(started);
            }
            let reason = match result {
                Attempt::Done(outcome, proof) => return self.ack(delivery, proof, outcome).await,
                Attempt::Conflict(stored) => DeadLetterReason::Conflict {
                    stored,
                    received: envelope.payload_hash(),
                },
                Attempt::Late(age, window) => DeadLetterReason::Late { age, window },
                Attempt::Panicked(msg) => DeadLetterReason::Panicked(msg),
                Attempt::Failed {
                    error, in_handler, ..
                } if error.is_unavailable() || !in_handler => {
                    // The store failed (or is unavailable to the handler): hold the delivery.
                    match self.hold(&error, &mut store_backoff, stop).await {
                        Some(turn) => {
                            probe = turn;
                            continue;
                        }
                        None => return self.nack(delivery, error).await,
                    }
                }
                Attempt::Failed { error, landed, .. } => {
                    self.health.succeeded(started);
                    if error.is_transient() {
                        if let Some(delay) = delays.next() {
                            debug!(error = %error, ?delay, attempt, "transient failure; retrying");
                            self.stats.retried();
                            crate::metrics::retry(&self.name);
                            attempt += 1;
                            tokio::select! {
                                biased;
                                _ = stop.cancelled() => return self.nack(delivery, error).await,
                                _ = tokio::time::sleep(delay) => continue,
                            }
                        }
                        // The last commit failed, but its answer may have been lost after
                        // it landed: the inbox tells. Dead-lettering a message whose effect
                        // is committed would report a failure that did not happen (found by
                        // oncely-sim, seed 419; tests/commit_answer_lost.rs).
                        if let Some(outcome) = landed {
                            match self.commit_landed(&envelope, stop).await {
                                Ok(true) => {
                                    return self.ack(delivery, Committed::new(), outcome).await;
                                }
                                Ok(false) => {}
                                Err(e) => return self.nack(delivery, e).await,
                            }
                        }
                        DeadLetterReason::AttemptsExhausted {
                            attempts: attempt,
                            last_error: error.to_string(),
                        }
                    } else if error.kind() == ErrorKind::Undecodable {
                        DeadLetterReason::UndecodablePayload(error.to_string())
                    } else {
                        DeadLetterReason::Permanent(error.to_string())
                    }
                }
            };
            return self.dead_letter(delivery, reason, attempt, stop).await;
        }
    }

    /// The message inside a delivery, or why it can never be processed.
    pub(super) fn screen(&self, delivery: &Delivery) -> Result<Envelope, DeadLetterReason> {
        if let Some(why) = delivery.defect() {
            return Err(DeadLetterReason::UndecodableEnvelope(why.to_owned()));
        }
        let raw = delivery.message();
        let id = MessageId::parse_optional(raw.id.as_deref()).map_err(DeadLetterReason::BadId)?;
        Ok(Envelope::from_parts(
            id,
            raw.payload.clone(),
            raw.meta.clone(),
        ))
    }

    /// One pass of begin → claim → handler → commit. Acks nothing.
    async fn attempt(&self, envelope: &Envelope) -> Attempt {
        let store_err = |error| Attempt::Failed {
            error,
            in_handler: false,
            landed: None,
        };
        let hash = envelope.payload_hash();
        if self.config.check_inbox_first {
            match self
                .store
                .committed_claim(&self.name, envelope.id(), hash)
                .await
            {
                Ok(true) => return Attempt::Done(Outcome::Duplicate, Committed::new()),
                Ok(false) => {}
                Err(e) => return store_err(e),
            }
        }
        let mut tx = match self.store.begin().await {
            Ok(tx) => tx,
            Err(e) => return store_err(e),
        };
        let claim = match self
            .store
            .claim(&mut tx, &self.name, envelope.id(), hash)
            .await
        {
            Ok(c) => c,
            Err(e) => return store_err(e),
        };
        let outcome = match claim {
            Claim::Conflict { stored } => {
                let _ = self.store.rollback(tx).await;
                return Attempt::Conflict(stored);
            }
            Claim::Duplicate => Outcome::Duplicate,
            Claim::Fresh => {
                if let Some((age, window)) = self.late(envelope) {
                    let _ = self.store.rollback(tx).await;
                    return Attempt::Late(age, window);
                }
                let started = Instant::now();
                let run = AssertUnwindSafe(self.handler.handle(&mut tx, envelope))
                    .catch_unwind()
                    .await;
                crate::metrics::handler_time(&self.name, started.elapsed());
                match run {
                    Err(panic) => return Attempt::Panicked(panic_message(&*panic)),
                    Ok(Err(error)) => {
                        let _ = self.store.rollback(tx).await;
                        return Attempt::Failed {
                            error,
                            in_handler: true,
                            landed: None,
                        };
                    }
                    Ok(Ok(Handled::Applied)) => Outcome::Applied,
                    Ok(Ok(Handled::Stale)) => Outcome::Stale,
                }
            }
        };
        let started = Instant::now();
        let committed = self.store.commit(tx).await;
        crate::metrics::commit_time(&self.name, started.elapsed());
        match committed {
            Ok(()) => Attempt::Done(outcome, Committed::new()),
            // A transient commit failure after the handler ran is the handler's attempt
            // failing (e.g. PostgreSQL refusing to commit a transaction the handler let abort):
            // it counts toward the retry policy and ends in a dead letter, never in a hold
            // that retries the same doomed effect forever.
            Err(e) if e.is_transient() && !matches!(outcome, Outcome::Duplicate) => {
                Attempt::Failed {
                    error: e,
                    in_handler: true,
                    landed: Some(outcome),
                }
            }
            Err(e) => store_err(e),
        }
    }

    /// Whether the inbox holds `envelope`'s claim with its payload hash: a commit reported
    /// failed did land after all (or another delivery of the same message committed; either
    /// way its effect is committed once). While the store cannot answer, the delivery is
    /// held as for any store failure (deciding without the answer could dead-letter a
    /// committed message: oncely-sim seed 145488); `Err` only on shutdown.
    async fn commit_landed(
        &self,
        envelope: &Envelope,
        stop: &CancellationToken,
    ) -> crate::Result<bool> {
        let hash = envelope.payload_hash();
        self.held(
            stop,
            |_| true,
            || async {
                self.store_call(self.store.committed_claim(&self.name, envelope.id(), hash))
                    .await
            },
        )
        .await
    }

    /// `(age, window)` when `envelope` is a late duplicate risk to quarantine.
    pub(super) fn late(&self, envelope: &Envelope) -> Option<(Duration, Duration)> {
        let window = self.config.late_window?;
        let age = age(envelope.meta().source_time?);
        (age > window && self.config.late_policy == LatePolicy::Quarantine).then_some((age, window))
    }
}
