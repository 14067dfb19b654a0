//! [`SimStore`]: the reference store under the run's store faults.

use crate::world::{StoreState, World};
use futures::FutureExt;
use oncely_core::{
    Claim, ConsumerName, DeadLetter, Error, Inspect, MessageId, PayloadHash, Result, Store,
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
    pub(super) versions: Vec<(String, i64)>,
    pub(super) stale: Vec<String>,
}

impl SimTx {
    pub(super) fn memory(&mut self) -> &mut MemoryTx {
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
