//! A group's in-memory log: the entries after its latest snapshot.
//!
//! `base` is the op the snapshot covers (0 for none); entries are
//! `base+1 ..= op`, contiguous. Snapshots bound its length, and with it the
//! size of the log a view change carries.

use std::collections::VecDeque;

use cohort_messages::{LogEntry, Op, View};

/// Entries `base+1 ..= op()`.
#[derive(Clone, Debug, Default)]
pub struct Log {
    base: Op,
    base_view: View,
    entries: VecDeque<LogEntry>,
    size_bytes: u64,
}

impl Log {
    /// An empty log after a snapshot at `base` (op 0: no snapshot).
    pub fn new(base: Op, base_view: View) -> Log {
        Log { base, base_view, entries: VecDeque::new(), size_bytes: 0 }
    }

    /// The snapshot op the log starts after.
    pub fn base(&self) -> Op {
        self.base
    }

    /// The highest op.
    pub fn op(&self) -> Op {
        Op(self.base.0 + self.entries.len() as u64)
    }

    /// The view of the entry at `op` (the snapshot's view at `base`), if known.
    pub fn view_at(&self, op: Op) -> Option<View> {
        if op == self.base {
            return Some(self.base_view);
        }
        self.get(op).map(|entry| entry.view)
    }

    /// The entry at `op`, if held.
    pub fn get(&self, op: Op) -> Option<&LogEntry> {
        if op <= self.base {
            return None;
        }
        self.entries.get((op.0 - self.base.0 - 1) as usize)
    }

    /// Bytes of operations held.
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Append the next entry.
    pub fn push(&mut self, entry: LogEntry) {
        assert_eq!(entry.op, self.op().next(), "log append out of order");
        self.size_bytes += entry.operation.len() as u64;
        self.entries.push_back(entry);
    }

    /// Drop entries after `op` (`op` ≥ base).
    pub fn truncate_after(&mut self, op: Op) {
        assert!(op >= self.base, "truncating below the snapshot");
        while self.op() > op {
            if let Some(entry) = self.entries.pop_back() {
                self.size_bytes -= entry.operation.len() as u64;
            }
        }
    }

    /// Drop entries up to and including `op` after a snapshot at `op`.
    pub fn discard_through(&mut self, op: Op, view: View) {
        assert!(op <= self.op(), "discarding past the log");
        while self.base < op {
            if let Some(entry) = self.entries.pop_front() {
                self.size_bytes -= entry.operation.len() as u64;
            }
            self.base = self.base.next();
        }
        self.base_view = view;
        if self.entries.is_empty() {
            // Z1: a group that snapshotted everything (an idle one) keeps
            // no room for entries; a busy one keeps its pipeline's.
            self.entries = VecDeque::new();
        }
    }

    /// Replace everything with an empty log after a snapshot at `base`.
    pub fn reset(&mut self, base: Op, base_view: View) {
        *self = Log::new(base, base_view);
    }

    /// Entries from `from` (≥ base+1) to the end.
    pub fn entries_from(&self, from: Op) -> impl Iterator<Item = &LogEntry> {
        let skip = from.0.saturating_sub(self.base.0 + 1) as usize;
        self.entries.iter().skip(skip)
    }

    /// Whether an entry after `after` belongs to `client`.
    pub fn has_client_after(&self, after: Op, client: cohort_messages::ClientId) -> bool {
        self.entries_from(after.next()).any(|entry| entry.client == client)
    }

    /// Find the op of a client's request in the log after `after`.
    pub fn find_request(
        &self,
        after: Op,
        client: cohort_messages::ClientId,
        request: cohort_messages::RequestNumber,
    ) -> Option<Op> {
        self.entries_from(after.next()).find(|entry| entry.client == client && entry.request == request).map(|e| e.op)
    }
}
