//! Many messages in one transaction: one claim statement ([`Store::claim_batch`]), the fresh
//! messages through [`Handler::handle_batch`], one commit, then every delivery acked. When the
//! handler or the store fails, the batch is rolled back and its messages go through the
//! per-message path one at a time, so the failing message is isolated (retried or
//! dead-lettered per its error kind) and the others apply once. While the store is
//! unavailable the batch is held and retried whole.

use super::Consumer;
use crate::envelope::{Envelope, PayloadHash};
use crate::error::{Error, Result};
use crate::handler::Handler;
use crate::id::MessageId;
use crate::outcome::{DeadLetterReason, Handled, Outcome};
use crate::source::Delivery;
use crate::store::{Claim, Committed, Store};
use futures::FutureExt;
use futures::future::join_all;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info_span, warn};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// What one message of a committed batch came to: settled messages carry their proof.
enum Committable {
    Done(Outcome, Committed),
    Conflict(PayloadHash),
}

#[derive(Debug, Default)]
pub(super) struct BatchCounts {
    committed: AtomicU64,
    fallbacks: AtomicU64,
    /// Duplicates were seen lately: read the inbox before claiming the next group.
    duplicates_seen: AtomicBool,
}

/// How batches went so far (see [`Consumer::group_commit`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupCommitStats {
    /// Batches committed in one transaction.
    pub committed: u64,
    /// Batches rolled back and processed one message at a time (a handler or the store failed).
    pub fallbacks: u64,
}

impl BatchCounts {
    pub(super) fn snapshot(&self) -> GroupCommitStats {
        GroupCommitStats {
            committed: self.committed.load(Relaxed),
            fallbacks: self.fallbacks.load(Relaxed),
        }
    }
}

impl<S: Store, H: Handler<S::Tx>> Consumer<S, H> {
    /// Settles several deliveries: bad ids, undecodable envelopes and late messages through
    /// the per-message path (which dead-letters them), the rest in one transaction.
    pub(super) async fn settle_many(
        &self,
        deliveries: Vec<Delivery>,
        stop: &CancellationToken,
    ) -> Vec<Outcome> {
        let mut outcomes: Vec<Option<Outcome>> = Vec::with_capacity(deliveries.len());
        let mut valid = Vec::with_capacity(deliveries.len());
        let mut pending = Vec::with_capacity(deliveries.len());
        for (at, delivery) in deliveries.into_iter().enumerate() {
            outcomes.push(None);
            match self.screen(&delivery) {
                Ok(message) if self.late(&message).is_none() => {
                    valid.push(message);
                    pending.push((at, delivery));
                }
                _ => outcomes[at] = Some(self.settle_one(delivery, stop).await),
            }
        }
        // Duplicates: one read for the group, then acked without a transaction. Only while
        // duplicates are about (a recent group had some, or the broker says this is a
        // redelivery): for fresh traffic the read would be a wasted round trip per group.
        let redelivered = pending.iter().any(|(_, d)| d.attempt() > 1);
        let worth_reading = redelivered || self.batches.duplicates_seen.load(Relaxed);
        if pending.len() > 1 && worth_reading {
            let items: Vec<(MessageId, PayloadHash)> = valid
                .iter()
                .map(|m| (m.id().clone(), m.payload_hash()))
                .collect();
            // Bounded like a transaction: a read stuck on a connection the network stranded
            // would otherwise hold this lane forever, silently (it did, once in CI).
            let read = self
                .store_call(self.store.committed_claims(&self.name, &items))
                .await;
            if let Ok(held) = &read {
                self.batches
                    .duplicates_seen
                    .store(held.contains(&true), Relaxed);
            }
            match read {
                Ok(held) if held.len() == items.len() && held.contains(&true) => {
                    let mut kept = (Vec::new(), Vec::new());
                    let mut acks = Vec::new();
                    for ((message, (at, delivery)), held) in
                        valid.into_iter().zip(pending).zip(held)
                    {
                        if held {
                            let ack = self.ack(delivery, Committed::new(), Outcome::Duplicate);
                            acks.push(async move { (at, ack.await) });
                        } else {
                            kept.0.push(message);
                            kept.1.push((at, delivery));
                        }
                    }
                    for (at, outcome) in join_all(acks).await {
                        outcomes[at] = Some(outcome);
                    }
                    (valid, pending) = kept;
                }
                Ok(_) => {}
                // The claim stays the authority: a failed read only costs the shortcut.
                Err(e) => {
                    debug!(consumer = %self.name, error = %e, "inbox read before the claim failed")
                }
            }
        }
        if pending.len() == 1 {
            let (at, delivery) = pending.pop().expect("one");
            outcomes[at] = Some(self.settle_one(delivery, stop).await);
        } else if !pending.is_empty() {
            match self
                .attempt_held(&valid, stop)
                .instrument(self.batch_span(&valid))
                .await
            {
                Ok(settled) => {
                    self.batches.committed.fetch_add(1, Relaxed);
                    let duplicates = settled
                        .iter()
                        .any(|s| matches!(s, Committable::Done(Outcome::Duplicate, _)));
                    if duplicates {
                        self.batches.duplicates_seen.store(true, Relaxed);
                    }
                    // The group's acks go out at once (pipelined: one wait for the group,
                    // not a round trip per message on brokers whose ack is confirmed); on a
                    // lane, that wait is left behind (see `PendingAcks`).
                    let mut acks = Vec::with_capacity(pending.len());
                    let mut conflicts = Vec::new();
                    let rows = pending.into_iter().zip(&valid).zip(settled);
                    for (((at, delivery), message), settled) in rows {
                        match settled {
                            Committable::Done(outcome, proof) => {
                                outcomes[at] = Some(outcome);
                                acks.push((delivery, proof));
                            }
                            Committable::Conflict(stored) => {
                                conflicts.push((at, delivery, stored, message.payload_hash()));
                            }
                        }
                    }
                    match &self.pending_acks {
                        Some(pending_acks) => {
                            let me = self.clone();
                            pending_acks.hand_off(async move { me.ack_all(acks).await });
                        }
                        None => self.ack_all(acks).await,
                    }
                    for (at, delivery, stored, received) in conflicts {
                        let reason = DeadLetterReason::Conflict { stored, received };
                        outcomes[at] = Some(self.dead_letter(delivery, reason, 1, stop).await);
                    }
                }
                Err(e) if stop.is_cancelled() && e.is_unavailable() => {
                    warn!(error = %e, "shutting down while the store fails; batch handed back to the broker");
                    for (at, delivery) in pending {
                        let e = Error::new(e.kind(), e.to_string());
                        outcomes[at] = Some(self.nack(delivery, e).await);
                    }
                }
                Err(e) => {
                    self.batches.fallbacks.fetch_add(1, Relaxed);
                    debug!(consumer = %self.name, error = %e, "batch rolled back; processing its messages one at a time");
                    for (at, delivery) in pending {
                        outcomes[at] = Some(self.settle_one(delivery, stop).await);
                    }
                }
            }
        }
        outcomes
            .into_iter()
            .map(|o| o.expect("every delivery settled"))
            .collect()
    }

    /// Acks committed deliveries at once (their outcomes are already counted).
    async fn ack_all(&self, acks: Vec<(Delivery, Committed)>) {
        join_all(
            acks.into_iter()
                .map(|(delivery, proof)| self.ack_committed(delivery, proof)),
        )
        .await;
    }

    /// The span of one group commit (`oncely.group_commit`): one transaction for many messages, so
    /// no single parent; it links to the trace context each message carries.
    fn batch_span(&self, batch: &[Envelope]) -> tracing::Span {
        let span = info_span!("oncely.group_commit", consumer = %self.name, size = batch.len());
        for message in batch {
            if let Some(cx) = crate::trace::span_context_of(&message.meta().headers) {
                span.add_link(cx);
            }
        }
        span
    }

    /// [`Self::attempt_batch`], held and retried while the store is unavailable (one probe at
    /// a time, backing off). Returns the unavailable error only if `stop` came first.
    async fn attempt_held(
        &self,
        batch: &[Envelope],
        stop: &CancellationToken,
    ) -> Result<Vec<Committable>> {
        self.held(stop, Error::is_unavailable, || async {
            self.store_call(self.attempt_batch(batch)).await
        })
        .await
    }

    /// begin → claim_batch → handler for the fresh messages → commit. Any failure rolls the
    /// whole batch back and is returned.
    async fn attempt_batch(&self, batch: &[Envelope]) -> Result<Vec<Committable>> {
        let mut tx = self.store.begin().await?;
        let items: Vec<(MessageId, PayloadHash)> = batch
            .iter()
            .map(|m| (m.id().clone(), m.payload_hash()))
            .collect();
        let claims = match self.store.claim_batch(&mut tx, &self.name, &items).await {
            Ok(claims) if claims.len() == items.len() => claims,
            Ok(claims) => {
                let _ = self.store.rollback(tx).await;
                return Err(Error::permanent(format!(
                    "claim_batch returned {} claims for {} messages",
                    claims.len(),
                    items.len()
                )));
            }
            Err(e) => {
                let _ = self.store.rollback(tx).await;
                return Err(e);
            }
        };
        let mut settled: Vec<Option<Committable>> = Vec::with_capacity(batch.len());
        let mut fresh = Vec::new();
        for (at, claim) in claims.into_iter().enumerate() {
            settled.push(match claim {
                Claim::Duplicate => Some(Committable::Done(Outcome::Duplicate, Committed::new())),
                Claim::Conflict { stored } => Some(Committable::Conflict(stored)),
                Claim::Fresh => {
                    fresh.push(at);
                    None
                }
            });
        }
        if !fresh.is_empty() {
            let messages: Vec<Envelope> = fresh.iter().map(|&at| batch[at].clone()).collect();
            let run = AssertUnwindSafe(self.handler.handle_batch(&mut tx, &messages))
                .catch_unwind()
                .await;
            let handled = match run {
                Ok(Ok(handled)) if handled.len() == messages.len() => handled,
                Ok(Ok(handled)) => {
                    let _ = self.store.rollback(tx).await;
                    return Err(Error::permanent(format!(
                        "handle_batch returned {} results for {} messages",
                        handled.len(),
                        messages.len()
                    )));
                }
                Ok(Err(e)) => {
                    let _ = self.store.rollback(tx).await;
                    return Err(e);
                }
                Err(_panic) => {
                    drop(tx); // rolls back
                    return Err(Error::permanent("a handler panicked in the batch"));
                }
            };
            for (at, handled) in fresh.into_iter().zip(handled) {
                let outcome = match handled {
                    Handled::Applied => Outcome::Applied,
                    Handled::Stale => Outcome::Stale,
                };
                settled[at] = Some(Committable::Done(outcome, Committed::new()));
            }
        }
        // The proofs stand for this commit: they are handed out only if it succeeds.
        self.store.commit(tx).await?;
        Ok(settled
            .into_iter()
            .map(|s| s.expect("every message settled"))
            .collect())
    }
}
