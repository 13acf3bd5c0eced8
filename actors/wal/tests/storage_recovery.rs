//! Recovery of the file storage from damaged files (torn writes, bit flips,
//! lost superblock or snapshot updates), the environment's failures (full
//! disk, failed sync) and the limits.

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use cohort_core::storage::conformance::{entry, snapshot, superblock};
use cohort_core::storage::{Recovered, Storage, StorageError};
use cohort_messages::{GroupId, LogEntry, Op};
use cohort_wal::{FileStorage, FileStorageConfig, InjectedFault, SUPERBLOCK_FILE_NAME};

use common::{
    copy_dir, exact_roomy_config, exact_small_config, open_recover, roomy_config, segments, small_segments_config,
    temp_dir,
};

/// Payload tag giving 40-byte operations (112-byte records).
const TAG: u64 = 40;

fn ok(result: Result<(), StorageError>) {
    if let Err(error) = result {
        panic!("storage call failed: {error}");
    }
}

fn entries_of(recovered: &Recovered, group: u64) -> Vec<LogEntry> {
    recovered.groups.get(&GroupId(group)).map(|state| state.entries.clone()).unwrap_or_default()
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).expect("stat").len()
}

fn flip_bit(path: &Path, offset: u64, bit: u8) {
    let file = OpenOptions::new().read(true).write(true).open(path).expect("open for damage");
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, offset).expect("read a byte");
    byte[0] ^= 1 << bit;
    file.write_all_at(&byte, offset).expect("write a byte");
}

fn write_bytes(path: &Path, offset: u64, bytes: &[u8]) {
    let file = OpenOptions::new().write(true).open(path).expect("open for damage");
    file.write_all_at(bytes, offset).expect("write");
}

fn cut(path: &Path, len: u64) {
    OpenOptions::new().write(true).open(path).expect("open").set_len(len).expect("cut");
}

/// A log of `count` entries of group 1, one flush each. Returns the offsets
/// at which each record starts in the (single) segment, plus its end.
fn one_record_per_flush(dir: &Path, count: u64) -> Vec<u64> {
    let (mut storage, _) = open_recover(dir, &exact_roomy_config());
    let segment = segments(dir).pop().expect("a segment");
    let mut offsets = vec![file_len(&segment)];
    for op in 1..=count {
        ok(storage.append(GroupId(1), &entry(op, 1, TAG)));
        ok(storage.flush());
        offsets.push(file_len(&segment));
    }
    offsets
}

fn expect_corrupt(dir: &Path, config: &FileStorageConfig) -> (String, u64, String) {
    let mut storage = FileStorage::open(dir, config.clone()).expect("valid config");
    match storage.recover() {
        Err(StorageError::Corrupt { path, offset, reason }) => {
            assert!(storage.failure().is_some(), "a Corrupt recovery must stop the storage");
            (path, offset, reason)
        }
        Err(other) => panic!("expected Corrupt, got {other}"),
        Ok(recovered) => panic!("expected Corrupt, recovered {} groups", recovered.groups.len()),
    }
}

#[test]
fn v4_torn_write_at_every_offset_of_the_last_record_keeps_everything_before_it() {
    let source = temp_dir("torn-source");
    let offsets = one_record_per_flush(source.path(), 12);
    let (last_start, last_end) = (offsets[11], offsets[12]);
    let want: Vec<LogEntry> = (1..=11).map(|op| entry(op, 1, TAG)).collect();
    for cut_at in last_start..last_end {
        let copy = temp_dir("torn");
        copy_dir(source.path(), copy.path());
        let segment = segments(copy.path()).pop().expect("a segment");
        cut(&segment, cut_at);
        let (mut storage, recovered) = open_recover(copy.path(), &exact_roomy_config());
        assert_eq!(entries_of(&recovered, 1), want, "cut at {cut_at}");
        let report = storage.recovery_report().expect("a report").clone();
        assert_eq!(report.torn_tail_bytes, cut_at - last_start, "cut at {cut_at}");
        // The log continues cleanly after the cut.
        ok(storage.append(GroupId(1), &entry(12, 2, TAG)));
        ok(storage.flush());
        drop(storage);
        let (_, recovered) = open_recover(copy.path(), &exact_roomy_config());
        assert_eq!(entries_of(&recovered, 1).len(), 12, "cut at {cut_at}: append after the cut");
    }
}

#[test]
fn v4_torn_write_inside_one_flush_keeps_a_prefix_of_its_records() {
    let source = temp_dir("torn-batch-source");
    let dir = source.path();
    let (mut storage, _) = open_recover(dir, &exact_roomy_config());
    ok(storage.append(GroupId(1), &entry(1, 1, TAG)));
    ok(storage.flush());
    let segment = segments(dir).pop().expect("a segment");
    let start = file_len(&segment);
    // One flush: g1 op 2, g2 op 1, g1 truncate after 1, g3 op 1.
    ok(storage.append(GroupId(1), &entry(2, 1, TAG)));
    ok(storage.append(GroupId(2), &entry(1, 1, TAG)));
    ok(storage.truncate_after(GroupId(1), Op(1)));
    ok(storage.append(GroupId(3), &entry(1, 1, TAG)));
    ok(storage.flush());
    drop(storage);
    let sizes = [112u64, 112, 48, 112];
    let end = file_len(&segment);
    assert_eq!(end - start, sizes.iter().sum::<u64>());
    for cut_at in start..end {
        let copy = temp_dir("torn-batch");
        copy_dir(dir, copy.path());
        cut(&segments(copy.path()).pop().expect("a segment"), cut_at);
        let (_, recovered) = open_recover(copy.path(), &exact_roomy_config());
        let whole: usize = sizes
            .iter()
            .scan(start, |at, size| {
                *at += size;
                Some(*at)
            })
            .filter(|&e| e <= cut_at)
            .count();
        let g1 = match whole {
            0 => 1,
            1 | 2 => 2,
            _ => 1,
        };
        assert_eq!(entries_of(&recovered, 1).len(), g1, "cut at {cut_at} ({whole} whole records)");
        assert_eq!(entries_of(&recovered, 2).len(), usize::from(whole >= 2), "cut at {cut_at}");
        assert_eq!(entries_of(&recovered, 3).len(), usize::from(whole >= 4), "cut at {cut_at}");
    }
}

#[test]
fn v4_bit_flip_in_the_tail_record_drops_it() {
    let source = temp_dir("flip-tail-source");
    let offsets = one_record_per_flush(source.path(), 8);
    let (last_start, last_end) = (offsets[7], offsets[8]);
    for offset in last_start..last_end {
        let copy = temp_dir("flip-tail");
        copy_dir(source.path(), copy.path());
        flip_bit(&segments(copy.path()).pop().expect("a segment"), offset, (offset % 8) as u8);
        let (storage, recovered) = open_recover(copy.path(), &exact_roomy_config());
        assert_eq!(entries_of(&recovered, 1).len(), 7, "flip at {offset}");
        assert_eq!(storage.recovery_report().and_then(|report| report.torn_tail_offset), Some(last_start));
    }
}

#[test]
fn v4_bit_flip_in_a_middle_record_is_corrupt_with_file_and_offset() {
    let source = temp_dir("flip-middle-source");
    let offsets = one_record_per_flush(source.path(), 8);
    let (start, end) = (offsets[3], offsets[4]);
    for offset in start..end {
        let copy = temp_dir("flip-middle");
        copy_dir(source.path(), copy.path());
        let segment = segments(copy.path()).pop().expect("a segment");
        flip_bit(&segment, offset, (offset % 8) as u8);
        let (path, at, reason) = expect_corrupt(copy.path(), &exact_roomy_config());
        assert_eq!(PathBuf::from(&path), segment, "flip at {offset}: {reason}");
        assert_eq!(at, start, "flip at {offset}: {reason}");
        assert!(reason.contains("later flush"), "flip at {offset}: {reason}");
    }
}

#[test]
fn v4_bit_flip_in_a_closed_segment_is_corrupt() {
    let dir = temp_dir("flip-closed");
    let config = exact_small_config();
    let (mut storage, _) = open_recover(dir.path(), &config);
    for op in 1..=40 {
        ok(storage.append(GroupId(1), &entry(op, 1, TAG)));
        ok(storage.flush());
    }
    drop(storage);
    let all = segments(dir.path());
    assert!(all.len() >= 3, "expected rotation, found {} segments", all.len());
    // The last byte of the first segment belongs to its last record.
    let first = &all[0];
    let last_byte = file_len(first) - 1;
    flip_bit(first, last_byte, 3);
    let (path, offset, reason) = expect_corrupt(dir.path(), &config);
    assert_eq!(PathBuf::from(path), *first);
    assert_eq!(offset, file_len(first) - 112, "{reason}");
    assert!(reason.contains("closed"), "{reason}");
}

#[test]
fn v4_damaged_segment_header_is_corrupt() {
    let dir = temp_dir("flip-header");
    let config = exact_small_config();
    let (mut storage, _) = open_recover(dir.path(), &config);
    for op in 1..=40 {
        ok(storage.append(GroupId(1), &entry(op, 1, TAG)));
        ok(storage.flush());
    }
    drop(storage);
    let second = segments(dir.path())[1].clone();
    flip_bit(&second, 17, 0);
    let (path, offset, _) = expect_corrupt(dir.path(), &config);
    assert_eq!((PathBuf::from(path), offset), (second, 0));
}

#[test]
fn v4_missing_middle_segment_is_corrupt() {
    let dir = temp_dir("missing-segment");
    let config = exact_small_config();
    let (mut storage, _) = open_recover(dir.path(), &config);
    for op in 1..=40 {
        ok(storage.append(GroupId(1), &entry(op, 1, TAG)));
        ok(storage.flush());
    }
    drop(storage);
    let all = segments(dir.path());
    std::fs::remove_file(&all[1]).expect("remove a segment");
    let (path, _, reason) = expect_corrupt(dir.path(), &config);
    assert_eq!(PathBuf::from(path), all[2], "{reason}");
}

#[test]
fn v4_damage_followed_only_by_its_own_flush_is_a_torn_tail() {
    let dir = temp_dir("torn-pages");
    let (mut storage, _) = open_recover(dir.path(), &exact_roomy_config());
    ok(storage.append(GroupId(1), &entry(1, 1, TAG)));
    ok(storage.flush());
    let segment = segments(dir.path()).pop().expect("a segment");
    let start = file_len(&segment);
    for op in 2..=6 {
        ok(storage.append(GroupId(1), &entry(op, 1, TAG)));
    }
    ok(storage.flush());
    drop(storage);
    // A page of the flush never reached the disk, but later ones did: the
    // second record of the flush is zeros, records 3..5 of it are intact.
    write_bytes(&segment, start + 112 + 10, &[0u8; 60]);
    let (storage, recovered) = open_recover(dir.path(), &exact_roomy_config());
    assert_eq!(entries_of(&recovered, 1).len(), 2);
    assert_eq!(storage.recovery_report().and_then(|report| report.torn_tail_offset), Some(start + 112));
}

#[test]
fn h2_a_log_ending_before_a_durable_superblock_is_lost_synced_records() {
    let dir = temp_dir("lost-acked");
    let (mut storage, _) = open_recover(dir.path(), &exact_roomy_config());
    for op in 1..=3 {
        ok(storage.append(GroupId(1), &entry(op, 1, TAG)));
    }
    ok(storage.stage_superblock(GroupId(1), &superblock(1, 3)));
    ok(storage.flush());
    drop(storage);
    // Recovery checkpoints the superblock into its file, marked as written
    // after the whole log was durable.
    drop(open_recover(dir.path(), &exact_roomy_config()));
    let segment = segments(dir.path()).pop().expect("a segment");
    cut(&segment, file_len(&segment) - 5);
    let (storage, recovered) = open_recover(dir.path(), &exact_roomy_config());
    let lost = lost_of(&storage);
    assert_eq!(PathBuf::from(&lost.path), segment);
    assert!(lost.reason.contains("acknowledged log records are missing"), "{lost}");
    assert_recovering(&recovered);
    assert_eq!(entries_of(&recovered, 1).len(), 3, "cut inside the superblock record: the entries stay");
}

/// The loss a recovery reported, or a panic.
fn lost_of(storage: &FileStorage) -> cohort_wal::LostRecords {
    match storage.recovery_report().and_then(|report| report.lost.clone()) {
        Some(lost) => lost,
        None => panic!("no loss reported: {:?}", storage.recovery_report()),
    }
}

/// H2: the storage says so, and every group it holds comes back recovering.
fn assert_recovering(recovered: &Recovered) {
    assert!(recovered.lost_synced_records && recovered.may_have_lost_data());
    for (group, state) in &recovered.groups {
        let superblock = state.superblock.as_ref().unwrap_or_else(|| panic!("{group} has a superblock"));
        assert!(superblock.recovering, "{group} recovers");
    }
}

/// A preallocating storage whose groups 1 and 2 were checkpointed (not
/// recovering) after ops 1..=4, then got ops 5..=12 of group 1 in one
/// flush each, acknowledged. Returns the offsets where ops 5..=12 start,
/// and the end of op 12.
fn checkpointed_then_acknowledged(dir: &Path) -> Vec<u64> {
    let (mut storage, _) = open_recover(dir, &roomy_config());
    for op in 1..=4 {
        ok(storage.append(GroupId(1), &entry(op, 1, TAG)));
        ok(storage.append(GroupId(2), &entry(op, 1, TAG)));
    }
    ok(storage.stage_superblock(GroupId(1), &superblock(1, 4)));
    ok(storage.stage_superblock(GroupId(2), &superblock(2, 4)));
    ok(storage.flush());
    drop(storage);
    // The last checkpoint: recovery writes the superblock file.
    let (mut storage, recovered) = open_recover(dir, &roomy_config());
    assert!(recovered.groups.values().all(|state| state.superblock.as_ref().is_some_and(|sb| !sb.recovering)));
    let mut offset = SEGMENT_HEADER_BYTES + 8 * RECORD_BYTES + superblock_records_bytes(&recovered);
    let mut offsets = Vec::new();
    for op in 5..=12 {
        offsets.push(offset);
        ok(storage.append(GroupId(1), &entry(op, 1, TAG)));
        ok(storage.flush());
        offset += RECORD_BYTES;
    }
    offsets.push(offset);
    offsets
}

const SEGMENT_HEADER_BYTES: u64 = 32;
const RECORD_BYTES: u64 = 112;

/// The bytes the groups' superblock records take (a 48-byte header and
/// the payload).
fn superblock_records_bytes(recovered: &Recovered) -> u64 {
    let superblocks = recovered.groups.values().filter_map(|state| state.superblock.as_ref());
    superblocks.map(|sb| 48 + cohort_wal::format::superblock_payload_size_bytes(sb) as u64).sum()
}

#[test]
fn h2_a_segment_cut_after_the_last_checkpoint_is_lost_synced_records_naming_the_file() {
    let source = temp_dir("h2-cut-source");
    let offsets = checkpointed_then_acknowledged(source.path());
    let segment_name = segments(source.path()).pop().expect("a segment").file_name().map(|name| name.to_owned());
    // At a record boundary, inside a record, and inside a record header.
    for (cut_at, kept) in [(offsets[4], 4), (offsets[6] + 60, 6), (offsets[7] + 3, 7)] {
        let copy = temp_dir("h2-cut");
        copy_dir(source.path(), copy.path());
        let segment = segments(copy.path()).pop().expect("a segment");
        assert_eq!(segment.file_name().map(|name| name.to_owned()), segment_name);
        let created = file_len(&segment);
        assert!(created > offsets[8], "the segment was created larger than its records");
        cut(&segment, cut_at);
        let (mut storage, recovered) = open_recover(copy.path(), &roomy_config());
        let lost = lost_of(&storage);
        assert_eq!(PathBuf::from(&lost.path), segment, "the loss names the file: {lost}");
        assert_eq!(lost.offset, offsets[kept], "the log ends at the last whole record: {lost}");
        assert!(lost.reason.contains("was cut"), "{lost}");
        assert_eq!(entries_of(&recovered, 1).len(), 4 + kept, "cut at {cut_at}");
        assert_eq!(entries_of(&recovered, 2).len(), 4, "cut at {cut_at}");
        assert_recovering(&recovered);
        assert_eq!(file_len(&segment), created, "the segment gets its length back");
        // The log goes on after the cut, and the next start is quiet but
        // still recovering (the flag is durable, the loss was reported once).
        ok(storage.append(GroupId(1), &entry(5 + kept as u64, 2, TAG)));
        ok(storage.flush());
        drop(storage);
        let (storage, recovered) = open_recover(copy.path(), &roomy_config());
        assert_eq!(storage.recovery_report().and_then(|report| report.lost.clone()), None);
        assert!(!recovered.lost_synced_records);
        assert!(recovered.groups.values().all(|state| state.superblock.as_ref().is_some_and(|sb| sb.recovering)));
        assert_eq!(entries_of(&recovered, 1).len(), 5 + kept, "cut at {cut_at}");
    }
}

#[test]
fn h2_a_torn_tail_after_a_crash_is_still_cut_silently() {
    // A crash in the middle of the last flush: its record reached the disk
    // in part, over the zeros written ahead of it. The file keeps its size.
    let source = temp_dir("h2-torn-source");
    let offsets = checkpointed_then_acknowledged(source.path());
    let (start, end) = (offsets[7], offsets[8]);
    for kept in [1u64, 47, 48, 100] {
        let copy = temp_dir("h2-torn");
        copy_dir(source.path(), copy.path());
        let segment = segments(copy.path()).pop().expect("a segment");
        let created = file_len(&segment);
        write_bytes(&segment, start + kept, &vec![0u8; (end - start - kept) as usize]);
        let (storage, recovered) = open_recover(copy.path(), &roomy_config());
        let report = storage.recovery_report().cloned().expect("a report");
        assert_eq!(report.lost, None, "{kept} bytes of the last record kept: a torn tail");
        assert_eq!(report.torn_tail_offset, Some(start), "{kept} bytes kept");
        assert!(!recovered.lost_synced_records && !recovered.may_have_lost_data());
        assert!(recovered.groups.values().all(|state| state.superblock.as_ref().is_some_and(|sb| !sb.recovering)));
        assert_eq!(entries_of(&recovered, 1).len(), 11, "{kept} bytes kept");
        assert_eq!(file_len(&segment), created, "{kept} bytes kept: the segment keeps its size");
    }
}

#[test]
fn h2_a_cut_through_zeros_alone_loses_nothing() {
    let dir = temp_dir("h2-zeros");
    let offsets = checkpointed_then_acknowledged(dir.path());
    let segment = segments(dir.path()).pop().expect("a segment");
    let created = file_len(&segment);
    cut(&segment, offsets[8] + 1000);
    let (storage, recovered) = open_recover(dir.path(), &roomy_config());
    assert_eq!(storage.recovery_report().and_then(|report| report.lost.clone()), None);
    assert_eq!(entries_of(&recovered, 1).len(), 12);
    assert!(!recovered.lost_synced_records);
    assert_eq!(file_len(&segment), created, "the length is restored");
}

#[test]
fn h2_a_newest_segment_cut_below_its_header_is_lost_synced_records() {
    let dir = temp_dir("h2-headless");
    let (mut storage, _) = open_recover(dir.path(), &small_segments_config());
    ok(storage.stage_superblock(GroupId(1), &superblock(1, 0)));
    ok(storage.flush());
    for op in 1..=40 {
        ok(storage.append(GroupId(1), &entry(op, 1, TAG)));
        ok(storage.flush());
    }
    drop(storage);
    let files = segments(dir.path());
    assert!(files.len() >= 2, "the log rotated");
    let newest = files.last().expect("a segment");
    cut(newest, 0);
    let (_, recovered) = open_recover(dir.path(), &small_segments_config());
    assert_recovering(&recovered);
}

/// Offset of copy `copy` of superblock slot `slot`.
fn copy_offset(slot: u64, copy: u64) -> u64 {
    1024 + slot * 2048 + copy * 1024
}

/// Two versions of group 1's superblock, each checkpointed into the
/// superblock file by a recovery: version 1 in copy 0, version 2 in copy 1.
/// The log still holds both as records.
fn two_superblock_versions(dir: &Path) {
    for (view, commit) in [(1, 1), (2, 2)] {
        let (mut storage, _) = open_recover(dir, &exact_roomy_config());
        ok(storage.stage_superblock(GroupId(1), &superblock(view, commit)));
        ok(storage.flush());
    }
    drop(open_recover(dir, &exact_roomy_config()));
}

#[test]
fn torn_superblock_write_leaves_the_previous_version() {
    let dir = temp_dir("torn-superblock");
    two_superblock_versions(dir.path());
    // A torn checkpoint of version 3 into copy 0 leaves version 2.
    let path = dir.path().join(SUPERBLOCK_FILE_NAME);
    write_bytes(&path, copy_offset(0, 0) + 100, &[0x5A; 300]);
    let (_, recovered) = open_recover(dir.path(), &exact_roomy_config());
    assert_eq!(recovered.groups[&GroupId(1)].superblock, Some(superblock(2, 2)));
    // A torn checkpoint of version 2 itself (copy 1) leaves version 1 in
    // the file; the log's record of version 2 is newer, and wins (K3).
    let dir = temp_dir("torn-superblock-2");
    two_superblock_versions(dir.path());
    let path = dir.path().join(SUPERBLOCK_FILE_NAME);
    write_bytes(&path, copy_offset(0, 1) + 700, &[0x5A; 3]);
    let (_, recovered) = open_recover(dir.path(), &exact_roomy_config());
    assert_eq!(recovered.groups[&GroupId(1)].superblock, Some(superblock(2, 2)));
}

#[test]
fn k3_superblocks_come_back_from_the_log_without_a_checkpoint() {
    let dir = temp_dir("superblock-records");
    let (mut storage, _) = open_recover(dir.path(), &exact_roomy_config());
    let syncs = storage.stats().superblock_syncs;
    for version in 1..=5u64 {
        ok(storage.append(GroupId(1), &entry(version, 1, TAG)));
        ok(storage.stage_superblock(GroupId(1), &superblock(version as u32, version)));
        ok(storage.stage_superblock(GroupId(2), &superblock(1, version)));
        ok(storage.flush());
    }
    assert_eq!(storage.stats().superblock_syncs, syncs, "every version went into the log");
    drop(storage);
    let (_, recovered) = open_recover(dir.path(), &exact_roomy_config());
    assert_eq!(recovered.groups[&GroupId(1)].superblock, Some(superblock(5, 5)));
    assert_eq!(recovered.groups[&GroupId(2)].superblock, Some(superblock(1, 5)));
}

#[test]
fn k3_a_torn_superblock_record_leaves_the_previous_version() {
    let dir = temp_dir("torn-superblock-record");
    let (mut storage, _) = open_recover(dir.path(), &exact_roomy_config());
    ok(storage.stage_superblock(GroupId(1), &superblock(1, 1)));
    ok(storage.flush());
    let segment = segments(dir.path()).pop().expect("a segment");
    let before = file_len(&segment);
    ok(storage.append(GroupId(1), &entry(1, 2, TAG)));
    ok(storage.stage_superblock(GroupId(1), &superblock(2, 1)));
    ok(storage.flush());
    drop(storage);
    // Cut inside the second flush's superblock record (it comes last): the
    // entry of that flush survives, the new superblock does not.
    cut(&segment, file_len(&segment) - 10);
    let (_, recovered) = open_recover(dir.path(), &exact_roomy_config());
    assert_eq!(recovered.groups[&GroupId(1)].superblock, Some(superblock(1, 1)));
    assert_eq!(entries_of(&recovered, 1), vec![entry(1, 2, TAG)]);
    assert!(file_len(&segment) > before);
}

#[test]
fn k3_a_segment_goes_only_after_its_superblocks_are_checkpointed() {
    let dir = temp_dir("checkpoint-before-prune");
    let (mut storage, _) = open_recover(dir.path(), &exact_small_config());
    // Group 1's superblocks ride in segments that group 2's entries fill.
    for op in 1..=40u64 {
        ok(storage.append(GroupId(2), &entry(op, 1, TAG)));
        ok(storage.stage_superblock(GroupId(1), &superblock(3, op)));
        ok(storage.flush());
    }
    assert!(storage.segment_count() > 2, "rotated");
    let syncs = storage.stats().superblock_syncs;
    ok(storage.save_snapshot(GroupId(2), &snapshot(40, 1, 10)));
    assert_eq!(storage.segment_count(), 1, "covered segments went");
    assert_eq!(storage.stats().superblock_syncs, syncs + 1, "one checkpoint before the removal");
    drop(storage);
    let (_, recovered) = open_recover(dir.path(), &exact_small_config());
    assert_eq!(recovered.groups[&GroupId(1)].superblock, Some(superblock(3, 40)));
}

#[test]
fn both_superblock_copies_damaged_is_corrupt() {
    let dir = temp_dir("superblock-corrupt");
    two_superblock_versions(dir.path());
    let path = dir.path().join(SUPERBLOCK_FILE_NAME);
    flip_bit(&path, copy_offset(0, 0) + 40, 1);
    flip_bit(&path, copy_offset(0, 1) + 40, 1);
    let (reported, offset, _) = expect_corrupt(dir.path(), &exact_roomy_config());
    assert_eq!(PathBuf::from(reported), path);
    assert_eq!(offset, copy_offset(0, 1));
}

#[test]
fn damaged_snapshot_is_corrupt() {
    let dir = temp_dir("snapshot-corrupt");
    let (mut storage, _) = open_recover(dir.path(), &exact_roomy_config());
    ok(storage.save_snapshot(GroupId(4), &snapshot(9, 1, 150)));
    drop(storage);
    let path = dir.path().join("snapshot-00000000000000000004.snap");
    flip_bit(&path, 80, 6);
    let (reported, _, reason) = expect_corrupt(dir.path(), &exact_roomy_config());
    assert_eq!(PathBuf::from(reported), path, "{reason}");
}

#[test]
fn interrupted_remove_group_is_completed_by_recovery() {
    let dir = temp_dir("remove-interrupted");
    let (mut storage, _) = open_recover(dir.path(), &exact_roomy_config());
    for group in 1..=2 {
        ok(storage.append(GroupId(group), &entry(1, 1, TAG)));
        ok(storage.stage_superblock(GroupId(group), &superblock(1, 1)));
    }
    ok(storage.flush());
    ok(storage.save_snapshot(GroupId(1), &snapshot(1, 1, 5)));
    // Keep the superblock file and the snapshot as they were before the
    // removal: as if the crash hit right after the RemoveGroup record synced.
    let before = temp_dir("remove-before");
    copy_dir(dir.path(), before.path());
    ok(storage.remove_group(GroupId(1)));
    drop(storage);
    for name in [SUPERBLOCK_FILE_NAME, "snapshot-00000000000000000001.snap"] {
        std::fs::copy(before.path().join(name), dir.path().join(name)).expect("restore an old file");
    }
    let (storage, recovered) = open_recover(dir.path(), &exact_roomy_config());
    assert!(!recovered.groups.contains_key(&GroupId(1)), "removed group came back: {recovered:?}");
    assert_eq!(entries_of(&recovered, 2).len(), 1);
    assert_eq!(storage.recovery_report().map(|report| report.removals_completed), Some(1));
    assert!(!dir.path().join("snapshot-00000000000000000001.snap").exists());
    drop(storage);
    let (_, again) = open_recover(dir.path(), &exact_roomy_config());
    assert_eq!(again, recovered);
}

/// D1, H1: a reset interrupted at any point after its record synced (the
/// superblock file and the snapshot still as before) recovers to the
/// reset's recovering superblock alone; cut inside its record, to the group
/// as it was. Never to no group at all, which would read as a member that
/// never acknowledged anything here (seed 6007052).
#[test]
fn d1_an_interrupted_reset_leaves_the_group_whole_or_recovering() {
    let dir = temp_dir("reset-interrupted");
    let (mut storage, _) = open_recover(dir.path(), &exact_roomy_config());
    for group in 1..=2 {
        ok(storage.append(GroupId(group), &entry(1, 1, TAG)));
        ok(storage.append(GroupId(group), &entry(2, 1, TAG)));
        ok(storage.stage_superblock(GroupId(group), &superblock(1, 1)));
    }
    ok(storage.flush());
    ok(storage.save_snapshot(GroupId(1), &snapshot(1, 1, 5)));
    let before = temp_dir("reset-before");
    copy_dir(dir.path(), before.path());
    let log_before: Vec<u64> = segments(dir.path()).iter().map(|path| file_len(path)).collect();
    let mut rebuilt = superblock(2, 0);
    rebuilt.recovering = true;
    ok(storage.reset_group(GroupId(1), &rebuilt));
    drop(storage);
    let after = temp_dir("reset-after");
    copy_dir(dir.path(), after.path());

    // The record synced, nothing after it: the old superblock and snapshot.
    for name in [SUPERBLOCK_FILE_NAME, "snapshot-00000000000000000001.snap"] {
        std::fs::copy(before.path().join(name), dir.path().join(name)).expect("restore an old file");
    }
    let (storage, recovered) = open_recover(dir.path(), &exact_roomy_config());
    let group = &recovered.groups[&GroupId(1)];
    assert_eq!(group.superblock.as_ref(), Some(&rebuilt), "{recovered:?}");
    assert!(group.snapshot.is_none() && group.entries.is_empty(), "{group:?}");
    assert_eq!(entries_of(&recovered, 2).len(), 2);
    assert!(!dir.path().join("snapshot-00000000000000000001.snap").exists());
    drop(storage);
    let (_, again) = open_recover(dir.path(), &exact_roomy_config());
    assert_eq!(again, recovered, "a second recovery changes nothing");

    // The record cut anywhere inside: the group as it was.
    let segment = segments(after.path()).pop().expect("a segment");
    let record_start = *log_before.last().expect("a segment before");
    let record_end = file_len(&segment);
    assert!(record_end > record_start, "the reset wrote its record");
    for len in record_start..record_end {
        let cut_dir = temp_dir("reset-cut");
        copy_dir(before.path(), cut_dir.path());
        let cut_segment = segments(cut_dir.path()).pop().expect("a segment");
        std::fs::copy(&segment, &cut_segment).expect("copy the segment");
        cut(&cut_segment, len);
        let (_, recovered) = open_recover(cut_dir.path(), &exact_roomy_config());
        let group = &recovered.groups[&GroupId(1)];
        assert_eq!(group.superblock, Some(superblock(1, 1)), "cut at {len}: {group:?}");
        assert!(group.snapshot.is_some(), "cut at {len}: the snapshot went without the reset");
    }
}

fn fill_groups(storage: &mut FileStorage, groups: u64, ops: u64) {
    for op in 1..=ops {
        for group in 1..=groups {
            ok(storage.append(GroupId(group), &entry(op, 1, TAG)));
        }
        ok(storage.flush());
    }
}

#[test]
fn v6_segments_covered_by_snapshots_are_removed() {
    let dir = temp_dir("prune");
    let config = exact_small_config();
    let (mut storage, _) = open_recover(dir.path(), &config);
    fill_groups(&mut storage, 3, 30);
    let before = storage.segment_count();
    assert!(before >= 5, "expected rotation, have {before} segments");
    ok(storage.save_snapshot(GroupId(1), &snapshot(30, 1, 1)));
    ok(storage.save_snapshot(GroupId(2), &snapshot(30, 1, 2)));
    assert_eq!(storage.segment_count(), before, "group:3 has no snapshot: no segment may go");
    ok(storage.save_snapshot(GroupId(3), &snapshot(20, 1, 3)));
    let after = storage.segment_count();
    assert!(after < before, "no segment removed ({before} -> {after})");
    // The real file system removes them on a thread of its own.
    ok(storage.settle_removals());
    assert_eq!(segments(dir.path()).len(), after);
    assert!(storage.stats().segments_removed > 0);
    drop(storage);
    let (_, recovered) = open_recover(dir.path(), &config);
    let ops: Vec<u64> = entries_of(&recovered, 3).iter().map(|entry| entry.op.get()).collect();
    assert_eq!(ops, (21..=30).collect::<Vec<u64>>());
    assert!(entries_of(&recovered, 1).is_empty());
    assert_eq!(recovered.groups[&GroupId(1)].snapshot, Some(snapshot(30, 1, 1)));
}

/// A deferred snapshot costs no sync when saved, the segments it covers
/// stay until it is written, and writing many costs one file sync each and
/// one directory sync for all.
#[test]
fn v6_deferred_snapshots_keep_their_segments_until_written_in_one_directory_sync() {
    let dir = temp_dir("deferred");
    let config = exact_small_config();
    let (mut storage, _) = open_recover(dir.path(), &config);
    fill_groups(&mut storage, 3, 30);
    let before = storage.segment_count();
    let syncs_before = storage.stats();
    for group in 1..=3 {
        ok(storage.defer_snapshot(GroupId(group), &snapshot(30, 1, group)));
    }
    assert_eq!(storage.deferred_snapshots(), 3);
    assert_eq!(storage.stats().syncs_total(), syncs_before.syncs_total(), "a deferred snapshot costs no sync");
    assert_eq!(storage.segment_count(), before, "segments stay while their snapshots wait");
    assert_eq!(storage.write_deferred_snapshots(2), Ok(1), "the oldest two written, one waits");
    // Group 3 still pins every segment, so this batch removed none.
    let stats = storage.stats();
    assert_eq!(storage.segment_count(), before);
    assert_eq!(stats.snapshot_syncs - syncs_before.snapshot_syncs, 2, "one sync per snapshot file");
    assert_eq!(stats.directory_syncs - syncs_before.directory_syncs, 1, "one directory sync for the batch");
    assert_eq!(storage.write_deferred_snapshots(usize::MAX), Ok(0));
    assert_eq!(storage.stats().deferred_snapshots_written, 3);
    assert!(storage.segment_count() < before, "written snapshots let the segments go");
    drop(storage);
    let (_, recovered) = open_recover(dir.path(), &config);
    for group in 1..=3 {
        assert_eq!(recovered.groups[&GroupId(group)].snapshot, Some(snapshot(30, 1, group)));
        assert!(entries_of(&recovered, group).is_empty());
    }
}

#[test]
fn v6_removed_group_no_longer_pins_segments() {
    let dir = temp_dir("prune-removed");
    let config = exact_small_config();
    let (mut storage, _) = open_recover(dir.path(), &config);
    fill_groups(&mut storage, 2, 30);
    let before = storage.segment_count();
    ok(storage.save_snapshot(GroupId(1), &snapshot(30, 1, 1)));
    assert_eq!(storage.segment_count(), before);
    ok(storage.remove_group(GroupId(2)));
    assert!(storage.segment_count() < before);
    drop(storage);
    let (_, recovered) = open_recover(dir.path(), &config);
    assert_eq!(recovered.groups.keys().copied().collect::<Vec<_>>(), vec![GroupId(1)]);
}

#[test]
fn full_disk_during_flush_loses_nothing_acknowledged_and_can_retry() {
    let dir = temp_dir("full");
    let (mut storage, _) = open_recover(dir.path(), &exact_roomy_config());
    fill_groups(&mut storage, 2, 3);
    for op in 4..=8 {
        ok(storage.append(GroupId(1), &entry(op, 1, TAG)));
    }
    ok(storage.stage_superblock(GroupId(1), &superblock(1, 8)));
    storage.inject_fault(InjectedFault::SpaceLeft { bytes: 250 });
    let error = storage.flush().expect_err("the disk is full");
    assert!(matches!(error, StorageError::Full { .. }), "{error}");
    assert!(!error.is_fatal() && storage.failure().is_none());
    // A crash now keeps exactly what was acknowledged, with no torn tail
    // (the short write was cut back).
    let copy = temp_dir("full-crash");
    copy_dir(dir.path(), copy.path());
    let (crashed, recovered) = open_recover(copy.path(), &exact_roomy_config());
    assert_eq!(entries_of(&recovered, 1).len(), 3);
    assert_eq!(recovered.groups[&GroupId(1)].superblock, None);
    assert_eq!(crashed.recovery_report().map(|report| report.torn_tail_bytes), Some(0));
    // Space comes back: the same flush succeeds.
    storage.inject_fault(InjectedFault::Clear);
    ok(storage.flush());
    drop(storage);
    let (_, recovered) = open_recover(dir.path(), &exact_roomy_config());
    let want: Vec<LogEntry> = (1..=8).map(|op| entry(op, 1, TAG)).collect();
    assert_eq!(entries_of(&recovered, 1), want);
    assert_eq!(recovered.groups[&GroupId(1)].superblock, Some(superblock(1, 8)));
}

#[test]
fn full_disk_during_rotation_keeps_the_synced_part() {
    let dir = temp_dir("full-rotation");
    let config = exact_small_config();
    let (mut storage, _) = open_recover(dir.path(), &config);
    let segment = segments(dir.path()).pop().expect("a segment");
    // 30 records of 112 bytes do not fit one 2 KiB segment.
    for op in 1..=30 {
        ok(storage.append(GroupId(1), &entry(op, 1, TAG)));
    }
    let fits = (2048 - file_len(&segment)) / 112;
    storage.inject_fault(InjectedFault::SpaceLeft { bytes: fits * 112 + 10 });
    let error = storage.flush().expect_err("no space for the new segment");
    assert!(matches!(error, StorageError::Full { .. }), "{error}");
    storage.inject_fault(InjectedFault::Clear);
    ok(storage.flush());
    drop(storage);
    let (_, recovered) = open_recover(dir.path(), &config);
    let want: Vec<LogEntry> = (1..=30).map(|op| entry(op, 1, TAG)).collect();
    assert_eq!(entries_of(&recovered, 1), want);
}

#[test]
fn failed_sync_is_fatal_and_never_retried() {
    let dir = temp_dir("sync-fails");
    let (mut storage, _) = open_recover(dir.path(), &exact_roomy_config());
    ok(storage.append(GroupId(1), &entry(1, 1, TAG)));
    storage.inject_fault(InjectedFault::SyncFails);
    let error = storage.flush().expect_err("the sync fails");
    assert!(matches!(error, StorageError::Io { .. }) && error.is_fatal(), "{error}");
    storage.inject_fault(InjectedFault::Clear);
    assert_eq!(storage.flush(), Err(error.clone()), "a flush after a failed sync must fail the same way");
    assert_eq!(storage.append(GroupId(1), &entry(2, 1, TAG)), Err(error.clone()));
    assert_eq!(storage.failure(), Some(&error));
}

#[test]
fn record_above_the_limit_is_refused_and_nothing_is_staged() {
    let dir = temp_dir("too-large");
    let config = exact_small_config();
    let (mut storage, _) = open_recover(dir.path(), &config);
    let mut big = entry(1, 1, TAG);
    big.operation = bytes::Bytes::from(vec![7u8; 1024]);
    let error = storage.append(GroupId(1), &big).expect_err("too large");
    assert!(matches!(error, StorageError::TooLarge { what: "log record", .. }), "{error}");
    // Op 1 is still the next allowed op: nothing was staged.
    ok(storage.append(GroupId(1), &entry(1, 1, TAG)));
}

#[test]
fn staged_bytes_above_the_limit_are_refused_until_a_flush() {
    let dir = temp_dir("staged-limit");
    let config = FileStorageConfig { staged_size_max_bytes: 1024, ..exact_small_config() };
    let (mut storage, _) = open_recover(dir.path(), &config);
    for op in 1..=9 {
        ok(storage.append(GroupId(1), &entry(op, 1, TAG)));
    }
    assert!(matches!(storage.append(GroupId(1), &entry(10, 1, TAG)), Err(StorageError::TooLarge { .. })));
    ok(storage.flush());
    ok(storage.append(GroupId(1), &entry(10, 1, TAG)));
}

#[test]
fn r12_superblock_slots_exhausted_fail_one_group_only() {
    let dir = temp_dir("groups-max");
    let config = FileStorageConfig { groups_max: 3, ..exact_roomy_config() };
    let (mut storage, _) = open_recover(dir.path(), &config);
    for group in 1..=3 {
        ok(storage.stage_superblock(GroupId(group), &superblock(1, group)));
    }
    let error = storage.stage_superblock(GroupId(4), &superblock(1, 4)).expect_err("no slot left");
    assert!(matches!(error, StorageError::TooLarge { .. }) && !error.is_fatal(), "{error}");
    ok(storage.flush());
    // A removed group frees its slot.
    ok(storage.remove_group(GroupId(2)));
    ok(storage.stage_superblock(GroupId(4), &superblock(1, 4)));
    ok(storage.flush());
    drop(storage);
    let (_, recovered) = open_recover(dir.path(), &config);
    let groups: Vec<u64> = recovered.groups.keys().map(|group| group.get()).collect();
    assert_eq!(groups, vec![1, 3, 4]);
}

#[test]
fn segments_open_max_refuses_rotation_until_snapshots_free_segments() {
    let dir = temp_dir("segments-max");
    let config = FileStorageConfig { segments_open_max: 3, ..exact_small_config() };
    let (mut storage, _) = open_recover(dir.path(), &config);
    let mut op = 0;
    let error = loop {
        op += 1;
        ok(storage.append(GroupId(1), &entry(op, 1, TAG)));
        match storage.flush() {
            Ok(()) => assert!(op < 100, "segments_open_max never reached"),
            Err(error) => break error,
        }
    };
    assert!(matches!(error, StorageError::Full { .. }), "{error}");
    assert_eq!(storage.segment_count(), 3);
    ok(storage.save_snapshot(GroupId(1), &snapshot(op - 1, 1, 1)));
    ok(storage.flush());
    drop(storage);
    let (_, recovered) = open_recover(dir.path(), &config);
    assert_eq!(entries_of(&recovered, 1).iter().map(|entry| entry.op).collect::<Vec<_>>(), vec![Op(op)]);
}

#[test]
fn torn_segment_creation_and_leftover_temporaries_are_cleaned_up() {
    let dir = temp_dir("torn-create");
    let (mut storage, _) = open_recover(dir.path(), &exact_roomy_config());
    fill_groups(&mut storage, 1, 3);
    drop(storage);
    // A segment whose creation was interrupted after a few header bytes.
    std::fs::write(dir.path().join("wal-00000000000000000004.seg"), b"cohort").expect("write");
    std::fs::write(dir.path().join("snapshot-00000000000000000001.snap.tmp"), b"half").expect("write");
    let (mut storage, recovered) = open_recover(dir.path(), &exact_roomy_config());
    assert_eq!(entries_of(&recovered, 1).len(), 3);
    let report = storage.recovery_report().cloned().expect("a report");
    assert!(report.torn_segment_removed && report.tmp_files_removed == 1, "{report:?}");
    ok(storage.append(GroupId(1), &entry(4, 1, TAG)));
    ok(storage.flush());
    drop(storage);
    let (_, recovered) = open_recover(dir.path(), &exact_roomy_config());
    assert_eq!(entries_of(&recovered, 1).len(), 4);
}

#[test]
fn k3_one_flush_of_many_groups_costs_one_sync() {
    let dir = temp_dir("sync-count");
    let (mut storage, _) = open_recover(dir.path(), &exact_roomy_config());
    let before = storage.stats();
    for group in 1..=500 {
        ok(storage.append(GroupId(group), &entry(1, 1, TAG)));
        ok(storage.stage_superblock(GroupId(group), &superblock(1, 1)));
    }
    ok(storage.flush());
    let after = storage.stats();
    assert_eq!(after.log_syncs - before.log_syncs, 1);
    assert_eq!(after.superblock_syncs, before.superblock_syncs, "superblocks ride in the log's flush");
    assert_eq!(after.directory_syncs, before.directory_syncs);
    assert_eq!(after.records_written - before.records_written, 1000, "500 entries and 500 superblocks");
    assert_eq!(after.superblock_records_written - before.superblock_records_written, 500);
}

#[test]
#[should_panic(expected = "recover() must be called first")]
fn calls_before_recover_are_a_caller_bug() {
    let dir = temp_dir("no-recover");
    let mut storage = FileStorage::open(dir.path(), exact_roomy_config()).expect("valid config");
    let _ = storage.flush();
}

#[test]
#[should_panic(expected = "recover() called twice")]
fn second_recover_is_a_caller_bug() {
    let dir = temp_dir("recover-twice");
    let (mut storage, _) = open_recover(dir.path(), &exact_roomy_config());
    let _ = storage.recover();
}

/// Group 1's superblock, checkpointed into the file, and the segments that
/// held its records removed (group 2's snapshot covers them): from then on
/// the file's copy is the only one.
fn superblock_only_in_the_file(dir: &Path) {
    let (mut storage, _) = open_recover(dir, &exact_small_config());
    ok(storage.stage_superblock(GroupId(1), &superblock(4, 0)));
    ok(storage.flush());
    for op in 1..=40u64 {
        ok(storage.append(GroupId(2), &entry(op, 1, TAG)));
        ok(storage.flush());
    }
    ok(storage.save_snapshot(GroupId(2), &snapshot(40, 1, 10)));
    assert_eq!(storage.segment_count(), 1, "the segments with group 1's record went");
    drop(storage);
    let (_, recovered) = open_recover(dir, &exact_small_config());
    assert_eq!(recovered.groups[&GroupId(1)].superblock, Some(superblock(4, 0)));
}

#[test]
fn t5_an_unreadable_only_copy_of_a_superblock_is_corrupt_not_an_empty_group() {
    let dir = temp_dir("superblock-only-copy");
    superblock_only_in_the_file(dir.path());
    let path = dir.path().join(SUPERBLOCK_FILE_NAME);
    flip_bit(&path, copy_offset(0, 0) + 40, 3);
    let (reported, offset, reason) = expect_corrupt(dir.path(), &exact_small_config());
    assert_eq!(PathBuf::from(reported), path, "{reason}");
    assert_eq!(offset, copy_offset(0, 0));
}

#[test]
fn t5_a_torn_first_checkpoint_recovers_from_the_log() {
    let dir = temp_dir("superblock-torn-first");
    let mut storage = FileStorage::open(dir.path(), exact_roomy_config()).expect("valid config");
    storage.recover().expect("an empty directory recovers");
    ok(storage.stage_superblock(GroupId(1), &superblock(3, 0)));
    ok(storage.flush());
    drop(storage);
    // The first checkpoint of group 1 tore: its copy 0 holds garbage and
    // copy 1 was never written. The log's record is still there.
    let path = dir.path().join(SUPERBLOCK_FILE_NAME);
    write_bytes(&path, copy_offset(0, 0) + 8, &[0xA5; 200]);
    let (_, recovered) = open_recover(dir.path(), &exact_roomy_config());
    assert_eq!(recovered.groups[&GroupId(1)].superblock, Some(superblock(3, 0)));
    // That recovery checkpointed it again, into the same slot.
    let (_, recovered) = open_recover(dir.path(), &exact_roomy_config());
    assert_eq!(recovered.groups[&GroupId(1)].superblock, Some(superblock(3, 0)));
}

#[test]
fn t5_a_lost_superblock_file_while_segments_exist_is_corrupt() {
    for damage in ["remove", "empty", "short garbage"] {
        let dir = temp_dir("superblock-file-lost");
        one_record_per_flush(dir.path(), 3);
        let path = dir.path().join(SUPERBLOCK_FILE_NAME);
        match damage {
            "remove" => std::fs::remove_file(&path).expect("remove"),
            "empty" => cut(&path, 0),
            _ => {
                cut(&path, 600);
                write_bytes(&path, 0, &[0x33; 600]);
            }
        }
        let (reported, offset, reason) = expect_corrupt(dir.path(), &exact_roomy_config());
        assert_eq!((PathBuf::from(reported), offset), (path, 0), "{damage}: {reason}");
    }
}

/// The log's size on disk, as `ls` would add it up.
fn segments_size_bytes(dir: &Path) -> u64 {
    segments(dir).iter().map(|segment| file_len(segment)).sum()
}

#[test]
fn o2_log_size_is_what_the_segment_files_take_on_disk() {
    let dir = temp_dir("log-size");
    let (mut storage, _) = open_recover(dir.path(), &exact_small_config());
    assert_eq!(storage.log_size_bytes(), segments_size_bytes(dir.path()), "an empty log is one header");
    for op in 1..=40u64 {
        ok(storage.append(GroupId(2), &entry(op, 1, TAG)));
        ok(storage.flush());
        assert_eq!(storage.log_size_bytes(), segments_size_bytes(dir.path()), "after op {op}");
    }
    assert!(storage.segment_count() > 2, "rotated");
    let full = storage.log_size_bytes();
    ok(storage.save_snapshot(GroupId(2), &snapshot(40, 1, 10)));
    assert_eq!(storage.segment_count(), 1, "covered segments went");
    assert!(storage.log_size_bytes() < full, "removed segments no longer count");
    // The real file system removes them on a thread of its own.
    ok(storage.settle_removals());
    assert_eq!(storage.log_size_bytes(), segments_size_bytes(dir.path()));
    drop(storage);
    let (storage, _) = open_recover(dir.path(), &exact_small_config());
    assert_eq!(storage.log_size_bytes(), segments_size_bytes(dir.path()), "after recovery");
}
