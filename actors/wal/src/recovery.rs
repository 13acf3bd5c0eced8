//! Recovery: read the shard directory back into per-group state, repair a
//! torn tail, and leave the files ready for writing.
//!
//! In order:
//! 1. List the directory; delete leftover `*.tmp` snapshot files.
//! 2. Read the superblock file and every snapshot file (a bad one is
//!    corruption: both are replaced atomically).
//! 3. Scan the segments oldest first, checking each header, that LSNs run on
//!    without a gap across segments, and each record's checksum; replay the
//!    records into per-group ordered maps (an Entry replaces its group's
//!    entries at its op and above, TruncateAfter drops the suffix,
//!    RemoveGroup drops the group).
//! 4. A bad record in a closed segment is corruption (closed segments were
//!    synced whole before the next one got a record). A bad record in the
//!    last segment at LSN `L` is a torn tail, unless a valid record *of a
//!    later flush* (one whose `batch_lsn` is above `L`) follows it: a later
//!    flush starts only after the earlier one's sync returned, so `L` was
//!    durable and has been damaged since. Corruption stops recovery with
//!    [`StorageError::Corrupt`] naming the file and offset; a torn tail is
//!    cut off.
//! 5. H2: records lost after they were synced are told from a torn tail.
//!    Every superblock and snapshot records the log position it was written
//!    after; if the log now ends before it, acknowledged records are
//!    missing. And with preallocation on, a segment is created at its whole
//!    size, recorded in its header, and named only once that is durable
//!    (`segment.rs`); a newest segment never shrinks afterwards (a torn tail
//!    is overwritten with zeros), so one shorter than its created size was
//!    cut, and unless a record header's worth of zeros still follows its
//!    last record, synced records may have gone with the cut. A crash
//!    cannot do that; only damage can. Either way the shard neither refuses
//!    to start (the data left is sound) nor starts silently: every group's
//!    superblock is marked recovering and made durable *before* the log is
//!    cut at the last good record, so its replicas take their primaries'
//!    logs before they vote or acknowledge again (H1's path), and the loss
//!    is reported ([`RecoveryReport::lost`], naming the file and offset).
//!    Damage inside the log (a closed segment, a later flush's record after
//!    a bad one) stays a refusal: it may be a bad read, and what follows it
//!    may be there. docs/storage.md lists what is not detectable.
//! 6. Finish removals a crash interrupted (a superblock or snapshot older
//!    than its group's last RemoveGroup record), sync what was read (after a
//!    process crash it may still be only in the page cache), and remove the
//!    segments snapshots made unnecessary.
//! 7. A superblock file that is missing or has no valid header while
//!    segments or snapshots exist, or more slots with an unreadable only
//!    copy than the log holds superblocks the file lacks (each could be a
//!    torn first checkpoint), is corruption: never an empty start (T5).
//! 8. A group's superblock is the newer of the superblock file's copy and
//!    the last Superblock record of the log (a record at or after the copy's
//!    `log_lsn` was written after it); the ones newer in the log are
//!    checkpointed into the file before any segment is removed.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};

use cohort_core::storage::{AppendCursor, Recovered, RecoveredGroup, StorageError, Superblock};
use cohort_messages::{GroupId, LogEntry, Op};

use super::config::{FileStorageConfig, SEGMENT_SIZE_LIMIT_BYTES};
use super::disk::{Disk, FileSystem, OpenMode, error_of, io_error};
use super::format::{
    DecodedRecord, RECORD_HEADER_SIZE_BYTES, RecordFault, RecordKind, SEGMENT_HEADER_SIZE_BYTES, decode_entry,
    decode_record, decode_segment_header, decode_superblock,
};
use super::segment::{
    ActiveSegment, ClosedSegment, SegmentSummary, Wal, WalLimits, parse_segment_file_name, write_zeros,
};
use super::snapshot::{self, LoadedSnapshot, TMP_SUFFIX, parse_snapshot_file_name};
use super::superblock::{LoadedSuperblock, SuperblockFile};

/// What recovery found and did, for logs and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segment files read.
    pub segments_scanned: usize,
    /// Log records replayed.
    pub records_replayed: u64,
    /// Bytes cut off the end of the last segment (a torn tail).
    pub torn_tail_bytes: u64,
    /// Zeros found after the last record of segments: written ahead of the
    /// records (K3), not a torn tail; the active segment keeps them.
    pub preallocated_tail_bytes: u64,
    /// The offset the last segment was cut at, if it was.
    pub torn_tail_offset: Option<u64>,
    /// True if the last segment's creation had been interrupted and it was deleted.
    pub torn_segment_removed: bool,
    /// Group removals a crash had interrupted and recovery completed.
    pub removals_completed: usize,
    /// Leftover temporary files deleted.
    pub tmp_files_removed: usize,
    /// Segments removed because snapshots cover them.
    pub segments_removed: usize,
    /// H1: the directory held no storage: this recovery created it.
    pub formatted: bool,
    /// H2: records that had been synced are missing (see the module
    /// docs); every group was marked recovering before the log was cut.
    pub lost: Option<LostRecords>,
}

/// H2: where synced records were found missing, and why recovery knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostRecords {
    /// The segment (or the directory, if no segment is left).
    pub path: String,
    /// The offset the log now ends at: everything after it is gone.
    pub offset: u64,
    /// The LSN the log now ends before.
    pub next_lsn: u64,
    /// How recovery knows the records had been synced.
    pub reason: String,
}

impl std::fmt::Display for LostRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "synced log records lost in {} after offset {} (the log now ends before LSN {}): {}",
            self.path, self.offset, self.next_lsn, self.reason
        )
    }
}

/// Everything the file storage needs after recovery.
pub(crate) struct Recovery<F: FileSystem> {
    pub(crate) recovered: Recovered,
    pub(crate) wal: Wal<F>,
    pub(crate) superblocks: SuperblockFile<F>,
    pub(crate) snapshot_ops: HashMap<GroupId, Op>,
    pub(crate) cursors: HashMap<GroupId, AppendCursor>,
    pub(crate) report: RecoveryReport,
}

/// The files of a shard directory.
#[derive(Default)]
struct Listing {
    segments: Vec<(u64, PathBuf)>,
    snapshots: Vec<(GroupId, PathBuf)>,
}

/// One scanned segment.
struct Scanned {
    path: PathBuf,
    /// The length of its valid part.
    valid_len_bytes: u64,
    /// The file's length: past the valid part, zeros (K3, preallocated)
    /// or a torn tail that recovery cuts off.
    file_len_bytes: u64,
    /// H2: the length it was created with (0: not known).
    created_size_bytes: u64,
    summary: SegmentSummary,
}

/// How the last segment ends.
enum Tail {
    Clean,
    /// Cut the last segment at this offset.
    Cut {
        offset: u64,
        file_len_bytes: u64,
    },
    /// The last segment has no valid header and no records: delete it.
    TornCreation(PathBuf),
    /// H2: the last segment was cut below its header, though segments are
    /// named only once their header is durable: delete it, and report.
    Headless(PathBuf),
}

/// The replayed log.
#[derive(Default)]
struct Replay {
    logs: HashMap<GroupId, BTreeMap<Op, LogEntry>>,
    /// Each group's last Superblock record, with its LSN.
    superblocks: HashMap<GroupId, (Superblock, u64)>,
    removed_at_lsn: HashMap<GroupId, u64>,
    /// Entries at or below these ops are not kept (the group's snapshot).
    snapshot_ops: HashMap<GroupId, (Op, u64)>,
    segments: Vec<Scanned>,
    next_lsn: Option<u64>,
    records: u64,
    /// Zeros found past the last record of segments (K3).
    zeros_bytes: u64,
}

/// Recover the shard directory `dir`.
pub(crate) fn run<F: FileSystem>(
    dir: &Path,
    config: &FileStorageConfig,
    disk: &mut Disk<F>,
) -> Result<Recovery<F>, StorageError> {
    let mut report = RecoveryReport::default();
    let listing = list(dir, disk, &mut report)?;
    let log_exists = !listing.segments.is_empty() || !listing.snapshots.is_empty();
    let (mut superblocks, mut loaded_superblocks, formatted) =
        SuperblockFile::open(dir, config.groups_max, log_exists, disk)?;
    report.formatted = formatted;
    let mut snapshots = HashMap::new();
    for (group, path) in &listing.snapshots {
        snapshots.insert(*group, snapshot::read(path, *group, disk)?);
    }
    let mut replay = Replay {
        snapshot_ops: snapshots.iter().map(|(group, loaded)| (*group, (loaded.snapshot.op, loaded.log_lsn))).collect(),
        ..Replay::default()
    };
    let tail = replay.scan(&listing.segments, disk)?;
    report.segments_scanned = replay.segments.len();
    report.records_replayed = replay.records;
    report.preallocated_tail_bytes = replay.zeros_bytes;
    let torn_base = match &tail {
        Tail::TornCreation(path) | Tail::Headless(path) => {
            path.file_name().and_then(|name| name.to_str()).and_then(parse_segment_file_name)
        }
        _ => None,
    };
    let next_lsn = replay.next_lsn.or(torn_base).unwrap_or(1);
    let lost = lost_by_cut(&replay, &tail, next_lsn)
        .or_else(|| lost_before_checkpoint(dir, &replay, &tail, next_lsn, &loaded_superblocks, &snapshots));
    let log_only_groups = replay.superblocks.keys().filter(|group| !loaded_superblocks.contains_key(group)).count();
    superblocks.check_unreadable(log_only_groups)?;
    finish_removals(
        dir,
        &replay,
        &mut superblocks,
        &mut loaded_superblocks,
        &mut snapshots,
        next_lsn,
        disk,
        &mut report,
    )?;
    let mut logged = newer_in_log(&mut replay, &mut loaded_superblocks);
    if lost.is_some() {
        // H2: every group recovers, durably, before the log is cut.
        mark_recovering(dir, &mut loaded_superblocks, &mut snapshots, &mut superblocks, next_lsn, disk)?;
        logged.clear();
    }
    repair_tail(dir, &mut replay, tail, disk, &mut report)?;
    let mut recovered = assemble(&mut replay, &loaded_superblocks, &snapshots);
    recovered.formatted = formatted;
    recovered.lost_synced_records = lost.is_some();
    report.lost = lost;
    let cursors = AppendCursor::all_recovered(&recovered).into_iter().collect();
    let snapshot_ops: HashMap<GroupId, Op> =
        snapshots.iter().map(|(group, loaded)| (*group, loaded.snapshot.op)).collect();
    let mut wal = open_wal(dir, config, replay.segments, next_lsn, disk)?;
    wal.sync_active(disk)?;
    if logged.is_empty() {
        superblocks.sync(disk)?;
    } else {
        // The checkpoint (its write syncs the file).
        superblocks.write(&logged, next_lsn, disk)?;
    }
    disk.sync_dir(dir)?;
    report.segments_removed = wal.prune(&snapshot_ops, disk)?;
    Ok(Recovery { recovered, wal, superblocks, snapshot_ops, cursors, report })
}

/// List the directory (creating it if needed) and delete leftover temporaries.
fn list<F: FileSystem>(dir: &Path, disk: &mut Disk<F>, report: &mut RecoveryReport) -> Result<Listing, StorageError> {
    if !disk.fs.exists(dir) {
        disk.fs.create_dir_all(dir).map_err(|error| error_of("creating the storage directory", dir, &error))?;
        if let Some(parent) = dir.parent().filter(|parent| !parent.as_os_str().is_empty()) {
            disk.sync_dir(parent)?;
        }
    }
    let mut listing = Listing::default();
    let names = disk.fs.list_dir(dir).map_err(|error| io_error("listing the storage directory", dir, &error))?;
    for name in names {
        let path = dir.join(&name);
        if let Some(base_lsn) = parse_segment_file_name(&name) {
            listing.segments.push((base_lsn, path));
        } else if let Some(group) = parse_snapshot_file_name(&name) {
            listing.snapshots.push((group, path));
        } else if name.ends_with(TMP_SUFFIX) {
            disk.fs
                .remove_file(&path)
                .map_err(|error| io_error("removing a leftover temporary file", &path, &error))?;
            report.tmp_files_removed += 1;
        }
    }
    listing.segments.sort_by_key(|(base_lsn, _)| *base_lsn);
    Ok(listing)
}

fn corrupt(path: &Path, offset: u64, reason: String) -> StorageError {
    StorageError::Corrupt { path: path.display().to_string(), offset, reason }
}

impl Replay {
    /// Scan every segment; returns how the last one ends.
    fn scan<F: FileSystem>(&mut self, segments: &[(u64, PathBuf)], disk: &mut Disk<F>) -> Result<Tail, StorageError> {
        for (index, (base_lsn, path)) in segments.iter().enumerate() {
            let is_last = index + 1 == segments.len();
            let length = disk.fs.len(path).map_err(|error| io_error("reading a segment", path, &error))?;
            if length > SEGMENT_SIZE_LIMIT_BYTES {
                return Err(corrupt(path, 0, format!("segment of {length} bytes exceeds SEGMENT_SIZE_LIMIT_BYTES")));
            }
            let bytes = disk.read(path, "reading a segment")?;
            // A segment of this version with preallocation on is named
            // only once its header is durable: one this short was cut (H2).
            let named_when_whole = self.segments.last().is_some_and(|segment| segment.created_size_bytes > 0);
            let header = match decode_segment_header(&bytes) {
                Ok(header) if header.base_lsn == *base_lsn => header,
                Ok(header) => {
                    let found = header.base_lsn;
                    return Err(corrupt(path, 0, format!("segment header says base LSN {found}, the name {base_lsn}")));
                }
                Err(_) if is_last && bytes.len() <= SEGMENT_HEADER_SIZE_BYTES && !named_when_whole => {
                    return Ok(Tail::TornCreation(path.clone()));
                }
                Err(_) if is_last && bytes.len() <= SEGMENT_HEADER_SIZE_BYTES => {
                    return Ok(Tail::Headless(path.clone()));
                }
                Err(reason) => return Err(corrupt(path, 0, reason.to_string())),
            };
            let expected = *self.next_lsn.get_or_insert(*base_lsn);
            if expected != *base_lsn {
                let reason =
                    format!("segment starts at LSN {base_lsn} but the log before it ends before LSN {expected}");
                return Err(corrupt(path, 0, reason));
            }
            self.segments.push(Scanned {
                path: path.clone(),
                valid_len_bytes: 0,
                file_len_bytes: bytes.len() as u64,
                created_size_bytes: header.created_size_bytes,
                summary: SegmentSummary::default(),
            });
            if let Some(tail) = self.scan_records(&bytes, path, is_last)? {
                return Ok(tail);
            }
        }
        Ok(Tail::Clean)
    }

    /// Replay one segment's records; returns the tail if this segment ends in one.
    fn scan_records(&mut self, bytes: &[u8], path: &Path, is_last: bool) -> Result<Option<Tail>, StorageError> {
        let mut offset = SEGMENT_HEADER_SIZE_BYTES;
        let mut expected = self.next_lsn.unwrap_or(1);
        while offset < bytes.len() {
            let fault = match decode_record(bytes, offset) {
                Ok(record) if record.header.lsn == expected => match self.apply(&record) {
                    Ok(()) => {
                        offset += record.size_bytes();
                        expected += 1;
                        self.next_lsn = Some(expected);
                        self.records += 1;
                        continue;
                    }
                    Err(fault) => fault,
                },
                Ok(_) => RecordFault::Invalid("record LSN out of sequence"),
                Err(fault) => fault,
            };
            if bytes[offset..].iter().all(|byte| *byte == 0) {
                // K3: the zeros written ahead of the records, never a record
                // (a record's checksum and batch LSN are never zero): the
                // end of this segment's log. In a closed segment they are
                // zeros whose cut at closing was lost; the next segment's
                // base LSN is checked against the records before them.
                self.set_valid_len(offset);
                self.zeros_bytes += (bytes.len() - offset) as u64;
                return Ok(None);
            }
            if !is_last {
                return Err(corrupt(path, offset as u64, format!("{fault} in a closed (fully synced) segment")));
            }
            if let Some(later) = later_flush_record(bytes, offset + 1, expected) {
                let reason = format!(
                    "{fault} at LSN {expected}, yet a record of a later flush follows at offset {later}: \
                     synced data was damaged"
                );
                return Err(corrupt(path, offset as u64, reason));
            }
            self.set_valid_len(offset);
            return Ok(Some(Tail::Cut { offset: offset as u64, file_len_bytes: bytes.len() as u64 }));
        }
        self.set_valid_len(offset);
        Ok(None)
    }

    fn set_valid_len(&mut self, offset: usize) {
        if let Some(segment) = self.segments.last_mut() {
            segment.valid_len_bytes = offset as u64;
        }
    }

    fn apply(&mut self, record: &DecodedRecord<'_>) -> Result<(), RecordFault> {
        let header = &record.header;
        let group = header.group;
        match header.kind {
            RecordKind::Entry => {
                let entry = decode_entry(record)?;
                if let Some(segment) = self.segments.last_mut() {
                    segment.summary.note_entry(group, entry.op);
                }
                let log = self.logs.entry(group).or_default();
                log.split_off(&entry.op);
                let snapshot_op = self.snapshot_ops.get(&group).map_or(Op(0), |(op, _)| *op);
                if entry.op > snapshot_op {
                    log.insert(entry.op, entry);
                }
            }
            RecordKind::TruncateAfter => {
                if let (Some(log), Some(first_dropped)) = (self.logs.get_mut(&group), header.op.get().checked_add(1)) {
                    log.split_off(&Op(first_dropped));
                }
            }
            RecordKind::Superblock => {
                let superblock = decode_superblock(record)?;
                self.superblocks.insert(group, (superblock, header.lsn));
            }
            RecordKind::RemoveGroup | RecordKind::ResetGroup => {
                self.logs.remove(&group);
                self.superblocks.remove(&group);
                if header.kind == RecordKind::ResetGroup {
                    // The removal and the superblock that outlives it.
                    let superblock = decode_superblock(record)?;
                    self.superblocks.insert(group, (superblock, header.lsn));
                }
                self.removed_at_lsn.insert(group, header.lsn);
                for segment in &mut self.segments {
                    segment.summary.forget_group(group);
                }
                // A snapshot saved before the removal no longer hides entries.
                if self.snapshot_ops.get(&group).is_some_and(|(_, log_lsn)| *log_lsn <= header.lsn) {
                    self.snapshot_ops.remove(&group);
                }
            }
        }
        Ok(())
    }
}

/// The offset of a valid record at or after `from` written by a flush that
/// started after LSN `lsn`, if there is one.
fn later_flush_record(bytes: &[u8], from: usize, lsn: u64) -> Option<usize> {
    let last_start = bytes.len().checked_sub(RECORD_HEADER_SIZE_BYTES)?;
    (from..=last_start).find(|&offset| {
        let Some(raw) = bytes.get(offset..offset + RECORD_HEADER_SIZE_BYTES) else { return false };
        let field = |at: usize| raw.get(at..at + 8).and_then(|b| b.try_into().ok()).map_or(0, u64::from_le_bytes);
        let (record_lsn, batch_lsn) = (field(8), field(16));
        // Cheap filters first; the checksum decides.
        batch_lsn > lsn
            && batch_lsn <= record_lsn
            && decode_record(bytes, offset).is_ok_and(|record| record.header.batch_lsn > lsn)
    })
}

/// H2: the newest segment was cut, if it is shorter than it was created
/// (a segment keeps its created length: see `segment.rs`) and the cut
/// may have taken records: unless at least a record header's worth of
/// zeros (a record's checksum and batch LSN are never zero) still follows
/// the last record, in which case the cut took only zeros.
fn lost_by_cut(replay: &Replay, tail: &Tail, next_lsn: u64) -> Option<LostRecords> {
    if let Tail::Headless(path) = tail {
        let reason = "the newest segment is shorter than its header, though a segment is named only once its \
                      header is durable: it was cut"
            .to_string();
        return Some(LostRecords { path: path.display().to_string(), offset: 0, next_lsn, reason });
    }
    let last = replay.segments.last()?;
    if last.created_size_bytes == 0 || last.file_len_bytes >= last.created_size_bytes {
        return None;
    }
    let zeros_after_bytes = last.file_len_bytes - last.valid_len_bytes;
    if matches!(tail, Tail::Clean) && zeros_after_bytes >= RECORD_HEADER_SIZE_BYTES as u64 {
        return None;
    }
    let reason = format!(
        "the newest segment is {} bytes long but was created {} bytes long (durably, before it got its name): \
         it was cut, and records synced after offset {} may be gone",
        last.file_len_bytes, last.created_size_bytes, last.valid_len_bytes
    );
    Some(LostRecords { path: last.path.display().to_string(), offset: last.valid_len_bytes, next_lsn, reason })
}

/// H2: the log ends before a position a superblock or snapshot was written
/// after (they are written only after the log was synced): acknowledged
/// records are missing.
fn lost_before_checkpoint(
    dir: &Path,
    replay: &Replay,
    tail: &Tail,
    next_lsn: u64,
    superblocks: &HashMap<GroupId, LoadedSuperblock>,
    snapshots: &HashMap<GroupId, LoadedSnapshot>,
) -> Option<LostRecords> {
    let newest_superblock = superblocks.iter().map(|(group, loaded)| (loaded.log_lsn, *group, "superblock")).max();
    let newest_snapshot = snapshots.iter().map(|(group, loaded)| (loaded.log_lsn, *group, "snapshot")).max();
    let (log_lsn, group, what) = newest_superblock.max(newest_snapshot)?;
    if log_lsn <= next_lsn {
        return None;
    }
    let (path, offset) = match (replay.segments.last(), tail) {
        (Some(segment), Tail::Cut { offset, .. }) => (segment.path.clone(), *offset),
        (Some(segment), _) => (segment.path.clone(), segment.valid_len_bytes),
        (None, _) => (dir.to_path_buf(), 0),
    };
    let reason = format!(
        "the {what} of {group} was written after LSN {} was durable: acknowledged log records are missing",
        log_lsn - 1
    );
    Some(LostRecords { path: path.display().to_string(), offset, next_lsn, reason })
}

/// H2: mark every group's superblock recovering and make it durable (one
/// write and sync of the superblock file), so that no replica of the
/// shard votes or acknowledges until it took its primary's log: whatever
/// it acknowledged may be among the lost records. Snapshots written after
/// the lost records are rewritten as written at `next_lsn`, where the log
/// now goes on, so that positions keep meaning "written after".
fn mark_recovering<F: FileSystem>(
    dir: &Path,
    loaded: &mut HashMap<GroupId, LoadedSuperblock>,
    snapshots: &mut HashMap<GroupId, LoadedSnapshot>,
    superblocks: &mut SuperblockFile<F>,
    next_lsn: u64,
    disk: &mut Disk<F>,
) -> Result<(), StorageError> {
    let mut marked = BTreeMap::new();
    for (group, copy) in loaded.iter_mut() {
        copy.superblock.recovering = true;
        // What the log holds at or below the commit point may be older
        // versions of entries the lost records replaced (a view change's
        // adoption rewrites uncommitted ops): only the snapshot is known to
        // be applied state. The replica takes the rest from its primary.
        let applied = snapshots.get(group).map_or(Op(0), |loaded| loaded.snapshot.op);
        copy.superblock.commit = copy.superblock.commit.min(applied);
        copy.log_lsn = next_lsn;
        marked.insert(*group, copy.superblock.clone());
    }
    superblocks.write(&marked, next_lsn, disk)?;
    let mut rewritten = false;
    for (group, copy) in snapshots.iter_mut().filter(|(_, copy)| copy.log_lsn > next_lsn) {
        snapshot::write_file(dir, *group, &copy.snapshot, next_lsn, disk)?;
        copy.log_lsn = next_lsn;
        rewritten = true;
    }
    if rewritten {
        disk.sync_dir(dir)?;
    }
    assert!(loaded.values().all(|copy| copy.superblock.recovering), "H2: every group recovers");
    Ok(())
}

/// Cut a torn tail off, or delete a segment whose creation was interrupted.
/// A segment that keeps its created length (H2) keeps it: its torn tail is
/// overwritten with zeros (synced with the rest at the end of recovery;
/// should that be lost, the tail is found torn again), and a cut one gets
/// its length back (after `mark_recovering`, so that a crash in between
/// still finds the loss recorded).
fn repair_tail<F: FileSystem>(
    dir: &Path,
    replay: &mut Replay,
    tail: Tail,
    disk: &mut Disk<F>,
    report: &mut RecoveryReport,
) -> Result<(), StorageError> {
    match tail {
        Tail::Clean => restore_created_size(replay, disk),
        Tail::Cut { offset, file_len_bytes } => {
            let Some(segment) = replay.segments.last_mut() else { return Ok(()) };
            let file = disk
                .fs
                .open(&segment.path, OpenMode::Existing)
                .map_err(|error| io_error("opening a segment to cut its torn tail", &segment.path, &error))?;
            let created = segment.created_size_bytes;
            if created > offset {
                write_zeros(disk, &file, &segment.path, offset, file_len_bytes.min(created), "zeroing a torn tail")?;
                if file_len_bytes > created {
                    disk.set_len(&file, &segment.path, created, "cutting a torn tail")?;
                }
                segment.file_len_bytes = file_len_bytes.min(created);
            } else {
                disk.set_len(&file, &segment.path, offset, "cutting a torn tail")?;
                segment.file_len_bytes = offset;
            }
            report.torn_tail_bytes = file_len_bytes - offset;
            report.torn_tail_offset = Some(offset);
            restore_created_size(replay, disk)
        }
        Tail::TornCreation(path) | Tail::Headless(path) => {
            disk.fs.remove_file(&path).map_err(|error| io_error("removing a torn segment", &path, &error))?;
            report.torn_segment_removed = true;
            disk.sync_dir(dir)
        }
    }
}

/// H2: a newest segment shorter than it was created (cut, or its torn
/// tail just cut off) gets its created length back, zeros past its
/// records, so that only a new cut shows next time.
fn restore_created_size<F: FileSystem>(replay: &mut Replay, disk: &mut Disk<F>) -> Result<(), StorageError> {
    let Some(segment) = replay.segments.last_mut() else { return Ok(()) };
    if segment.file_len_bytes >= segment.created_size_bytes {
        return Ok(());
    }
    let file = disk
        .fs
        .open(&segment.path, OpenMode::Existing)
        .map_err(|error| io_error("opening a cut segment", &segment.path, &error))?;
    disk.set_len(&file, &segment.path, segment.created_size_bytes, "sizing a log segment")?;
    segment.file_len_bytes = segment.created_size_bytes;
    Ok(())
}

/// Complete removals a crash interrupted: a superblock or snapshot written
/// before its group's last RemoveGroup record belongs to the removed group.
#[allow(clippy::too_many_arguments)]
fn finish_removals<F: FileSystem>(
    dir: &Path,
    replay: &Replay,
    superblocks: &mut SuperblockFile<F>,
    loaded_superblocks: &mut HashMap<GroupId, LoadedSuperblock>,
    snapshots: &mut HashMap<GroupId, LoadedSnapshot>,
    next_lsn: u64,
    disk: &mut Disk<F>,
    report: &mut RecoveryReport,
) -> Result<(), StorageError> {
    for (group, removed_at_lsn) in &replay.removed_at_lsn {
        let mut completed = false;
        if loaded_superblocks.get(group).is_some_and(|loaded| loaded.log_lsn <= *removed_at_lsn) {
            superblocks.remove(*group, next_lsn, disk)?;
            loaded_superblocks.remove(group);
            completed = true;
        }
        if snapshots.get(group).is_some_and(|loaded| loaded.log_lsn <= *removed_at_lsn) {
            snapshot::remove(dir, *group, disk)?;
            snapshots.remove(group);
            completed = true;
        }
        report.removals_completed += usize::from(completed);
    }
    Ok(())
}

/// Replace the file's superblocks with the log's where the log's are newer;
/// returns those (they are in the log only, until checkpointed).
fn newer_in_log(replay: &mut Replay, loaded: &mut HashMap<GroupId, LoadedSuperblock>) -> BTreeMap<GroupId, Superblock> {
    let mut logged = BTreeMap::new();
    for (group, (superblock, lsn)) in std::mem::take(&mut replay.superblocks) {
        if loaded.get(&group).is_none_or(|copy| lsn >= copy.log_lsn) {
            loaded.insert(group, LoadedSuperblock { superblock: superblock.clone(), log_lsn: lsn });
            logged.insert(group, superblock);
        }
    }
    logged
}

/// Put each group's parts together.
fn assemble(
    replay: &mut Replay,
    superblocks: &HashMap<GroupId, LoadedSuperblock>,
    snapshots: &HashMap<GroupId, LoadedSnapshot>,
) -> Recovered {
    let mut groups: Vec<GroupId> =
        replay.logs.keys().chain(superblocks.keys()).chain(snapshots.keys()).copied().collect();
    groups.sort_unstable();
    groups.dedup();
    let groups = groups
        .into_iter()
        .filter_map(|group| {
            let log = replay.logs.remove(&group).unwrap_or_default();
            RecoveredGroup::from_parts(
                superblocks.get(&group).map(|loaded| loaded.superblock.clone()),
                snapshots.get(&group).map(|loaded| loaded.snapshot.clone()),
                log.into_values(),
            )
            .map(|recovered| (group, recovered))
        })
        .collect();
    Recovered { groups, ..Recovered::default() }
}

/// Open the log for writing: the last surviving segment is the active one.
fn open_wal<F: FileSystem>(
    dir: &Path,
    config: &FileStorageConfig,
    mut segments: Vec<Scanned>,
    next_lsn: u64,
    disk: &mut Disk<F>,
) -> Result<Wal<F>, StorageError> {
    let limits = WalLimits {
        segment_size_max_bytes: config.segment_size_max_bytes,
        segments_open_max: config.segments_open_max,
        preallocation_size_bytes: config.preallocation_size_bytes,
    };
    let active = match segments.pop() {
        Some(last) => {
            // K3: the zeros written ahead of the records. In a segment
            // created at its full length (H2) the rest may be a hole: none
            // are known, and the next flush writes them again.
            let allocated = match last.created_size_bytes {
                0 => last.file_len_bytes.min(config.segment_size_max_bytes).max(last.valid_len_bytes),
                _ => last.valid_len_bytes,
            };
            let created = last.created_size_bytes;
            Some(ActiveSegment::reopen(last.path, last.valid_len_bytes, allocated, created, last.summary, disk)?)
        }
        None => None,
    };
    let closed: VecDeque<ClosedSegment> = segments
        .into_iter()
        .map(|scanned| ClosedSegment {
            path: scanned.path,
            summary: scanned.summary,
            size_bytes: scanned.file_len_bytes,
        })
        .collect();
    Wal::new(dir.to_path_buf(), limits, closed, active, next_lsn, disk)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{RecordHeader, encode_record};
    use cohort_messages::View;

    fn control(lsn: u64, batch_lsn: u64) -> Vec<u8> {
        let header = RecordHeader {
            payload_size: 0,
            lsn,
            batch_lsn,
            group: GroupId(1),
            op: Op(1),
            view: View(0),
            kind: RecordKind::TruncateAfter,
        };
        let mut buf = Vec::new();
        encode_record(&mut buf, &header, &[]);
        buf
    }

    #[test]
    fn later_flush_record_is_found_only_for_a_later_flush() {
        let mut bytes = vec![0xAB; 13];
        bytes.extend(control(12, 10));
        assert_eq!(later_flush_record(&bytes, 0, 11), None, "same flush as LSN 11");
        let mut later = vec![0xAB; 13];
        later.extend(control(14, 14));
        assert_eq!(later_flush_record(&later, 0, 11), Some(13));
        assert_eq!(later_flush_record(&later, 14, 11), None);
        assert_eq!(later_flush_record(&[], 0, 1), None);
    }

    #[test]
    fn zero_fields_are_no_evidence() {
        assert_eq!(later_flush_record(&[0u8; 4096], 0, 0), None);
    }
}
