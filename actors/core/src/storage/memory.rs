//! In-memory [`Storage`] for the simulator and tests.
//!
//! It keeps what is *staged* apart from what is *durable*, so that the
//! simulator can crash a node at any point and restart it with exactly what a
//! real disk would have kept: [`MemoryStorage::crash`] loses everything staged,
//! and [`MemoryStorage::crash_mid_flush`] models a crash inside a flush, where
//! a seed-chosen *prefix* of the staged log records became durable (the prefix
//! rule of the contract) and, only if all of them did, a seed-chosen subset of
//! the staged superblocks (log before superblocks).
//!
//! Faults are armed by the simulator and fire on the next matching call:
//! failing appends, failing one group's superblock stage (R12) and failing a
//! flush. It does no I/O and reads no clock; the only randomness is the seed
//! the caller passes in.
//!
//! Cloning is cheap enough to snapshot a node's disk in the simulator: each
//! group's durable state sits behind an [`Arc`] and is copied only when a
//! clone writes to it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use cohort_messages::{GroupId, LogEntry, Op};

use super::conformance::splitmix64;
use super::{AppendCursor, DeferredSnapshots, Recovered, RecoveredGroup, Snapshot, Storage, StorageError, Superblock};

/// One staged log call.
#[derive(Clone, Debug)]
enum StagedRecord {
    Append(GroupId, LogEntry),
    Truncate(GroupId, Op),
}

impl StagedRecord {
    fn group(&self) -> GroupId {
        match self {
            StagedRecord::Append(group, _) | StagedRecord::Truncate(group, _) => *group,
        }
    }
}

/// What the disk holds for one group.
#[derive(Clone, Debug, Default)]
struct DurableGroup {
    /// Entries above the snapshot op (older ones are dropped as they can
    /// never be shown again: the snapshot op never goes down).
    log: BTreeMap<Op, LogEntry>,
    superblock: Option<Superblock>,
    snapshot: Option<Snapshot>,
}

impl DurableGroup {
    fn snapshot_op(&self) -> Op {
        self.snapshot.as_ref().map_or(Op(0), |snapshot| snapshot.op)
    }

    fn drop_below_snapshot(&mut self) {
        let kept = self.log.split_off(&self.snapshot_op().next());
        self.log = kept;
    }
}

/// Armed faults; each fires on the next matching call.
#[derive(Clone, Debug, Default)]
struct Faults {
    appends_to_fail: u32,
    superblock_stages_to_fail: BTreeSet<GroupId>,
    flushes_to_fail: u32,
}

/// Counters of what the storage did, for tests and the simulator's reports.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Successful flushes.
    pub flushes: u64,
    /// Log records (appends and truncations) made durable by flushes.
    pub records_flushed: u64,
    /// Superblocks made durable by flushes.
    pub superblocks_flushed: u64,
    /// Crashes (either kind).
    pub crashes: u64,
    /// Faults that fired.
    pub faults_fired: u64,
}

/// The simulator's storage. See the module docs.
#[derive(Clone, Debug, Default)]
pub struct MemoryStorage {
    durable: BTreeMap<GroupId, Arc<DurableGroup>>,
    staged_log: Vec<StagedRecord>,
    staged_superblocks: BTreeMap<GroupId, Superblock>,
    cursors: BTreeMap<GroupId, AppendCursor>,
    deferred: DeferredSnapshots,
    faults: Faults,
    stats: MemoryStats,
    /// H1: a recovery ran on this disk before (the first one formats it).
    recovered_once: bool,
}

impl MemoryStorage {
    /// An empty disk.
    pub fn new() -> Self {
        Self::default()
    }

    /// The node died: everything staged is lost. The value now is the disk a
    /// restarted node opens; call `recover` next. Armed faults stay armed
    /// (they belong to the disk, not to the process).
    pub fn crash(&mut self) {
        self.staged_log.clear();
        self.staged_superblocks.clear();
        self.deferred.clear();
        self.cursors = AppendCursor::all_recovered(&self.recovered());
        self.stats.crashes += 1;
    }

    /// The node died inside a flush: a prefix of the staged log records,
    /// chosen by `seed`, became durable; if the whole log did, each staged
    /// superblock became durable or not, also by `seed`. Then as [`crash`].
    ///
    /// [`crash`]: MemoryStorage::crash
    pub fn crash_mid_flush(&mut self, seed: u64) {
        let mut state = seed;
        let staged_count = self.staged_log.len();
        let kept = (splitmix64(&mut state) % (staged_count as u64 + 1)) as usize;
        let records: Vec<StagedRecord> = self.staged_log.drain(..kept).collect();
        for record in records {
            self.apply(record);
        }
        if kept == staged_count {
            for (group, superblock) in std::mem::take(&mut self.staged_superblocks) {
                if splitmix64(&mut state) & 1 == 1 {
                    Arc::make_mut(self.durable.entry(group).or_default()).superblock = Some(superblock);
                }
            }
        }
        self.crash();
    }

    /// Make the next `count` appends fail (nothing staged for them).
    pub fn fail_next_appends(&mut self, count: u32) {
        self.faults.appends_to_fail = count;
    }

    /// Make the next `stage_superblock` of `group` fail (R12); other groups
    /// are unaffected.
    pub fn fail_next_superblock_stage(&mut self, group: GroupId) {
        self.faults.superblock_stages_to_fail.insert(group);
    }

    /// Make the next flush fail. Nothing staged becomes durable; per the
    /// contract the caller must stop the node (the simulator then calls
    /// [`crash`](MemoryStorage::crash) or
    /// [`crash_mid_flush`](MemoryStorage::crash_mid_flush)).
    pub fn fail_next_flush(&mut self) {
        self.faults.flushes_to_fail = self.faults.flushes_to_fail.saturating_add(1);
    }

    /// How many log records are staged.
    pub fn staged_record_count(&self) -> usize {
        self.staged_log.len()
    }

    /// How many superblocks are staged.
    pub fn staged_superblock_count(&self) -> usize {
        self.staged_superblocks.len()
    }

    /// What the storage did so far.
    pub fn stats(&self) -> MemoryStats {
        self.stats
    }

    /// What a restart would see now (does not change anything).
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
        Recovered { groups, formatted: !self.recovered_once, lost_synced_records: false }
    }

    /// A snapshot on the disk; the entries it covers go.
    fn make_durable(&mut self, group: GroupId, snapshot: Snapshot) {
        let state = Arc::make_mut(self.durable.entry(group).or_default());
        state.snapshot = Some(snapshot);
        state.drop_below_snapshot();
    }

    fn injected(&mut self, what: &'static str) -> StorageError {
        self.stats.faults_fired += 1;
        StorageError::Injected(what)
    }

    fn apply(&mut self, record: StagedRecord) {
        match record {
            StagedRecord::Append(group, entry) => {
                let state = Arc::make_mut(self.durable.entry(group).or_default());
                state.log.split_off(&entry.op);
                if entry.op > state.snapshot_op() {
                    state.log.insert(entry.op, entry);
                }
            }
            StagedRecord::Truncate(group, op) => {
                if let (Some(state), Some(first_dropped)) = (self.durable.get_mut(&group), op.get().checked_add(1)) {
                    Arc::make_mut(state).log.split_off(&Op(first_dropped));
                }
            }
        }
    }
}

impl Storage for MemoryStorage {
    fn append(&mut self, group: GroupId, entry: &LogEntry) -> Result<(), StorageError> {
        if self.faults.appends_to_fail > 0 {
            self.faults.appends_to_fail -= 1;
            return Err(self.injected("append"));
        }
        self.cursors.entry(group).or_default().on_append(group, entry.op);
        self.staged_log.push(StagedRecord::Append(group, entry.clone()));
        Ok(())
    }

    fn truncate_after(&mut self, group: GroupId, op: Op) -> Result<(), StorageError> {
        if self.deferred.op_of(group).is_some_and(|deferred| deferred > op)
            && let Some(snapshot) = self.deferred.take(group)
        {
            self.make_durable(group, snapshot);
        }
        self.cursors.entry(group).or_default().on_truncate(op);
        self.staged_log.push(StagedRecord::Truncate(group, op));
        Ok(())
    }

    fn stage_superblock(&mut self, group: GroupId, superblock: &Superblock) -> Result<(), StorageError> {
        if self.faults.superblock_stages_to_fail.remove(&group) {
            return Err(self.injected("superblock stage"));
        }
        self.staged_superblocks.insert(group, superblock.clone());
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StorageError> {
        if self.faults.flushes_to_fail > 0 {
            self.faults.flushes_to_fail -= 1;
            return Err(self.injected("flush"));
        }
        let records = std::mem::take(&mut self.staged_log);
        self.stats.records_flushed += records.len() as u64;
        for record in records {
            self.apply(record);
        }
        let superblocks = std::mem::take(&mut self.staged_superblocks);
        self.stats.superblocks_flushed += superblocks.len() as u64;
        for (group, superblock) in superblocks {
            Arc::make_mut(self.durable.entry(group).or_default()).superblock = Some(superblock);
        }
        self.stats.flushes += 1;
        Ok(())
    }

    fn save_snapshot(&mut self, group: GroupId, snapshot: &Snapshot) -> Result<(), StorageError> {
        self.cursors.entry(group).or_default().on_snapshot(group, snapshot.op);
        self.deferred.take(group);
        self.make_durable(group, snapshot.clone());
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
            self.make_durable(group, snapshot);
        }
        Ok(self.deferred.len())
    }

    fn deferred_snapshots(&self) -> usize {
        self.deferred.len()
    }

    fn remove_group(&mut self, group: GroupId) -> Result<(), StorageError> {
        self.durable.remove(&group);
        self.staged_log.retain(|record| record.group() != group);
        self.staged_superblocks.remove(&group);
        self.cursors.remove(&group);
        self.deferred.take(group);
        Ok(())
    }

    fn reset_group(&mut self, group: GroupId, superblock: &Superblock) -> Result<(), StorageError> {
        self.remove_group(group)?;
        // One step of the durable map: nothing between the two to crash in.
        self.durable
            .insert(group, Arc::new(DurableGroup { superblock: Some(superblock.clone()), ..DurableGroup::default() }));
        Ok(())
    }

    fn recover(&mut self) -> Result<Recovered, StorageError> {
        let recovered = self.recovered();
        self.recovered_once = true;
        Ok(recovered)
    }
}
