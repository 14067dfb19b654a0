//! The user's code: a [`Handler`] writes its effect through the store's transaction.

use crate::envelope::Envelope;
use crate::error::Result;
use crate::outcome::Handled;
use std::future::Future;

/// Applies one message's effect through the store's transaction `Tx`.
///
/// The claim was inserted into the same transaction just before, so the effect and the
/// claim commit (or roll back) together. Return [`crate::Error::transient`] to have the
/// runtime roll back and retry, [`crate::Error::permanent`] to dead-letter at once.
///
/// ```
/// use oncely_core::{Envelope, Error, Handled, Handler};
///
/// struct Count;
/// // `Tx` here is a plain counter; with oncely-sql it is a `sqlx::Transaction`.
/// impl Handler<u64> for Count {
///     async fn handle(&self, tx: &mut u64, msg: &Envelope) -> Result<Handled, Error> {
///         if msg.payload().is_empty() {
///             return Err(Error::permanent("empty payload"));
///         }
///         *tx += 1;
///         Ok(Handled::Applied)
///     }
/// }
/// ```
pub trait Handler<Tx>: Send + Sync + 'static {
    /// Writes the effect of `message` through `tx`.
    fn handle(
        &self,
        tx: &mut Tx,
        message: &Envelope,
    ) -> impl Future<Output = Result<Handled>> + Send;

    /// Writes the effects of several fresh messages through `tx` at once, returning one
    /// [`Handled`] per message, in order. Batch mode ([`crate::Consumer::max_batch`]) calls it with
    /// the fresh messages of a batch, after their claims went into the same transaction.
    ///
    /// The default calls [`Handler::handle`] for each message in turn. Override it to write a
    /// whole batch with multi-row statements (e.g. PostgreSQL `unnest`), which saves a round
    /// trip per message. An error rolls the whole batch back; the runtime then processes its
    /// messages one at a time through [`Handler::handle`].
    fn handle_batch(
        &self,
        tx: &mut Tx,
        messages: &[Envelope],
    ) -> impl Future<Output = Result<Vec<Handled>>> + Send
    where
        Tx: Send,
    {
        async move {
            let mut handled = Vec::with_capacity(messages.len());
            for message in messages {
                handled.push(self.handle(tx, message).await?);
            }
            Ok(handled)
        }
    }
}
