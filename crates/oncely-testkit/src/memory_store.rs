//! The reference store: the contract in memory, for tests of sources, handlers and the runtime.

use crate::harness::StoreHarness;
use oncely_core::{
    Claim, ConsumerName, DeadLetter, DeadLetterReason, Inspect, MessageId, PayloadHash, Result,
    Store, StoredDeadLetter,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;
use tokio::sync::{Mutex as TxLock, OwnedMutexGuard};

type InboxKey = (String, String);
type LetterKey = (String, Option<Vec<u8>>, String, &'static str);

#[derive(Default)]
struct Tables {
    inbox: HashMap<InboxKey, PayloadHash>,
    effects: Vec<(String, i64)>,
    letters: Vec<StoredDeadLetter>,
    letter_index: HashMap<LetterKey, usize>,
}

/// An in-memory [`Store`] with the semantics every SQL store has: one transaction writes at a
/// time (as SQLite's `BEGIN IMMEDIATE`), so a second claim of the same id waits for the first
/// transaction and then sees [`Claim::Duplicate`]; claims and effects become visible together
/// on commit; dropping a transaction rolls it back; dead letters are deduplicated by
/// `(consumer, raw id, payload hash, reason)`. It passes the whole store suite
/// ([`crate::exercise`]), so it is the reference the source suite consumes into.
///
/// ```
/// use oncely_testkit::MemoryStore;
/// use oncely_core::{Consumer, ConsumerName, MemorySource, RawEnvelope, Source};
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// let consumer = Consumer::new(ConsumerName::new("billing").unwrap(), store.clone(), store.recorder());
/// let mut source = MemorySource::new();
/// source.publish(RawEnvelope::new("m-1", "5"));
/// source.publish(RawEnvelope::new("m-1", "5"));
/// source.close();
/// consumer.run(source, Default::default()).await.unwrap();
/// assert_eq!(store.effects(), vec![("m-1".to_owned(), 5)]);
/// # });
/// ```
#[derive(Clone, Default)]
pub struct MemoryStore {
    tables: Arc<Mutex<Tables>>,
    writer: Arc<TxLock<()>>,
}

/// A transaction of [`MemoryStore`]: it holds the store's write lock; its claims and effects
/// are applied on commit and dropped on rollback.
pub struct MemoryTx {
    _writer: OwnedMutexGuard<()>,
    claims: Vec<(InboxKey, PayloadHash)>,
    effects: Vec<(String, i64)>,
}

impl MemoryTx {
    /// Writes one effect row `(message_id, amount)` inside the transaction.
    pub fn add_effect(&mut self, message_id: &str, amount: i64) {
        self.effects.push((message_id.to_owned(), amount));
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every committed effect row, in commit order.
    pub fn effects(&self) -> Vec<(String, i64)> {
        self.lock().effects.clone()
    }

    /// A handler that records `(id, amount)` with the amount parsed from the payload text
    /// (see [`crate::LedgerHandler`]).
    pub fn recorder(&self) -> crate::LedgerHandler<MemoryHarness> {
        crate::LedgerHandler::default()
    }

    fn lock(&self) -> MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lookup(&self, consumer: &str, id: &str) -> Option<PayloadHash> {
        self.lock()
            .inbox
            .get(&(consumer.to_owned(), id.to_owned()))
            .copied()
    }
}

impl Store for MemoryStore {
    type Tx = MemoryTx;

    async fn begin(&self) -> Result<MemoryTx> {
        Ok(MemoryTx {
            _writer: self.writer.clone().lock_owned().await,
            claims: Vec::new(),
            effects: Vec::new(),
        })
    }

    async fn claim(
        &self,
        tx: &mut MemoryTx,
        consumer: &ConsumerName,
        id: &MessageId,
        hash: PayloadHash,
    ) -> Result<Claim> {
        let key = (consumer.as_str().to_owned(), id.as_str().to_owned());
        let own = tx.claims.iter().find(|(k, _)| *k == key).map(|(_, h)| *h);
        let claim = Claim::given(own.or_else(|| self.lookup(&key.0, &key.1)), hash);
        if claim == Claim::Fresh {
            tx.claims.push((key, hash));
        }
        Ok(claim)
    }

    async fn committed_claim(
        &self,
        consumer: &ConsumerName,
        id: &MessageId,
        hash: PayloadHash,
    ) -> Result<bool> {
        Ok(self.lookup(consumer.as_str(), id.as_str()) == Some(hash))
    }

    async fn commit(&self, tx: MemoryTx) -> Result<()> {
        let mut t = self.lock();
        t.inbox.extend(tx.claims);
        t.effects.extend(tx.effects);
        Ok(())
    }

    async fn rollback(&self, tx: MemoryTx) -> Result<()> {
        drop(tx);
        Ok(())
    }

    async fn dead_letter(&self, letter: &DeadLetter) -> Result<()> {
        let message = &letter.message;
        let hash = PayloadHash::of(&message.payload).to_hex();
        let code = letter.reason.code();
        let key = (
            letter.consumer.as_str().to_owned(),
            message.id.clone(),
            hash.clone(),
            code,
        );
        let now = SystemTime::now();
        let mut t = self.lock();
        if let Some(&at) = t.letter_index.get(&key) {
            let row = &mut t.letters[at];
            row.deliveries += 1;
            row.last_seen = now;
            row.attempts = row.attempts.max(letter.attempts);
            row.detail = letter.reason.to_string();
            return Ok(());
        }
        let row = StoredDeadLetter {
            id: t.letters.len() as i64 + 1,
            consumer: letter.consumer.as_str().to_owned(),
            message_id: message.display_id(),
            raw_id: message.id.clone(),
            payload: message.payload.clone(),
            payload_hash: hash,
            stored_hash: match &letter.reason {
                DeadLetterReason::Conflict { stored, .. } => Some(stored.to_hex()),
                _ => None,
            },
            reason: code.to_owned(),
            detail: letter.reason.to_string(),
            attempts: letter.attempts,
            dead_lettered_at: now,
            last_seen: now,
            deliveries: 1,
            meta: message.meta.clone(),
        };
        let at = t.letters.len();
        t.letters.push(row);
        t.letter_index.insert(key, at);
        Ok(())
    }
}

impl Inspect for MemoryStore {
    async fn claimed_hash(&self, consumer: &ConsumerName, id: &str) -> Result<Option<PayloadHash>> {
        Ok(self.lookup(consumer.as_str(), id))
    }

    async fn dead_letters(&self, consumer: Option<&ConsumerName>) -> Result<Vec<StoredDeadLetter>> {
        Ok(self
            .lock()
            .letters
            .iter()
            .filter(|l| consumer.is_none_or(|c| c.as_str() == l.consumer))
            .cloned()
            .collect())
    }
}

/// Runs the store suite on [`MemoryStore`] (each `fresh` store is a new, empty one).
#[derive(Debug, Clone, Copy, Default)]
pub struct MemoryHarness;

impl StoreHarness for MemoryHarness {
    type Store = MemoryStore;

    async fn fresh(&self) -> Result<MemoryStore> {
        Ok(MemoryStore::new())
    }

    async fn add_effect(tx: &mut MemoryTx, message_id: &str, amount: i64) -> Result<()> {
        tx.add_effect(message_id, amount);
        Ok(())
    }

    async fn effects(store: &MemoryStore) -> Result<Vec<(String, i64)>> {
        Ok(store.effects())
    }
}
