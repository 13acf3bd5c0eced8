//! Snapshots kept in memory until the storage writes them, in the order they
//! were saved: the one rule every [`Storage`](super::Storage) implementation
//! shares, so that they defer and write the same snapshots.
//!
//! Why: a snapshot file costs a create, a sync and a directory sync. A group
//! that turns idle snapshots what it applied (so that its few entries do not
//! keep old log segments alive), and when a node's writes stop at once (a
//! failover stalls every client) thousands of groups turn idle in the same
//! tick. Written inside the flush, their files held that flush, and every
//! view change waiting on it, for seconds. A snapshot whose entries the log
//! already holds loses nothing by waiting: until it is written, a crash
//! recovers the older snapshot and the entries after it, the state the group
//! had before it snapshotted. So such a snapshot is *deferred* and written
//! later, when the storage has time ([`Storage::write_deferred_snapshots`]),
//! and the log keeps its entries until then.
//!
//! A snapshot past the end of the group's log (a state transfer) is written
//! at once: nothing else holds its state.
//!
//! [`Storage::write_deferred_snapshots`]: super::Storage::write_deferred_snapshots

use std::collections::{BTreeMap, VecDeque};

use cohort_messages::{GroupId, Op};

use super::{AppendCursor, Snapshot};

/// Deferred snapshots a storage driver writes per step when it has nothing
/// else to do: each costs a file sync, and the step shares one directory
/// sync. The node's storage worker and the simulator's use the same.
pub const DEFERRED_SNAPSHOTS_PER_STEP: usize = 4;

/// Under a load that never leaves the driver idle, flushes between two
/// forced steps, so the log can still let go of old segments.
pub const FLUSHES_PER_FORCED_SNAPSHOT_STEP: u32 = 32;

/// Whether a snapshot at `op` may wait: the group's staged log reaches it.
pub fn may_defer(cursor: &AppendCursor, op: Op) -> bool {
    op <= cursor.last_op
}

/// Deferred snapshots, the oldest first; one per group (a newer one of the
/// same group replaces the older in its place).
#[derive(Clone, Debug, Default)]
pub struct DeferredSnapshots {
    order: VecDeque<GroupId>,
    snapshots: BTreeMap<GroupId, Snapshot>,
}

impl DeferredSnapshots {
    /// The defer rule every storage shares: if the group's staged log
    /// (`cursor`) reaches the snapshot, record it on the cursor and keep it
    /// to write later, and return true; else return false, and the caller
    /// saves it at once.
    pub fn defer_if_logged(&mut self, cursor: &mut AppendCursor, group: GroupId, snapshot: &Snapshot) -> bool {
        if !may_defer(cursor, snapshot.op) {
            return false;
        }
        cursor.on_snapshot(group, snapshot.op);
        self.defer(group, snapshot.clone());
        true
    }

    /// Keep `snapshot` of `group` to write later.
    pub fn defer(&mut self, group: GroupId, snapshot: Snapshot) {
        if self.snapshots.insert(group, snapshot).is_none() {
            self.order.push_back(group);
        }
        if self.order.len() > 2 * self.snapshots.len() + 64 {
            // Taken snapshots leave their places behind; keep the queue
            // bounded by what waits (first places win: the oldest stay first).
            let mut placed = std::collections::BTreeSet::new();
            let snapshots = &self.snapshots;
            self.order.retain(|group| snapshots.contains_key(group) && placed.insert(*group));
        }
        debug_assert!(self.order.len() >= self.snapshots.len(), "every deferred group has its place");
    }

    /// The group's deferred snapshot, taken out (it is written now, or
    /// superseded, or the group is gone).
    pub fn take(&mut self, group: GroupId) -> Option<Snapshot> {
        self.snapshots.remove(&group)
    }

    /// The group's deferred snapshot's op, if one waits.
    pub fn op_of(&self, group: GroupId) -> Option<Op> {
        self.snapshots.get(&group).map(|snapshot| snapshot.op)
    }

    /// The oldest deferred snapshot, taken out.
    pub fn pop_oldest(&mut self) -> Option<(GroupId, Snapshot)> {
        while let Some(group) = self.order.pop_front() {
            if let Some(snapshot) = self.snapshots.remove(&group) {
                return Some((group, snapshot));
            }
        }
        None
    }

    /// How many wait.
    pub fn len(&self) -> usize {
        self.snapshots.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.snapshots.is_empty()
    }

    /// Forget them all (a crash: the log still holds their entries).
    pub fn clear(&mut self) {
        self.order.clear();
        self.snapshots.clear();
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use cohort_messages::View;

    use super::*;

    fn snapshot(op: u64) -> Snapshot {
        Snapshot { op: Op(op), view: View(1), data: Bytes::from_static(b"s") }
    }

    #[test]
    fn the_oldest_goes_first_and_a_newer_one_keeps_its_groups_place() {
        let mut deferred = DeferredSnapshots::default();
        deferred.defer(GroupId(2), snapshot(5));
        deferred.defer(GroupId(1), snapshot(3));
        deferred.defer(GroupId(2), snapshot(9));
        assert_eq!(deferred.len(), 2);
        assert_eq!(deferred.pop_oldest(), Some((GroupId(2), snapshot(9))));
        assert_eq!(deferred.pop_oldest(), Some((GroupId(1), snapshot(3))));
        assert_eq!(deferred.pop_oldest(), None);
    }

    #[test]
    fn a_taken_snapshot_is_not_written_again() {
        let mut deferred = DeferredSnapshots::default();
        deferred.defer(GroupId(1), snapshot(3));
        deferred.defer(GroupId(2), snapshot(4));
        assert_eq!(deferred.take(GroupId(1)), Some(snapshot(3)));
        assert_eq!(deferred.pop_oldest(), Some((GroupId(2), snapshot(4))));
        assert!(deferred.is_empty());
    }

    #[test]
    fn only_a_snapshot_the_log_reaches_may_wait() {
        let cursor = AppendCursor { last_op: Op(10), snapshot_op: Op(2) };
        assert!(may_defer(&cursor, Op(10)));
        assert!(!may_defer(&cursor, Op(11)));
    }
}
