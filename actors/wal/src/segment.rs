//! The shard's write-ahead log as a sequence of segment files: group commit,
//! rotation and removal.
//!
//! A segment is named after the LSN of its first record
//! (`wal-<20 digits>.seg`), starts with a synced header and holds whole
//! records only. Exactly one segment, the newest, is *active* (written to);
//! the others are *closed*.
//!
//! [`Wal::append`] writes a flush's records into one buffer, writes it with
//! one `pwrite` and syncs once. When a record would not fit the active
//! segment, the part written so far is synced, the active segment is closed
//! and a new one is created, with its header synced and the directory synced,
//! before any record goes into it. So a closed segment is always complete and
//! durable, and a damaged record in it is corruption, never a torn write; only
//! the active segment can end in a torn tail. Rotation costs three extra
//! syncs once per `segment_size_max_bytes` of log.
//!
//! K3: the active segment is kept written with zeros ahead of its records,
//! `preallocation_size_bytes` at a time (the zeros go with a flush's
//! records, under the same sync). A flush then overwrites bytes the file
//! already has, so its `fdatasync` writes data blocks only: when a write
//! grows the file, the sync must also commit the new size to the file
//! system's journal, which here costs about half again the sync's CPU time
//! and latency (docs/benchmarks.md). Zeros never decode as a record, so
//! recovery reads an all-zero end of a segment as the end of its log; a
//! closed segment's zeros are cut off when it is closed.
//!
//! A closed segment is removed once every entry record in it is at or below
//! its group's snapshot op (or its group was removed), oldest first, one
//! directory sync per removal, so that the surviving segments are always a
//! contiguous suffix of the log (see docs/storage.md for why the replay of a
//! suffix gives the same result).

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};

use cohort_core::storage::{StorageError, Superblock};
use cohort_messages::{GroupId, LogEntry, Op, View};

use super::disk::{Disk, FileSystem, OpenMode, SyncOf, io_error};
use super::format::{
    RECORD_HEADER_SIZE_BYTES, RecordHeader, RecordKind, SEGMENT_HEADER_SIZE_BYTES, SegmentHeader, encode_record,
    encode_segment_header, entry_record, entry_record_size_bytes, superblock_payload_size_bytes, superblock_record,
};
use super::snapshot::TMP_SUFFIX;

/// The file name of the segment whose first record has `base_lsn`.
pub(crate) fn segment_file_name(base_lsn: u64) -> String {
    format!("wal-{base_lsn:020}.seg")
}

/// The base LSN of a segment file name, if it is one.
pub(crate) fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("wal-")?.strip_suffix(".seg")?;
    if digits.len() != 20 || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Per segment: the highest entry op of each group that has entries in it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SegmentSummary {
    entry_op_max: HashMap<GroupId, Op>,
}

impl SegmentSummary {
    pub(crate) fn note_entry(&mut self, group: GroupId, op: Op) {
        let max = self.entry_op_max.entry(group).or_default();
        *max = (*max).max(op);
    }

    pub(crate) fn forget_group(&mut self, group: GroupId) {
        self.entry_op_max.remove(&group);
    }

    /// True if every entry in the segment is at or below its group's snapshot.
    fn covered_by(&self, snapshot_ops: &HashMap<GroupId, Op>) -> bool {
        self.entry_op_max.iter().all(|(group, op)| snapshot_ops.get(group).is_some_and(|snapshot| op <= snapshot))
    }
}

/// A closed segment: complete and durable.
#[derive(Debug)]
pub(crate) struct ClosedSegment {
    pub(crate) path: PathBuf,
    pub(crate) summary: SegmentSummary,
    /// The file's length on disk.
    pub(crate) size_bytes: u64,
}

/// The segment being written.
#[derive(Debug)]
pub(crate) struct ActiveSegment<F: FileSystem> {
    file: F::File,
    path: PathBuf,
    /// Where the next record goes: every byte below is the header or a whole record.
    len_bytes: u64,
    /// K3: the bytes from `len_bytes` up to here are zeros already written
    /// (the file may be longer, with zeros too, after a failed extension).
    allocated_bytes: u64,
    /// H2: the length the file was created with and keeps (0: none, it
    /// grows with its records). See [`ActiveSegment::create`].
    created_size_bytes: u64,
    /// H2: a failed write left bytes from `len_bytes` up to here that its
    /// zeroing could not clear: the next write zeroes them first.
    garbage_end_bytes: u64,
    summary: SegmentSummary,
}

impl<F: FileSystem> ActiveSegment<F> {
    /// Create a segment whose first record will have `base_lsn`; its header,
    /// its length and its directory entry are durable on return.
    ///
    /// H2: with preallocation on, the file is created `size_bytes` long
    /// (sparse: the zeros ahead of the records are still written as K3
    /// asks) and says so in its header, and it gets its name only once
    /// that is durable (written under a temporary name, synced, renamed,
    /// directory synced: the same two syncs as before). So a segment file
    /// is never shorter than its header says unless something cut it, and
    /// recovery can tell records lost to a cut from a torn tail.
    fn create(dir: &Path, base_lsn: u64, size_bytes: u64, disk: &mut Disk<F>) -> Result<Self, StorageError> {
        let path = dir.join(segment_file_name(base_lsn));
        let tmp = PathBuf::from(format!("{}{TMP_SUFFIX}", path.display()));
        let header = encode_segment_header(SegmentHeader { base_lsn, created_size_bytes: size_bytes });
        let file = disk.open(&tmp, OpenMode::CreateTruncate, "creating a log segment")?;
        let written = disk
            .write_at(&file, &tmp, &header, 0, "writing a segment header")
            .and_then(|()| match size_bytes {
                0 => Ok(()),
                _ => disk.set_len(&file, &tmp, size_bytes, "sizing a log segment"),
            })
            .and_then(|()| disk.sync_data(&file, &tmp, SyncOf::SegmentHeader));
        if let Err(error) = written {
            // Leave no half-made segment behind (recovery removes a
            // leftover temporary file too).
            let _ = disk.fs.remove_file(&tmp);
            return Err(error);
        }
        disk.fs.rename(&tmp, &path).map_err(|error| io_error("naming a log segment", &path, &error))?;
        disk.sync_dir(dir)?;
        disk.stats.segments_created += 1;
        let len_bytes = SEGMENT_HEADER_SIZE_BYTES as u64;
        Ok(Self {
            file,
            path,
            len_bytes,
            allocated_bytes: len_bytes,
            created_size_bytes: size_bytes,
            garbage_end_bytes: 0,
            summary: SegmentSummary::default(),
        })
    }

    /// Reopen the newest segment found by recovery, to append at
    /// `len_bytes`; the file holds zeros from there to `allocated_bytes`.
    pub(crate) fn reopen(
        path: PathBuf,
        len_bytes: u64,
        allocated_bytes: u64,
        created_size_bytes: u64,
        summary: SegmentSummary,
        disk: &mut Disk<F>,
    ) -> Result<Self, StorageError> {
        assert!(allocated_bytes >= len_bytes, "a segment's zeros start after its records");
        let file = disk.open(&path, OpenMode::Existing, "opening the active log segment")?;
        Ok(Self { file, path, len_bytes, allocated_bytes, created_size_bytes, garbage_end_bytes: 0, summary })
    }

    /// The file's length as written: its records, and the zeros ahead of
    /// them (none written when preallocation is off).
    fn size_bytes(&self) -> u64 {
        self.allocated_bytes.max(self.len_bytes)
    }

    /// The file's length: its records and zeros, or the length it was
    /// created with if larger (sparse, H2).
    fn file_len_bytes(&self) -> u64 {
        self.size_bytes().max(self.created_size_bytes)
    }
}

/// The zeros a preallocation writes, a piece at a time (static, so they
/// cost no memory of their own).
static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

/// One record to write.
#[derive(Copy, Clone, Debug)]
pub(crate) enum LogRecord<'a> {
    Entry(GroupId, &'a LogEntry),
    TruncateAfter(GroupId, Op),
    RemoveGroup(GroupId),
    Superblock(GroupId, &'a Superblock),
    ResetGroup(GroupId, &'a Superblock),
}

impl LogRecord<'_> {
    pub(crate) fn size_bytes(&self) -> u64 {
        match self {
            LogRecord::Entry(_, entry) => entry_record_size_bytes(entry),
            LogRecord::TruncateAfter(..) | LogRecord::RemoveGroup(_) => RECORD_HEADER_SIZE_BYTES as u64,
            LogRecord::Superblock(_, superblock) | LogRecord::ResetGroup(_, superblock) => {
                (RECORD_HEADER_SIZE_BYTES + superblock_payload_size_bytes(superblock)) as u64
            }
        }
    }

    fn encode(&self, buf: &mut Vec<u8>, lsn: u64, batch_lsn: u64) {
        let control =
            |group, op, kind| RecordHeader { payload_size: 0, lsn, batch_lsn, group, op, view: View(0), kind };
        match self {
            LogRecord::Entry(group, entry) => {
                let (header, fixed) = entry_record(*group, entry, lsn, batch_lsn);
                encode_record(buf, &header, &[&fixed, &entry.operation]);
            }
            LogRecord::TruncateAfter(group, op) => {
                encode_record(buf, &control(*group, *op, RecordKind::TruncateAfter), &[]);
            }
            LogRecord::RemoveGroup(group) => {
                encode_record(buf, &control(*group, Op(0), RecordKind::RemoveGroup), &[]);
            }
            LogRecord::Superblock(group, superblock) => {
                let (header, payload) = superblock_record(*group, superblock, lsn, batch_lsn);
                encode_record(buf, &header, &[&payload]);
            }
            LogRecord::ResetGroup(group, superblock) => {
                let (header, payload) = superblock_record(*group, superblock, lsn, batch_lsn);
                let header = RecordHeader { kind: RecordKind::ResetGroup, ..header };
                encode_record(buf, &header, &[&payload]);
            }
        }
    }
}

/// The log. See the module docs.
#[derive(Debug)]
pub(crate) struct Wal<F: FileSystem> {
    dir: PathBuf,
    active: ActiveSegment<F>,
    closed: VecDeque<ClosedSegment>,
    next_lsn: u64,
    segment_size_max_bytes: u64,
    segments_open_max: u32,
    preallocation_size_bytes: u64,
    buf: Vec<u8>,
}

/// The log's limits.
#[derive(Copy, Clone, Debug)]
pub(crate) struct WalLimits {
    pub(crate) segment_size_max_bytes: u64,
    pub(crate) segments_open_max: u32,
    /// Zeros kept written ahead of the records (0: none).
    pub(crate) preallocation_size_bytes: u64,
}

impl WalLimits {
    /// H2: the length a new segment file is created with: its whole size
    /// when preallocation is on, none (it grows) when it is off.
    pub(crate) fn created_size_bytes(&self) -> u64 {
        if self.preallocation_size_bytes == 0 { 0 } else { self.segment_size_max_bytes }
    }
}

impl<F: FileSystem> Wal<F> {
    /// The log as recovery left it: `closed` segments oldest first, the
    /// `active` one (or none yet: then one is created at `next_lsn`).
    pub(crate) fn new(
        dir: PathBuf,
        limits: WalLimits,
        closed: VecDeque<ClosedSegment>,
        active: Option<ActiveSegment<F>>,
        next_lsn: u64,
        disk: &mut Disk<F>,
    ) -> Result<Self, StorageError> {
        let active = match active {
            Some(active) => active,
            None => ActiveSegment::create(&dir, next_lsn, limits.created_size_bytes(), disk)?,
        };
        Ok(Self {
            dir,
            active,
            closed,
            next_lsn,
            segment_size_max_bytes: limits.segment_size_max_bytes,
            segments_open_max: limits.segments_open_max,
            preallocation_size_bytes: limits.preallocation_size_bytes,
            buf: Vec::new(),
        })
    }

    /// The LSN the next record will get; every record below it is durable.
    pub(crate) fn next_lsn(&self) -> u64 {
        self.next_lsn
    }

    /// How many segment files exist.
    pub(crate) fn segment_count(&self) -> usize {
        self.closed.len() + 1
    }

    /// The bytes the segment files take on disk: every closed segment, and
    /// the active one with the zeros written ahead of its records.
    pub(crate) fn size_bytes(&self) -> u64 {
        let closed: u64 = self.closed.iter().map(|segment| segment.size_bytes).sum();
        let size_bytes = closed + self.active.size_bytes();
        debug_assert!(size_bytes >= self.segment_count() as u64 * SEGMENT_HEADER_SIZE_BYTES as u64);
        size_bytes
    }

    /// Write `records` and make them durable with one sync (more only when a
    /// segment fills up). Returns how many of them are durable, and the error
    /// that stopped the rest: on `Full` the records after the count were not
    /// written (the active segment is cut back), so they may be retried.
    pub(crate) fn append<'a>(
        &mut self,
        records: impl IntoIterator<Item = LogRecord<'a>>,
        disk: &mut Disk<F>,
    ) -> (usize, Result<(), StorageError>) {
        let batch_lsn = self.next_lsn;
        let mut durable = 0usize;
        let mut buffered = 0usize;
        self.buf.clear();
        let records: Vec<LogRecord<'a>> = records.into_iter().collect();
        // K3: a flush that does not fit what is left of the active segment
        // starts a new one first, so that it costs one sync (a flush larger
        // than a whole segment is still split).
        let total: u64 = records.iter().map(LogRecord::size_bytes).sum();
        let active_has_records = self.active.len_bytes > SEGMENT_HEADER_SIZE_BYTES as u64;
        if self.active.len_bytes + total > self.segment_size_max_bytes
            && active_has_records
            && let Err(error) = self.rotate(disk)
        {
            return (0, Err(error));
        }
        for record in records {
            let size = record.size_bytes();
            let used = self.active.len_bytes + self.buf.len() as u64;
            let active_has_records = used > SEGMENT_HEADER_SIZE_BYTES as u64;
            if used + size > self.segment_size_max_bytes && active_has_records {
                if let Err(error) = self.write_buffer(buffered, disk) {
                    return (durable, Err(error));
                }
                durable += buffered;
                buffered = 0;
                if let Err(error) = self.rotate(disk) {
                    return (durable, Err(error));
                }
            }
            record.encode(&mut self.buf, batch_lsn + (durable + buffered) as u64, batch_lsn);
            if let LogRecord::Entry(group, entry) = record {
                self.active.summary.note_entry(group, entry.op);
            }
            buffered += 1;
        }
        if buffered > 0 {
            if let Err(error) = self.write_buffer(buffered, disk) {
                return (durable, Err(error));
            }
            durable += buffered;
        }
        (durable, Ok(()))
    }

    /// Write the buffer at the end of the active segment and sync it.
    fn write_buffer(&mut self, records: usize, disk: &mut Disk<F>) -> Result<(), StorageError> {
        let active = &mut self.active;
        let offset = active.len_bytes;
        // H2: what an earlier failed write left and could not zero goes
        // first, or this write would leave it past its own records.
        if active.garbage_end_bytes > offset {
            let (from, to) = (offset, active.garbage_end_bytes);
            write_zeros(disk, &active.file, &active.path, from, to, "zeroing what a failed log write left")?;
            active.garbage_end_bytes = 0;
        }
        if let Err(error) = disk.write_at(&active.file, &active.path, &self.buf, offset, "writing log records") {
            // Whatever part of it reached the file must go, so that the
            // next write continues a clean log (a retry after `Full` must
            // not leave garbage in the middle of the segment, nor records
            // of the failed write beyond it).
            let end = offset + self.buf.len() as u64;
            let created = active.created_size_bytes;
            // H2: within the length the segment was created with, the
            // failed write's bytes are overwritten with zeros in place (its
            // blocks are there: no new space), and only what lies past that
            // length is cut: the segment is never shorter than it was
            // created, not even for a moment a crash could keep. (Cutting
            // to the failed write's offset and sizing back after, a crash
            // that kept the cut without the sizing read as synced records
            // lost: seed 6002210, a member that lost nothing recovered as
            // one that had, beside one whose disk was replaced, and an
            // acknowledged write went with both.)
            if created > offset {
                if end > created {
                    disk.set_len(&active.file, &active.path, created, "cutting back a failed log write")?;
                }
                // Should the zeros fail too (the disk keeps failing), the
                // next write zeroes what is left first; a crash before
                // that finds a torn tail, which recovery zeroes.
                let zeroed = write_zeros(
                    disk,
                    &active.file,
                    &active.path,
                    offset,
                    end.min(created),
                    "zeroing a failed log write",
                );
                if zeroed.is_err() {
                    active.garbage_end_bytes = end.min(created);
                }
            } else {
                // Past the created length a cut never reads as a loss.
                disk.set_len(&active.file, &active.path, offset, "cutting back a failed log write")?;
            }
            active.allocated_bytes = offset;
            return Err(error);
        }
        self.preallocate(offset + self.buf.len() as u64, disk);
        let active = &mut self.active;
        disk.sync_data(&active.file, &active.path, SyncOf::Log)?;
        active.len_bytes += self.buf.len() as u64;
        disk.stats.records_written += records as u64;
        disk.stats.record_bytes_written += self.buf.len() as u64;
        self.next_lsn += records as u64;
        self.buf.clear();
        Ok(())
    }

    /// K3: once the records written so far reach past the zeros ahead of
    /// them, write `preallocation_size_bytes` more zeros (at most up to
    /// the segment's size), so that the flushes after this one do not grow
    /// the file. The caller's sync covers them. Best effort: a failed write
    /// of zeros (a full disk) leaves zeros or nothing past the records,
    /// never anything else, and the records are not affected.
    fn preallocate(&mut self, records_end: u64, disk: &mut Disk<F>) {
        let active = &mut self.active;
        if self.preallocation_size_bytes == 0 || records_end < active.allocated_bytes {
            return;
        }
        let end = records_end.saturating_add(self.preallocation_size_bytes).min(self.segment_size_max_bytes);
        active.allocated_bytes = records_end;
        let mut offset = records_end;
        while offset < end {
            let piece = (end - offset).min(ZEROS.len() as u64);
            let zeros = &ZEROS[..piece as usize];
            if disk.write_at(&active.file, &active.path, zeros, offset, "preallocating a log segment").is_err() {
                return;
            }
            offset += piece;
            active.allocated_bytes = offset;
            disk.stats.preallocated_bytes += piece;
        }
    }

    /// Close the active segment (already synced) and start a new one.
    fn rotate(&mut self, disk: &mut Disk<F>) -> Result<(), StorageError> {
        if self.segment_count() + 1 > self.segments_open_max as usize {
            return Err(StorageError::Full {
                operation: "starting a log segment: segments_open_max reached (segments go once every group with \
                            entries in them has a snapshot above those entries)",
                path: self.dir.display().to_string(),
            });
        }
        let limits = WalLimits {
            segment_size_max_bytes: self.segment_size_max_bytes,
            segments_open_max: self.segments_open_max,
            preallocation_size_bytes: self.preallocation_size_bytes,
        };
        let next = ActiveSegment::create(&self.dir, self.next_lsn, limits.created_size_bytes(), disk)?;
        let old = std::mem::replace(&mut self.active, next);
        // The closed segment's zeros are cut off: a closed segment holds
        // whole records only. Not synced: should the cut be lost, recovery
        // reads the zeros as the end of that segment's records, and the
        // next segment's base LSN shows that none is missing. Cut only once
        // the next segment is durable (H2): a newest segment shorter than
        // it was created is one whose end was lost.
        let mut size_bytes = old.size_bytes();
        if old.file_len_bytes() > old.len_bytes
            && disk.set_len(&old.file, &old.path, old.len_bytes, "cutting a closed segment's zeros").is_ok()
        {
            size_bytes = old.len_bytes;
        }
        self.closed.push_back(ClosedSegment { path: old.path, summary: old.summary, size_bytes });
        Ok(())
    }

    /// Sync the active segment (recovery does this once: after a process
    /// crash what it read may still be only in the page cache, and its cut of
    /// a torn tail must be durable before new records follow it).
    pub(crate) fn sync_active(&mut self, disk: &mut Disk<F>) -> Result<(), StorageError> {
        disk.sync_data(&self.active.file, &self.active.path, SyncOf::SegmentHeader)
    }

    /// A removed group's entries no longer keep any segment alive.
    pub(crate) fn forget_group(&mut self, group: GroupId) {
        self.active.summary.forget_group(group);
        for segment in &mut self.closed {
            segment.summary.forget_group(group);
        }
    }

    /// True if [`Wal::prune`] would remove a segment now.
    pub(crate) fn prunable(&self, snapshot_ops: &HashMap<GroupId, Op>) -> bool {
        self.closed.front().is_some_and(|oldest| oldest.summary.covered_by(snapshot_ops))
    }

    /// Remove the oldest closed segments whose entries are all covered by
    /// snapshots. Returns how many went. The superblocks whose newest copy is
    /// a record in the log must be checkpointed into the superblock file
    /// first (see `FileStorage`): a removed segment takes its records along.
    pub(crate) fn prune(
        &mut self,
        snapshot_ops: &HashMap<GroupId, Op>,
        disk: &mut Disk<F>,
    ) -> Result<usize, StorageError> {
        let mut removed = 0;
        while let Some(oldest) = self.closed.front() {
            if !oldest.summary.covered_by(snapshot_ops) {
                break;
            }
            // One directory sync per removal, in order, keeps the surviving
            // segments a contiguous suffix even if the removals reach the
            // disk out of order; the real file system does both on a thread
            // of its own (`remover`), off the next flush's way.
            disk.remove_in_order(&oldest.path, &self.dir)?;
            disk.stats.segments_removed += 1;
            self.closed.pop_front();
            removed += 1;
        }
        Ok(removed)
    }
}

/// Write zeros over `from..to` of `file`, 64 KiB at a time (a failed
/// write's bytes, a torn tail); `operation` names the work in an error.
pub(crate) fn write_zeros<F: FileSystem>(
    disk: &mut Disk<F>,
    file: &F::File,
    path: &Path,
    from: u64,
    to: u64,
    operation: &'static str,
) -> Result<(), StorageError> {
    let mut at = from;
    while at < to {
        let piece = (to - at).min(ZEROS.len() as u64);
        disk.write_at(file, path, &ZEROS[..piece as usize], at, operation)?;
        at += piece;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_roundtrip() {
        assert_eq!(segment_file_name(42), "wal-00000000000000000042.seg");
        assert_eq!(parse_segment_file_name(&segment_file_name(u64::MAX)), Some(u64::MAX));
        assert_eq!(parse_segment_file_name("wal-42.seg"), None);
        assert_eq!(parse_segment_file_name("wal-0000000000000000004x.seg"), None);
        assert_eq!(parse_segment_file_name("snapshot-00000000000000000001.snap"), None);
    }

    #[test]
    fn summary_is_covered_only_when_every_group_is() {
        let mut summary = SegmentSummary::default();
        summary.note_entry(GroupId(1), Op(5));
        summary.note_entry(GroupId(2), Op(3));
        let mut snapshots = HashMap::from([(GroupId(1), Op(5))]);
        assert!(!summary.covered_by(&snapshots));
        snapshots.insert(GroupId(2), Op(2));
        assert!(!summary.covered_by(&snapshots));
        snapshots.insert(GroupId(2), Op(3));
        assert!(summary.covered_by(&snapshots));
        summary.note_entry(GroupId(3), Op(1));
        assert!(!summary.covered_by(&snapshots));
        summary.forget_group(GroupId(3));
        assert!(summary.covered_by(&snapshots));
    }
}
