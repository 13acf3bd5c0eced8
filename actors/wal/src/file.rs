//! [`FileStorage`]: the [`Storage`] trait on real files, one directory per
//! shard.
//!
//! Staging calls only touch memory (and check limits and the contract's
//! preconditions). `flush` is the group commit: every staged log record,
//! then every staged superblock as a record of its own, goes out in one
//! write and one sync, so a flush costs one sync however many groups it
//! carries (K3). A superblock record follows the log records of its flush,
//! so a crash that keeps a prefix of the flush never keeps a superblock
//! newer than the log it describes.
//!
//! The superblock file is a checkpoint: the superblocks whose newest copy
//! is only a record in the log are written into it (one write per slot,
//! one sync) before a segment is removed, since a removed segment takes its
//! records along, and at the end of recovery. Recovery takes, per group, the
//! newer of the file's copy and the log's last superblock record.
//!
//! Errors: `Full` leaves the storage consistent and usable (what was not
//! written stays staged, and may be retried once space is freed); `Io` (any
//! failed sync or other I/O error) and `Corrupt` are fatal, and the storage
//! refuses every later call with the same error, so nothing can be retried as
//! if it were safe.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use cohort_core::storage::{AppendCursor, DeferredSnapshots, Recovered, Snapshot, Storage, StorageError, Superblock};
use cohort_messages::{GROUP_MEMBERS_MAX, GroupId, LogEntry, Op};

use super::config::{FileStorageConfig, WalConfigError};
use super::disk::{Disk, FileStorageStats, FileSystem, InjectedFault, OsFileSystem};
use super::format::{RECORD_HEADER_SIZE_BYTES, entry_record_size_bytes};
use super::recovery::{self, RecoveryReport};
use super::segment::{LogRecord, Wal};
use super::snapshot;
use super::superblock::SuperblockFile;

/// One staged log call.
#[derive(Clone, Debug)]
enum Staged {
    Entry(GroupId, LogEntry),
    TruncateAfter(GroupId, Op),
}

impl Staged {
    fn group(&self) -> GroupId {
        match self {
            Staged::Entry(group, _) | Staged::TruncateAfter(group, _) => *group,
        }
    }

    fn record(&self) -> LogRecord<'_> {
        match self {
            Staged::Entry(group, entry) => LogRecord::Entry(*group, entry),
            Staged::TruncateAfter(group, op) => LogRecord::TruncateAfter(*group, *op),
        }
    }
}

/// The state that exists once `recover` has run.
struct Live<F: FileSystem> {
    wal: Wal<F>,
    superblocks: SuperblockFile<F>,
    snapshot_ops: HashMap<GroupId, Op>,
    cursors: HashMap<GroupId, AppendCursor>,
    staged: Vec<Staged>,
    staged_size_bytes: u64,
    staged_superblocks: BTreeMap<GroupId, Superblock>,
    /// Superblocks whose newest copy is a record in the log only, not yet
    /// checkpointed into the superblock file.
    logged_superblocks: BTreeMap<GroupId, Superblock>,
    /// Snapshots whose entries the log holds, not yet written (see
    /// `cohort_core::storage::deferred`): `snapshot_ops` moves only when one
    /// is, so the log keeps those entries until then.
    deferred: DeferredSnapshots,
}

/// A shard's durable storage in a directory. See the module docs and
/// docs/storage.md.
///
/// `F` is the file system it runs on: the real one ([`OsFileSystem`], the
/// default, what [`FileStorage::open`] uses) or a test double
/// ([`FileStorage::open_on`]).
pub struct FileStorage<F: FileSystem = OsFileSystem> {
    dir: PathBuf,
    config: FileStorageConfig,
    disk: Disk<F>,
    live: Option<Live<F>>,
    recover_called: bool,
    failed: Option<StorageError>,
    report: Option<RecoveryReport>,
}

impl<F: FileSystem> std::fmt::Debug for FileStorage<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileStorage").field("dir", &self.dir).field("failed", &self.failed).finish_non_exhaustive()
    }
}

impl FileStorage {
    /// A storage for the shard directory `dir` on the real file system
    /// (created by `recover` if missing). Nothing is read until `recover`.
    pub fn open(dir: impl Into<PathBuf>, config: FileStorageConfig) -> Result<Self, WalConfigError> {
        Self::open_on(OsFileSystem::default(), dir, config)
    }
}

impl<F: FileSystem> FileStorage<F> {
    /// A storage for the shard directory `dir` on the file system `fs`
    /// (created by `recover` if missing). Nothing is read until `recover`.
    pub fn open_on(fs: F, dir: impl Into<PathBuf>, config: FileStorageConfig) -> Result<Self, WalConfigError> {
        config.validate()?;
        Ok(Self {
            dir: dir.into(),
            config,
            disk: Disk::new(fs),
            live: None,
            recover_called: false,
            failed: None,
            report: None,
        })
    }

    /// The file system it runs on.
    pub fn file_system(&self) -> &F {
        &self.disk.fs
    }

    /// The shard directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The limits in force.
    pub fn config(&self) -> &FileStorageConfig {
        &self.config
    }

    /// What the storage did so far.
    pub fn stats(&self) -> FileStorageStats {
        self.disk.stats
    }

    /// What the last `recover` found and repaired.
    pub fn recovery_report(&self) -> Option<&RecoveryReport> {
        self.report.as_ref()
    }

    /// Wait until every log segment asked to go is removed (the real file
    /// system removes them on a thread of its own, so the files may
    /// outlive the call that let them go by a few milliseconds); `Err`
    /// (fatal) if a removal failed.
    pub fn settle_removals(&mut self) -> Result<(), StorageError> {
        self.disk.removals_failed(true)
    }

    /// How many segment files the log keeps (0 before `recover`); a
    /// segment let go counts no more, even while its removal is queued
    /// ([`FileStorage::settle_removals`]).
    pub fn segment_count(&self) -> usize {
        self.live.as_ref().map_or(0, |live| live.wal.segment_count())
    }

    /// The bytes the log's segment files take on disk, preallocated zeros
    /// included (0 before `recover`). Snapshots and the superblock file are
    /// not counted.
    pub fn log_size_bytes(&self) -> u64 {
        self.live.as_ref().map_or(0, |live| live.wal.size_bytes())
    }

    /// The fatal error that stopped this storage, if one did.
    pub fn failure(&self) -> Option<&StorageError> {
        self.failed.as_ref()
    }

    /// Inject an I/O fault (tests of the error paths only).
    pub fn inject_fault(&mut self, fault: InjectedFault) {
        self.disk.inject(fault);
    }

    /// The live state, or the error that stopped the storage.
    ///
    /// # Panics
    /// Before `recover` (the contract: `recover` comes first).
    fn live(&mut self) -> Result<(&mut Live<F>, &mut Disk<F>), StorageError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        let Some(live) = self.live.as_mut() else { panic!("storage contract: recover() must be called first") };
        Ok((live, &mut self.disk))
    }

    fn store_snapshot(&mut self, group: GroupId, snapshot: &Snapshot, deferrable: bool) -> Result<(), StorageError> {
        let size_bytes = snapshot.data.len() as u64;
        let max_bytes = self.config.snapshot_size_max_bytes;
        if size_bytes > max_bytes {
            return Err(StorageError::TooLarge { what: "snapshot", size_bytes, max_bytes });
        }
        let dir = self.dir.clone();
        let (live, disk) = self.live()?;
        let result = Self::save_snapshot_live(&dir, live, disk, group, snapshot, deferrable);
        self.note(result)
    }

    /// Remember a fatal error so that every later call fails with it.
    fn note<T>(&mut self, result: Result<T, StorageError>) -> Result<T, StorageError> {
        if let Err(error) = &result
            && error.is_fatal()
        {
            self.failed = Some(error.clone());
        }
        result
    }

    fn stage(&mut self, record: Staged, size_bytes: u64) -> Result<(), StorageError> {
        let staged_size_max_bytes = self.config.staged_size_max_bytes;
        let (live, _) = self.live()?;
        let staged_size_bytes = live.staged_size_bytes + size_bytes;
        if staged_size_bytes > staged_size_max_bytes {
            return Err(StorageError::TooLarge {
                what: "staged log records (flush first)",
                size_bytes: staged_size_bytes,
                max_bytes: staged_size_max_bytes,
            });
        }
        let group = record.group();
        let cursor = live.cursors.entry(group).or_default();
        match &record {
            Staged::Entry(_, entry) => cursor.on_append(group, entry.op),
            Staged::TruncateAfter(_, op) => cursor.on_truncate(*op),
        }
        live.staged.push(record);
        live.staged_size_bytes = staged_size_bytes;
        Ok(())
    }

    fn flush_live(live: &mut Live<F>, disk: &mut Disk<F>) -> Result<(), StorageError> {
        let log_records = live.staged.len();
        if log_records + live.staged_superblocks.len() == 0 {
            return Ok(());
        }
        let superblocks = live.staged_superblocks.iter().map(|(group, block)| LogRecord::Superblock(*group, block));
        let (durable, result) = live.wal.append(live.staged.iter().map(Staged::record).chain(superblocks), disk);
        let entries_durable = durable.min(log_records);
        let written: u64 = live.staged.drain(..entries_durable).map(|staged| staged.record().size_bytes()).sum();
        live.staged_size_bytes -= written;
        // Superblock records durable with this flush (they come last).
        let superblocks_durable = durable - entries_durable;
        let durable_groups: Vec<GroupId> = live.staged_superblocks.keys().take(superblocks_durable).copied().collect();
        for group in durable_groups {
            if let Some(block) = live.staged_superblocks.remove(&group) {
                live.logged_superblocks.insert(group, block);
            }
        }
        disk.stats.superblock_records_written += superblocks_durable as u64;
        result?;
        debug_assert!(live.staged.is_empty() && live.staged_superblocks.is_empty(), "a flush writes all it staged");
        disk.stats.flushes += 1;
        Ok(())
    }

    /// Write the superblocks that are only records in the log into the
    /// superblock file, if a segment is about to be removed (see the module docs).
    fn checkpoint_before_prune(live: &mut Live<F>, disk: &mut Disk<F>) -> Result<(), StorageError> {
        if live.logged_superblocks.is_empty() || !live.wal.prunable(&live.snapshot_ops) {
            return Ok(());
        }
        live.superblocks.write(&live.logged_superblocks, live.wal.next_lsn(), disk)?;
        live.logged_superblocks.clear();
        Ok(())
    }

    fn save_snapshot_live(
        dir: &Path,
        live: &mut Live<F>,
        disk: &mut Disk<F>,
        group: GroupId,
        saved: &Snapshot,
        deferrable: bool,
    ) -> Result<(), StorageError> {
        let mut cursor = live.cursors.get(&group).copied().unwrap_or_default();
        if deferrable && live.deferred.defer_if_logged(&mut cursor, group, saved) {
            live.cursors.insert(group, cursor);
            disk.stats.snapshots_deferred += 1;
            return Ok(());
        }
        cursor.on_snapshot(group, saved.op);
        live.cursors.insert(group, cursor);
        live.deferred.take(group);
        Self::write_snapshots(dir, live, disk, vec![(group, saved.clone())])
    }

    /// Write `snapshots` into their files with one directory sync for all,
    /// then let the log go where they cover it.
    fn write_snapshots(
        dir: &Path,
        live: &mut Live<F>,
        disk: &mut Disk<F>,
        snapshots: Vec<(GroupId, Snapshot)>,
    ) -> Result<(), StorageError> {
        if snapshots.is_empty() {
            return Ok(());
        }
        for (group, saved) in &snapshots {
            snapshot::write_file(dir, *group, saved, live.wal.next_lsn(), disk)?;
        }
        disk.sync_dir(dir)?;
        for (group, saved) in snapshots {
            live.snapshot_ops.insert(group, saved.op);
        }
        Self::checkpoint_before_prune(live, disk)?;
        live.wal.prune(&live.snapshot_ops, disk)?;
        Ok(())
    }

    fn write_deferred_live(
        dir: &Path,
        live: &mut Live<F>,
        disk: &mut Disk<F>,
        snapshots_max: usize,
    ) -> Result<usize, StorageError> {
        let snapshots: Vec<(GroupId, Snapshot)> =
            std::iter::from_fn(|| live.deferred.pop_oldest()).take(snapshots_max).collect();
        disk.stats.deferred_snapshots_written += snapshots.len() as u64;
        Self::write_snapshots(dir, live, disk, snapshots)?;
        Ok(live.deferred.len())
    }

    /// Remove `group`, or with `reset` replace it by that superblock alone:
    /// the removal and the superblock go in one record (see
    /// [`Storage::reset_group`]).
    fn remove_group_live(
        dir: &Path,
        live: &mut Live<F>,
        disk: &mut Disk<F>,
        group: GroupId,
        reset: Option<&Superblock>,
    ) -> Result<(), StorageError> {
        if let Some(superblock) = reset {
            // Checked before anything goes: the group is kept whole if it fails.
            check_superblock_members(superblock)?;
            live.superblocks.reserve(group)?;
        }
        let before = live.staged.len();
        live.staged.retain(|staged| staged.group() != group);
        if live.staged.len() != before {
            live.staged_size_bytes = live.staged.iter().map(|staged| staged.record().size_bytes()).sum();
        }
        live.staged_superblocks.remove(&group);
        live.logged_superblocks.remove(&group);
        live.cursors.remove(&group);
        live.deferred.take(group);
        // The RemoveGroup (or ResetGroup) record first: once it is durable,
        // recovery finishes the rest (superblock, snapshot) if a crash
        // interrupts it.
        let record = reset.map_or(LogRecord::RemoveGroup(group), |superblock| LogRecord::ResetGroup(group, superblock));
        let (_, result) = live.wal.append([record], disk);
        result?;
        live.wal.forget_group(group);
        match reset {
            // The superblock file's copy, written after the record, is newer
            // than it: the record may go with its segment from now on.
            Some(superblock) => {
                live.superblocks.write(&BTreeMap::from([(group, superblock.clone())]), live.wal.next_lsn(), disk)?
            }
            None => live.superblocks.remove(group, live.wal.next_lsn(), disk)?,
        }
        snapshot::remove(dir, group, disk)?;
        live.snapshot_ops.remove(&group);
        Self::checkpoint_before_prune(live, disk)?;
        live.wal.prune(&live.snapshot_ops, disk)?;
        Ok(())
    }
}

impl<F: FileSystem> Storage for FileStorage<F> {
    fn append(&mut self, group: GroupId, entry: &LogEntry) -> Result<(), StorageError> {
        let size_bytes = entry_record_size_bytes(entry);
        let record_size_max_bytes = u64::from(self.config.record_size_max_bytes);
        if size_bytes > record_size_max_bytes {
            return Err(StorageError::TooLarge { what: "log record", size_bytes, max_bytes: record_size_max_bytes });
        }
        self.stage(Staged::Entry(group, entry.clone()), size_bytes)
    }

    fn truncate_after(&mut self, group: GroupId, op: Op) -> Result<(), StorageError> {
        let dir = self.dir.clone();
        let (live, disk) = self.live()?;
        if live.deferred.op_of(group).is_some_and(|deferred| deferred > op)
            && let Some(saved) = live.deferred.take(group)
        {
            let result = Self::write_snapshots(&dir, live, disk, vec![(group, saved)]);
            self.note(result)?;
        }
        self.stage(Staged::TruncateAfter(group, op), RECORD_HEADER_SIZE_BYTES as u64)
    }

    fn stage_superblock(&mut self, group: GroupId, superblock: &Superblock) -> Result<(), StorageError> {
        check_superblock_members(superblock)?;
        let (live, _) = self.live()?;
        live.superblocks.reserve(group)?;
        live.staged_superblocks.insert(group, superblock.clone());
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StorageError> {
        let (live, disk) = self.live()?;
        let result = Self::flush_live(live, disk);
        self.note(result)
    }

    fn save_snapshot(&mut self, group: GroupId, snapshot: &Snapshot) -> Result<(), StorageError> {
        self.store_snapshot(group, snapshot, false)
    }

    fn defer_snapshot(&mut self, group: GroupId, snapshot: &Snapshot) -> Result<(), StorageError> {
        self.store_snapshot(group, snapshot, true)
    }

    fn write_deferred_snapshots(&mut self, snapshots_max: usize) -> Result<usize, StorageError> {
        let dir = self.dir.clone();
        let (live, disk) = self.live()?;
        let result = Self::write_deferred_live(&dir, live, disk, snapshots_max);
        self.note(result)
    }

    fn deferred_snapshots(&self) -> usize {
        self.live.as_ref().map_or(0, |live| live.deferred.len())
    }

    /// None while the log is one segment: only a closed segment can be
    /// removed, so until one exists a written snapshot would free nothing.
    fn deferred_snapshots_due(&self) -> usize {
        self.live.as_ref().filter(|live| live.wal.segment_count() >= 2).map_or(0, |live| live.deferred.len())
    }

    fn remove_group(&mut self, group: GroupId) -> Result<(), StorageError> {
        let dir = self.dir.clone();
        let (live, disk) = self.live()?;
        let result = Self::remove_group_live(&dir, live, disk, group, None);
        self.note(result)
    }

    fn reset_group(&mut self, group: GroupId, superblock: &Superblock) -> Result<(), StorageError> {
        let dir = self.dir.clone();
        let (live, disk) = self.live()?;
        let result = Self::remove_group_live(&dir, live, disk, group, Some(superblock));
        self.note(result)
    }

    /// # Panics
    /// If called twice (the contract: once, before any other call).
    fn recover(&mut self) -> Result<Recovered, StorageError> {
        assert!(!self.recover_called, "storage contract: recover() called twice");
        self.recover_called = true;
        let result = recovery::run(&self.dir, &self.config, &mut self.disk);
        let recovery = self.note(result)?;
        self.live = Some(Live {
            wal: recovery.wal,
            superblocks: recovery.superblocks,
            snapshot_ops: recovery.snapshot_ops,
            cursors: recovery.cursors,
            staged: Vec::new(),
            staged_size_bytes: 0,
            staged_superblocks: BTreeMap::new(),
            logged_superblocks: BTreeMap::new(),
            deferred: DeferredSnapshots::default(),
        });
        self.report = Some(recovery.report);
        Ok(recovery.recovered)
    }
}

/// A superblock's members fit its record and its copy in the superblock file.
fn check_superblock_members(superblock: &Superblock) -> Result<(), StorageError> {
    if superblock.members.len() > GROUP_MEMBERS_MAX {
        return Err(StorageError::TooLarge {
            what: "superblock member list (8 bytes per member)",
            size_bytes: superblock.members.len() as u64 * 8,
            max_bytes: GROUP_MEMBERS_MAX as u64 * 8,
        });
    }
    Ok(())
}
