//! Deliveries handed back (nacked or dropped unsettled), held in-process and handed out
//! again after a backoff: the broker never sees a nack, and its PUBACK waits for the commit.

use rumqttc::v5::AsyncClient;
use rumqttc::v5::mqttbytes::v5::Publish;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// First wait before a handed-back publish is delivered again; doubled per attempt.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// Longest wait before a handed-back publish is delivered again. Short, because under group
/// commit a delivery is also handed back when another message of its group failed, so its
/// attempt count climbs faster than its own failures; and a consumer that stops after an
/// idle spell (`oncely demo --idle-exit`) must see it again well before that.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// A publish received on one connection, with the client handle that must ack it.
pub(crate) struct Item {
    pub(crate) publish: Publish,
    pub(crate) client: AsyncClient,
    /// The connection it arrived on (see [`Hold::connection`]).
    pub(crate) connection: u64,
}

struct Held {
    due: Instant,
    item: Item,
    attempt: u32,
}

/// The held publishes, and the number of the current connection: a publish held from an
/// earlier connection is forgotten, since the broker redelivers it on the new one (and an
/// ack through the old client could not reach the broker).
#[derive(Default)]
pub(crate) struct Hold {
    held: Mutex<Vec<Held>>,
    changed: Notify,
    connection: AtomicU64,
}

impl Hold {
    /// Holds `item`, whose delivery `attempt` was handed back, for a backoff.
    pub(crate) fn put(&self, item: Item, attempt: u32) {
        let due = Instant::now() + backoff(attempt);
        self.lock().push(Held {
            due,
            item,
            attempt: attempt.saturating_add(1),
        });
        self.changed.notify_one();
    }

    /// A held publish whose backoff has passed, with its next attempt; or when the next
    /// one is due (`Err`), `None` if nothing is held.
    pub(crate) fn take_due(&self) -> Result<(Item, u32), Option<Instant>> {
        let current = self.connection.load(Ordering::Acquire);
        let mut held = self.lock();
        held.retain(|h| h.item.connection == current);
        let now = Instant::now();
        match held.iter().position(|h| h.due <= now) {
            Some(i) => {
                let h = held.swap_remove(i);
                Ok((h.item, h.attempt))
            }
            None => Err(held.iter().map(|h| h.due).min()),
        }
    }

    /// Resolves when something was put on hold.
    pub(crate) async fn changed(&self) {
        self.changed.notified().await
    }

    /// A new connection was opened: what is held from earlier ones is forgotten.
    pub(crate) fn new_connection(&self) -> u64 {
        let n = self.connection.fetch_add(1, Ordering::AcqRel) + 1;
        self.changed.notify_one();
        n
    }

    /// Publishes held now.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Wait before delivery `attempt` + 1: 50 ms doubled per attempt, at most 1 s.
fn backoff(attempt: u32) -> Duration {
    FIRST_BACKOFF
        .saturating_mul(1 << attempt.saturating_sub(1).min(16))
        .min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        assert_eq!(backoff(1), Duration::from_millis(50));
        assert_eq!(backoff(2), Duration::from_millis(100));
        assert_eq!(backoff(4), Duration::from_millis(400));
        assert_eq!(backoff(30), MAX_BACKOFF);
    }
}
