//! An in-memory store, a wrapper that makes it fail on demand, and a ledger handler: enough
//! to drive the runtime through store outages without a database.
#![allow(dead_code)]

use oncely_core::{
    Claim, ConsumerName, DeadLetter, Envelope, Error, ErrorKind, Handled, Handler, MessageId,
    PayloadHash, Result, Store,
};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

type Key = (String, String);

#[derive(Default)]
struct Tables {
    inbox: HashMap<Key, PayloadHash>,
    pending: HashSet<Key>,
    ledger: Vec<String>,
    dead_letters: Vec<String>,
}

/// A small in-memory store: claims become visible on commit; a second claim of an id whose
/// claim is still uncommitted fails transiently (as a lock wait would end).
#[derive(Clone, Default)]
pub struct MemStore {
    tables: Arc<Mutex<Tables>>,
}

/// A transaction of [`MemStore`]: its claims and effects, dropped on rollback.
pub struct MemTx {
    tables: Arc<Mutex<Tables>>,
    claims: Vec<(Key, PayloadHash)>,
    effects: Vec<String>,
    held: Vec<Box<dyn std::any::Any + Send>>,
}

impl MemTx {
    fn on(tables: &Arc<Mutex<Tables>>) -> Self {
        let (claims, effects, held) = (Vec::new(), Vec::new(), Vec::new());
        let tables = tables.clone();
        Self {
            tables,
            claims,
            effects,
            held,
        }
    }

    /// Writes one effect row inside the transaction.
    pub fn effect(&mut self, id: &str) {
        self.effects.push(id.to_owned());
    }

    /// Keeps `guard` until the transaction ends (commit or rollback), as a row lock.
    #[allow(dead_code)]
    pub fn hold(&mut self, guard: impl std::any::Any + Send) {
        self.held.push(Box::new(guard));
    }
}

impl Drop for MemTx {
    fn drop(&mut self) {
        let mut t = lock(&self.tables);
        for (key, _) in &self.claims {
            t.pending.remove(key);
        }
    }
}

fn lock(tables: &Mutex<Tables>) -> MutexGuard<'_, Tables> {
    tables.lock().unwrap_or_else(|p| p.into_inner())
}

impl MemStore {
    /// Committed effect rows, one per applied message.
    pub fn ledger(&self) -> Vec<String> {
        lock(&self.tables).ledger.clone()
    }

    /// Ids of the dead letters stored.
    pub fn dead_letters(&self) -> Vec<String> {
        lock(&self.tables).dead_letters.clone()
    }
}

impl Store for MemStore {
    type Tx = MemTx;

    async fn begin(&self) -> Result<MemTx> {
        Ok(MemTx::on(&self.tables))
    }

    async fn claim(
        &self,
        tx: &mut MemTx,
        consumer: &ConsumerName,
        id: &MessageId,
        hash: PayloadHash,
    ) -> Result<Claim> {
        let key = (consumer.as_str().to_owned(), id.as_str().to_owned());
        let mut t = lock(&self.tables);
        let claim = Claim::given(t.inbox.get(&key).copied(), hash);
        if claim != Claim::Fresh {
            return Ok(claim);
        }
        if !t.pending.insert(key.clone()) {
            return Err(Error::transient("claim held by another transaction"));
        }
        tx.claims.push((key, hash));
        Ok(Claim::Fresh)
    }

    async fn commit(&self, mut tx: MemTx) -> Result<()> {
        let mut t = lock(&self.tables);
        for (key, hash) in tx.claims.drain(..) {
            t.pending.remove(&key);
            t.inbox.insert(key, hash);
        }
        t.ledger.append(&mut tx.effects);
        Ok(())
    }

    async fn rollback(&self, tx: MemTx) -> Result<()> {
        drop(tx);
        Ok(())
    }

    async fn dead_letter(&self, letter: &DeadLetter) -> Result<()> {
        let id = letter.message.display_id().unwrap_or_default();
        lock(&self.tables).dead_letters.push(id);
        Ok(())
    }
}

/// Which store calls fail while a fault is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Calls {
    /// begin, claim, commit, dead_letter, committed_claim.
    All,
    /// dead_letter only.
    DeadLetter,
    /// commit only (the transaction is rolled back).
    Commit,
}

/// Wraps a [`MemStore`]; while a fault is on, the chosen calls fail with its kind.
#[derive(Clone, Default)]
pub struct Faulty {
    /// The store underneath.
    pub inner: MemStore,
    fault: Arc<Mutex<Option<(ErrorKind, Calls)>>>,
    failed: Arc<AtomicU64>,
    /// Inbox reads (committed_claim) left that never answer.
    to_stall: Arc<AtomicU64>,
    stalled: Arc<AtomicU64>,
}

impl Faulty {
    /// Makes `calls` fail with `kind` from now on.
    pub fn fail(&self, kind: ErrorKind, calls: Calls) {
        *self.fault.lock().unwrap() = Some((kind, calls));
    }

    /// Ends the fault.
    pub fn heal(&self) {
        *self.fault.lock().unwrap() = None;
    }

    /// Makes the next `reads` inbox reads never answer, as on a connection the network
    /// stranded (no RST, no FIN: the client waits for an answer that never comes).
    pub fn stall_reads(&self, reads: u64) {
        self.to_stall.store(reads, Relaxed);
    }

    /// Inbox reads that stalled so far.
    pub fn stalled_reads(&self) -> u64 {
        self.stalled.load(Relaxed)
    }

    /// Store calls that failed so far.
    pub fn failed_calls(&self) -> u64 {
        self.failed.load(Relaxed)
    }

    fn check(&self, call: Calls) -> Result<()> {
        match *self.fault.lock().unwrap() {
            Some((kind, calls)) if calls == Calls::All || calls == call => {
                self.failed.fetch_add(1, Relaxed);
                Err(Error::new(kind, format!("injected {kind:?} store fault")))
            }
            _ => Ok(()),
        }
    }
}

impl Store for Faulty {
    type Tx = MemTx;

    async fn begin(&self) -> Result<MemTx> {
        self.check(Calls::All)?;
        self.inner.begin().await
    }

    async fn claim(
        &self,
        tx: &mut MemTx,
        consumer: &ConsumerName,
        id: &MessageId,
        hash: PayloadHash,
    ) -> Result<Claim> {
        self.check(Calls::All)?;
        self.inner.claim(tx, consumer, id, hash).await
    }

    async fn committed_claim(
        &self,
        _consumer: &ConsumerName,
        _id: &MessageId,
        _hash: PayloadHash,
    ) -> Result<bool> {
        self.check(Calls::All)?;
        let stall = self
            .to_stall
            .fetch_update(Relaxed, Relaxed, |left| left.checked_sub(1))
            .is_ok();
        if stall {
            self.stalled.fetch_add(1, Relaxed);
            std::future::pending::<()>().await;
        }
        Ok(false)
    }

    async fn commit(&self, tx: MemTx) -> Result<()> {
        self.check(Calls::Commit)?;
        self.inner.commit(tx).await
    }

    async fn rollback(&self, tx: MemTx) -> Result<()> {
        self.inner.rollback(tx).await
    }

    async fn dead_letter(&self, letter: &DeadLetter) -> Result<()> {
        self.check(Calls::DeadLetter)?;
        self.inner.dead_letter(letter).await
    }
}

/// Writes one ledger row per message; payload `reject` fails permanently; while `unavailable`
/// is set, every call fails as a handler whose own database went read-only.
#[derive(Clone, Default)]
pub struct Ledger {
    unavailable: Arc<std::sync::atomic::AtomicBool>,
}

impl Ledger {
    /// Makes the handler's own database calls fail (`Unavailable`) or work again.
    pub fn set_unavailable(&self, on: bool) {
        self.unavailable.store(on, Relaxed);
    }
}

impl Handler<MemTx> for Ledger {
    async fn handle(&self, tx: &mut MemTx, message: &Envelope) -> Result<Handled> {
        if self.unavailable.load(Relaxed) {
            return Err(Error::unavailable("ledger insert: database is read-only"));
        }
        // A little work, so the outage starts while messages are still flowing.
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        if message.payload() == b"reject" {
            return Err(Error::permanent("rejected"));
        }
        tx.effect(message.id().as_str());
        Ok(Handled::Applied)
    }
}

/// Counts each id in `rows`: (ids applied twice or more, published ids missing).
pub fn double_and_lost(rows: &[String], published: &[String]) -> (usize, usize) {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for row in rows {
        *counts.entry(row).or_default() += 1;
    }
    let double = counts.values().filter(|&&n| n > 1).count();
    let lost = published
        .iter()
        .filter(|id| !counts.contains_key(id.as_str()))
        .count();
    (double, lost)
}
