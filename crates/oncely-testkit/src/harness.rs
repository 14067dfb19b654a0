//! What a store must provide to be exercised: fresh isolated instances and an effect ledger.

use oncely_core::{Inspect, Result, Store};
use std::future::Future;
use std::time::SystemTime;

/// The 16 MiB payload the worst-case dead-letter scenario writes unless a store declares less.
pub const DEAD_LETTER_PAYLOAD: usize = 16 * 1024 * 1024;

/// How a store fits the worst dead letters into what it can hold, declared by its harness
/// ([`StoreHarness::dead_letter_limits`]) and checked by the worst-case scenario: a limit is
/// stated here, never a case skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadLetterLimits {
    /// The largest payload the scenario writes (it writes 16 MB and 16 MiB, each capped here).
    pub payload_max: usize,
    /// Payloads above this many bytes are stored cut, ending with `…[truncated N bytes]`
    /// (MySQL: the row must fit in `max_allowed_packet`); `None`: every payload whole.
    pub payload_whole_max: Option<usize>,
    /// Text columns (entity key, detail) are cut to at most this many bytes with the marker,
    /// the display id to 255 bytes with the marker, and headers that don't fit are dropped
    /// and counted in `oncely.dropped_headers`; `None`: text is kept whole.
    pub text_max: Option<usize>,
    /// Text keeps NUL (PostgreSQL's `TEXT` does not: NUL becomes U+FFFD).
    pub text_keeps_nul: bool,
}

impl Default for DeadLetterLimits {
    fn default() -> Self {
        Self {
            payload_max: DEAD_LETTER_PAYLOAD,
            payload_whole_max: None,
            text_max: None,
            text_keeps_nul: true,
        }
    }
}

/// Connects the conformance suite to a store implementation (as River's `Exercise()` takes a driver).
///
/// The suite writes effects only through [`StoreHarness::add_effect`] inside the store's own
/// transaction, and counts them only through [`StoreHarness::effects`], so it never trusts the
/// consumer's own counters.
pub trait StoreHarness: Send + Sync + 'static {
    /// The store under test.
    type Store: Store + Inspect + Clone;

    /// A fresh, isolated (own file / schema / database), migrated store with an empty ledger.
    fn fresh(&self) -> impl Future<Output = Result<Self::Store>> + Send;

    /// Writes one effect row `(message_id, amount)` inside `tx`.
    fn add_effect(
        tx: &mut <Self::Store as Store>::Tx,
        message_id: &str,
        amount: i64,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Every effect row written and committed so far.
    fn effects(store: &Self::Store) -> impl Future<Output = Result<Vec<(String, i64)>>> + Send;

    /// "Now" by the clock the store stamps its rows with (a database's own clock); by
    /// default this host's.
    fn clock(store: &Self::Store) -> impl Future<Output = Result<SystemTime>> + Send {
        let _ = store;
        async { Ok(SystemTime::now()) }
    }

    /// What the store does with the worst dead letters; by default it keeps them whole.
    fn dead_letter_limits(&self) -> DeadLetterLimits {
        DeadLetterLimits::default()
    }
}
