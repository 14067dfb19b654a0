//! The store contract: a transaction the handler writes through, a claim inside it, a
//! commit, and a dead-letter table; plus the [`Committed`] proof the runtime makes from a
//! successful commit and an ack requires.

use crate::envelope::{Meta, PayloadHash, RawEnvelope};
use crate::error::Result;
use crate::id::ConsumerName;
use crate::outcome::DeadLetterReason;
use std::future::Future;
use std::time::SystemTime;

/// Proof that the store reported a durable commit. [`Delivery::ack`](crate::Delivery::ack)
/// requires one, so a processed delivery cannot be acked before the commit it depends on.
///
/// Only the runtime in `oncely-core` makes it, right after [`Store::commit`] or
/// [`Store::dead_letter`] returned `Ok` (or [`Store::committed_claim`] returned `Ok(true)`).
/// A store reports success with `Ok(())` and never holds a proof. User code can neither call
/// a constructor nor write a struct literal:
///
/// ```compile_fail
/// let proof = oncely_core::Committed::new();
/// ```
///
/// ```compile_fail
/// let proof = oncely_core::Committed { _sealed: () };
/// ```
///
/// Draining a source without processing is explicit and needs no proof:
/// [`Delivery::discard`](crate::Delivery::discard).
#[must_use = "a Committed proof exists to be passed to an ack"]
#[derive(Debug)]
pub struct Committed {
    _sealed: (),
}

impl Committed {
    /// The runtime only: call right after a store call confirmed a durable commit.
    pub(crate) fn new() -> Self {
        Self { _sealed: () }
    }
}

/// The result of claiming `(consumer, message_id)` inside a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// First time: run the effect in the same transaction.
    Fresh,
    /// Already processed with the same payload: do nothing.
    Duplicate,
    /// Already processed with a different payload.
    Conflict {
        /// The hash the inbox holds.
        stored: PayloadHash,
    },
}

impl Claim {
    /// What a claim of a payload with `hash` is, given the hash the inbox already `held` for
    /// its id (`None`: not claimed yet). Every store decides the same way through this.
    ///
    /// ```
    /// use oncely_core::{Claim, PayloadHash};
    /// let (a, b) = (PayloadHash::of(b"a"), PayloadHash::of(b"b"));
    /// assert_eq!(Claim::given(None, a), Claim::Fresh);
    /// assert_eq!(Claim::given(Some(a), a), Claim::Duplicate);
    /// assert_eq!(Claim::given(Some(b), a), Claim::Conflict { stored: b });
    /// ```
    pub fn given(held: Option<PayloadHash>, hash: PayloadHash) -> Claim {
        match held {
            None => Claim::Fresh,
            Some(stored) if stored == hash => Claim::Duplicate,
            Some(stored) => Claim::Conflict { stored },
        }
    }
}

/// A message that could not be processed, with the reason.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    /// The consumer that gave up on it.
    pub consumer: ConsumerName,
    /// The message as delivered (its id may be unusable).
    pub message: RawEnvelope,
    /// Why.
    pub reason: DeadLetterReason,
    /// Attempts made before giving up.
    pub attempts: u32,
}

/// A dead-letter row as stored.
///
/// One row per `(consumer, message id, payload hash, reason)`: writing the same dead letter
/// again (a redelivery of the same conflicting copy, the same bad message) does not add a
/// row but counts it in [`deliveries`](Self::deliveries) and moves
/// [`last_seen`](Self::last_seen). Every message can be stored: text that a column cannot
/// take is cut and ends with `…[truncated N bytes]`; the raw id and the payload are kept
/// whole (on MySQL, a payload larger than the server's `max_allowed_packet` is cut the same
/// way; [`payload_hash`](Self::payload_hash) is always the hash of the whole payload).
#[derive(Debug, Clone)]
pub struct StoredDeadLetter {
    /// Row id.
    pub id: i64,
    /// Consumer name.
    pub consumer: String,
    /// The id as shown for humans (lossy, control characters escaped, at most 255 bytes), if
    /// the message had one. Display only: [`raw_id`](Self::raw_id) holds the bytes.
    pub message_id: Option<String>,
    /// The raw id bytes, if any.
    pub raw_id: Option<Vec<u8>>,
    /// Payload bytes.
    pub payload: Vec<u8>,
    /// SHA-256 of the payload as delivered (lower-case hex).
    pub payload_hash: String,
    /// The hash the inbox held, for conflicts.
    pub stored_hash: Option<String>,
    /// Reason code, see [`DeadLetterReason::code`].
    pub reason: String,
    /// Human-readable detail (of the latest write).
    pub detail: String,
    /// Attempts made (the most any write reported).
    pub attempts: u32,
    /// First seen: when this dead letter was first stored (the database's clock).
    pub dead_lettered_at: SystemTime,
    /// Last seen: when this same dead letter was last written again (the database's clock);
    /// equal to [`dead_lettered_at`](Self::dead_lettered_at) for a letter seen once.
    pub last_seen: SystemTime,
    /// How many times it was dead-lettered (1 the first time).
    pub deliveries: u32,
    /// Entity key, version, source time, headers of the message.
    pub meta: Meta,
}

/// A store: the inbox and dead-letter tables plus the transaction the handler writes through.
///
/// Implementations: `oncely-sql` (SQLite, PostgreSQL, MySQL/MariaDB). The conformance suite in
/// `oncely-testkit` checks any implementation.
pub trait Store: Send + Sync + 'static {
    /// The transaction the claim and the handler's effect share.
    type Tx: Send + 'static;

    /// Begins a transaction.
    fn begin(&self) -> impl Future<Output = Result<Self::Tx>> + Send;

    /// Inserts `(consumer, message_id, payload_hash, received_at)` inside `tx`.
    ///
    /// A concurrent claim of the same id must wait for the first transaction and then see
    /// [`Claim::Duplicate`] (or [`Claim::Fresh`] if the first rolled back).
    fn claim(
        &self,
        tx: &mut Self::Tx,
        consumer: &ConsumerName,
        id: &crate::MessageId,
        hash: PayloadHash,
    ) -> impl Future<Output = Result<Claim>> + Send;

    /// Claims several messages in `tx` at once, one [`Claim`] per item, in order.
    ///
    /// The same id may appear more than once: its first copy is claimed, a later copy is
    /// [`Claim::Duplicate`] when its hash equals the one the inbox will hold (the first copy's
    /// if that one was fresh) and [`Claim::Conflict`] otherwise. The default claims the items
    /// one by one; SQL stores override it with one statement per batch.
    fn claim_batch(
        &self,
        tx: &mut Self::Tx,
        consumer: &ConsumerName,
        items: &[(crate::MessageId, PayloadHash)],
    ) -> impl Future<Output = Result<Vec<Claim>>> + Send {
        async move {
            let mut claims = Vec::with_capacity(items.len());
            for (id, hash) in items {
                claims.push(self.claim(tx, consumer, id, *hash).await?);
            }
            Ok(claims)
        }
    }

    /// Looks `(consumer, id)` up outside any transaction, before a claim. `true` when the
    /// inbox already holds it with this `hash`: a committed claim, so the delivery is a
    /// duplicate and may be acked. `false` when it is absent or held with another hash (the
    /// claim then decides, as always). The default finds nothing.
    ///
    /// Used by [`crate::Consumer::check_inbox_first`].
    fn committed_claim(
        &self,
        consumer: &ConsumerName,
        id: &crate::MessageId,
        hash: PayloadHash,
    ) -> impl Future<Output = Result<bool>> + Send {
        let _ = (consumer, id, hash);
        async { Ok(false) }
    }

    /// [`Store::committed_claim`] for several messages at once, one `bool` per item, in order:
    /// `true` where the inbox already holds the id with the item's hash. The runtime calls it
    /// for each group of ready deliveries before claiming (see [`crate::Consumer::group_commit`]),
    /// so redelivered duplicates are acked after one read, without a write transaction. The
    /// default asks [`Store::committed_claim`] for each item; SQL stores use one statement.
    fn committed_claims(
        &self,
        consumer: &ConsumerName,
        items: &[(crate::MessageId, PayloadHash)],
    ) -> impl Future<Output = Result<Vec<bool>>> + Send {
        async move {
            let mut held = Vec::with_capacity(items.len());
            for (id, hash) in items {
                held.push(self.committed_claim(consumer, id, *hash).await?);
            }
            Ok(held)
        }
    }

    /// Commits durably. `Ok(())` means the claim and the effect are durable: the runtime
    /// acks the delivery only after it.
    fn commit(&self, tx: Self::Tx) -> impl Future<Output = Result<()>> + Send;

    /// Rolls back (dropping the transaction must do the same).
    fn rollback(&self, tx: Self::Tx) -> impl Future<Output = Result<()>> + Send;

    /// Stores a dead letter in its own transaction and commits it. Storing the same dead
    /// letter again (same consumer, raw id, payload and reason code) updates the stored row
    /// (see [`StoredDeadLetter::deliveries`]) instead of adding one. It must not fail because
    /// of the message's content (sizes, NUL bytes, invalid UTF-8). `Ok(())` means the row
    /// is durable: the runtime acks the delivery only after it.
    fn dead_letter(&self, letter: &DeadLetter) -> impl Future<Output = Result<()>> + Send;

    /// Checks, once, that the store can serve a consumer: its tables exist with the columns
    /// this version uses and the user may read them. [`crate::Consumer::run`] calls it before
    /// taking a delivery and refuses to start on an error that is not an outage (kind
    /// [`ErrorKind::Config`](crate::ErrorKind::Config): missing table or column, permission
    /// denied), whose message should say what to do (`oncely migrate`). An unavailable store
    /// is not refused: the runtime holds deliveries until it answers. The default checks
    /// nothing; SQL stores run one cheap query per table.
    fn check_ready(&self) -> impl Future<Output = Result<()>> + Send {
        async { Ok(()) }
    }
}

/// Read access for checks, admin commands and the conformance suite.
pub trait Inspect: Store {
    /// The payload hash the inbox holds for `(consumer, id)`, if claimed and committed.
    fn claimed_hash(
        &self,
        consumer: &ConsumerName,
        id: &str,
    ) -> impl Future<Output = Result<Option<PayloadHash>>> + Send;

    /// Dead letters of a consumer (all consumers when `None`), oldest first.
    fn dead_letters(
        &self,
        consumer: Option<&ConsumerName>,
    ) -> impl Future<Output = Result<Vec<StoredDeadLetter>>> + Send;
}
