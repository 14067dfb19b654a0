//! [`Book`]: which deliveries of a channel are settled, and the frames that tell the broker.

use std::collections::BTreeMap;
use std::time::Instant;

/// What a frame does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `basic.ack` with `multiple`: every delivery up to and including the tag. Only ever
    /// for a settled prefix (every delivery up to the tag decided), so two of them
    /// [coalesce](coalesce) into one.
    AckUpTo,
    /// `basic.ack` of the tag alone.
    AckOne,
    /// `basic.nack` of the tag alone, requeued.
    Requeue,
}

/// One frame to send, with what its settling answers (one item per delivery it covers;
/// the last is the tag's own).
#[derive(Debug)]
pub(crate) struct Frame<T> {
    pub kind: Kind,
    pub tag: u64,
    pub items: Vec<T>,
}

enum Entry<T> {
    /// Handed to the consumer, not settled yet.
    Open,
    /// Acked by the consumer, waiting for the deliveries before it.
    Held { since: Instant, item: T },
}

/// The deliveries of one channel not yet sent to the broker as settled, by delivery tag;
/// decides which frames settle them. Pure bookkeeping (no I/O), so it is tested on its own.
pub(crate) struct Book<T> {
    entries: BTreeMap<u64, Entry<T>>,
    /// How many entries are [`Entry::Held`].
    held: usize,
}

impl<T> Default for Book<T> {
    fn default() -> Self {
        Self {
            entries: BTreeMap::new(),
            held: 0,
        }
    }
}

impl<T> Book<T> {
    /// A delivery handed to the consumer (tags rise on a channel).
    pub fn open(&mut self, tag: u64) {
        self.entries.insert(tag, Entry::Open);
    }

    /// The consumer acked `tag`: the frame that settles the acked prefix, if `tag` completed one.
    pub fn ack(&mut self, tag: u64, item: T, now: Instant) -> Option<Frame<T>> {
        if let Some(Entry::Held { .. }) = self.entries.insert(tag, Entry::Held { since: now, item })
        {
            self.held -= 1;
        }
        self.held += 1;
        self.prefix()
    }

    /// Acks held beyond `room`, oldest delivery first, each as a frame of its own: held acks
    /// count against the broker's window, and past their room they would leave the consumer's
    /// hands empty while a slow delivery holds the run before them.
    pub fn beyond(&mut self, room: usize) -> Vec<Frame<T>> {
        let mut frames = Vec::new();
        while self.held > room {
            let Some(tag) = self
                .entries
                .iter()
                .find(|(_, e)| matches!(e, Entry::Held { .. }))
                .map(|(tag, _)| *tag)
            else {
                break;
            };
            frames.extend(self.take_held(tag));
        }
        frames
    }

    /// Removes held `tag` as a frame of its own.
    fn take_held(&mut self, tag: u64) -> Option<Frame<T>> {
        match self.entries.remove(&tag) {
            Some(Entry::Held { item, .. }) => {
                self.held -= 1;
                Some(Frame {
                    kind: Kind::AckOne,
                    tag,
                    items: vec![item],
                })
            }
            Some(open) => {
                self.entries.insert(tag, open);
                None
            }
            None => None,
        }
    }

    /// The consumer gave `tag` back: its requeue, then the prefix it may have unblocked.
    pub fn requeue(&mut self, tag: u64, item: T) -> Vec<Frame<T>> {
        if let Some(Entry::Held { .. }) = self.entries.remove(&tag) {
            self.held -= 1;
        }
        let mut frames = vec![Frame {
            kind: Kind::Requeue,
            tag,
            items: vec![item],
        }];
        frames.extend(self.prefix());
        frames
    }

    /// When the oldest held ack was held.
    pub fn oldest_held(&self) -> Option<Instant> {
        self.entries
            .values()
            .filter_map(|e| match e {
                Entry::Held { since, .. } => Some(*since),
                Entry::Open => None,
            })
            .min()
    }

    /// Every ack held since `before` or earlier, each as a frame of its own.
    pub fn overdue(&mut self, before: Instant) -> Vec<Frame<T>> {
        let due: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, e)| matches!(e, Entry::Held { since, .. } if *since <= before))
            .map(|(tag, _)| *tag)
            .collect();
        due.into_iter()
            .filter_map(|tag| self.take_held(tag))
            .collect()
    }

    /// The acked deliveries before the oldest open one, as one frame.
    fn prefix(&mut self) -> Option<Frame<T>> {
        let mut items = Vec::new();
        let mut last = None;
        while let Some(entry) = self.entries.first_entry() {
            if matches!(entry.get(), Entry::Open) {
                break;
            }
            let (tag, entry) = entry.remove_entry();
            if let Entry::Held { item, .. } = entry {
                self.held -= 1;
                items.push(item);
                last = Some(tag);
            }
        }
        let tag = last?;
        let kind = Kind::AckUpTo;
        Some(Frame { kind, tag, items })
    }
}

/// Frames decided one after another, as few as the broker needs: every [`Kind::AckUpTo`]
/// merged into one at the end (the last one's tag, every item), the other frames first in
/// their order. Sound because an `AckUpTo` settles a prefix: whatever was decided after it
/// concerns later tags, so it may go first, and sending an ack later never acks a delivery
/// the consumer had not settled. While the channel's sender waits on one frame, the acks
/// decided meanwhile go out as one `multiple` ack instead of one frame each.
pub(crate) fn coalesce<T>(frames: Vec<Frame<T>>) -> Vec<Frame<T>> {
    let mut out = Vec::with_capacity(frames.len());
    let mut run: Option<Frame<T>> = None;
    for frame in frames {
        match (frame.kind, &mut run) {
            (Kind::AckUpTo, Some(acc)) => {
                acc.tag = frame.tag;
                acc.items.extend(frame.items);
            }
            (Kind::AckUpTo, None) => run = Some(frame),
            _ => out.push(frame),
        }
    }
    out.extend(run);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;
    use std::time::Duration;

    /// What RabbitMQ does with the frames: the channel's unacked deliveries; an ack of a tag it
    /// does not hold closes the channel (here: an error).
    #[derive(Default)]
    struct Broker {
        unacked: BTreeSet<u64>,
        acked: BTreeSet<u64>,
        requeued: BTreeSet<u64>,
    }

    impl Broker {
        fn apply(&mut self, frame: &Frame<u64>) -> Result<(), String> {
            if !self.unacked.contains(&frame.tag) {
                return Err(format!(
                    "PRECONDITION_FAILED: unknown delivery tag {}",
                    frame.tag
                ));
            }
            let settled: Vec<u64> = match frame.kind {
                Kind::AckUpTo => self.unacked.range(..=frame.tag).copied().collect(),
                Kind::AckOne | Kind::Requeue => vec![frame.tag],
            };
            for tag in settled {
                self.unacked.remove(&tag);
                let into = match frame.kind {
                    Kind::Requeue => &mut self.requeued,
                    _ => &mut self.acked,
                };
                into.insert(tag);
            }
            Ok(())
        }
    }

    /// How a delivery is settled, and when (an index into the settling order).
    #[derive(Debug, Clone, Copy)]
    enum Settle {
        Ack,
        Requeue,
    }

    fn settlings() -> impl Strategy<Value = Vec<(Settle, usize)>> {
        prop::collection::vec(
            (
                prop_oneof![4 => Just(Settle::Ack), 1 => Just(Settle::Requeue)],
                any::<usize>(),
            ),
            1..60,
        )
    }

    proptest! {
        /// Whatever order deliveries are settled in (and with held acks sent on their own at
        /// any point): every ack reaches the broker, no requeued delivery is acked, every frame
        /// is one the broker accepts, and the answers reach each delivery once.
        #[test]
        fn frames_settle_exactly_what_the_consumer_settled(
            plan in settlings(),
            overdue_every in 2usize..9,
            room in 0usize..8,
            flush_every in 1usize..6,
        ) {
            let n = plan.len() as u64;
            let mut book = Book::default();
            let mut broker = Broker::default();
            for tag in 1..=n {
                book.open(tag);
                broker.unacked.insert(tag);
            }
            // Settle in the order the plan's random keys give.
            let mut order: Vec<(usize, u64, Settle)> = plan
                .iter()
                .zip(1..)
                .map(|(&(how, key), tag)| (key, tag, how))
                .collect();
            order.sort_by_key(|&(key, tag, _)| (key, tag));
            let t0 = Instant::now();
            let mut answered = Vec::new();
            // Frames queue up as the channel's sender would find them, and go out coalesced.
            let mut queued = Vec::new();
            let mut flush = |queued: &mut Vec<Frame<u64>>, broker: &mut Broker| {
                for frame in coalesce(std::mem::take(queued)) {
                    broker.apply(&frame).map_err(TestCaseError::fail)?;
                    prop_assert_eq!(frame.items.last(), Some(&frame.tag));
                    answered.extend(frame.items);
                }
                Ok(())
            };
            for (step, &(_, tag, how)) in order.iter().enumerate() {
                let now = t0 + Duration::from_millis(step as u64);
                match how {
                    Settle::Ack => queued.extend(book.ack(tag, tag, now)),
                    Settle::Requeue => queued.extend(book.requeue(tag, tag)),
                }
                if step % overdue_every == 0 {
                    queued.extend(book.overdue(now - Duration::from_millis(2)));
                }
                queued.extend(book.beyond(room));
                prop_assert!(book.held <= room, "{} acks held, room for {}", book.held, room);
                if step % flush_every == 0 {
                    flush(&mut queued, &mut broker)?;
                }
            }
            flush(&mut queued, &mut broker)?;
            prop_assert!(book.oldest_held().is_none(), "acks still held at the end");
            let acks: BTreeSet<u64> = order.iter().filter(|o| matches!(o.2, Settle::Ack)).map(|o| o.1).collect();
            let requeues: BTreeSet<u64> = order.iter().filter(|o| matches!(o.2, Settle::Requeue)).map(|o| o.1).collect();
            prop_assert_eq!(&broker.acked, &acks);
            prop_assert_eq!(&broker.requeued, &requeues);
            prop_assert!(broker.unacked.is_empty());
            answered.sort();
            prop_assert_eq!(answered, (1..=n).collect::<Vec<_>>());
        }
    }

    #[test]
    fn acks_in_order_go_out_one_frame_per_run() {
        let mut book = Book::default();
        let now = Instant::now();
        (1..=4).for_each(|tag| book.open(tag));
        assert!(book.ack(2, 2, now).is_none(), "2 waits for 1");
        assert!(book.ack(3, 3, now).is_none(), "3 waits for 1");
        let frame = book.ack(1, 1, now).expect("1 completes the run 1..=3");
        assert_eq!(
            (frame.kind, frame.tag, frame.items),
            (Kind::AckUpTo, 3, vec![1, 2, 3])
        );
        let frame = book.ack(4, 4, now).expect("4 is next");
        assert_eq!((frame.kind, frame.tag), (Kind::AckUpTo, 4));
    }

    #[test]
    fn acks_queued_meanwhile_go_out_as_one_frame_after_the_rest() {
        let mut book = Book::default();
        let now = Instant::now();
        (1..=5).for_each(|tag| book.open(tag));
        let mut queued: Vec<Frame<u64>> = Vec::new();
        queued.extend(book.ack(1, 1, now));
        queued.extend(book.ack(2, 2, now));
        queued.extend(book.requeue(4, 4));
        queued.extend(book.ack(3, 3, now));
        let frames: Vec<(Kind, u64, Vec<u64>)> = coalesce(queued)
            .into_iter()
            .map(|f| (f.kind, f.tag, f.items))
            .collect();
        assert_eq!(
            frames,
            [
                (Kind::Requeue, 4, vec![4]),
                (Kind::AckUpTo, 3, vec![1, 2, 3])
            ]
        );
    }

    #[test]
    fn a_requeue_goes_first_then_the_run_it_unblocked() {
        let mut book = Book::default();
        let now = Instant::now();
        (1..=3).for_each(|tag| book.open(tag));
        assert!(book.ack(2, 2, now).is_none());
        assert!(book.ack(3, 3, now).is_none());
        let frames: Vec<(Kind, u64)> = book.requeue(1, 1).iter().map(|f| (f.kind, f.tag)).collect();
        assert_eq!(frames, [(Kind::Requeue, 1), (Kind::AckUpTo, 3)]);
    }

    #[test]
    fn acks_beyond_the_room_go_out_alone_oldest_first() {
        let mut book = Book::default();
        let now = Instant::now();
        (1..=5).for_each(|tag| book.open(tag));
        for tag in [3, 5, 2] {
            assert!(book.ack(tag, tag, now).is_none(), "{tag} waits for 1");
        }
        assert!(book.beyond(3).is_empty(), "3 held, room for 3");
        let frames: Vec<(Kind, u64)> = book.beyond(1).iter().map(|f| (f.kind, f.tag)).collect();
        assert_eq!(frames, [(Kind::AckOne, 2), (Kind::AckOne, 3)]);
        let frame = book.ack(1, 1, now).expect("1 is first");
        assert_eq!(
            (frame.kind, frame.tag, frame.items),
            (Kind::AckUpTo, 1, vec![1])
        );
        let frame = book.ack(4, 4, now).expect("4 completes 4..=5");
        assert_eq!((frame.kind, frame.tag), (Kind::AckUpTo, 5));
    }

    #[test]
    fn held_acks_are_sent_alone_once_overdue() {
        let mut book = Book::default();
        let t0 = Instant::now();
        (1..=3).for_each(|tag| book.open(tag));
        assert!(book.ack(2, 2, t0).is_none());
        assert!(book.ack(3, 3, t0 + Duration::from_millis(10)).is_none());
        assert_eq!(book.oldest_held(), Some(t0));
        let frames: Vec<(Kind, u64)> = book.overdue(t0).iter().map(|f| (f.kind, f.tag)).collect();
        assert_eq!(frames, [(Kind::AckOne, 2)], "only the ack held since t0");
        let frame = book.ack(1, 1, t0).expect("1 then 3 (2 already sent)");
        assert_eq!(
            (frame.kind, frame.tag, frame.items),
            (Kind::AckUpTo, 3, vec![1, 3])
        );
    }
}
