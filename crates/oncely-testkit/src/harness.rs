//! What a store must provide to be exercised: fresh isolated instances and an effect ledger.

use oncely_core::{Inspect, Result, Store};
use std::future::Future;

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
}
