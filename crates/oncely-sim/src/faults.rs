//! The fault wrappers: around the reference store ([`SimStore`]: latency, outages, read-only
//! phases, crashes around each step, plus a per-key version table for versioned apply),
//! around the reference source ([`SimSource`]: crashes at receipt and after the ack, and the
//! ack-time check), and the handler ([`SimHandler`]: transient and permanent failures,
//! panics, versioned apply). The runtime under them is the production one, untouched.

use crate::world::{StoreState, World};
use futures::FutureExt;
use futures::future::BoxFuture;
use oncely_core::{
    Acker, Claim, ConsumerName, DeadLetter, Delivery, Envelope, Error, Handled, Handler, Inspect,
    MemorySource, MessageId, PayloadHash, Result, Source, Store,
};
use oncely_testkit::{MemoryStore, MemoryTx};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Committed versions per entity key, and every version write in commit order.
#[derive(Default, Debug)]
pub struct Versions {
    /// The newest version applied per key.
    pub current: HashMap<String, i64>,
    /// `(key, version)` in commit order: must never go back for a key.
    pub log: Vec<(String, i64)>,
    /// Ids whose versioned apply was committed as stale.
    pub stale: Vec<String>,
}

/// A transaction of [`SimStore`]: the reference store's, plus pending version writes.
pub struct SimTx {
    /// The reference store's transaction (taken by plants that split transactions).
    pub inner: Option<MemoryTx>,
    /// Ids claimed in this transaction (for the crash points' keys).
    pub ids: Vec<String>,
    versions: Vec<(String, i64)>,
    stale: Vec<String>,
}

impl SimTx {
    fn memory(&mut self) -> &mut MemoryTx {
        self.inner.as_mut().expect("transaction open")
    }
}

/// The reference [`MemoryStore`] under the run's store faults.
#[derive(Clone)]
pub struct SimStore {
    /// The reference store.
    pub memory: MemoryStore,
    /// The version table (committed with the transaction).
    pub versions: Arc<Mutex<Versions>>,
    world: World,
}

impl SimStore {
    /// Wraps a fresh reference store.
    pub fn new(world: World) -> Self {
        Self {
            memory: MemoryStore::new(),
            versions: Arc::default(),
            world,
        }
    }

    /// A fresh transaction of the reference store (plants use it to split transactions).
    pub async fn begin_memory(&self) -> Result<MemoryTx> {
        self.memory.begin().await
    }

    fn refuse(&self, write: bool) -> Result<()> {
        match self.world.store_state() {
            StoreState::Down => Err(Error::unavailable("sim: store down")),
            StoreState::ReadOnly if write => Err(Error::unavailable(
                "sim: cannot execute in a read-only transaction",
            )),
            _ => Ok(()),
        }
    }

    /// A store error at `what` (its first two occurrences only), by the plan's rate.
    fn store_error(&self, what: &str) -> bool {
        self.world.chance(what, self.world.plan.store_error_rate, 2)
    }

    fn tx_key(&self, tx: &SimTx) -> String {
        tx.ids
            .first()
            .cloned()
            .unwrap_or_else(|| format!("#{}", self.world.count("tx-key")))
    }
}

impl Store for SimStore {
    type Tx = SimTx;

    async fn check_ready(&self) -> Result<()> {
        if self.world.store_state() == StoreState::Down {
            self.world.mark("fault: store down at start");
        }
        self.refuse(false)
    }

    async fn begin(&self) -> Result<SimTx> {
        self.world.latency().await;
        self.refuse(false)?;
        let inner = self.memory.begin().await?;
        let n = self.world.count("begin");
        self.world.maybe_crash("begin", &format!("#{n}"));
        Ok(SimTx {
            inner: Some(inner),
            ids: Vec::new(),
            versions: Vec::new(),
            stale: Vec::new(),
        })
    }

    async fn claim(
        &self,
        tx: &mut SimTx,
        consumer: &ConsumerName,
        id: &MessageId,
        hash: PayloadHash,
    ) -> Result<Claim> {
        self.world.latency().await;
        // A read-only phase may begin after the claim's statement (a failover mid-transaction):
        // then the handler's write or the commit is refused instead.
        if self.world.store_state() != StoreState::ReadOnly
            || !self.world.chance("ro-claim", 0.5, u32::MAX)
        {
            self.refuse(true)?;
        }
        if self.store_error(&format!("deadlock:claim:{}", id.as_str())) {
            self.world.mark("fault: store deadlock");
            return Err(Error::transient("sim: deadlock detected (claim)"));
        }
        let claim = self.memory.claim(tx.memory(), consumer, id, hash).await?;
        tx.ids.push(id.as_str().to_owned());
        let seen = match claim {
            Claim::Fresh => "fresh",
            Claim::Duplicate => "duplicate",
            Claim::Conflict { .. } => "conflict",
        };
        self.world.event(format!("claim {:?} {seen}", id.as_str()));
        self.world.maybe_crash("claim", id.as_str());
        Ok(claim)
    }

    async fn committed_claim(
        &self,
        consumer: &ConsumerName,
        id: &MessageId,
        hash: PayloadHash,
    ) -> Result<bool> {
        self.world.latency().await;
        self.refuse(false)?;
        self.world.mark("path: inbox read first");
        self.memory.committed_claim(consumer, id, hash).await
    }

    async fn commit(&self, mut tx: SimTx) -> Result<()> {
        self.world.latency().await;
        let key = self.tx_key(&tx);
        self.refuse(true)?;
        self.world.maybe_crash("effect", &key);
        let inner = tx.inner.take().expect("transaction open");
        // The version table commits with the reference store's transaction: both under its
        // write lock, which the transaction holds until the end of this call.
        if self.store_error(&format!("deadlock:commit:{key}")) {
            self.world.mark("fault: store deadlock");
            self.world
                .event(format!("commit of {key} failed (deadlock), rolled back"));
            return Err(Error::transient("sim: deadlock detected (commit)"));
        }
        {
            let mut v = self.versions.lock().unwrap_or_else(|p| p.into_inner());
            for (k, version) in tx.versions.drain(..) {
                v.current.insert(k.clone(), version);
                v.log.push((k, version));
            }
            v.stale.append(&mut tx.stale);
        }
        self.memory.commit(inner).await?;
        self.world.event(format!("commit {:?}", tx.ids));
        self.world.maybe_crash("commit", &key);
        if self.store_error(&format!("lost-answer:{key}")) {
            // Committed, but the answer never arrives: the caller cannot tell.
            self.world.mark("fault: commit answer lost");
            self.world
                .event(format!("commit of {key} landed, answer lost"));
            return Err(if self.world.draw("lost-answer-kind", 0) < 0.5 {
                Error::unavailable("sim: connection reset after COMMIT")
            } else {
                Error::transient("sim: commit outcome unknown")
            });
        }
        Ok(())
    }

    async fn rollback(&self, tx: SimTx) -> Result<()> {
        drop(tx);
        Ok(())
    }

    async fn dead_letter(&self, letter: &DeadLetter) -> Result<()> {
        let key = letter.message.display_id().unwrap_or_default();
        let hash = PayloadHash::of(&letter.message.payload);
        let refused = format!("dead letter refused:{key}:{hash}");
        // Before any await: the runtime decided just now, with nothing run in between, so
        // a claim committed now was committed before its decision (unless an earlier try
        // of this letter was refused and held, when another copy may have committed since).
        if letter.reason.code() != "conflict" && self.world.counted(&refused) == 0 {
            let raw = letter
                .message
                .id
                .as_deref()
                .and_then(|b| std::str::from_utf8(b).ok());
            let name = crate::run::consumer_name();
            let held = |id: &str| self.memory.claimed_hash(&name, id).now_or_never();
            if let Some(id) = raw
                && held(id).and_then(|r| r.ok()).flatten() == Some(hash)
            {
                self.world.violation(format!(
                    "dead-lettered {} although its effect is committed: {id:?} ({})",
                    letter.reason.code(),
                    letter.reason
                ));
            }
        }
        self.world.latency().await;
        if let Err(e) = self.refuse(true) {
            self.world.count(&refused);
            return Err(e);
        }
        self.world.maybe_crash("dead-letter", &key);
        self.memory.dead_letter(letter).await?;
        self.world
            .event(format!("dead letter {key:?} {}", letter.reason.code()));
        self.world.mark(match letter.reason.code() {
            "bad_id" => "dead letter: bad_id",
            "conflict" => "dead letter: conflict",
            "permanent" => "dead letter: permanent",
            "attempts_exhausted" => "dead letter: attempts_exhausted",
            "panic" => "dead letter: panic",
            "late" => "dead letter: late",
            "undecodable_envelope" => "dead letter: undecodable_envelope",
            _ => "dead letter: other",
        });
        self.world.maybe_crash("dead-lettered", &key);
        Ok(())
    }
}

/// The run's handler: writes `(id, amount)` through the reference store's transaction,
/// with versioned apply for versioned messages, and fails as the plan says.
#[derive(Clone)]
pub struct SimHandler {
    world: World,
    versions: Arc<Mutex<Versions>>,
    /// Plant `versions-ignored`: apply every version, newer or not.
    pub ignore_versions: bool,
}

impl SimHandler {
    /// The handler over `store`'s version table.
    pub fn new(world: World, store: &SimStore) -> Self {
        Self {
            world,
            versions: store.versions.clone(),
            ignore_versions: false,
        }
    }
}

impl Handler<SimTx> for SimHandler {
    async fn handle(&self, tx: &mut SimTx, message: &Envelope) -> Result<Handled> {
        let id = message.id().as_str();
        let plan = &self.world.plan;
        let msg = plan.msgs.iter().find(|m| m.id == id);
        if msg.is_some_and(|m| m.panics) {
            std::panic::resume_unwind(Box::new(format!("sim: handler panics on {id}")));
        }
        if msg.is_some_and(|m| m.poison) {
            return Err(Error::permanent(format!("sim: {id} is poison")));
        }
        if self
            .world
            .chance(&format!("transient:{id}"), plan.transient_rate, 6)
        {
            self.world.mark("fault: handler transient error");
            return Err(Error::transient("sim: transient handler failure"));
        }
        if self.world.store_state() != StoreState::Up {
            self.world.mark("fault: handler write refused");
            return Err(Error::unavailable("sim: read-only (handler's write)"));
        }
        let text = std::str::from_utf8(message.payload()).unwrap_or("0");
        let amount: i64 = text.parse().unwrap_or(0);
        let meta = message.meta();
        if let (Some(key), Some(version)) = (&meta.entity_key, meta.version) {
            let pending = tx
                .versions
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| *v);
            let committed = self
                .versions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .current
                .get(key)
                .copied();
            let newest = pending.or(committed).unwrap_or(0);
            if version <= newest && !self.ignore_versions {
                tx.stale.push(id.to_owned());
                self.world.mark("path: versioned stale");
                return Ok(Handled::Stale);
            }
            tx.versions.push((key.clone(), version));
        }
        tx.memory().add_effect(id, amount);
        Ok(Handled::Applied)
    }
}

/// The reference [`MemorySource`] as one consumer process sees it: crashes at receipt and
/// after the ack; every ack is checked against the store first (no ack before its commit).
pub struct SimSource {
    inner: MemorySource,
    world: World,
    store: MemoryStore,
    worker: usize,
}

impl SimSource {
    /// Worker `worker`'s view of the shared `inner` source, checked against `store`.
    pub fn new(inner: MemorySource, world: World, store: MemoryStore, worker: usize) -> Self {
        Self {
            inner,
            world,
            store,
            worker,
        }
    }
}

impl Source for SimSource {
    async fn next(&mut self) -> Result<Option<Delivery>> {
        loop {
            if self
                .world
                .chance("broker-error", self.world.plan.broker_fault_rate, 200)
            {
                self.world.mark("fault: broker connection lost");
                self.world.event(format!("w{} source error", self.worker));
                return Err(Error::transient("sim: broker connection lost"));
            }
            let Some(delivery) = self.inner.next().await? else {
                return Ok(None);
            };
            let id = delivery.message().display_id().unwrap_or_default();
            let attempt = delivery.attempt();
            self.world
                .event(format!("w{} receive {id:?} #{attempt}", self.worker));
            if attempt > 1 {
                self.world.mark("path: redelivery");
            }
            let crashed = AssertCrash::run(|| self.world.maybe_crash("receive", &id));
            if crashed {
                self.world.count("dropped at receipt");
                self.world.event(format!("w{} dropped {id:?}", self.worker));
                drop(delivery);
                continue;
            }
            let (world, store) = (self.world.clone(), self.store.clone());
            let plan = &self.world.plan;
            let hostile = plan.msgs.iter().any(|m| m.hostile && m.id == id);
            let message = delivery.message().clone();
            let checked = CheckedAck {
                original: delivery,
                world,
                store,
            };
            if hostile {
                // The broker mapping failed on this envelope (a header out of range).
                self.world.mark("fault: undecodable envelope");
                let why = "sim: timestamp header out of range";
                return Ok(Some(Delivery::undecodable(
                    message,
                    attempt,
                    Box::new(checked),
                    why,
                )));
            }
            return Ok(Some(Delivery::new(message, attempt, Box::new(checked))));
        }
    }

    fn read_ahead(&mut self, deliveries: usize) {
        self.inner.read_ahead(deliveries);
    }
}

/// Runs `f`, telling whether it crashed (a crash at receipt is counted, not propagated:
/// the source drops the delivery as a dying process would and goes on).
struct AssertCrash;

impl AssertCrash {
    fn run(f: impl FnOnce()) -> bool {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err()
    }
}

/// Checks, at the ack, that the store holds what the ack stands for: the inbox claim with
/// this copy's payload hash, or a dead-letter row of this copy.
struct CheckedAck {
    original: Delivery,
    world: World,
    store: MemoryStore,
}

/// Whether `store` holds this copy's claim or its dead letter, read from the store's state.
pub fn settled_in_store(store: &MemoryStore, id: Option<&str>, payload: &[u8]) -> bool {
    let hash = PayloadHash::of(payload);
    let consumer = crate::run::consumer_name();
    if let Some(id) = id {
        let held = store
            .claimed_hash(&consumer, id)
            .now_or_never()
            .and_then(|r| r.ok())
            .flatten();
        if held == Some(hash) {
            return true;
        }
    }
    let letters = store
        .dead_letters(Some(&consumer))
        .now_or_never()
        .and_then(|r| r.ok())
        .unwrap_or_default();
    let raw = id.map(|s| s.as_bytes().to_vec());
    letters
        .iter()
        .any(|l| l.raw_id == raw && l.payload_hash == hash.to_hex())
}

impl Acker for CheckedAck {
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        Box::pin(async move {
            let message = self.original.message().clone();
            let id = message.display_id().unwrap_or_default();
            if !settled_in_store(
                &self.store,
                message
                    .id
                    .as_deref()
                    .and_then(|b| std::str::from_utf8(b).ok()),
                &message.payload,
            ) {
                self.world.violation(format!(
                    "ack before commit: {id:?} (payload {:?}) acked while the store holds neither its claim nor its dead letter",
                    String::from_utf8_lossy(&message.payload)
                ));
            }
            let what = format!("ack-fails:{id}");
            if self
                .world
                .chance(&what, self.world.plan.broker_fault_rate, 2)
            {
                // Committed, not acked: the broker redelivers (a duplicate).
                self.world.mark("fault: ack failed");
                self.world.event(format!("ack {id:?} failed"));
                drop(self.original);
                return Err(Error::transient("sim: ack failed, connection lost"));
            }
            self.world.event(format!("ack {id:?}"));
            self.original.discard().await?;
            self.world.maybe_crash("ack", &id);
            Ok(())
        })
    }

    fn nack(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        self.world.mark("path: nack at shutdown");
        Box::pin(self.original.nack())
    }
}
