//! Application snapshots: one file per group, replaced atomically.
//!
//! A snapshot is written to `snapshot-<group>.snap.tmp`, synced, renamed over
//! `snapshot-<group>.snap` and the directory synced (once for all the
//! snapshots written together): a reader (recovery) sees
//! either the old file or the new one, whole. So a snapshot file that fails its
//! checksum is corruption, never a torn write, and recovery stops on it.
//! Leftover `.tmp` files are from interrupted saves and are deleted.
//!
//! The header records the log's next LSN when the snapshot was saved
//! (`log_lsn`), for the same two checks as the superblocks: the log must still
//! reach it, and a snapshot older than a `RemoveGroup` record is stale.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use cohort_core::storage::{Snapshot, StorageError};
use cohort_messages::{GroupId, Op, View};

use super::disk::{Disk, FileSystem, OpenMode, SyncOf, io_error};
use super::format::{FORMAT_VERSION, u16_at, u32_at, u64_at};

/// Size of a snapshot file's header.
pub const SNAPSHOT_HEADER_SIZE_BYTES: usize = 56;

const MAGIC: [u8; 8] = *b"cohortsn";

/// The suffix of a snapshot being written.
pub(crate) const TMP_SUFFIX: &str = ".tmp";

/// The file name of `group`'s snapshot.
pub(crate) fn snapshot_file_name(group: GroupId) -> String {
    format!("snapshot-{:020}.snap", group.get())
}

/// The group of a snapshot file name, if it is one.
pub(crate) fn parse_snapshot_file_name(name: &str) -> Option<GroupId> {
    let digits = name.strip_prefix("snapshot-")?.strip_suffix(".snap")?;
    if digits.len() != 20 || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(GroupId)
}

/// A snapshot read back, with the log position it was saved at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LoadedSnapshot {
    pub(crate) snapshot: Snapshot,
    pub(crate) log_lsn: u64,
}

fn encode_header(group: GroupId, snapshot: &Snapshot, log_lsn: u64) -> [u8; SNAPSHOT_HEADER_SIZE_BYTES] {
    let mut raw = [0u8; SNAPSHOT_HEADER_SIZE_BYTES];
    raw[4..12].copy_from_slice(&MAGIC);
    raw[12..14].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    raw[16..24].copy_from_slice(&group.get().to_le_bytes());
    raw[24..32].copy_from_slice(&snapshot.op.get().to_le_bytes());
    raw[32..36].copy_from_slice(&snapshot.view.get().to_le_bytes());
    raw[40..48].copy_from_slice(&log_lsn.to_le_bytes());
    raw[48..56].copy_from_slice(&(snapshot.data.len() as u64).to_le_bytes());
    let checksum = crc32c::crc32c_append(crc32c::crc32c(&raw[4..]), &snapshot.data);
    raw[0..4].copy_from_slice(&checksum.to_le_bytes());
    raw
}

/// Replace `group`'s snapshot file: written and synced under a temporary
/// name, then renamed into place. Durable once the caller syncs `dir`
/// (once for many files; see the module docs).
pub(crate) fn write_file<F: FileSystem>(
    dir: &Path,
    group: GroupId,
    snapshot: &Snapshot,
    log_lsn: u64,
    disk: &mut Disk<F>,
) -> Result<(), StorageError> {
    let path = dir.join(snapshot_file_name(group));
    let tmp = PathBuf::from(format!("{}{TMP_SUFFIX}", path.display()));
    let written = write_tmp(&tmp, group, snapshot, log_lsn, disk);
    if let Err(error) = written {
        let _ = disk.fs.remove_file(&tmp);
        return Err(error);
    }
    disk.fs.rename(&tmp, &path).map_err(|error| io_error("renaming a snapshot into place", &path, &error))
}

fn write_tmp<F: FileSystem>(
    tmp: &Path,
    group: GroupId,
    snapshot: &Snapshot,
    log_lsn: u64,
    disk: &mut Disk<F>,
) -> Result<(), StorageError> {
    let file = disk.open(tmp, OpenMode::CreateTruncate, "creating a snapshot file")?;
    let header = encode_header(group, snapshot, log_lsn);
    disk.write_at(&file, tmp, &header, 0, "writing a snapshot")?;
    disk.write_at(&file, tmp, &snapshot.data, SNAPSHOT_HEADER_SIZE_BYTES as u64, "writing a snapshot")?;
    disk.sync_data(&file, tmp, SyncOf::Snapshot)
}

/// Read and check the snapshot file at `path`, which must be `group`'s.
pub(crate) fn read<F: FileSystem>(
    path: &Path,
    group: GroupId,
    disk: &mut Disk<F>,
) -> Result<LoadedSnapshot, StorageError> {
    let corrupt = |reason: &str| StorageError::Corrupt {
        path: path.display().to_string(),
        offset: 0,
        reason: reason.to_string(),
    };
    let bytes = disk.read(path, "reading a snapshot")?;
    let header: &[u8; SNAPSHOT_HEADER_SIZE_BYTES] = bytes
        .get(..SNAPSHOT_HEADER_SIZE_BYTES)
        .and_then(|raw| raw.try_into().ok())
        .ok_or_else(|| corrupt("snapshot file shorter than its header"))?;
    if u32_at(header, 0) != crc32c::crc32c(&bytes[4..]) {
        return Err(corrupt("snapshot checksum mismatch"));
    }
    if header[4..12] != MAGIC || u16_at(header, 12) != FORMAT_VERSION {
        return Err(corrupt("not a snapshot file of this format version"));
    }
    if header[14..16] != [0, 0] || header[36..40] != [0; 4] {
        return Err(corrupt("reserved snapshot header bytes are not zero"));
    }
    if GroupId(u64_at(header, 16)) != group {
        return Err(corrupt("snapshot file holds another group's snapshot"));
    }
    if u64_at(header, 48) != (bytes.len() - SNAPSHOT_HEADER_SIZE_BYTES) as u64 {
        return Err(corrupt("snapshot data size does not match the file"));
    }
    let op = Op(u64_at(header, 24));
    let view = View(u32_at(header, 32));
    let log_lsn = u64_at(header, 40);
    let data = Bytes::from(bytes).slice(SNAPSHOT_HEADER_SIZE_BYTES..);
    Ok(LoadedSnapshot { snapshot: Snapshot { op, view, data }, log_lsn })
}

/// Durably remove `group`'s snapshot, if it has one.
pub(crate) fn remove<F: FileSystem>(dir: &Path, group: GroupId, disk: &mut Disk<F>) -> Result<(), StorageError> {
    let path = dir.join(snapshot_file_name(group));
    if disk.remove_file(&path, "removing a snapshot")? { disk.sync_dir(dir) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_names_roundtrip() {
        assert_eq!(parse_snapshot_file_name(&snapshot_file_name(GroupId(77))), Some(GroupId(77)));
        assert_eq!(parse_snapshot_file_name("snapshot-77.snap"), None);
        assert_eq!(parse_snapshot_file_name("snapshot-00000000000000000077.snap.tmp"), None);
    }
}
