//! Durable storage on real files: one write-ahead log per shard with group
//! commit, per-group superblocks, snapshots and crash recovery (V4, V6,
//! R12).
//!
//! One [`FileStorage`] owns one shard directory and implements the core's
//! [`Storage`](cohort_core::storage::Storage) trait. All of the
//! shard's groups share one log, so that one `flush` makes every group's
//! staged records durable with one `fdatasync` (about 145 µs here: one sync
//! per record would cap a shard near 7 k records/s).
//!
//! The files, one concern each:
//! - [`format`](mod@format): the log's segment header and record codec (crc32c per record).
//! - `segment`: segment files, group commit, rotation and removal.
//! - `superblock`: the superblock file (two alternating copies per group slot).
//! - `snapshot`: one snapshot file per group, replaced atomically.
//! - `recovery`: scanning, replay, torn-tail repair, corruption detection.
//! - `file`: [`FileStorage`], the trait implementation.
//! - `disk`: the [`FileSystem`] trait and the real [`OsFileSystem`]; every
//!   file operation, error mapping, counters, fault injection.
//! - `remover`: the real file system's removals of segments, on a thread of
//!   their own (a 64 MiB segment's removal is tens of milliseconds).
//! - `config`: the limits.
//!
//! docs/storage.md describes the on-disk format field by field, the ordering
//! guarantees and the recovery algorithm.

#![warn(unreachable_pub)]

mod config;
mod disk;
mod file;
pub mod format;
mod recovery;
mod remover;
mod segment;
mod snapshot;
mod superblock;

pub use config::{
    FileStorageConfig, GROUPS_LIMIT, RECORD_SIZE_DEFAULT_BYTES, SEGMENT_SIZE_LIMIT_BYTES, WalConfigError,
};
pub use disk::{FileStorageStats, FileSystem, InjectedFault, OpenMode, OsFileSystem};
pub use file::FileStorage;
pub use recovery::{LostRecords, RecoveryReport};
pub use snapshot::SNAPSHOT_HEADER_SIZE_BYTES;
pub use superblock::{SUPERBLOCK_COPY_SIZE_BYTES, SUPERBLOCK_FILE_NAME};
