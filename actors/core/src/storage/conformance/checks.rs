//! The checks of the conformance suite, one function each.
//!
//! Most checks drive the implementation and the [`Model`] side by side
//! (through [`Both`]) and compare them at every crash; the important ones
//! also state the expected result outright, so that a wrong model cannot
//! make a wrong implementation pass.

use cohort_messages::{GroupId, LogEntry, Op};

use super::{
    Harness, Model, Recovered, RecoveredGroup, Snapshot, Storage, StorageError, Superblock, assert_same_recovered,
    crash_and_recover, entry, ok, recover_or_panic, seeded_steps, snapshot, superblock,
};

/// The implementation and the model, driven by the same calls.
struct Both<'h, H: Harness> {
    harness: &'h mut H,
    storage: Option<H::Storage>,
    model: Model,
    name: &'static str,
}

impl<'h, H: Harness> Both<'h, H> {
    fn new(harness: &'h mut H, name: &'static str) -> Self {
        let mut storage = harness.open_empty();
        let recovered = recover_or_panic(&mut storage, name);
        assert!(recovered.groups.is_empty(), "{name}: a new storage recovered {} groups", recovered.groups.len());
        Self { harness, storage: Some(storage), model: Model::new(), name }
    }

    fn call(&mut self, what: &str, call: impl Fn(&mut dyn Storage) -> Result<(), StorageError>) {
        let name = self.name;
        let Some(storage) = self.storage.as_mut() else { panic!("{name}: storage missing") };
        ok(call(storage), &format!("{name}: {what}"));
        ok(call(&mut self.model), &format!("{name}: {what} (model)"));
    }

    fn append(&mut self, group: u64, entry: LogEntry) {
        self.call("append", |storage| storage.append(GroupId(group), &entry));
    }

    fn append_range(&mut self, group: u64, ops: std::ops::RangeInclusive<u64>, view: u32, tag: u64) {
        for op in ops {
            self.append(group, entry(op, view, tag));
        }
    }

    fn truncate_after(&mut self, group: u64, op: u64) {
        self.call("truncate_after", |storage| storage.truncate_after(GroupId(group), Op(op)));
    }

    fn stage_superblock(&mut self, group: u64, block: Superblock) {
        self.call("stage_superblock", |storage| storage.stage_superblock(GroupId(group), &block));
    }

    fn flush(&mut self) {
        self.call("flush", |storage| storage.flush());
    }

    fn save_snapshot(&mut self, group: u64, saved: Snapshot) {
        self.call("save_snapshot", |storage| storage.save_snapshot(GroupId(group), &saved));
    }

    fn remove_group(&mut self, group: u64) {
        self.call("remove_group", |storage| storage.remove_group(GroupId(group)));
    }

    fn defer_snapshot(&mut self, group: u64, saved: Snapshot) {
        self.call("defer_snapshot", |storage| storage.defer_snapshot(GroupId(group), &saved));
    }

    /// Write every deferred snapshot, in both.
    fn write_deferred(&mut self) {
        self.call("write_deferred_snapshots", |storage| storage.write_deferred_snapshots(usize::MAX).map(|_| ()));
        let name = self.name;
        let Some(storage) = self.storage.as_ref() else { panic!("{name}: storage missing") };
        assert_eq!(storage.deferred_snapshots(), 0, "{name}: deferred snapshots left after writing them all");
    }

    /// Crash both, compare, and return what was recovered.
    fn crash(&mut self, step: &str) -> Recovered {
        let context = format!("{}: {step}", self.name);
        let Some(storage) = self.storage.take() else { panic!("{context}: storage missing") };
        let (storage, recovered) = crash_and_recover(self.harness, storage, &context);
        self.storage = Some(storage);
        self.model.crash();
        assert_same_recovered(&recovered, &self.model.recovered(), &context);
        recovered
    }
}

fn group_of<'r>(recovered: &'r Recovered, group: u64, context: &str) -> &'r RecoveredGroup {
    match recovered.groups.get(&GroupId(group)) {
        Some(state) => state,
        None => panic!("{context}: group:{group} is missing after recovery"),
    }
}

fn ops_of(state: &RecoveredGroup) -> Vec<(u64, u32)> {
    state.entries.iter().map(|entry| (entry.op.get(), entry.view.get())).collect()
}

/// A new storage recovers no group, before and after a crash.
pub fn empty_storage_recovers_nothing<H: Harness>(harness: &mut H) {
    let mut both = Both::new(harness, "empty_storage_recovers_nothing");
    let recovered = both.crash("crash with nothing written");
    assert!(recovered.groups.is_empty(), "empty_storage_recovers_nothing: recovered {:?}", recovered.groups.keys());
}

/// Entries of several groups flushed together are all recovered, intact.
pub fn flushed_entries_survive_a_crash<H: Harness>(harness: &mut H) {
    let name = "flushed_entries_survive_a_crash";
    let mut both = Both::new(harness, name);
    for group in 1..=3 {
        both.append_range(group, 1..=5, 1, group);
    }
    both.flush();
    let recovered = both.crash("crash after one flush");
    for group in 1..=3 {
        let state = group_of(&recovered, group, name);
        let want: Vec<LogEntry> = (1..=5).map(|op| entry(op, 1, group)).collect();
        assert_eq!(state.entries, want, "{name}: group:{group} entries");
        assert!(state.superblock.is_none() && state.snapshot.is_none(), "{name}: group:{group} gained state");
    }
}

/// Appends, truncations and superblocks staged after the last flush are gone
/// after a crash; what was flushed before them is intact.
pub fn staged_calls_do_not_survive_a_crash<H: Harness>(harness: &mut H) {
    let name = "staged_calls_do_not_survive_a_crash";
    let mut both = Both::new(harness, name);
    both.append_range(1, 1..=3, 1, 1);
    both.stage_superblock(1, superblock(1, 2));
    both.flush();
    both.append_range(1, 4..=6, 1, 1);
    both.truncate_after(1, 1);
    both.stage_superblock(1, superblock(2, 3));
    both.append_range(2, 1..=2, 1, 2);
    let recovered = both.crash("crash with calls staged");
    let state = group_of(&recovered, 1, name);
    assert_eq!(ops_of(state), vec![(1, 1), (2, 1), (3, 1)], "{name}: group:1 entries");
    assert_eq!(state.superblock, Some(superblock(1, 2)), "{name}: group:1 superblock");
    assert!(!recovered.groups.contains_key(&GroupId(2)), "{name}: unflushed group:2 recovered");
}

/// An append of op n replaces the group's entries at n and above, and only
/// that group's.
pub fn append_replaces_the_suffix_at_its_op<H: Harness>(harness: &mut H) {
    let name = "append_replaces_the_suffix_at_its_op";
    let mut both = Both::new(harness, name);
    both.append_range(1, 1..=5, 1, 1);
    both.append_range(2, 1..=5, 1, 2);
    both.flush();
    both.append(1, entry(3, 2, 9));
    both.flush();
    let recovered = both.crash("crash after the replacing append");
    assert_eq!(ops_of(group_of(&recovered, 1, name)), vec![(1, 1), (2, 1), (3, 2)], "{name}: group:1");
    assert_eq!(group_of(&recovered, 1, name).entries[2], entry(3, 2, 9), "{name}: group:1 op 3 contents");
    assert_eq!(group_of(&recovered, 2, name).entries.len(), 5, "{name}: group:2 was touched");
}

/// Replacement also works when both the old and the new entries are in the
/// same flush.
pub fn append_replaces_within_one_flush<H: Harness>(harness: &mut H) {
    let name = "append_replaces_within_one_flush";
    let mut both = Both::new(harness, name);
    both.append_range(1, 1..=4, 1, 1);
    both.append(1, entry(2, 3, 5));
    both.append(1, entry(3, 3, 5));
    both.flush();
    let recovered = both.crash("crash after the flush");
    assert_eq!(ops_of(group_of(&recovered, 1, name)), vec![(1, 1), (2, 3), (3, 3)], "{name}: group:1");
}

/// `truncate_after` drops the suffix durably; appends continue after it.
pub fn truncate_after_drops_the_suffix<H: Harness>(harness: &mut H) {
    let name = "truncate_after_drops_the_suffix";
    let mut both = Both::new(harness, name);
    both.append_range(1, 1..=5, 1, 1);
    both.flush();
    both.truncate_after(1, 2);
    both.flush();
    let recovered = both.crash("crash after truncating");
    assert_eq!(ops_of(group_of(&recovered, 1, name)), vec![(1, 1), (2, 1)], "{name}: after truncate");
    both.append(1, entry(3, 2, 7));
    both.truncate_after(1, 9);
    both.flush();
    let recovered = both.crash("crash after appending again");
    assert_eq!(ops_of(group_of(&recovered, 1, name)), vec![(1, 1), (2, 1), (3, 2)], "{name}: after append");
}

/// A group whose entries were all truncated, with no superblock or snapshot,
/// is not listed.
pub fn group_without_anything_left_is_absent<H: Harness>(harness: &mut H) {
    let name = "group_without_anything_left_is_absent";
    let mut both = Both::new(harness, name);
    both.append_range(1, 1..=3, 1, 1);
    both.append_range(2, 1..=1, 1, 2);
    both.flush();
    both.truncate_after(1, 0);
    both.flush();
    let recovered = both.crash("crash after truncating everything");
    assert!(!recovered.groups.contains_key(&GroupId(1)), "{name}: empty group:1 listed");
    assert!(recovered.groups.contains_key(&GroupId(2)), "{name}: group:2 missing");
}

/// A staged superblock is durable only after a flush; the newest flushed one
/// wins.
pub fn superblock_is_durable_only_after_flush<H: Harness>(harness: &mut H) {
    let name = "superblock_is_durable_only_after_flush";
    let mut both = Both::new(harness, name);
    both.stage_superblock(1, superblock(1, 0));
    let recovered = both.crash("crash before any flush");
    assert!(recovered.groups.is_empty(), "{name}: unflushed superblock survived");
    both.stage_superblock(1, superblock(1, 0));
    both.stage_superblock(1, superblock(2, 4));
    both.flush();
    both.stage_superblock(1, superblock(3, 6));
    let recovered = both.crash("crash with a newer superblock staged");
    assert_eq!(group_of(&recovered, 1, name).superblock, Some(superblock(2, 4)), "{name}: flushed superblock");
    for round in 0..5 {
        both.stage_superblock(1, superblock(10 + round, u64::from(round)));
        both.flush();
    }
    let recovered = both.crash("crash after five flushes");
    assert_eq!(group_of(&recovered, 1, name).superblock, Some(superblock(14, 4)), "{name}: newest superblock");
}

/// Many groups' superblocks staged together all become durable in one flush,
/// each group keeping its own.
pub fn superblocks_of_many_groups_share_one_flush<H: Harness>(harness: &mut H) {
    let name = "superblocks_of_many_groups_share_one_flush";
    let groups = 1000;
    let mut both = Both::new(harness, name);
    for group in 1..=groups {
        both.stage_superblock(group, superblock((group % 90) as u32, group));
    }
    both.flush();
    for group in (1..=groups).step_by(3) {
        both.stage_superblock(group, superblock((group % 90) as u32 + 1, group + 1));
    }
    both.flush();
    let recovered = both.crash("crash after two flushes");
    assert_eq!(recovered.groups.len(), groups as usize, "{name}: group count");
    for group in 1..=groups {
        let want = if group % 3 == 1 {
            superblock((group % 90) as u32 + 1, group + 1)
        } else {
            superblock((group % 90) as u32, group)
        };
        assert_eq!(group_of(&recovered, group, name).superblock, Some(want), "{name}: group:{group}");
    }
}

/// Every superblock field survives, at the extremes of its range.
pub fn superblock_fields_roundtrip<H: Harness>(harness: &mut H) {
    use cohort_messages::{GROUP_MEMBERS_MAX, Incarnation, NodeId, View};
    let name = "superblock_fields_roundtrip";
    let mut both = Both::new(harness, name);
    let widest = Superblock {
        view: View(u32::MAX),
        log_view: View(u32::MAX - 1),
        commit: Op(u64::MAX),
        incarnation: Incarnation(u64::MAX),
        members: (0..GROUP_MEMBERS_MAX as u64).map(|index| NodeId(u64::MAX - index)).collect(),
        replication_quorum: u8::MAX,
        recovering: true,
    };
    let emptiest = Superblock {
        view: View(0),
        log_view: View(0),
        commit: Op(0),
        incarnation: Incarnation(0),
        members: Vec::new(),
        replication_quorum: 0,
        recovering: false,
    };
    both.stage_superblock(1, widest.clone());
    both.stage_superblock(2, emptiest.clone());
    both.flush();
    let recovered = both.crash("crash after the flush");
    assert_eq!(group_of(&recovered, 1, name).superblock, Some(widest), "{name}: widest");
    assert_eq!(group_of(&recovered, 2, name).superblock, Some(emptiest), "{name}: emptiest");
}

/// `save_snapshot` is durable on return (no flush) and hides the entries at
/// or below its op.
pub fn snapshot_is_durable_on_return_and_hides_older_entries<H: Harness>(harness: &mut H) {
    let name = "snapshot_is_durable_on_return_and_hides_older_entries";
    let mut both = Both::new(harness, name);
    both.append_range(1, 1..=10, 1, 1);
    both.flush();
    both.save_snapshot(1, snapshot(6, 1, 3));
    let recovered = both.crash("crash right after the snapshot");
    let state = group_of(&recovered, 1, name);
    assert_eq!(state.snapshot, Some(snapshot(6, 1, 3)), "{name}: snapshot");
    assert_eq!(state.entries.first().map(|entry| entry.op), Some(Op(7)), "{name}: first entry");
    assert_eq!(state.entries.len(), 4, "{name}: entry count");
}

/// A deferred snapshot the log reaches waits: a crash before it is written
/// recovers the group as if it had not been taken (every entry, no
/// snapshot). Once written it is durable and hides the entries at or below
/// its op.
pub fn deferred_snapshot_waits_until_written_then_hides_older_entries<H: Harness>(harness: &mut H) {
    let name = "deferred_snapshot_waits_until_written_then_hides_older_entries";
    let mut both = Both::new(harness, name);
    both.append_range(1, 1..=10, 1, 1);
    both.flush();
    both.defer_snapshot(1, snapshot(6, 1, 3));
    let recovered = both.crash("crash before the deferred snapshot is written");
    let state = group_of(&recovered, 1, name);
    assert_eq!(state.snapshot, None, "{name}: a deferred snapshot survived a crash");
    assert_eq!(state.entries.len(), 10, "{name}: entries kept for the deferred snapshot");
    both.defer_snapshot(1, snapshot(6, 1, 3));
    both.write_deferred();
    let recovered = both.crash("crash right after writing the snapshot");
    let state = group_of(&recovered, 1, name);
    assert_eq!(state.snapshot, Some(snapshot(6, 1, 3)), "{name}: snapshot");
    assert_eq!(state.entries.first().map(|entry| entry.op), Some(Op(7)), "{name}: first entry");
    assert_eq!(state.entries.len(), 4, "{name}: entry count");
}

/// A deferred snapshot past the end of the log cannot wait: nothing else
/// holds its state, so it is saved at once.
pub fn deferred_snapshot_past_the_log_is_saved_at_once<H: Harness>(harness: &mut H) {
    let name = "deferred_snapshot_past_the_log_is_saved_at_once";
    let mut both = Both::new(harness, name);
    both.append_range(1, 1..=3, 1, 1);
    both.flush();
    both.defer_snapshot(1, snapshot(9, 1, 4));
    let recovered = both.crash("crash right after the snapshot");
    assert_eq!(group_of(&recovered, 1, name).snapshot, Some(snapshot(9, 1, 4)), "{name}: snapshot");
}

/// A truncation below a deferred snapshot's op writes the snapshot first,
/// and a saved snapshot replaces a deferred one.
pub fn truncation_or_save_after_a_deferred_snapshot<H: Harness>(harness: &mut H) {
    let name = "truncation_or_save_after_a_deferred_snapshot";
    let mut both = Both::new(harness, name);
    both.append_range(1, 1..=10, 1, 1);
    both.append_range(2, 1..=10, 1, 2);
    both.flush();
    both.defer_snapshot(1, snapshot(8, 1, 2));
    both.truncate_after(1, 5);
    both.flush();
    both.defer_snapshot(2, snapshot(8, 1, 3));
    both.save_snapshot(2, snapshot(9, 1, 4));
    both.write_deferred();
    let recovered = both.crash("crash after the truncation and the save");
    let state = group_of(&recovered, 1, name);
    assert_eq!(state.snapshot, Some(snapshot(8, 1, 2)), "{name}: group:1 snapshot");
    assert!(state.entries.is_empty(), "{name}: group:1 entries {:?}", ops_of(state));
    assert_eq!(group_of(&recovered, 2, name).snapshot, Some(snapshot(9, 1, 4)), "{name}: group:2 snapshot");
}

/// A snapshot past the end of the log (state transfer) is followed by
/// appends from the op after it.
pub fn snapshot_beyond_the_log_then_append<H: Harness>(harness: &mut H) {
    let name = "snapshot_beyond_the_log_then_append";
    let mut both = Both::new(harness, name);
    both.append_range(1, 1..=3, 1, 1);
    both.flush();
    both.save_snapshot(1, snapshot(100, 4, 1));
    both.append_range(1, 101..=102, 4, 1);
    both.flush();
    let recovered = both.crash("crash after appending past the snapshot");
    let state = group_of(&recovered, 1, name);
    assert_eq!(ops_of(state), vec![(101, 4), (102, 4)], "{name}: entries");
    assert_eq!(state.snapshot.as_ref().map(|s| s.op), Some(Op(100)), "{name}: snapshot op");
}

/// A newer snapshot replaces the older one.
pub fn newer_snapshot_replaces_older<H: Harness>(harness: &mut H) {
    let name = "newer_snapshot_replaces_older";
    let mut both = Both::new(harness, name);
    both.append_range(1, 1..=20, 1, 1);
    both.flush();
    both.save_snapshot(1, snapshot(5, 1, 1));
    both.save_snapshot(1, snapshot(5, 1, 2));
    both.save_snapshot(1, snapshot(15, 1, 3));
    let recovered = both.crash("crash after three snapshots");
    let state = group_of(&recovered, 1, name);
    assert_eq!(state.snapshot, Some(snapshot(15, 1, 3)), "{name}: snapshot");
    assert_eq!(state.entries.len(), 5, "{name}: entries after the snapshot");
}

/// Calls staged before a snapshot stay staged (not durable, not lost) and a
/// later flush applies them on top of it.
pub fn staged_entries_stay_staged_across_a_snapshot<H: Harness>(harness: &mut H) {
    let name = "staged_entries_stay_staged_across_a_snapshot";
    let mut both = Both::new(harness, name);
    both.append_range(1, 1..=5, 1, 1);
    both.flush();
    both.append_range(1, 6..=7, 1, 1);
    both.save_snapshot(1, snapshot(3, 1, 1));
    let recovered = both.crash("crash before the flush");
    assert_eq!(ops_of(group_of(&recovered, 1, name)), vec![(4, 1), (5, 1)], "{name}: before flush");
    both.append_range(1, 6..=7, 1, 1);
    both.save_snapshot(1, snapshot(4, 1, 1));
    both.flush();
    let recovered = both.crash("crash after the flush");
    assert_eq!(ops_of(group_of(&recovered, 1, name)), vec![(5, 1), (6, 1), (7, 1)], "{name}: after flush");
}

/// `remove_group` durably removes a group's entries, superblock and snapshot,
/// and nothing of the other groups.
pub fn remove_group_is_durable_and_spares_other_groups<H: Harness>(harness: &mut H) {
    let name = "remove_group_is_durable_and_spares_other_groups";
    let mut both = Both::new(harness, name);
    for group in 1..=3 {
        both.append_range(group, 1..=6, 1, group);
        both.stage_superblock(group, superblock(1, group));
    }
    both.flush();
    both.save_snapshot(1, snapshot(2, 1, 1));
    both.save_snapshot(2, snapshot(3, 1, 2));
    both.remove_group(1);
    let recovered = both.crash("crash right after remove_group");
    assert!(!recovered.groups.contains_key(&GroupId(1)), "{name}: removed group:1 recovered");
    assert_eq!(group_of(&recovered, 2, name).entries.len(), 3, "{name}: group:2 entries");
    assert_eq!(group_of(&recovered, 3, name).entries.len(), 6, "{name}: group:3 entries");
    assert!(group_of(&recovered, 2, name).snapshot.is_some(), "{name}: group:2 snapshot");
}

/// `remove_group` drops what is staged for the group, leaves other groups'
/// staged calls staged, and a later flush does not bring the group back.
pub fn remove_group_discards_its_staged_calls_only<H: Harness>(harness: &mut H) {
    let name = "remove_group_discards_its_staged_calls_only";
    let mut both = Both::new(harness, name);
    both.append_range(1, 1..=2, 1, 1);
    both.append_range(2, 1..=2, 1, 2);
    both.flush();
    both.append_range(1, 3..=4, 1, 1);
    both.stage_superblock(1, superblock(2, 2));
    both.append_range(2, 3..=4, 1, 2);
    both.remove_group(1);
    let recovered = both.crash("crash with group:2 staged");
    assert!(!recovered.groups.contains_key(&GroupId(1)), "{name}: group:1 recovered");
    assert_eq!(group_of(&recovered, 2, name).entries.len(), 2, "{name}: group:2 staged entries became durable");
    both.append_range(1, 1..=1, 1, 1);
    both.append_range(2, 3..=3, 1, 2);
    both.remove_group(1);
    both.flush();
    let recovered = both.crash("crash after the flush");
    assert!(!recovered.groups.contains_key(&GroupId(1)), "{name}: group:1 came back");
    assert_eq!(group_of(&recovered, 2, name).entries.len(), 3, "{name}: group:2 entries");
}

/// D1, H1: `reset_group` durably leaves the given superblock alone (no
/// entries, no snapshot), drops what was staged for the group, spares the
/// other groups, and the group goes on from op 1 after it.
pub fn reset_group_leaves_its_superblock_alone<H: Harness>(harness: &mut H) {
    let name = "reset_group_leaves_its_superblock_alone";
    let mut both = Both::new(harness, name);
    for group in 1..=2 {
        both.append_range(group, 1..=6, 2, group);
        both.stage_superblock(group, superblock(2, 4));
    }
    both.flush();
    both.save_snapshot(1, snapshot(3, 2, 1));
    both.append_range(1, 7..=8, 2, 1);
    both.stage_superblock(1, superblock(4, 6));
    let mut rebuilt = superblock(1, 0);
    rebuilt.recovering = true;
    both.call("reset_group", |storage| storage.reset_group(GroupId(1), &rebuilt));
    let recovered = both.crash("crash right after reset_group");
    let state = group_of(&recovered, 1, name);
    assert_eq!(state.superblock.as_ref(), Some(&rebuilt), "{name}: the reset superblock");
    assert!(state.snapshot.is_none() && state.entries.is_empty(), "{name}: leftovers of group:1: {state:?}");
    assert_eq!(group_of(&recovered, 2, name).entries.len(), 6, "{name}: group:2 entries");
    both.append_range(1, 1..=2, 3, 9);
    both.flush();
    let recovered = both.crash("crash after writing on");
    let want: Vec<LogEntry> = (1..=2).map(|op| entry(op, 3, 9)).collect();
    assert_eq!(group_of(&recovered, 1, name).entries, want, "{name}: entries after the reset");
}

/// A removed group can be created again from op 1; nothing of its old
/// incarnation comes back.
pub fn removed_group_can_be_created_again<H: Harness>(harness: &mut H) {
    let name = "removed_group_can_be_created_again";
    let mut both = Both::new(harness, name);
    both.append_range(1, 1..=8, 1, 1);
    both.stage_superblock(1, superblock(3, 5));
    both.flush();
    both.save_snapshot(1, snapshot(4, 1, 1));
    both.remove_group(1);
    both.append_range(1, 1..=2, 1, 99);
    both.stage_superblock(1, superblock(1, 0));
    both.flush();
    let recovered = both.crash("crash after re-creating the group");
    let state = group_of(&recovered, 1, name);
    let want: Vec<LogEntry> = (1..=2).map(|op| entry(op, 1, 99)).collect();
    assert_eq!(state.entries, want, "{name}: entries of the new incarnation");
    assert_eq!(state.superblock, Some(superblock(1, 0)), "{name}: superblock");
    assert!(state.snapshot.is_none(), "{name}: the old snapshot came back");
}

/// Crashing again and again without writing recovers the same state.
pub fn repeated_crashes_change_nothing<H: Harness>(harness: &mut H) {
    let name = "repeated_crashes_change_nothing";
    let mut both = Both::new(harness, name);
    both.append_range(1, 1..=5, 2, 1);
    both.stage_superblock(1, superblock(2, 3));
    both.flush();
    both.save_snapshot(1, snapshot(2, 2, 1));
    let first = both.crash("first crash");
    for round in 0..3 {
        let again = both.crash("another crash");
        assert_eq!(again, first, "{name}: recovery {round} differs from the first");
    }
}

/// After a recovery, new calls continue the recovered log.
pub fn writes_after_recovery_continue_the_log<H: Harness>(harness: &mut H) {
    let name = "writes_after_recovery_continue_the_log";
    let mut both = Both::new(harness, name);
    for round in 0..4u64 {
        both.append_range(1, round * 3 + 1..=round * 3 + 3, 1, 1);
        both.append_range(2 + round, 1..=1, 1, round);
        both.flush();
        both.crash("crash between rounds");
    }
    let recovered = both.crash("final crash");
    assert_eq!(group_of(&recovered, 1, name).entries.len(), 12, "{name}: group:1 entries");
    assert_eq!(recovered.groups.len(), 5, "{name}: group count");
}

/// Entry fields survive exactly, including empty and large operations and
/// extreme ids.
pub fn entry_contents_roundtrip<H: Harness>(harness: &mut H) {
    use cohort_messages::{ClientId, RequestNumber, View};
    let name = "entry_contents_roundtrip";
    let mut both = Both::new(harness, name);
    let empty = LogEntry {
        op: Op(1),
        view: View(0),
        client: ClientId(0),
        request: RequestNumber(0),
        operation: bytes::Bytes::new(),
    };
    let large = LogEntry {
        op: Op(2),
        view: View(u32::MAX),
        client: ClientId(u128::MAX),
        request: RequestNumber(u64::MAX),
        operation: super::payload(42, 64 * 1024),
    };
    both.append(1, empty.clone());
    both.append(1, large.clone());
    both.flush();
    let recovered = both.crash("crash after the flush");
    assert_eq!(group_of(&recovered, 1, name).entries, vec![empty, large], "{name}: entries");
}

/// Many groups' appends and truncations interleaved in one flush keep each
/// group's own order.
pub fn many_groups_interleaved_in_one_flush<H: Harness>(harness: &mut H) {
    let name = "many_groups_interleaved_in_one_flush";
    let groups = 200u64;
    let mut both = Both::new(harness, name);
    for op in 1..=6 {
        for group in 1..=groups {
            both.append(group, entry(op, 1, group));
        }
    }
    for group in (1..=groups).filter(|group| group % 2 == 0) {
        both.truncate_after(group, group % 6);
    }
    both.flush();
    let recovered = both.crash("crash after the flush");
    for group in 1..=groups {
        let want_len = if group % 2 == 0 { group % 6 } else { 6 };
        let have_len = recovered.groups.get(&GroupId(group)).map_or(0, |state| state.entries.len() as u64);
        assert_eq!(have_len, want_len, "{name}: group:{group} entry count");
    }
}

/// A few seeded random call sequences agree with the model at every crash.
pub fn seeded_sequences_agree_with_the_model<H: Harness>(harness: &mut H) {
    for seed in 0..4 {
        super::run_steps(harness, &seeded_steps(seed, 300));
    }
}
