//! Coalesced acks for one channel: many deliveries settled by one `basic.ack` with
//! `multiple`.
//!
//! A consumer with several groups in flight commits them out of delivery order, so acking
//! each delivery with its own frame costs the broker one settlement per message (on a quorum
//! queue, one command in its log). Here an ack is held until every delivery before it on the
//! channel is settled too; then one `basic.ack` with `multiple` settles the whole run.
//!
//! Rules that keep it safe (RabbitMQ closes the channel on an ack of a tag it does not hold
//! unacked, and `multiple` settles every unacked delivery up to its tag):
//!
//! - a `multiple` ack covers only deliveries the consumer acked: it is sent for the highest
//!   tag of the *prefix* of acked deliveries, the ones before the oldest delivery not yet
//!   settled;
//! - frames leave in the order they were decided (one queue, one sender), so a requeue
//!   decided before a `multiple` ack reaches the broker before it; the one exception is
//!   safe: what queued up while the sender waited on the last frame goes out
//!   [coalesced](book::coalesce), its prefix acks merged into one at the end (acking later
//!   never acks more than was settled);
//! - held acks have a room in the broker's window (the prefetch beyond what the consumer keeps
//!   in hand, [`ChannelAcks::set_room`]): past it, the oldest are sent on their own, so finished
//!   work never fills the window while a delivery before it is slow to settle (a retry, a
//!   stuck handler);
//! - an ack held longer than [`MAX_HOLD`] is sent on its own too (an idle channel's last acks
//!   do not wait for deliveries that never come).
//!
//! Why the room and not a short hold: with several groups in flight on a quorum queue, the
//! delivery before a held run often settles 25 ms or more after it; with a 25 ms hold, most
//! acks of a backlog went out alone and RabbitMQ spent 3 to 5 times the CPU per message
//! settling them (docs/perf/history.md).

use futures::future::BoxFuture;
use lapin::options::{BasicAckOptions, BasicNackOptions};
use oncely_core::{Acker, Error, Result};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, mpsc, oneshot};
use tracing::debug;

mod book;

use book::{Book, Frame, Kind, coalesce};

/// Longest an ack waits for the deliveries before it before it is sent on its own.
pub(crate) const MAX_HOLD: Duration = Duration::from_millis(250);

/// What a held ack carries: lapin's handle for its tag, and who waits for its frame.
struct Pending {
    acker: lapin::Acker,
    waiter: Option<oneshot::Sender<Result<()>>>,
}

/// The acks of one channel: the [`Book`] and the queue of frames its single sender task
/// sends in order.
pub(crate) struct ChannelAcks {
    book: Mutex<Book<Pending>>,
    frames: mpsc::UnboundedSender<Frame<Pending>>,
    /// Wakes the sender when an ack is held (its deadline to watch).
    held: Arc<Notify>,
    /// How many acks may be held at once ([`ChannelAcks::set_room`]).
    room: AtomicUsize,
}

impl ChannelAcks {
    /// The acks of a channel just opened, with the task that sends its frames (it ends when the
    /// channel's last delivery is settled and the channel is gone).
    pub fn start() -> Arc<Self> {
        let (frames, queue) = mpsc::unbounded_channel();
        let acks = Arc::new(Self {
            book: Mutex::new(Book::default()),
            frames,
            held: Arc::new(Notify::new()),
            room: AtomicUsize::new(0),
        });
        tokio::spawn(send_frames(Arc::downgrade(&acks), acks.held.clone(), queue));
        acks
    }

    /// Sets how many acks may be held for the deliveries before them: the part of the
    /// channel's prefetch the consumer does not keep in hand (see [`room_in`]). Until set
    /// (consuming has not started), none.
    pub fn set_room(&self, room: usize) {
        self.room.store(room, Relaxed);
    }

    /// The acker of a delivery the consumer is handed now.
    pub fn acker(self: &Arc<Self>, tag: u64, acker: lapin::Acker) -> Box<dyn Acker> {
        self.lock().open(tag);
        Box::new(AmqpAcker {
            channel: self.clone(),
            tag,
            inner: Some(acker),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Book<Pending>> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs a decision on the book and queues its frames before any later decision's.
    fn decide(&self, f: impl FnOnce(&mut Book<Pending>) -> Vec<Frame<Pending>>) {
        let mut book = self.lock();
        for frame in f(&mut book) {
            // The receiver is gone only when the sender task ended, i.e. the runtime shuts
            // down: dropping the frame leaves its deliveries unacked, and the broker
            // redelivers them.
            let _ = self.frames.send(frame);
        }
    }
}

/// Sends the frames in the order they were decided, and the held acks that waited too long.
async fn send_frames(
    acks: Weak<ChannelAcks>,
    held: Arc<Notify>,
    mut queue: mpsc::UnboundedReceiver<Frame<Pending>>,
) {
    let mut sent = Sent::default();
    loop {
        // Gone once the channel is: then only the frames already queued are left to send.
        let due = acks
            .upgrade()
            .and_then(|channel| channel.lock().oldest_held())
            .map(|since| since + MAX_HOLD);
        tokio::select! {
            _ = held.notified(), if due.is_none() => {}
            frame = queue.recv() => match frame {
                Some(frame) => {
                    // What was decided while the last frame went out, coalesced: in-order
                    // acks become one `multiple` ack instead of a frame each.
                    let mut frames = vec![frame];
                    while let Ok(next) = queue.try_recv() {
                        frames.push(next);
                    }
                    for frame in coalesce(frames) {
                        send(frame, &mut sent).await;
                    }
                }
                None => break,
            },
            _ = tokio::time::sleep_until(due.unwrap_or_else(Instant::now).into()), if due.is_some() => {
                if let Some(acks) = acks.upgrade() {
                    let before = Instant::now() - MAX_HOLD;
                    acks.decide(|book| book.overdue(before));
                }
            }
        }
    }
    debug!(
        acks_up_to = sent.up_to,
        deliveries_in_them = sent.covered,
        acks_one = sent.one,
        requeues = sent.requeue,
        "RabbitMQ: channel's acks done"
    );
}

/// Frames sent on a channel, for the debug line when it ends.
#[derive(Default)]
struct Sent {
    up_to: u64,
    covered: u64,
    one: u64,
    requeue: u64,
}

async fn send(frame: Frame<Pending>, sent: &mut Sent) {
    let Frame {
        kind,
        tag,
        mut items,
    } = frame;
    let Some(own) = items.pop() else { return };
    let result = match kind {
        Kind::AckUpTo | Kind::AckOne => {
            let multiple = kind == Kind::AckUpTo;
            own.acker.ack(BasicAckOptions { multiple }).await
        }
        Kind::Requeue => {
            own.acker
                .nack(BasicNackOptions {
                    requeue: true,
                    multiple: false,
                })
                .await
        }
    };
    match kind {
        Kind::AckUpTo => {
            sent.up_to += 1;
            sent.covered += items.len() as u64 + 1;
        }
        Kind::AckOne => sent.one += 1,
        Kind::Requeue => sent.requeue += 1,
    }
    let what = if kind == Kind::Requeue {
        "basic.nack"
    } else {
        "basic.ack"
    };
    let failure = match result {
        Ok(true) => None,
        Ok(false) => Some(format!(
            "RabbitMQ: {what} of delivery {tag}: the channel is closed (the broker redelivers \
             what it had not seen settled)"
        )),
        Err(e) => Some(format!("RabbitMQ: {what} of delivery {tag}: {e}")),
    };
    for waiter in items.into_iter().chain([own]).filter_map(|p| p.waiter) {
        let _ = waiter.send(match &failure {
            None => Ok(()),
            Some(why) => Err(Error::transient(why)),
        });
    }
}

/// The acker of one delivery: settles through its channel's [`ChannelAcks`].
struct AmqpAcker {
    channel: Arc<ChannelAcks>,
    tag: u64,
    inner: Option<lapin::Acker>,
}

impl AmqpAcker {
    fn settle(
        &mut self,
        decide: impl FnOnce(&mut Book<Pending>, Pending) -> Vec<Frame<Pending>>,
    ) -> BoxFuture<'static, Result<()>> {
        let acker = self.inner.take().expect("settled once");
        let (waiter, answer) = oneshot::channel();
        let pending = Pending {
            acker,
            waiter: Some(waiter),
        };
        self.channel.decide(|book| decide(book, pending));
        let tag = self.tag;
        Box::pin(async move {
            answer.await.unwrap_or_else(|_| {
                Err(Error::transient(format!(
                    "RabbitMQ: settling delivery {tag}: the channel's ack sender stopped"
                )))
            })
        })
    }
}

impl Acker for AmqpAcker {
    /// Resolves when the frame that settles this delivery is written (at most [`MAX_HOLD`]
    /// after the call, plus the write).
    fn ack(mut self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        let tag = self.tag;
        let channel = self.channel.clone();
        let room = channel.room.load(Relaxed);
        self.settle(move |book, p| match book.ack(tag, p, Instant::now()) {
            Some(frame) => {
                let mut frames = vec![frame];
                frames.extend(book.beyond(room));
                frames
            }
            None => {
                channel.held.notify_one();
                book.beyond(room)
            }
        })
    }

    fn nack(mut self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        let tag = self.tag;
        self.settle(move |book, p| book.requeue(tag, p))
    }
}

impl Drop for AmqpAcker {
    /// A delivery dropped unsettled (a crashed task) is requeued, as the broker would do
    /// if the process had died.
    fn drop(&mut self) {
        if let Some(acker) = self.inner.take() {
            let tag = self.tag;
            let pending = Pending {
                acker,
                waiter: None,
            };
            self.channel.decide(|book| book.requeue(tag, pending));
        }
    }
}

/// The room for held acks in a window of `prefetch` deliveries of which the consumer keeps
/// `in_hand` (unknown: `None`): the rest of the window, and at least half of it (a prefetch of
/// 1,536 with 512 in hand leaves 1,024; a prefetch of 32, unknown hand, 16).
pub(crate) fn room_in(prefetch: u16, in_hand: Option<usize>) -> usize {
    let prefetch = usize::from(prefetch);
    let rest = prefetch.saturating_sub(in_hand.unwrap_or(prefetch));
    rest.max(prefetch / 2)
}

#[cfg(test)]
mod tests {
    use super::room_in;

    #[test]
    fn held_acks_get_the_window_beyond_the_hand_and_at_least_half() {
        assert_eq!(room_in(1536, Some(512)), 1024);
        assert_eq!(room_in(32, None), 16);
        assert_eq!(
            room_in(8, Some(512)),
            4,
            "a URL's small prefetch: half of it"
        );
        assert_eq!(room_in(1, Some(1)), 0);
    }
}
