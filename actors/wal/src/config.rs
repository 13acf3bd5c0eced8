//! The limits of the file storage, with units in their names, and the check
//! that relates them.
//!
//! Every size the storage writes is bounded by one of these; every size it
//! reads is bounded by the file it reads from (and the format constants in
//! [`format`](super::format)), never by a configured value, so that lowering a
//! limit never makes existing data unreadable.

use cohort_messages::{GROUP_MEMBERS_MAX, OPERATION_SIZE_MAX_BYTES};

use super::format::{ENTRY_FIXED_SIZE_BYTES, RECORD_HEADER_SIZE_BYTES, SEGMENT_HEADER_SIZE_BYTES};

/// The largest segment file this format allows: 1 GiB. Recovery reads one
/// segment into memory at a time, so this also bounds its memory.
pub const SEGMENT_SIZE_LIMIT_BYTES: u64 = 1 << 30;

/// The largest record an entry of the wire format's largest operation needs.
pub const RECORD_SIZE_DEFAULT_BYTES: u32 =
    (RECORD_HEADER_SIZE_BYTES + ENTRY_FIXED_SIZE_BYTES + OPERATION_SIZE_MAX_BYTES) as u32;

/// The most superblock slots (groups that have ever saved a superblock and
/// not been removed) a shard's superblock file may hold.
pub const GROUPS_LIMIT: u32 = 1 << 20;

const _: () = {
    // A record of the default size fits a segment of the default size.
    assert!(RECORD_SIZE_DEFAULT_BYTES as u64 + SEGMENT_HEADER_SIZE_BYTES as u64 <= 64 * 1024 * 1024);
    // A superblock's member list is one byte long.
    assert!(GROUP_MEMBERS_MAX <= u8::MAX as usize);
};

/// The limits of one shard's file storage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileStorageConfig {
    /// A segment is closed and a new one started before it would exceed this
    /// size. Segments are removed whole, so smaller segments free space
    /// sooner after snapshots; larger ones rotate (three extra syncs) less.
    pub segment_size_max_bytes: u64,
    /// The largest log record (header and payload); a larger entry is refused
    /// by `append` with `TooLarge`.
    pub record_size_max_bytes: u32,
    /// The most segment files that may exist at once (the active one and the
    /// closed ones not yet removed). Together with the segment size this caps
    /// the log's disk use; when reached, a flush that needs a new segment
    /// fails with `Full` until snapshots let old segments go.
    pub segments_open_max: u32,
    /// The most groups with a superblock slot (two 1 KiB copies each).
    pub groups_max: u32,
    /// The largest snapshot `data`.
    pub snapshot_size_max_bytes: u64,
    /// The most log-record bytes that may be staged between flushes; an
    /// append beyond it is refused with `TooLarge` (flush first).
    pub staged_size_max_bytes: u64,
    /// K3: zeros kept written ahead of the active segment's records, so
    /// that a flush's sync does not also commit a new file size (0: none,
    /// every flush grows the file). At most `segment_size_max_bytes` is
    /// ever allocated.
    pub preallocation_size_bytes: u64,
}

impl Default for FileStorageConfig {
    fn default() -> Self {
        Self {
            segment_size_max_bytes: 64 * 1024 * 1024,
            record_size_max_bytes: RECORD_SIZE_DEFAULT_BYTES,
            segments_open_max: 1024,
            groups_max: 65_536,
            snapshot_size_max_bytes: 1 << 30,
            staged_size_max_bytes: 256 * 1024 * 1024,
            preallocation_size_bytes: 1024 * 1024,
        }
    }
}

/// A limit that is out of range or inconsistent with another.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid storage config: {field} = {value}: {reason}")]
pub struct WalConfigError {
    /// The field.
    pub field: &'static str,
    /// Its value.
    pub value: u64,
    /// Why it is refused.
    pub reason: &'static str,
}

impl FileStorageConfig {
    /// Check every limit; the first bad one is returned.
    pub fn validate(&self) -> Result<(), WalConfigError> {
        let record_min = (RECORD_HEADER_SIZE_BYTES + ENTRY_FIXED_SIZE_BYTES) as u64;
        let record = u64::from(self.record_size_max_bytes);
        check(
            "record_size_max_bytes",
            record,
            record >= record_min,
            "must hold at least a record header and an entry's fixed fields (72 bytes)",
        )?;
        check(
            "segment_size_max_bytes",
            self.segment_size_max_bytes,
            self.segment_size_max_bytes <= SEGMENT_SIZE_LIMIT_BYTES,
            "must be at most SEGMENT_SIZE_LIMIT_BYTES (1 GiB)",
        )?;
        check(
            "segment_size_max_bytes",
            self.segment_size_max_bytes,
            self.segment_size_max_bytes >= SEGMENT_HEADER_SIZE_BYTES as u64 + record,
            "must hold the segment header and one record of record_size_max_bytes",
        )?;
        check(
            "segments_open_max",
            u64::from(self.segments_open_max),
            self.segments_open_max >= 2,
            "must be at least 2 (the active segment and the one being rotated to)",
        )?;
        check(
            "groups_max",
            u64::from(self.groups_max),
            self.groups_max >= 1 && self.groups_max <= GROUPS_LIMIT,
            "must be between 1 and GROUPS_LIMIT (1,048,576)",
        )?;
        check(
            "snapshot_size_max_bytes",
            self.snapshot_size_max_bytes,
            self.snapshot_size_max_bytes <= i64::MAX as u64,
            "must fit a file length",
        )?;
        check(
            "staged_size_max_bytes",
            self.staged_size_max_bytes,
            self.staged_size_max_bytes >= record,
            "must hold at least one record of record_size_max_bytes",
        )
    }
}

fn check(field: &'static str, value: u64, holds: bool, reason: &'static str) -> Result<(), WalConfigError> {
    if holds { Ok(()) } else { Err(WalConfigError { field, value, reason }) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_is_valid() {
        assert_eq!(FileStorageConfig::default().validate(), Ok(()));
    }

    #[test]
    fn segment_smaller_than_a_record_is_refused() {
        let config = FileStorageConfig { segment_size_max_bytes: 4096, ..FileStorageConfig::default() };
        assert_eq!(config.validate().map_err(|error| error.field), Err("segment_size_max_bytes"));
    }

    #[test]
    fn one_segment_is_refused() {
        let config = FileStorageConfig { segments_open_max: 1, ..FileStorageConfig::default() };
        assert_eq!(config.validate().map_err(|error| error.field), Err("segments_open_max"));
    }
}
