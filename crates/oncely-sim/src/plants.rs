//! Planted faults: the contract broken on purpose, each as a wrapper around the store, the
//! source, the handler or the replay (never as a branch in the runtime). The simulator must
//! catch every one of them; `--plant NAME` runs with one planted.

use crate::faults::{SimStore, SimTx};
use crate::world::World;
use oncely_core::{Claim, ConsumerName, DeadLetter, MessageId, PayloadHash, Result, Store};
use std::time::Duration;

/// A planted fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plant {
    /// The source acks every delivery on receipt, before anything is committed.
    AckBeforeCommit,
    /// The claim commits in a transaction of its own, apart from the effect.
    ClaimOwnTx,
    /// A claim that finds the id already there reports it fresh (and so does the inbox read).
    SkipDuplicateCheck,
    /// The dead-letter insert answers `Ok` before its row is stored (the row follows later).
    DeadLetterAckEarly,
    /// One commit in four rolls back but answers `Ok` (an aborted transaction's silent
    /// `ROLLBACK`, unnoticed).
    CommitSwallowed,
    /// The dead-letter replay applies each row's effect directly, without a claim.
    ReplayIgnoresInbox,
    /// The handler's versioned apply writes older versions over newer ones.
    VersionsIgnored,
}

impl Plant {
    /// Every plant.
    pub const ALL: [Plant; 7] = [
        Plant::AckBeforeCommit,
        Plant::ClaimOwnTx,
        Plant::SkipDuplicateCheck,
        Plant::DeadLetterAckEarly,
        Plant::CommitSwallowed,
        Plant::ReplayIgnoresInbox,
        Plant::VersionsIgnored,
    ];

    /// The name `--plant` takes.
    pub fn name(self) -> &'static str {
        match self {
            Plant::AckBeforeCommit => "ack-before-commit",
            Plant::ClaimOwnTx => "claim-own-tx",
            Plant::SkipDuplicateCheck => "skip-duplicate-check",
            Plant::DeadLetterAckEarly => "dead-letter-ack-early",
            Plant::CommitSwallowed => "commit-swallowed",
            Plant::ReplayIgnoresInbox => "replay-ignores-inbox",
            Plant::VersionsIgnored => "versions-ignored",
        }
    }

    /// The plant named `name`.
    pub fn parse(name: &str) -> Option<Plant> {
        Plant::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// The store as the run sees it: [`SimStore`], with the store plant if one is set.
#[derive(Clone)]
pub struct Planted {
    /// The store under the plant.
    pub inner: SimStore,
    plant: Option<Plant>,
    world: World,
}

impl Planted {
    /// Wraps `inner` with `plant` (store plants only; others pass through).
    pub fn new(inner: SimStore, plant: Option<Plant>, world: World) -> Self {
        Self {
            inner,
            plant,
            world,
        }
    }
}

impl Store for Planted {
    type Tx = SimTx;

    async fn check_ready(&self) -> Result<()> {
        self.inner.check_ready().await
    }

    async fn begin(&self) -> Result<SimTx> {
        self.inner.begin().await
    }

    async fn claim(
        &self,
        tx: &mut SimTx,
        consumer: &ConsumerName,
        id: &MessageId,
        hash: PayloadHash,
    ) -> Result<Claim> {
        let claim = self.inner.claim(tx, consumer, id, hash).await?;
        match (self.plant, claim) {
            (Some(Plant::ClaimOwnTx), Claim::Fresh) => {
                let own = tx.inner.take().expect("transaction open");
                self.inner.memory.commit(own).await?;
                tx.inner = Some(self.inner.begin_memory().await?);
                Ok(claim)
            }
            (Some(Plant::SkipDuplicateCheck), Claim::Duplicate) => Ok(Claim::Fresh),
            _ => Ok(claim),
        }
    }

    async fn committed_claim(
        &self,
        consumer: &ConsumerName,
        id: &MessageId,
        hash: PayloadHash,
    ) -> Result<bool> {
        let held = self.inner.committed_claim(consumer, id, hash).await?;
        Ok(held && self.plant != Some(Plant::SkipDuplicateCheck))
    }

    async fn commit(&self, tx: SimTx) -> Result<()> {
        if self.plant == Some(Plant::CommitSwallowed) && self.world.chance("swallow", 0.25, 1000) {
            self.world.event("plant: commit rolled back, answered Ok");
            drop(tx);
            return Ok(());
        }
        self.inner.commit(tx).await
    }

    async fn rollback(&self, tx: SimTx) -> Result<()> {
        self.inner.rollback(tx).await
    }

    async fn dead_letter(&self, letter: &DeadLetter) -> Result<()> {
        if self.plant == Some(Plant::DeadLetterAckEarly) {
            let (store, letter) = (self.inner.clone(), letter.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(1)).await;
                let _ = store.memory.dead_letter(&letter).await;
            });
            return Ok(());
        }
        self.inner.dead_letter(letter).await
    }
}
