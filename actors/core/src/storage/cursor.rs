//! The precondition check every [`Storage`](super::Storage) implementation
//! shares, so that they panic on the same caller bugs.
//!
//! An implementation keeps one [`AppendCursor`] per group, updated as records
//! are *staged* (not as they become durable): the check is about what the
//! caller asked for, in the order it asked.

use std::collections::BTreeMap;

use cohort_messages::{GroupId, Op};

use super::Recovered;

/// Where a group's staged log ends and where its snapshot is.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct AppendCursor {
    /// The op of the last staged entry (0 when the log is empty).
    pub last_op: Op,
    /// The op of the newest snapshot (0 when there is none).
    pub snapshot_op: Op,
}

impl AppendCursor {
    /// A cursor for what survived a restart: the last recovered entry's op
    /// and the snapshot op.
    pub fn recovered(last_op: Op, snapshot_op: Op) -> Self {
        Self { last_op, snapshot_op }
    }

    /// The cursors a restarted node starts from: per recovered group, its
    /// last entry's op and its snapshot op.
    pub fn all_recovered(recovered: &Recovered) -> BTreeMap<GroupId, AppendCursor> {
        recovered
            .groups
            .iter()
            .map(|(group, state)| {
                let last_op = state.entries.last().map_or(Op(0), |entry| entry.op);
                let snapshot_op = state.snapshot.as_ref().map_or(Op(0), |snapshot| snapshot.op);
                (*group, AppendCursor::recovered(last_op, snapshot_op))
            })
            .collect()
    }

    /// The highest op an append may use next.
    pub fn append_op_max(&self) -> Op {
        self.last_op.max(self.snapshot_op).next()
    }

    /// Record an append of `op`.
    ///
    /// # Panics
    /// If `op` is 0 or would leave a gap (a caller bug: the recovered log
    /// would not be contiguous).
    pub fn on_append(&mut self, group: GroupId, op: Op) {
        assert!(op.get() > 0, "storage contract: {group} append of op 0 (op 0 is the empty log)");
        let op_max = self.append_op_max();
        assert!(
            op <= op_max,
            "storage contract: {group} append of {op} leaves a gap (last staged {}, snapshot {}, next allowed at most {op_max})",
            self.last_op,
            self.snapshot_op
        );
        self.last_op = op;
    }

    /// Record a truncation after `op`.
    pub fn on_truncate(&mut self, op: Op) {
        self.last_op = self.last_op.min(op);
    }

    /// Record a snapshot at `op`.
    ///
    /// # Panics
    /// If the snapshot op goes down (a caller bug).
    pub fn on_snapshot(&mut self, group: GroupId, op: Op) {
        assert!(
            op >= self.snapshot_op,
            "storage contract: {group} snapshot op goes down from {} to {op}",
            self.snapshot_op
        );
        self.snapshot_op = op;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_may_follow_the_log_or_the_snapshot() {
        let group = GroupId(1);
        let mut cursor = AppendCursor::default();
        cursor.on_append(group, Op(1));
        cursor.on_append(group, Op(2));
        cursor.on_append(group, Op(2));
        cursor.on_truncate(Op(1));
        assert_eq!(cursor.append_op_max(), Op(2));
        cursor.on_snapshot(group, Op(10));
        assert_eq!(cursor.append_op_max(), Op(11));
        cursor.on_append(group, Op(11));
        assert_eq!(cursor.last_op, Op(11));
    }

    #[test]
    #[should_panic(expected = "leaves a gap")]
    fn append_with_a_gap_panics() {
        let mut cursor = AppendCursor::default();
        cursor.on_append(GroupId(1), Op(2));
    }

    #[test]
    #[should_panic(expected = "snapshot op goes down")]
    fn snapshot_going_down_panics() {
        let mut cursor = AppendCursor::default();
        cursor.on_snapshot(GroupId(1), Op(5));
        cursor.on_snapshot(GroupId(1), Op(4));
    }
}
