//! A simulated shard's storage: the real [`FileStorage`] on the node's
//! [`SimDisk`] (the default), or the core's [`MemoryStorage`] (kept for
//! comparison: a seed that fails only on one of them points at that
//! storage, not at the protocol), behind one [`Storage`] value.
//!
//! The wrapper adds the one fault neither storage produces by itself in a
//! run: a superblock stage that fails for one group alone (R12), which
//! `FileStorage` only returns once its superblock file is out of slots.

use std::collections::BTreeSet;

use cohort_core::storage::memory::MemoryStorage;
use cohort_core::storage::{Recovered, Snapshot, Storage, StorageError, Superblock};
use cohort_messages::{GroupId, LogEntry, Op};
use cohort_wal::{FileStorage, FileStorageConfig};

use crate::disk::SimDisk;

/// Which storage the nodes run.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum StorageKind {
    /// `cohort_wal::FileStorage` on the simulated disk: what production runs.
    #[default]
    File,
    /// `cohort_core::storage::memory::MemoryStorage`.
    Memory,
}

impl StorageKind {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            StorageKind::File => "file",
            StorageKind::Memory => "memory",
        }
    }
}

/// D1: where the kv groups' state machines keep their state.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum StateKind {
    /// In memory: cohort snapshots the map whole (the default).
    #[default]
    Memory,
    /// On the node's simulated disk, checkpointed by cohort
    /// ([`crate::disk_kv::DiskKv`]).
    Disk,
}

impl StateKind {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            StateKind::Memory => "memory",
            StateKind::Disk => "disk",
        }
    }
}

/// The file storage's limits in the simulator: small segments, so that
/// rotation, checkpoints and segment removal happen in ordinary runs, and
/// zeros written ahead of the records a few flushes at a time (K3), so that
/// torn writes and crashes land before, over and after them.
pub fn file_config() -> FileStorageConfig {
    FileStorageConfig {
        segment_size_max_bytes: 48 * 1024,
        record_size_max_bytes: 16 * 1024,
        preallocation_size_bytes: 4 * 1024,
        ..FileStorageConfig::default()
    }
}

/// The storage behind a [`SimStorage`].
#[derive(Debug)]
// One per simulated shard: the size of the in-memory variant costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum Backend {
    /// The real WAL on the node's simulated disk.
    File(Box<FileStorage<SimDisk>>),
    /// The in-memory model.
    Memory(MemoryStorage),
}

/// One shard's storage. See the module docs.
#[derive(Debug)]
pub struct SimStorage {
    /// The storage itself.
    pub backend: Backend,
    superblock_failures: BTreeSet<GroupId>,
}

impl SimStorage {
    /// A storage over `backend`.
    pub fn new(backend: Backend) -> SimStorage {
        SimStorage { backend, superblock_failures: BTreeSet::new() }
    }

    /// The next superblock stage of `group` fails (R12); others go on.
    pub fn fail_next_superblock_stage(&mut self, group: GroupId) {
        self.superblock_failures.insert(group);
    }

    fn storage(&mut self) -> &mut dyn Storage {
        match &mut self.backend {
            Backend::File(file) => file.as_mut(),
            Backend::Memory(memory) => memory,
        }
    }
}

impl Storage for SimStorage {
    fn append(&mut self, group: GroupId, entry: &LogEntry) -> Result<(), StorageError> {
        self.storage().append(group, entry)
    }

    fn truncate_after(&mut self, group: GroupId, op: Op) -> Result<(), StorageError> {
        self.storage().truncate_after(group, op)
    }

    fn stage_superblock(&mut self, group: GroupId, superblock: &Superblock) -> Result<(), StorageError> {
        if self.superblock_failures.remove(&group) {
            return Err(StorageError::Injected("superblock stage refused (R12)"));
        }
        self.storage().stage_superblock(group, superblock)
    }

    fn flush(&mut self) -> Result<(), StorageError> {
        self.storage().flush()
    }

    fn save_snapshot(&mut self, group: GroupId, snapshot: &Snapshot) -> Result<(), StorageError> {
        self.storage().save_snapshot(group, snapshot)
    }

    fn defer_snapshot(&mut self, group: GroupId, snapshot: &Snapshot) -> Result<(), StorageError> {
        self.storage().defer_snapshot(group, snapshot)
    }

    fn write_deferred_snapshots(&mut self, snapshots_max: usize) -> Result<usize, StorageError> {
        self.storage().write_deferred_snapshots(snapshots_max)
    }

    fn deferred_snapshots(&self) -> usize {
        match &self.backend {
            Backend::File(file) => file.deferred_snapshots(),
            Backend::Memory(memory) => memory.deferred_snapshots(),
        }
    }

    fn deferred_snapshots_due(&self) -> usize {
        match &self.backend {
            Backend::File(file) => file.deferred_snapshots_due(),
            Backend::Memory(memory) => memory.deferred_snapshots_due(),
        }
    }

    fn remove_group(&mut self, group: GroupId) -> Result<(), StorageError> {
        self.superblock_failures.remove(&group);
        self.storage().remove_group(group)
    }

    fn reset_group(&mut self, group: GroupId, superblock: &Superblock) -> Result<(), StorageError> {
        self.superblock_failures.remove(&group);
        self.storage().reset_group(group, superblock)
    }

    fn recover(&mut self) -> Result<Recovered, StorageError> {
        self.storage().recover()
    }
}
