//! [`handler_fn`]: a closure as a [`Handler`], like tower's `service_fn`.

use crate::envelope::Envelope;
use crate::error::Result;
use crate::handler::Handler;
use crate::outcome::Handled;
use futures::future::BoxFuture;
use std::fmt;

/// A [`Handler`] made of a closure; see [`handler_fn`].
#[derive(Clone)]
pub struct HandlerFn<F>(F);

impl<F> fmt::Debug for HandlerFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HandlerFn")
    }
}

/// Makes a [`Handler`] of a closure that takes the claim's transaction and the message and
/// returns a boxed future (`Box::pin(async move { … })`) of the outcome.
///
/// The `Box::pin` is the working shape on stable Rust, as in sqlx's
/// `Connection::transaction(|tx| Box::pin(async move { … }))`: the future borrows `tx`
/// across its `.await`s, so its type depends on that borrow's lifetime, and a closure can
/// only say so through a boxed future. (An `async` closure that captures anything implements
/// only `AsyncFn`, whose future cannot be required to be `Send`, which the runtime needs.)
/// Clone what the closure captures into the `async move` block, or write a struct
/// implementing [`Handler`] when the handler grows (no box per message then).
///
/// ```
/// use oncely_core::{Envelope, Error, Handled, handler_fn};
///
/// // `Tx` is a plain list here; with oncely it is `AnyTx`, the claim's transaction.
/// let handler = handler_fn(|tx: &mut Vec<i64>, msg: &Envelope| {
///     Box::pin(async move {
///         let amount: i64 = std::str::from_utf8(msg.payload())
///             .ok()
///             .and_then(|s| s.parse().ok())
///             .ok_or_else(|| Error::permanent("payload is not an amount"))?;
///         tx.push(amount); // e.g. `tx.execute(sql, &[amount.into()]).await?`
///         Ok(Handled::Applied)
///     })
/// });
/// # fn is_handler<H: oncely_core::Handler<Vec<i64>>>(_: &H) {}
/// # is_handler(&handler);
/// ```
pub fn handler_fn<Tx, F>(f: F) -> HandlerFn<F>
where
    F: for<'a> Fn(&'a mut Tx, &'a Envelope) -> BoxFuture<'a, Result<Handled>>
        + Send
        + Sync
        + 'static,
{
    HandlerFn(f)
}

impl<Tx, F> Handler<Tx> for HandlerFn<F>
where
    Tx: Send,
    F: for<'a> Fn(&'a mut Tx, &'a Envelope) -> BoxFuture<'a, Result<Handled>>
        + Send
        + Sync
        + 'static,
{
    async fn handle(&self, tx: &mut Tx, message: &Envelope) -> Result<Handled> {
        (self.0)(tx, message).await
    }
}
