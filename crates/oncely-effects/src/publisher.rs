//! Where the relay sends outbox messages: any broker that implements [`Publisher`].

use crate::outbox::OutboxMessage;
use oncely_core::{MemorySource, Result};
use std::future::Future;
use std::sync::Arc;

/// Sends one outgoing message to a broker. Returning `Ok` means the broker accepted it
/// (published and, where the broker has them, confirmed); the relay then marks the row
/// dispatched. An error makes the relay retry the row later with backoff.
///
/// The message keeps its id on every retry, so a publish that reached the broker but was not
/// marked (a relay crash) produces a duplicate that the downstream inbox deduplicates.
pub trait Publisher: Send + Sync + 'static {
    /// Publishes `message` (see [`OutboxMessage::to_raw`] for the envelope form).
    fn publish(&self, message: &OutboxMessage) -> impl Future<Output = Result<()>> + Send;
}

/// The in-process broker: publishes [`OutboxMessage::to_raw`].
impl Publisher for MemorySource {
    async fn publish(&self, message: &OutboxMessage) -> Result<()> {
        MemorySource::publish(self, message.to_raw());
        Ok(())
    }
}

impl<P: Publisher> Publisher for Arc<P> {
    fn publish(&self, message: &OutboxMessage) -> impl Future<Output = Result<()>> + Send {
        (**self).publish(message)
    }
}
