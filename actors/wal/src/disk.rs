//! Every write and sync of the file storage goes through [`Disk`], for three
//! reasons: one place maps OS errors to [`StorageError`] (a full disk is
//! `Full`, anything else `Io`; a failed *sync* is always `Io`, even for
//! ENOSPC, because the kernel may already have dropped the dirty pages and a
//! retried sync could falsely succeed), one place counts syncs for the
//! benchmark and telemetry, and tests can inject a full disk or a failing
//! sync here without a special file system.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use cohort_core::storage::StorageError;

/// ENOSPC on Linux.
const ERRNO_NO_SPACE: i32 = 28;
/// EDQUOT on Linux.
const ERRNO_QUOTA: i32 = 122;

/// Counters of what the file storage did. Monotonic.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct FileStorageStats {
    /// Flushes that wrote anything.
    pub flushes: u64,
    /// Log records written (and synced).
    pub records_written: u64,
    /// Log bytes written.
    pub record_bytes_written: u64,
    /// `sync_data` calls on log segments for a flush's records (K3: one per flush).
    pub log_syncs: u64,
    /// `sync_data` calls on log segments otherwise: a new segment's header,
    /// recovery's sync of the active segment.
    pub segment_syncs: u64,
    /// `sync_data` calls on the superblock file.
    pub superblock_syncs: u64,
    /// Superblock copies written into the superblock file (checkpoints).
    pub superblocks_written: u64,
    /// Superblocks written as records in the log (K3: one per group per flush that staged one).
    pub superblock_records_written: u64,
    /// `sync_data` calls on snapshot files.
    pub snapshot_syncs: u64,
    /// `fsync` calls on the directory.
    pub directory_syncs: u64,
    /// Segment files created.
    pub segments_created: u64,
    /// Segment files removed after snapshots.
    pub segments_removed: u64,
}

impl FileStorageStats {
    /// Every sync of any kind.
    pub fn syncs_total(&self) -> u64 {
        self.log_syncs + self.segment_syncs + self.superblock_syncs + self.snapshot_syncs + self.directory_syncs
    }
}

/// A fault to inject into the file storage's I/O (tests only).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum InjectedFault {
    /// The disk has this many bytes left: a write beyond them writes what
    /// fits and fails with ENOSPC, as a real short write would.
    SpaceLeft {
        /// Bytes that can still be written.
        bytes: u64,
    },
    /// The next sync of any file fails with EIO.
    SyncFails,
    /// Remove every injected fault (space becomes unlimited again).
    Clear,
}

/// Which file a sync was for (for the counters).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum SyncOf {
    /// A flush's records.
    Log,
    /// A new segment's header (rotation), or recovery's sync of the active segment.
    SegmentHeader,
    Superblocks,
    Snapshot,
}

/// The file storage's access to the disk. See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Disk {
    pub(crate) stats: FileStorageStats,
    space_left_bytes: Option<u64>,
    sync_failures: u32,
}

impl Disk {
    pub(crate) fn inject(&mut self, fault: InjectedFault) {
        match fault {
            InjectedFault::SpaceLeft { bytes } => self.space_left_bytes = Some(bytes),
            InjectedFault::SyncFails => self.sync_failures += 1,
            InjectedFault::Clear => {
                self.space_left_bytes = None;
                self.sync_failures = 0;
            }
        }
    }

    /// Write all of `buf` at `offset`.
    pub(crate) fn write_at(
        &mut self,
        file: &File,
        path: &Path,
        buf: &[u8],
        offset: u64,
        operation: &'static str,
    ) -> Result<(), StorageError> {
        if let Some(space) = self.space_left_bytes {
            let fits = (buf.len() as u64).min(space);
            self.space_left_bytes = Some(space - fits);
            if fits < buf.len() as u64 {
                // A short write, then ENOSPC.
                let written = file.write_all_at(&buf[..fits as usize], offset);
                written.map_err(|error| error_of(operation, path, &error))?;
                return Err(error_of(operation, path, &io::Error::from_raw_os_error(ERRNO_NO_SPACE)));
            }
        }
        file.write_all_at(buf, offset).map_err(|error| error_of(operation, path, &error))
    }

    /// `sync_data` a file. Any failure is fatal (`Io`).
    pub(crate) fn sync_data(&mut self, file: &File, path: &Path, of: SyncOf) -> Result<(), StorageError> {
        match of {
            SyncOf::Log => self.stats.log_syncs += 1,
            SyncOf::SegmentHeader => self.stats.segment_syncs += 1,
            SyncOf::Superblocks => self.stats.superblock_syncs += 1,
            SyncOf::Snapshot => self.stats.snapshot_syncs += 1,
        }
        if self.sync_failures > 0 {
            self.sync_failures -= 1;
            return Err(sync_error(path, &io::Error::from_raw_os_error(5)));
        }
        file.sync_data().map_err(|error| sync_error(path, &error))
    }

    /// `fsync` a directory, making file creations, renames and removals in it
    /// durable. Any failure is fatal (`Io`).
    pub(crate) fn sync_dir(&mut self, dir: &Path) -> Result<(), StorageError> {
        self.stats.directory_syncs += 1;
        if self.sync_failures > 0 {
            self.sync_failures -= 1;
            return Err(sync_error(dir, &io::Error::from_raw_os_error(5)));
        }
        let handle = File::open(dir).map_err(|error| io_error("opening the directory to sync it", dir, &error))?;
        handle.sync_all().map_err(|error| sync_error(dir, &error))
    }
}

/// Map an OS error: a full disk (or quota) is `Full`, anything else `Io`.
pub(crate) fn error_of(operation: &'static str, path: &Path, error: &io::Error) -> StorageError {
    let full = error.kind() == io::ErrorKind::StorageFull
        || matches!(error.raw_os_error(), Some(ERRNO_NO_SPACE) | Some(ERRNO_QUOTA));
    if full {
        StorageError::Full { operation, path: path.display().to_string() }
    } else {
        io_error(operation, path, error)
    }
}

/// An `Io` error, whatever the OS error was.
pub(crate) fn io_error(operation: &'static str, path: &Path, error: &io::Error) -> StorageError {
    StorageError::Io { operation, path: path.display().to_string(), reason: error.to_string() }
}

fn sync_error(path: &Path, error: &io::Error) -> StorageError {
    io_error("sync (fsync/fdatasync); data may be lost and must not be assumed durable", path, error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enospc_maps_to_full_and_eio_to_io() {
        let path = Path::new("/x");
        let full = error_of("write", path, &io::Error::from_raw_os_error(ERRNO_NO_SPACE));
        assert!(matches!(full, StorageError::Full { .. }), "{full:?}");
        let eio = error_of("write", path, &io::Error::from_raw_os_error(5));
        assert!(matches!(eio, StorageError::Io { .. }), "{eio:?}");
        assert!(eio.is_fatal() && !full.is_fatal());
    }
}
