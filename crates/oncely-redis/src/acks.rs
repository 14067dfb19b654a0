//! `XACK`s coalesced per connection: acks asked for while one `XACK` is on the wire go out
//! together in the next, as one command with many entry ids. A group's acks then cost one
//! round trip and one command instead of one each; a lone ack still costs one round trip.
//! Each ack is answered only once its `XACK` was, so "acked" still means the broker has it.

use oncely_core::{Error, Result};
use redis::Value;
use redis::aio::MultiplexedConnection;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::{mpsc, oneshot};

/// Most entry ids in one `XACK`.
const MAX_IDS: usize = 1024;

/// The ack side of one connection: a task sending coalesced `XACK`s.
#[derive(Clone)]
pub(crate) struct Acks {
    tx: mpsc::UnboundedSender<Pending>,
}

struct Pending {
    entry: String,
    done: oneshot::Sender<Result<()>>,
}

impl Acks {
    /// Starts the ack task over `conn` for `stream` and `group`; a failed `XACK` sets
    /// `broken` (the source then reconnects).
    pub(crate) fn start(
        conn: MultiplexedConnection,
        stream: String,
        group: String,
        broken: Arc<AtomicBool>,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(conn, stream, group, broken, rx));
        Self { tx }
    }

    /// Acks `entry`; returns once the `XACK` carrying it was answered.
    pub(crate) async fn ack(&self, entry: String) -> Result<()> {
        let (done, answer) = oneshot::channel();
        self.tx
            .send(Pending { entry, done })
            .map_err(|_| Error::transient("Redis: XACK not sent: the ack task has ended"))?;
        answer
            .await
            .map_err(|_| Error::transient("Redis: XACK not answered: the ack task has ended"))?
    }
}

/// Sends what is waiting as one `XACK`, waits for its answer, then the next; ends when every
/// [`Acks`] handle is gone.
async fn run(
    mut conn: MultiplexedConnection,
    stream: String,
    group: String,
    broken: Arc<AtomicBool>,
    mut rx: mpsc::UnboundedReceiver<Pending>,
) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_IDS {
            match rx.try_recv() {
                Ok(more) => batch.push(more),
                Err(_) => break,
            }
        }
        let mut cmd = redis::cmd("XACK");
        cmd.arg(&stream).arg(&group);
        for pending in &batch {
            cmd.arg(&pending.entry);
        }
        let answered: redis::RedisResult<Value> = cmd.query_async(&mut conn).await;
        if let Err(e) = &answered {
            broken.store(true, Ordering::Relaxed);
            tracing::debug!(error = %e, ids = batch.len(), "Redis: XACK failed");
        }
        for pending in batch {
            let result = match &answered {
                Ok(_) => Ok(()),
                Err(e) => Err(Error::transient(format!("Redis: XACK: {e}"))),
            };
            let _ = pending.done.send(result);
        }
    }
}
