//! Offset bookkeeping without I/O: which delivered offsets are settled, and how far each
//! partition may be committed.
//!
//! The one rule: the commit position of a partition only moves over offsets whose
//! delivery was acked (its database transaction committed). An offset still in flight —
//! or given back with a nack — blocks every later offset of the same partition, however
//! many of those are done. So a commit never skips unfinished work, whatever order the
//! consumer runtime finishes deliveries in.

use std::collections::{BTreeMap, HashMap};

/// A topic partition.
pub(crate) type Tp = (String, i32);

#[derive(Debug, Default)]
struct Entry {
    /// Deliveries of this offset handed out and not yet settled.
    in_flight: u32,
    /// Some delivery of this offset was acked.
    done: bool,
    /// Deliveries of this offset so far (the next one's attempt number is this + 1).
    deliveries: u32,
}

#[derive(Debug)]
struct Part {
    generation: u64,
    /// Where consumption should start (the committed offset), when known: the first
    /// record received is checked against it.
    expected_start: Option<i64>,
    pending: BTreeMap<i64, Entry>,
    /// Next offset to commit: every delivered offset below it is done.
    done_upto: Option<i64>,
    /// The last position handed to a commit (or known committed).
    committed: Option<i64>,
}

impl Part {
    fn new(generation: u64) -> Self {
        Self {
            generation,
            expected_start: None,
            pending: BTreeMap::new(),
            done_upto: None,
            committed: None,
        }
    }

    fn advance(&mut self) {
        while let Some(entry) = self.pending.first_entry() {
            if !entry.get().done {
                break;
            }
            let offset = *entry.key();
            entry.remove();
            self.done_upto = Some(offset + 1);
        }
    }

    fn in_flight(&self) -> u32 {
        self.pending.values().map(|e| e.in_flight).sum()
    }
}

/// A handed-out delivery's place in the tracker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ticket {
    pub tp: Tp,
    pub offset: i64,
    pub generation: u64,
}

/// What [`Tracker::register`] decided about a received message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Registered {
    /// Hand it out; settle it with this ticket. `attempt` counts deliveries of the offset
    /// seen by this process (1 for the first).
    Track { ticket: Ticket, attempt: u32 },
    /// The partition is not assigned to this consumer: do not hand it out.
    NotAssigned,
    /// Already done in this assignment (fetched again, e.g. after the client reset its
    /// fetch position): skip it.
    AlreadyDone,
}

/// Per-partition offset state of one consumer.
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    parts: HashMap<Tp, Part>,
    next_generation: u64,
    ever_assigned: bool,
}

impl Tracker {
    fn new_generation(&mut self) -> u64 {
        self.next_generation += 1;
        self.next_generation
    }

    /// Partitions were assigned: fresh state for each (a new generation, so late
    /// settlements from an earlier assignment are ignored).
    pub fn assign(&mut self, tps: impl IntoIterator<Item = Tp>) {
        self.ever_assigned = true;
        for tp in tps {
            let generation = self.new_generation();
            self.parts.insert(tp, Part::new(generation));
        }
    }

    /// True once partitions were assigned to this consumer (any time so far).
    pub fn ever_assigned(&self) -> bool {
        self.ever_assigned
    }

    /// The committed offset of an assigned partition, where its first record should be.
    pub fn expect_start(&mut self, tp: &Tp, offset: i64) {
        if let Some(part) = self.parts.get_mut(tp) {
            part.expected_start = Some(offset);
        }
    }

    /// For the first record received after an assignment: the offsets the broker skipped
    /// between the committed offset and this record (`Some((from, to))`, `to` exclusive),
    /// if any. A few are normal (transaction markers, compaction); many mean the broker
    /// lost records, which no consumer can recover.
    pub fn gap_before(&mut self, tp: &Tp, offset: i64) -> Option<(i64, i64)> {
        let part = self.parts.get_mut(tp)?;
        let start = part.expected_start.take()?;
        (offset > start).then_some((start, offset))
    }

    /// A message at `offset` was received.
    ///
    /// A partition that is not assigned (any more) gives [`Registered::NotAssigned`]: the
    /// record is left to whoever owns the partition. Tracking it would start a fresh state
    /// at this offset and let a later commit jump over the records before it.
    pub fn register(&mut self, tp: &Tp, offset: i64) -> Registered {
        let Some(part) = self.parts.get_mut(tp) else {
            return Registered::NotAssigned;
        };
        if part.done_upto.is_some_and(|d| offset < d) {
            return Registered::AlreadyDone;
        }
        let entry = part.pending.entry(offset).or_default();
        if entry.done {
            return Registered::AlreadyDone;
        }
        entry.in_flight += 1;
        entry.deliveries += 1;
        Registered::Track {
            attempt: entry.deliveries,
            ticket: Ticket {
                tp: tp.clone(),
                offset,
                generation: part.generation,
            },
        }
    }

    fn part_of(&mut self, ticket: &Ticket) -> Option<&mut Part> {
        self.parts
            .get_mut(&ticket.tp)
            .filter(|p| p.generation == ticket.generation)
    }

    /// The delivery's transaction committed. Returns true if the partition's commit
    /// position moved.
    pub fn ack(&mut self, ticket: &Ticket) -> bool {
        let Some(part) = self.part_of(ticket) else {
            return false;
        };
        let Some(entry) = part.pending.get_mut(&ticket.offset) else {
            return false;
        };
        entry.in_flight = entry.in_flight.saturating_sub(1);
        entry.done = true;
        let before = part.done_upto;
        part.advance();
        part.done_upto != before
    }

    /// The delivery was given back (nacked, or dropped by a crashed task). Returns true if
    /// the record must be handed out again: it is not done through another delivery and
    /// the partition is still ours in the same assignment. Until it is done, no later
    /// offset of its partition is committed.
    pub fn nack(&mut self, ticket: &Ticket) -> bool {
        let Some(part) = self.part_of(ticket) else {
            return false;
        };
        let Some(entry) = part.pending.get_mut(&ticket.offset) else {
            return false;
        };
        entry.in_flight = entry.in_flight.saturating_sub(1);
        !entry.done
    }

    /// A given-back record is handed out again. Returns its attempt number, or `None` if
    /// it no longer needs a delivery (done meanwhile, or its partition was revoked or
    /// re-assigned since).
    pub fn redeliver(&mut self, ticket: &Ticket) -> Option<u32> {
        let part = self.part_of(ticket)?;
        let entry = part.pending.get_mut(&ticket.offset)?;
        if entry.done {
            return None;
        }
        entry.in_flight += 1;
        entry.deliveries += 1;
        Some(entry.deliveries)
    }

    /// Deliveries of `tp` still in flight.
    pub fn in_flight(&self, tp: &Tp) -> u32 {
        self.parts.get(tp).map_or(0, Part::in_flight)
    }

    /// Deliveries in flight over all partitions.
    pub fn total_in_flight(&self) -> u32 {
        self.parts.values().map(Part::in_flight).sum()
    }

    /// Positions to commit: partitions whose done position moved past the last commit.
    /// They are marked committed; call [`Tracker::commit_failed`] if the commit fails.
    pub fn take_dirty(&mut self) -> Vec<(Ticket, i64)> {
        let mut out = Vec::new();
        for (tp, part) in &mut self.parts {
            if let Some(d) = part.done_upto
                && part.committed.is_none_or(|c| c < d)
            {
                part.committed = Some(d);
                out.push((
                    Ticket {
                        tp: tp.clone(),
                        offset: d,
                        generation: part.generation,
                    },
                    d,
                ));
            }
        }
        out
    }

    /// A commit of these positions failed: commit them again next time.
    pub fn commit_failed(&mut self, batch: &[(Ticket, i64)]) {
        for (ticket, _) in batch {
            if let Some(part) = self.part_of(ticket) {
                part.committed = None;
            }
        }
    }

    /// The partition was revoked: forget it, returning the position to commit now (if it
    /// moved since the last commit).
    pub fn revoke(&mut self, tp: &Tp) -> Option<i64> {
        let part = self.parts.remove(tp)?;
        let d = part.done_upto?;
        part.committed.is_none_or(|c| c < d).then_some(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> Tp {
        ("t".to_owned(), p)
    }

    fn track(t: &mut Tracker, p: i32, offset: i64) -> Ticket {
        match t.register(&tp(p), offset) {
            Registered::Track { ticket, .. } => ticket,
            other => panic!("expected Track, got {other:?}"),
        }
    }

    #[test]
    fn commits_only_contiguously() {
        let mut t = Tracker::default();
        t.assign([tp(0)]);
        let a = track(&mut t, 0, 10);
        let b = track(&mut t, 0, 11);
        let c = track(&mut t, 0, 12);
        assert!(!t.ack(&c), "12 done while 10 in flight: nothing to commit");
        assert!(!t.ack(&b));
        assert!(t.take_dirty().is_empty());
        assert!(t.ack(&a));
        let dirty = t.take_dirty();
        assert_eq!(dirty.len(), 1);
        assert_eq!(dirty[0].1, 13);
        assert!(t.take_dirty().is_empty(), "nothing moved since");
    }

    #[test]
    fn gaps_in_offsets_do_not_block() {
        let mut t = Tracker::default();
        t.assign([tp(0)]);
        let a = track(&mut t, 0, 5);
        let b = track(&mut t, 0, 9); // 6..8 were control records: never delivered
        t.ack(&b);
        t.ack(&a);
        assert_eq!(t.take_dirty()[0].1, 10);
    }

    #[test]
    fn nack_blocks_commits_until_the_redelivery_is_done() {
        let mut t = Tracker::default();
        t.assign([tp(0)]);
        let a = track(&mut t, 0, 1);
        let b = track(&mut t, 0, 2);
        let c = track(&mut t, 0, 3);
        assert!(t.nack(&c));
        assert!(t.nack(&a));
        t.ack(&b);
        assert!(t.take_dirty().is_empty(), "offset 1 is not done");
        assert_eq!(t.total_in_flight(), 0);
        assert_eq!(t.redeliver(&a), Some(2), "second delivery of offset 1");
        assert_eq!(t.register(&tp(0), 2), Registered::AlreadyDone);
        assert_eq!(t.redeliver(&c), Some(2));
        t.ack(&a);
        assert_eq!(t.take_dirty()[0].1, 3, "1 and 2 are done; 3 is in flight");
        t.ack(&c);
        assert_eq!(t.take_dirty()[0].1, 4);
        assert_eq!(t.redeliver(&c), None, "done: nothing to hand out");
        assert_eq!(t.register(&tp(0), 3), Registered::AlreadyDone);
    }

    #[test]
    fn nack_of_a_done_or_revoked_record_asks_for_no_redelivery() {
        let mut t = Tracker::default();
        t.assign([tp(0)]);
        let a = track(&mut t, 0, 1);
        let Registered::Track { ticket: a2, .. } = t.register(&tp(0), 1) else {
            panic!("a second delivery of an unfinished offset is tracked");
        };
        t.ack(&a2);
        assert!(!t.nack(&a), "done through the other delivery");
        let b = track(&mut t, 0, 2);
        assert_eq!(t.revoke(&tp(0)), Some(2));
        assert!(!t.nack(&b), "the partition is no longer ours");
        assert_eq!(t.redeliver(&b), None);
    }

    #[test]
    fn stale_generation_is_ignored_and_revoke_returns_the_position() {
        let mut t = Tracker::default();
        t.assign([tp(0), tp(1)]);
        let a = track(&mut t, 0, 0);
        let b = track(&mut t, 0, 1);
        t.ack(&a);
        assert_eq!(t.in_flight(&tp(0)), 1);
        assert_eq!(t.revoke(&tp(0)), Some(1));
        t.assign([tp(0)]);
        assert!(
            !t.ack(&b),
            "a settlement from the old assignment changes nothing"
        );
        assert!(!t.nack(&b));
        assert!(t.take_dirty().is_empty());
        assert_eq!(t.total_in_flight(), 0);
    }

    #[test]
    fn records_of_unassigned_partitions_are_not_tracked() {
        let mut t = Tracker::default();
        assert_eq!(t.register(&tp(0), 7), Registered::NotAssigned);
        t.assign([tp(0)]);
        let a = track(&mut t, 0, 7);
        t.ack(&a);
        assert_eq!(t.revoke(&tp(0)), Some(8));
        // A record fetched before the revoke and received after it must not start a
        // fresh state at offset 9: committing 10 would skip offset 8.
        assert_eq!(t.register(&tp(0), 9), Registered::NotAssigned);
        assert!(t.take_dirty().is_empty());
    }

    #[test]
    fn a_gap_after_the_committed_offset_is_reported_once() {
        let mut t = Tracker::default();
        t.assign([tp(0), tp(1)]);
        t.expect_start(&tp(0), 2024);
        t.expect_start(&tp(1), 5);
        assert_eq!(t.gap_before(&tp(0), 2230), Some((2024, 2230)));
        assert_eq!(t.gap_before(&tp(0), 2231), None, "only the first record");
        assert_eq!(t.gap_before(&tp(1), 5), None, "started where committed");
        assert_eq!(t.gap_before(&tp(2), 9), None, "not assigned");
    }

    #[test]
    fn failed_commit_is_retried() {
        let mut t = Tracker::default();
        t.assign([tp(3)]);
        let a = track(&mut t, 3, 0);
        t.ack(&a);
        let batch = t.take_dirty();
        t.commit_failed(&batch);
        assert_eq!(t.take_dirty(), batch);
        assert_eq!(t.revoke(&tp(3)), None, "already handed to a commit");
    }
}
