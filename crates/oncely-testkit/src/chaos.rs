//! Chaos as wrappers, tower-style: crash a consumer after any step of the contract, or break
//! the contract on purpose, without anything test-only in the runtime's path.
//!
//! - [`CrashingStore`] (with [`CrashingHandler`] for the handler's side of its transaction)
//!   "crashes" before or after the claim, before or after the commit.
//! - [`CrashingSource`] crashes right after a delivery is received, or right after its ack.
//! - [`AckEarly`] acks every delivery as soon as it is received: the contract broken, for the
//!   checker's negative test.
//!
//! A crash unwinds the task processing the delivery (without running the panic hook, so it
//! prints nothing): its transaction is dropped (rolled back) and the delivery is neither
//! acked nor nacked, as if the process had died there. The runtime counts it as
//! [`Outcome::Abandoned`](oncely_core::Outcome::Abandoned) and the broker redelivers it.
//!
//! ```
//! use oncely_core::{CancellationToken, Consumer, ConsumerName, MemorySource, RawEnvelope};
//! use oncely_testkit::chaos::{CrashPlan, CrashingHandler, CrashingStore, Step};
//! use oncely_testkit::{MemoryStore, tally};
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! let plan = CrashPlan::new(7, 0.3).only_at(&[Step::Claimed, Step::Committed]);
//! let crashing = CrashingStore::new(store.clone(), plan.clone());
//! let name = ConsumerName::new("billing").unwrap();
//! let consumer = Consumer::new(name, crashing, CrashingHandler(store.recorder()));
//! let source = MemorySource::new();
//! for i in 0..50 {
//!     source.publish(RawEnvelope::new(format!("m-{i}"), "1"));
//! }
//! source.close();
//! consumer.run(source, CancellationToken::new()).await.unwrap();
//! let expected = (0..50).map(|i| (format!("m-{i}"), 1)).collect();
//! let t = tally(&store.effects(), &expected, &[]);
//! assert!(t.is_exactly_once() && plan.fired() > 0, "{t:?}");
//! # });
//! ```

use futures::future::BoxFuture;
use oncely_core::{
    Acker, Claim, ConsumerName, DeadLetter, Delivery, Envelope, Handled, Handler, MessageId,
    PayloadHash, RawEnvelope, Result, Source, Store,
};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// The step of the contract after which a crash is injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// The delivery was received ([`CrashingSource`]).
    Received,
    /// The transaction was begun, nothing claimed yet ([`CrashingStore`]).
    Begun,
    /// The claim was inserted, not committed ([`CrashingStore`]).
    Claimed,
    /// The handler's effect was written, not committed ([`CrashingStore`], before its commit).
    Effected,
    /// The transaction committed, not acked ([`CrashingStore`], after its commit).
    Committed,
    /// The delivery was acked ([`CrashingSource`]).
    Acked,
}

impl Step {
    /// Every step, in contract order.
    pub const ALL: [Step; 6] = [
        Step::Received,
        Step::Begun,
        Step::Claimed,
        Step::Effected,
        Step::Committed,
        Step::Acked,
    ];
}

/// Decides whether to crash after a step of a delivery.
pub trait Chaos: Send + Sync + 'static {
    /// True to crash right after `step` of the `attempt`-th processing of message `id`.
    fn crash_after(&self, step: Step, id: Option<&[u8]>, attempt: u32) -> bool;
}

/// Crashes after each step with probability `rate`, decided by hashing
/// `(seed, id, attempt, step)`: the same seed gives the same crashes, whatever the
/// scheduling. Attempts beyond `max_crashing_attempt` never crash, so every message gets
/// through eventually. Clones share one count of the crashes fired ([`CrashPlan::fired`],
/// per step [`CrashPlan::fired_at`]).
///
/// ```
/// use oncely_testkit::chaos::{Chaos, CrashPlan, Step};
/// let plan = CrashPlan::new(7, 0.5);
/// let a = plan.crash_after(Step::Claimed, Some(b"m-1"), 1);
/// assert_eq!(a, CrashPlan::new(7, 0.5).crash_after(Step::Claimed, Some(b"m-1"), 1));
/// ```
#[derive(Debug, Clone)]
pub struct CrashPlan {
    seed: u64,
    rate: f64,
    steps: Vec<Step>,
    max_crashing_attempt: u32,
    /// Crashes fired, per step (indexed by [`Step::ALL`] order).
    fired: Arc<[AtomicU64; Step::ALL.len()]>,
}

impl CrashPlan {
    /// Crashes at every step with probability `rate` (0.0..=1.0).
    pub fn new(seed: u64, rate: f64) -> Self {
        Self {
            seed,
            rate: rate.clamp(0.0, 1.0),
            steps: Step::ALL.to_vec(),
            max_crashing_attempt: 20,
            fired: Arc::default(),
        }
    }

    /// Restricts crashes to these steps.
    pub fn only_at(mut self, steps: &[Step]) -> Self {
        self.steps = steps.to_vec();
        self
    }

    /// Attempts numbered above this never crash (default 20).
    pub fn max_crashing_attempt(mut self, attempt: u32) -> Self {
        self.max_crashing_attempt = attempt;
        self
    }

    /// Crashes fired so far by this plan and its clones.
    pub fn fired(&self) -> u64 {
        self.fired.iter().map(|n| n.load(Relaxed)).sum()
    }

    /// Crashes fired so far after `step`. After [`Step::Received`] a crash drops a delivery
    /// before the runtime sees it; after any other step the runtime counts the deliveries
    /// it abandoned (with group commit, a whole group per crash).
    pub fn fired_at(&self, step: Step) -> u64 {
        self.fired[step as usize].load(Relaxed)
    }
}

impl Chaos for CrashPlan {
    fn crash_after(&self, step: Step, id: Option<&[u8]>, attempt: u32) -> bool {
        if self.rate == 0.0 || attempt > self.max_crashing_attempt || !self.steps.contains(&step) {
            return false;
        }
        let mut h = Sha256::new();
        h.update(self.seed.to_le_bytes());
        h.update(id.unwrap_or(b"\0none"));
        h.update(attempt.to_le_bytes());
        h.update([step as u8]);
        let digest = h.finalize();
        let draw = u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"));
        let crash = (draw as f64) < self.rate * (u64::MAX as f64);
        if crash {
            self.fired[step as usize].fetch_add(1, Relaxed);
        }
        crash
    }
}

/// The unwind payload of an injected crash.
#[derive(Debug)]
pub struct InjectedCrash(pub Step);

/// Unwinds the current task as an injected crash (no panic hook runs, nothing is printed).
fn crash(step: Step) -> ! {
    std::panic::resume_unwind(Box::new(InjectedCrash(step)))
}

/// A [`Store`] that crashes after [`Step::Begun`], [`Step::Claimed`], [`Step::Effected`] and
/// [`Step::Committed`] as its plan decides. The attempt a plan sees is how many times this
/// wrapper has claimed the id. Pair it with [`CrashingHandler`], which runs the handler on
/// the wrapped transaction.
pub struct CrashingStore<S> {
    inner: S,
    chaos: Arc<dyn Chaos>,
    claims: Mutex<HashMap<(ConsumerName, MessageId), u32>>,
}

impl<S: Store> CrashingStore<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, chaos: impl Chaos) -> Self {
        Self {
            inner,
            chaos: Arc::new(chaos),
            claims: Mutex::default(),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn nth_claim(&self, consumer: &ConsumerName, id: &MessageId) -> u32 {
        let mut claims = self.claims.lock().expect("claims lock");
        let n = claims.entry((consumer.clone(), id.clone())).or_default();
        *n += 1;
        *n
    }

    /// Crashes after `step` of a transaction holding `claims` if the plan says so. Before the
    /// commit a transaction crashes as one: the plan is asked for its first claim only. Asking
    /// every member would crash nearly every group of 64 before its commit, again on each
    /// redelivery, until the plan's crashing attempts ran out (nothing would commit, and no
    /// crash would ever come after a commit). After the commit any member's answer counts:
    /// such a crash only leaves the group to come back as duplicates.
    fn maybe_crash(&self, step: Step, claims: &[(MessageId, u32)]) {
        let asked = match step {
            Step::Committed | Step::Acked => claims,
            _ => &claims[..claims.len().min(1)],
        };
        if asked.iter().any(|(id, n)| {
            self.chaos
                .crash_after(step, Some(id.as_str().as_bytes()), *n)
        }) {
            crash(step);
        }
    }
}

/// The transaction of a [`CrashingStore`]: the inner one plus the claims made in it.
pub struct CrashTx<T> {
    inner: T,
    claims: Vec<(MessageId, u32)>,
}

impl<T> CrashTx<T> {
    /// The wrapped store's transaction.
    pub fn inner(&mut self) -> &mut T {
        &mut self.inner
    }
}

impl<S: Store> Store for CrashingStore<S> {
    type Tx = CrashTx<S::Tx>;

    async fn begin(&self) -> Result<Self::Tx> {
        Ok(CrashTx {
            inner: self.inner.begin().await?,
            claims: Vec::new(),
        })
    }

    async fn claim(
        &self,
        tx: &mut Self::Tx,
        consumer: &ConsumerName,
        id: &MessageId,
        hash: PayloadHash,
    ) -> Result<Claim> {
        let this = [(id.clone(), self.nth_claim(consumer, id))];
        self.maybe_crash(Step::Begun, &this);
        let claim = self.inner.claim(&mut tx.inner, consumer, id, hash).await?;
        tx.claims.extend(this);
        self.maybe_crash(Step::Claimed, &tx.claims);
        Ok(claim)
    }

    async fn claim_batch(
        &self,
        tx: &mut Self::Tx,
        consumer: &ConsumerName,
        items: &[(MessageId, PayloadHash)],
    ) -> Result<Vec<Claim>> {
        let these: Vec<_> = items
            .iter()
            .map(|(id, _)| (id.clone(), self.nth_claim(consumer, id)))
            .collect();
        self.maybe_crash(Step::Begun, &these);
        let claims = self
            .inner
            .claim_batch(&mut tx.inner, consumer, items)
            .await?;
        tx.claims.extend(these);
        self.maybe_crash(Step::Claimed, &tx.claims);
        Ok(claims)
    }

    async fn committed_claim(
        &self,
        consumer: &ConsumerName,
        id: &MessageId,
        hash: PayloadHash,
    ) -> Result<bool> {
        self.inner.committed_claim(consumer, id, hash).await
    }

    async fn committed_claims(
        &self,
        consumer: &ConsumerName,
        items: &[(MessageId, PayloadHash)],
    ) -> Result<Vec<bool>> {
        self.inner.committed_claims(consumer, items).await
    }

    async fn commit(&self, tx: Self::Tx) -> Result<()> {
        self.maybe_crash(Step::Effected, &tx.claims);
        self.inner.commit(tx.inner).await?;
        self.maybe_crash(Step::Committed, &tx.claims);
        Ok(())
    }

    async fn rollback(&self, tx: Self::Tx) -> Result<()> {
        self.inner.rollback(tx.inner).await
    }

    async fn dead_letter(&self, letter: &DeadLetter) -> Result<()> {
        self.inner.dead_letter(letter).await
    }

    async fn check_ready(&self) -> Result<()> {
        self.inner.check_ready().await
    }
}

/// Runs a handler of a store's transaction on a [`CrashingStore`]'s transaction.
#[derive(Debug, Clone)]
pub struct CrashingHandler<H>(pub H);

impl<T: Send, H: Handler<T>> Handler<CrashTx<T>> for CrashingHandler<H> {
    async fn handle(&self, tx: &mut CrashTx<T>, message: &Envelope) -> Result<Handled> {
        self.0.handle(&mut tx.inner, message).await
    }

    async fn handle_batch(
        &self,
        tx: &mut CrashTx<T>,
        messages: &[Envelope],
    ) -> Result<Vec<Handled>> {
        self.0.handle_batch(&mut tx.inner, messages).await
    }

    fn lock_key(&self, message: &RawEnvelope) -> Option<String> {
        self.0.lock_key(message)
    }
}

/// A [`Source`] whose consumer crashes right after receiving a delivery ([`Step::Received`]:
/// the delivery is dropped unsettled) or right after acking it ([`Step::Acked`]), as its plan
/// decides from the delivery count: the broker's, or how many times this wrapper received the
/// id if that is more (a classic RabbitMQ queue only says "redelivered", so its count stops
/// at 2, and a plan crashing at attempt 2 would crash on every redelivery).
pub struct CrashingSource<Src> {
    inner: Src,
    chaos: Arc<dyn Chaos>,
    received: std::collections::HashMap<Vec<u8>, u32>,
}

impl<Src: Source> CrashingSource<Src> {
    /// Wraps `inner`.
    pub fn new(inner: Src, chaos: impl Chaos) -> Self {
        Self {
            inner,
            chaos: Arc::new(chaos),
            received: std::collections::HashMap::new(),
        }
    }
}

impl<Src: Source> Source for CrashingSource<Src> {
    async fn next(&mut self) -> Result<Option<Delivery>> {
        loop {
            let Some(delivery) = self.inner.next().await? else {
                return Ok(None);
            };
            let id = delivery.message().id.clone();
            let seen = match &id {
                Some(id) => {
                    let n = self.received.entry(id.clone()).or_default();
                    *n += 1;
                    *n
                }
                None => 1,
            };
            let attempt = delivery.attempt().max(seen);
            if self
                .chaos
                .crash_after(Step::Received, id.as_deref(), attempt)
            {
                drop(delivery); // unsettled: the broker redelivers it
                continue;
            }
            return Ok(Some(crash_after_ack(delivery, self.chaos.clone())));
        }
    }

    fn read_ahead(&mut self, deliveries: usize) {
        self.inner.read_ahead(deliveries);
    }
}

/// A [`Source`] that acks every delivery as soon as it is received, before anything is
/// committed: the contract broken on purpose. With crashes before the commit
/// ([`Step::Effected`]) it loses messages, which a checker must notice.
pub struct AckEarly<Src>(pub Src);

impl<Src: Source> Source for AckEarly<Src> {
    async fn next(&mut self) -> Result<Option<Delivery>> {
        let Some(delivery) = self.0.next().await? else {
            return Ok(None);
        };
        let mut original = None;
        let early = delivery.relay(|d| {
            original = Some(d);
            Box::new(Settled)
        });
        original
            .expect("relay hands the original over")
            .discard()
            .await?;
        Ok(Some(early))
    }

    fn read_ahead(&mut self, deliveries: usize) {
        self.0.read_ahead(deliveries);
    }
}

/// A new delivery of the same message that acks the original, then crashes if `chaos` says
/// so (decided at the ack, so a delivery abandoned earlier never counts a crash here).
fn crash_after_ack(delivery: Delivery, chaos: Arc<dyn Chaos>) -> Delivery {
    delivery.relay(|original| Box::new(AckThenCrash(original, chaos)))
}

/// Acks the original delivery, then crashes if the plan says so.
struct AckThenCrash(Delivery, Arc<dyn Chaos>);

impl Acker for AckThenCrash {
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        Box::pin(async move {
            let (id, attempt) = (self.0.message().id.clone(), self.0.attempt());
            // The runtime's ack carried a proof; the original is acked on its behalf.
            self.0.discard().await?;
            if self.1.crash_after(Step::Acked, id.as_deref(), attempt) {
                crash(Step::Acked);
            }
            Ok(())
        })
    }

    fn nack(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        Box::pin(self.0.nack())
    }
}

/// The acker of a delivery that was already acked.
struct Settled;

impl Acker for Settled {
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    fn nack(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        Box::pin(async { Ok(()) })
    }
}
