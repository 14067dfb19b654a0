//! The user's code: a [`Handler`] writes its effect through the store's transaction.

use crate::envelope::{Envelope, RawEnvelope};
use crate::error::{Error, Result};
use crate::outcome::Handled;
use serde::de::DeserializeOwned;
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

    /// The key of the rows this message's effect locks, for group commit's lanes (see
    /// [`crate::Consumer::concurrency`]): messages with the same key go to the same lane, in
    /// order, and groups lock rows in key order. The default is the entity key the producer
    /// set ([`crate::Meta::entity_key`]); override it when the key is in the payload.
    /// Messages without a key share one lane.
    ///
    /// ```
    /// use oncely_core::{Envelope, Handled, Handler, RawEnvelope, Result};
    ///
    /// /// Credits an account; the payload is `account:amount`.
    /// struct Credits;
    /// impl Handler<()> for Credits {
    ///     async fn handle(&self, _tx: &mut (), _message: &Envelope) -> Result<Handled> {
    ///         Ok(Handled::Applied)
    ///     }
    ///     fn lock_key(&self, message: &RawEnvelope) -> Option<String> {
    ///         let text = std::str::from_utf8(&message.payload).ok()?;
    ///         Some(text.split(':').next()?.to_owned())
    ///     }
    /// }
    /// let key = Credits.lock_key(&RawEnvelope::new("m-1", "acct-17:5"));
    /// assert_eq!(key.as_deref(), Some("acct-17"));
    /// ```
    fn lock_key(&self, message: &RawEnvelope) -> Option<String> {
        message.meta.entity_key.clone()
    }

    /// Writes the effects of several fresh messages through `tx` at once, returning one
    /// [`Handled`] per message, in order. Batch mode ([`crate::Consumer::group_commit`]) calls it with
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

/// A handler of typed payloads: [`Json`] decodes each payload from JSON into
/// [`JsonHandler::Payload`] before calling it. A payload that does not decode is never handed
/// to it: the runtime dead-letters the message with reason `undecodable_payload` (with serde's
/// error) and acks it.
///
/// ```
/// use oncely_core::{Envelope, Error, Handled, Json, JsonHandler};
/// use serde::Deserialize;
///
/// #[derive(Deserialize)]
/// struct Credit {
///     account: String,
///     amount: i64,
/// }
///
/// struct AddCredits;
/// // `Tx` is a plain map here; with oncely-sql it is the store's transaction.
/// impl JsonHandler<std::collections::HashMap<String, i64>> for AddCredits {
///     type Payload = Credit;
///     async fn handle(
///         &self,
///         tx: &mut std::collections::HashMap<String, i64>,
///         _message: &Envelope,
///         credit: Credit,
///     ) -> Result<Handled, Error> {
///         *tx.entry(credit.account).or_default() += credit.amount;
///         Ok(Handled::Applied)
///     }
/// }
///
/// let handler = Json(AddCredits); // a `Handler` for `Consumer::new`
/// # let _ = handler;
/// ```
pub trait JsonHandler<Tx>: Send + Sync + 'static {
    /// The type each payload is decoded into.
    type Payload: DeserializeOwned + Send;

    /// Writes the effect of `message`, whose payload decoded to `payload`, through `tx`.
    fn handle(
        &self,
        tx: &mut Tx,
        message: &Envelope,
        payload: Self::Payload,
    ) -> impl Future<Output = Result<Handled>> + Send;
}

/// Decodes JSON payloads for a [`JsonHandler`]; see there.
#[derive(Debug, Clone, Default)]
pub struct Json<H>(pub H);

impl<Tx: Send, H: JsonHandler<Tx>> Handler<Tx> for Json<H> {
    async fn handle(&self, tx: &mut Tx, message: &Envelope) -> Result<Handled> {
        let payload = serde_json::from_slice::<H::Payload>(message.payload()).map_err(|e| {
            Error::undecodable(format!("not a JSON {}: {e}", short_type::<H::Payload>()))
        })?;
        self.0.handle(tx, message, payload).await
    }
}

/// The last path segment of a type's name (`Credit` for `my_app::Credit`).
fn short_type<T>() -> &'static str {
    let name = std::any::type_name::<T>();
    let base = name.split('<').next().unwrap_or(name);
    base.rsplit("::").next().unwrap_or(base)
}
