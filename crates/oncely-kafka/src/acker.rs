//! The acker of a Kafka delivery: an ack marks the offset done (its commit follows in
//! the background); a nack or a drop parks the record to be handed out again.

use crate::shared::Shared;
use crate::tracker::Ticket;
use futures::future::BoxFuture;
use oncely_core::{Acker, RawEnvelope, Result};
use std::sync::Arc;
use tracing::debug;

pub(crate) struct KafkaAcker {
    pub(crate) shared: Arc<Shared>,
    pub(crate) ticket: Option<Ticket>,
    /// The record's contents, parked for redelivery if the delivery is given back.
    pub(crate) copy: Option<RawEnvelope>,
}

impl KafkaAcker {
    /// Gives the delivery back: parks the record to be handed out again (unless it is
    /// done or its partition is gone).
    fn give_back(&mut self) {
        let (Some(ticket), Some(copy)) = (self.ticket.take(), self.copy.take()) else {
            return;
        };
        {
            let mut tracker = self.shared.lock();
            if tracker.nack(&ticket) {
                debug!(
                    topic = ticket.tp.0,
                    partition = ticket.tp.1,
                    offset = ticket.offset,
                    "Kafka: record given back; redelivering"
                );
                self.shared.parked().push_back((ticket, copy));
                self.shared.parked_ready.notify_one();
            }
        }
        self.shared.settled.notify_all();
    }
}

impl Acker for KafkaAcker {
    fn ack(mut self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        self.copy = None;
        if let Some(ticket) = self.ticket.take() {
            let moved = self.shared.lock().ack(&ticket);
            self.shared.settled.notify_all();
            if moved {
                self.shared.commit_wanted.notify_one();
            }
        }
        Box::pin(async { Ok(()) })
    }

    fn nack(mut self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        self.give_back();
        Box::pin(async { Ok(()) })
    }
}

impl Drop for KafkaAcker {
    /// A delivery dropped unsettled (a crashed task) is given back, as if nacked.
    fn drop(&mut self) {
        self.give_back();
    }
}
