//! Every file operation of the file storage goes through [`Disk`], for four
//! reasons: one place maps OS errors to [`StorageError`] (a full disk is
//! `Full`, anything else `Io`; a failed *sync* is always `Io`, even for
//! ENOSPC, because the kernel may already have dropped the dirty pages and a
//! retried sync could falsely succeed), one place counts syncs for the
//! benchmark and telemetry, tests can inject a full disk or a failing sync
//! here without a special file system, and the file system itself is a
//! [`FileSystem`] value: [`OsFileSystem`] (the real one) in production, an
//! in-memory one that tears writes and loses unsynced data in the simulator.
//!
//! [`FileSystem`] is deliberately the handful of POSIX calls the storage
//! makes, each with the real call's meaning, so that a test double cannot
//! offer a guarantee the real disk does not: writes are durable only after
//! `sync_data` on the file, and creations, renames and removals only after
//! `sync_dir` on the directory. `FileStorage` is generic over it (with
//! `OsFileSystem` the default), so production code pays nothing for the
//! abstraction: every call is monomorphised to the `std::fs` call it was.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use cohort_core::storage::StorageError;

use crate::remover::Remover;

/// ENOSPC on Linux.
const ERRNO_NO_SPACE: i32 = 28;
/// EDQUOT on Linux.
const ERRNO_QUOTA: i32 = 122;
/// EIO on Linux.
const ERRNO_IO: i32 = 5;

/// How [`FileSystem::open`] opens a file. Every mode opens for reading and
/// writing.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Create the file; fail if it exists (`O_CREAT | O_EXCL`).
    CreateNew,
    /// Open the file; fail if it does not exist.
    Existing,
    /// Open the file, creating it empty if it does not exist (`O_CREAT`).
    CreateOrOpen,
    /// Create the file, or cut an existing one to zero length (`O_CREAT | O_TRUNC`).
    CreateTruncate,
}

/// The file system calls the file storage makes (see the module docs).
///
/// Errors are `std::io::Error`s with the OS error a real disk would give
/// (`ENOSPC` for a full disk, `EIO` for a failed device, `ENOENT` for a
/// missing file): `Disk` maps them to [`StorageError`] in one place.
pub trait FileSystem {
    /// An open file.
    type File: std::fmt::Debug;
    /// An open directory (for `sync_dir`).
    type Dir;

    /// Open `path` as `mode` says.
    fn open(&mut self, path: &Path, mode: OpenMode) -> io::Result<Self::File>;
    /// Write all of `buf` at `offset` (`pwrite` until done). Visible to
    /// reads at once, durable only after [`FileSystem::sync_data`].
    fn write_all_at(&mut self, file: &Self::File, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Set the file's length (`ftruncate`); durable after `sync_data`.
    fn set_len(&mut self, file: &Self::File, len_bytes: u64) -> io::Result<()>;
    /// Make the file's data durable (`fdatasync`).
    fn sync_data(&mut self, file: &Self::File) -> io::Result<()>;
    /// Open the directory `dir`.
    fn open_dir(&mut self, dir: &Path) -> io::Result<Self::Dir>;
    /// Make the creations, renames and removals in the directory durable (`fsync`).
    fn sync_dir(&mut self, dir: &Self::Dir) -> io::Result<()>;
    /// The whole content of the file at `path`.
    fn read(&mut self, path: &Path) -> io::Result<Vec<u8>>;
    /// The length of the file at `path`.
    fn len(&mut self, path: &Path) -> io::Result<u64>;
    /// Remove the file at `path` (durable after `sync_dir`).
    fn remove_file(&mut self, path: &Path) -> io::Result<()>;
    /// Remove the file at `path` (one already gone counts as removed) and
    /// then sync the directory `dir`, after every removal asked for before
    /// it, now or later: a file system may do it on a thread of its own
    /// (the real one does). A failure, now or of an earlier such removal,
    /// is `Err` here and from [`FileSystem::removals_failed`]; after one,
    /// no later removal is done. Default: both now, as `remove_file` and
    /// `sync_dir`.
    fn remove_in_order(&mut self, path: &Path, dir: &Path) -> io::Result<()> {
        remove_then_sync_dir(self, path, dir)
    }
    /// `Err` if a removal of [`FileSystem::remove_in_order`] failed (with
    /// `settle`: once every one asked for is done). Default: `Ok`, the
    /// default removals being done (and any failure returned) at once.
    fn removals_failed(&mut self, settle: bool) -> io::Result<()> {
        let _ = settle;
        Ok(())
    }
    /// Rename `from` to `to`, replacing `to` atomically (durable after `sync_dir`).
    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()>;
    /// True if `path` exists.
    fn exists(&mut self, path: &Path) -> bool;
    /// Create the directory `dir` and its missing parents.
    fn create_dir_all(&mut self, dir: &Path) -> io::Result<()>;
    /// The names of the entries of directory `dir` (names that are not
    /// UTF-8 are left out: the storage never creates one).
    fn list_dir(&mut self, dir: &Path) -> io::Result<Vec<String>>;
}

/// Remove the file at `path` (one already gone counts as removed), then
/// sync the directory `dir`: what [`FileSystem::remove_in_order`] does,
/// now or on a thread.
fn remove_then_sync_dir<F: FileSystem + ?Sized>(fs: &mut F, path: &Path, dir: &Path) -> io::Result<()> {
    match fs.remove_file(path) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    let handle = fs.open_dir(dir)?;
    fs.sync_dir(&handle)
}

/// The real file system: each method is the `std::fs` call it names,
/// except [`FileSystem::remove_in_order`], which a thread of this value's
/// own carries out (`remover`: a large segment's removal would otherwise
/// hold up the next flush). Dropping it waits for the removals asked for.
#[derive(Debug, Default)]
pub struct OsFileSystem {
    remover: Option<Remover>,
}

impl FileSystem for OsFileSystem {
    type File = File;
    type Dir = File;

    #[inline]
    fn open(&mut self, path: &Path, mode: OpenMode) -> io::Result<File> {
        let mut options = OpenOptions::new();
        options.read(true).write(true);
        match mode {
            OpenMode::CreateNew => options.create_new(true),
            OpenMode::Existing => &mut options,
            OpenMode::CreateOrOpen => options.create(true).truncate(false),
            OpenMode::CreateTruncate => options.create(true).truncate(true),
        };
        options.open(path)
    }

    #[inline]
    fn write_all_at(&mut self, file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
        file.write_all_at(buf, offset)
    }

    #[inline]
    fn set_len(&mut self, file: &File, len_bytes: u64) -> io::Result<()> {
        file.set_len(len_bytes)
    }

    #[inline]
    fn sync_data(&mut self, file: &File) -> io::Result<()> {
        file.sync_data()
    }

    #[inline]
    fn open_dir(&mut self, dir: &Path) -> io::Result<File> {
        File::open(dir)
    }

    #[inline]
    fn sync_dir(&mut self, dir: &File) -> io::Result<()> {
        dir.sync_all()
    }

    #[inline]
    fn read(&mut self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }

    #[inline]
    fn len(&mut self, path: &Path) -> io::Result<u64> {
        std::fs::metadata(path).map(|metadata| metadata.len())
    }

    #[inline]
    fn remove_file(&mut self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn remove_in_order(&mut self, path: &Path, dir: &Path) -> io::Result<()> {
        let remover = match &mut self.remover {
            Some(remover) => remover,
            // The thread's removals are this file system's own calls.
            empty => {
                empty.insert(Remover::start(|path, dir| remove_then_sync_dir(&mut OsFileSystem::default(), path, dir))?)
            }
        };
        remover.remove(path.to_owned(), dir.to_owned())
    }

    fn removals_failed(&mut self, settle: bool) -> io::Result<()> {
        match (&self.remover, settle) {
            (None, _) => Ok(()),
            (Some(remover), true) => remover.settle(),
            (Some(remover), false) => remover.failure(),
        }
    }

    #[inline]
    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    #[inline]
    fn exists(&mut self, path: &Path) -> bool {
        path.exists()
    }

    #[inline]
    fn create_dir_all(&mut self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn list_dir(&mut self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            if let Some(name) = entry?.file_name().to_str() {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }
}

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
    /// Snapshots kept to write later (their entries are in the log).
    pub snapshots_deferred: u64,
    /// Deferred snapshots written.
    pub deferred_snapshots_written: u64,
    /// `fsync` calls on the directory.
    pub directory_syncs: u64,
    /// Segment files created.
    pub segments_created: u64,
    /// Segment files removed after snapshots.
    pub segments_removed: u64,
    /// Zeros written ahead of the log's records (K3: preallocation).
    pub preallocated_bytes: u64,
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
#[derive(Debug)]
pub(crate) struct Disk<F> {
    pub(crate) fs: F,
    pub(crate) stats: FileStorageStats,
    space_left_bytes: Option<u64>,
    sync_failures: u32,
}

impl<F: FileSystem> Disk<F> {
    pub(crate) fn new(fs: F) -> Self {
        Self { fs, stats: FileStorageStats::default(), space_left_bytes: None, sync_failures: 0 }
    }

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

    /// Open `path` as `mode` says; a failure is `Full` or `Io` as [`error_of`] maps it.
    pub(crate) fn open(
        &mut self,
        path: &Path,
        mode: OpenMode,
        operation: &'static str,
    ) -> Result<F::File, StorageError> {
        self.fs.open(path, mode).map_err(|error| error_of(operation, path, &error))
    }

    /// Write all of `buf` at `offset`.
    pub(crate) fn write_at(
        &mut self,
        file: &F::File,
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
                let written = self.fs.write_all_at(file, &buf[..fits as usize], offset);
                written.map_err(|error| error_of(operation, path, &error))?;
                return Err(error_of(operation, path, &io::Error::from_raw_os_error(ERRNO_NO_SPACE)));
            }
        }
        self.fs.write_all_at(file, buf, offset).map_err(|error| error_of(operation, path, &error))
    }

    /// `sync_data` a file. Any failure is fatal (`Io`), and so is a failed
    /// removal of [`Disk::remove_in_order`] (it is a failed sync).
    pub(crate) fn sync_data(&mut self, file: &F::File, path: &Path, of: SyncOf) -> Result<(), StorageError> {
        self.removals_failed(false)?;
        match of {
            SyncOf::Log => self.stats.log_syncs += 1,
            SyncOf::SegmentHeader => self.stats.segment_syncs += 1,
            SyncOf::Superblocks => self.stats.superblock_syncs += 1,
            SyncOf::Snapshot => self.stats.snapshot_syncs += 1,
        }
        if self.sync_failures > 0 {
            self.sync_failures -= 1;
            return Err(sync_error(path, &io::Error::from_raw_os_error(ERRNO_IO)));
        }
        self.fs.sync_data(file).map_err(|error| sync_error(path, &error))
    }

    /// `fsync` a directory, making file creations, renames and removals in it
    /// durable. Any failure is fatal (`Io`).
    pub(crate) fn sync_dir(&mut self, dir: &Path) -> Result<(), StorageError> {
        self.stats.directory_syncs += 1;
        if self.sync_failures > 0 {
            self.sync_failures -= 1;
            return Err(sync_error(dir, &io::Error::from_raw_os_error(ERRNO_IO)));
        }
        let handle =
            self.fs.open_dir(dir).map_err(|error| io_error("opening the directory to sync it", dir, &error))?;
        self.fs.sync_dir(&handle).map_err(|error| sync_error(dir, &error))
    }

    /// Cut `file` to `len_bytes`. Any failure is `Io`.
    pub(crate) fn set_len(
        &mut self,
        file: &F::File,
        path: &Path,
        len_bytes: u64,
        operation: &'static str,
    ) -> Result<(), StorageError> {
        self.fs.set_len(file, len_bytes).map_err(|error| io_error(operation, path, &error))
    }

    /// The whole file at `path`. Any failure is `Io`.
    pub(crate) fn read(&mut self, path: &Path, operation: &'static str) -> Result<Vec<u8>, StorageError> {
        self.fs.read(path).map_err(|error| io_error(operation, path, &error))
    }

    /// Remove the file at `path` and then sync `dir`, in order with the
    /// other such removals, now or later ([`FileSystem::remove_in_order`]).
    /// Any failure, now or later, is fatal (`Io`): a failed directory sync
    /// may have lost the removal.
    pub(crate) fn remove_in_order(&mut self, path: &Path, dir: &Path) -> Result<(), StorageError> {
        self.stats.directory_syncs += 1;
        if self.sync_failures > 0 {
            self.sync_failures -= 1;
            return Err(sync_error(dir, &io::Error::from_raw_os_error(ERRNO_IO)));
        }
        self.fs.remove_in_order(path, dir).map_err(|error| sync_error(path, &error))
    }

    /// `Err` (fatal) if a removal of [`Disk::remove_in_order`] failed;
    /// with `settle`, once every one asked for is done.
    pub(crate) fn removals_failed(&mut self, settle: bool) -> Result<(), StorageError> {
        self.fs.removals_failed(settle).map_err(|error| sync_error(Path::new("a log segment's removal"), &error))
    }

    /// Remove the file at `path`; `Ok(false)` if there was none.
    pub(crate) fn remove_file(&mut self, path: &Path, operation: &'static str) -> Result<bool, StorageError> {
        match self.fs.remove_file(path) {
            Ok(()) => Ok(true),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(error) => Err(io_error(operation, path, &error)),
        }
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

    /// A segment's removal on the real file system's thread that fails
    /// (its directory gone) is a failed sync: fatal from then on, at the
    /// next sync of anything.
    #[test]
    fn v6_a_failed_removal_in_order_is_fatal_at_the_next_sync() {
        let dir = tempfile::tempdir().expect("a directory");
        let mut disk = Disk::new(OsFileSystem::default());
        let missing = dir.path().join("gone");
        disk.remove_in_order(&missing.join("wal-00000000000000000001.seg"), &missing).expect("queued");
        let error = disk.removals_failed(true).expect_err("its directory's sync failed");
        assert!(error.is_fatal(), "{error}");
        let path = dir.path().join("wal-00000000000000000009.seg");
        let file = disk.fs.open(&path, OpenMode::CreateNew).expect("a file");
        let synced = disk.sync_data(&file, &path, SyncOf::Log);
        assert!(synced.as_ref().is_err_and(StorageError::is_fatal), "{synced:?}");
        let queued = disk.remove_in_order(&path, dir.path());
        assert!(queued.is_err(), "no removal after a failed one: {queued:?}");
        assert!(path.exists());
    }

    #[test]
    fn enospc_maps_to_full_and_eio_to_io() {
        let path = Path::new("/x");
        let full = error_of("write", path, &io::Error::from_raw_os_error(ERRNO_NO_SPACE));
        assert!(matches!(full, StorageError::Full { .. }), "{full:?}");
        let eio = error_of("write", path, &io::Error::from_raw_os_error(ERRNO_IO));
        assert!(matches!(eio, StorageError::Io { .. }), "{eio:?}");
        assert!(eio.is_fatal() && !full.is_fatal());
    }
}
