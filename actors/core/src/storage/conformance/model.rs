//! The reference model: the storage contract written as plainly as possible.
//!
//! It keeps every durable entry in one ordered map per group and every staged
//! call in a list, applies the list on `flush` and forgets it on `crash`. No
//! cleverness, no faults, no sharing: it is what the real implementations are
//! compared against, so it must be obviously right rather than fast.

use std::collections::BTreeMap;

use cohort_messages::{GroupId, LogEntry, Op};

use crate::storage::{
    AppendCursor, DeferredSnapshots, Recovered, RecoveredGroup, Snapshot, Storage, StorageError, Superblock,
};

/// One staged log call.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Staged {
    Append(GroupId, LogEntry),
    Truncate(GroupId, Op),
}

/// One group's durable state in the model.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct ModelGroup {
    log: BTreeMap<Op, LogEntry>,
    superblock: Option<Superblock>,
    snapshot: Option<Snapshot>,
}

/// The reference model of a [`Storage`].
#[derive(Clone, Debug, Default)]
pub struct Model {
    durable: BTreeMap<GroupId, ModelGroup>,
    staged_log: Vec<Staged>,
    staged_superblocks: BTreeMap<GroupId, Superblock>,
    cursors: BTreeMap<GroupId, AppendCursor>,
    deferred: DeferredSnapshots,
}

impl Model {
    /// An empty model.
    pub fn new() -> Self {
        Self::default()
    }

    /// The group's staged append cursor (what the next append may use).
    pub fn cursor(&self, group: GroupId) -> AppendCursor {
        self.cursors.get(&group).copied().unwrap_or_default()
    }

    /// How many log calls are staged.
    pub fn staged_record_count(&self) -> usize {
        self.staged_log.len()
    }

    /// Forget everything staged, as a crash does.
    pub fn crash(&mut self) {
        self.staged_log.clear();
        self.staged_superblocks.clear();
        self.deferred.clear();
        self.cursors = AppendCursor::all_recovered(&self.recovered());
    }

    /// What a restart sees now.
    pub fn recovered(&self) -> Recovered {
        let groups = self
            .durable
            .iter()
            .filter_map(|(group, state)| {
                RecoveredGroup::from_parts(
                    state.superblock.clone(),
                    state.snapshot.clone(),
                    state.log.values().cloned(),
                )
                .map(|recovered| (*group, recovered))
            })
            .collect();
        Recovered { groups, formatted: false, lost_synced_records: false }
    }

    /// The model as it would be if only the first `count` staged log calls
    /// had become durable (a flush interrupted by a crash), with no staged
    /// superblock applied. Used to check the prefix rule.
    pub fn with_log_prefix(&self, count: usize) -> Model {
        let mut model = self.clone();
        let staged: Vec<Staged> = model.staged_log.drain(..).take(count).collect();
        for record in staged {
            model.apply(record);
        }
        model.staged_superblocks.clear();
        model.deferred.clear();
        model
    }

    /// The superblock that is staged for `group`, if any.
    pub fn staged_superblock(&self, group: GroupId) -> Option<&Superblock> {
        self.staged_superblocks.get(&group)
    }

    fn apply(&mut self, record: Staged) {
        match record {
            Staged::Append(group, entry) => {
                let log = &mut self.durable.entry(group).or_default().log;
                log.split_off(&entry.op);
                log.insert(entry.op, entry);
            }
            Staged::Truncate(group, op) => {
                if let Some(state) = self.durable.get_mut(&group)
                    && let Some(first_dropped) = op.get().checked_add(1)
                {
                    state.log.split_off(&Op(first_dropped));
                }
            }
        }
    }
}

impl Storage for Model {
    fn append(&mut self, group: GroupId, entry: &LogEntry) -> Result<(), StorageError> {
        self.cursors.entry(group).or_default().on_append(group, entry.op);
        self.staged_log.push(Staged::Append(group, entry.clone()));
        Ok(())
    }

    fn truncate_after(&mut self, group: GroupId, op: Op) -> Result<(), StorageError> {
        if self.deferred.op_of(group).is_some_and(|deferred| deferred > op)
            && let Some(snapshot) = self.deferred.take(group)
        {
            self.durable.entry(group).or_default().snapshot = Some(snapshot);
        }
        self.cursors.entry(group).or_default().on_truncate(op);
        self.staged_log.push(Staged::Truncate(group, op));
        Ok(())
    }

    fn stage_superblock(&mut self, group: GroupId, superblock: &Superblock) -> Result<(), StorageError> {
        self.staged_superblocks.insert(group, superblock.clone());
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StorageError> {
        let staged: Vec<Staged> = self.staged_log.drain(..).collect();
        for record in staged {
            self.apply(record);
        }
        for (group, superblock) in std::mem::take(&mut self.staged_superblocks) {
            self.durable.entry(group).or_default().superblock = Some(superblock);
        }
        Ok(())
    }

    fn save_snapshot(&mut self, group: GroupId, snapshot: &Snapshot) -> Result<(), StorageError> {
        self.cursors.entry(group).or_default().on_snapshot(group, snapshot.op);
        self.deferred.take(group);
        self.durable.entry(group).or_default().snapshot = Some(snapshot.clone());
        Ok(())
    }

    fn defer_snapshot(&mut self, group: GroupId, snapshot: &Snapshot) -> Result<(), StorageError> {
        let cursor = self.cursors.entry(group).or_default();
        if self.deferred.defer_if_logged(cursor, group, snapshot) {
            return Ok(());
        }
        self.save_snapshot(group, snapshot)
    }

    fn write_deferred_snapshots(&mut self, snapshots_max: usize) -> Result<usize, StorageError> {
        for _ in 0..snapshots_max {
            let Some((group, snapshot)) = self.deferred.pop_oldest() else { break };
            self.durable.entry(group).or_default().snapshot = Some(snapshot);
        }
        Ok(self.deferred.len())
    }

    fn deferred_snapshots(&self) -> usize {
        self.deferred.len()
    }

    fn remove_group(&mut self, group: GroupId) -> Result<(), StorageError> {
        self.durable.remove(&group);
        self.staged_log.retain(|record| match record {
            Staged::Append(of, _) | Staged::Truncate(of, _) => *of != group,
        });
        self.staged_superblocks.remove(&group);
        self.cursors.remove(&group);
        self.deferred.take(group);
        Ok(())
    }

    fn reset_group(&mut self, group: GroupId, superblock: &Superblock) -> Result<(), StorageError> {
        self.remove_group(group)?;
        self.durable.entry(group).or_default().superblock = Some(superblock.clone());
        Ok(())
    }

    fn recover(&mut self) -> Result<Recovered, StorageError> {
        Ok(self.recovered())
    }
}
