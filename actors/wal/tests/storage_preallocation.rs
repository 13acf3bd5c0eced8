//! K3: segments written with zeros ahead of their records. A flush then
//! overwrites bytes the file already has, so its one sync does not also
//! commit a new file size; recovery reads the zeros as the end of the log,
//! and a torn write over them as a torn tail.

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use cohort_core::storage::conformance::entry;
use cohort_core::storage::{Recovered, Storage, StorageError};
use cohort_messages::{GroupId, LogEntry};
use cohort_wal::{FileStorageConfig, InjectedFault};

use common::{copy_dir, open_recover, segments, temp_dir};

/// Payload tag giving 40-byte operations (112-byte records).
const TAG: u64 = 40;
const RECORD_BYTES: u64 = 112;
const SEGMENT_HEADER_BYTES: u64 = 32;
const PREALLOCATION_BYTES: u64 = 8 * 1024;
const SEGMENT_BYTES: u64 = 64 * 1024;

fn config() -> FileStorageConfig {
    FileStorageConfig {
        segment_size_max_bytes: SEGMENT_BYTES,
        record_size_max_bytes: 4096,
        preallocation_size_bytes: PREALLOCATION_BYTES,
        ..FileStorageConfig::default()
    }
}

fn ok(result: Result<(), StorageError>) {
    if let Err(error) = result {
        panic!("storage call failed: {error}");
    }
}

fn entries_of(recovered: &Recovered) -> Vec<LogEntry> {
    recovered.groups.get(&GroupId(1)).map(|state| state.entries.clone()).unwrap_or_default()
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).expect("stat").len()
}

fn write_bytes(path: &Path, offset: u64, bytes: &[u8]) {
    let file = OpenOptions::new().write(true).open(path).expect("open for damage");
    file.write_all_at(bytes, offset).expect("write");
}

fn read_bytes(path: &Path, offset: u64, len: u64) -> Vec<u8> {
    let file = OpenOptions::new().read(true).open(path).expect("open");
    let mut bytes = vec![0; len as usize];
    file.read_exact_at(&mut bytes, offset).expect("read");
    bytes
}

/// Group 1's entries 1..=count, one flush each, into `dir`.
fn one_record_per_flush(dir: &Path, count: u64) {
    let (mut storage, _) = open_recover(dir, &config());
    for op in 1..=count {
        ok(storage.append(GroupId(1), &entry(op, 1, TAG)));
        ok(storage.flush());
    }
}

#[test]
fn k3_flushes_into_preallocated_zeros_do_not_grow_the_segment() {
    let dir = temp_dir("prealloc-grow");
    let (mut storage, _) = open_recover(dir.path(), &config());
    let segment = segments(dir.path()).pop().expect("a segment");
    let mut lengths = Vec::new();
    for op in 1..=200 {
        ok(storage.append(GroupId(1), &entry(op, 1, TAG)));
        ok(storage.flush());
        lengths.push(file_len(&segment));
    }
    // H2: the file is created at its whole size and never grows; the
    // zeros are written ahead of the records 8 KiB at a time (K3), so
    // 200 records of 112 bytes write zeros at most 4 times.
    assert!(lengths.iter().all(|len| *len == SEGMENT_BYTES), "the segment never grew: {lengths:?}");
    let log_end = SEGMENT_HEADER_BYTES + 200 * RECORD_BYTES;
    assert!(read_bytes(&segment, log_end, file_len(&segment) - log_end).iter().all(|byte| *byte == 0));
    let stats = storage.stats();
    assert_eq!(stats.log_syncs, 200, "one sync per flush, zeros included");
    // Every byte a record took was a zero written ahead of it, once.
    let zeros = stats.preallocated_bytes;
    assert!(zeros >= log_end - SEGMENT_HEADER_BYTES, "counted: {stats:?}");
    assert!(zeros <= log_end + PREALLOCATION_BYTES, "counted: {stats:?}");
    drop(storage);

    let (mut storage, recovered) = open_recover(dir.path(), &config());
    let want: Vec<LogEntry> = (1..=200).map(|op| entry(op, 1, TAG)).collect();
    assert_eq!(entries_of(&recovered), want);
    let report = storage.recovery_report().expect("a report").clone();
    assert_eq!(report.torn_tail_bytes, 0, "zeros are not a torn tail");
    assert_eq!(report.preallocated_tail_bytes, file_len(&segment) - log_end);
    // The log goes on into the zeros it found.
    let before = file_len(&segment);
    ok(storage.append(GroupId(1), &entry(201, 1, TAG)));
    ok(storage.flush());
    assert_eq!(file_len(&segment), before, "the recovered zeros are used, not cut");
    drop(storage);
    let (_, recovered) = open_recover(dir.path(), &config());
    assert_eq!(entries_of(&recovered).len(), 201);
}

#[test]
fn k3_a_torn_write_over_the_zeros_keeps_everything_before_it() {
    // A flush whose write reached the disk only in part leaves a prefix of
    // its bytes and the zeros after them: at every length of that prefix,
    // the earlier records come back, and the log goes on after a cut.
    let source = temp_dir("prealloc-torn-source");
    one_record_per_flush(source.path(), 12);
    let last_start = SEGMENT_HEADER_BYTES + 11 * RECORD_BYTES;
    let segment = segments(source.path()).pop().expect("a segment");
    let last = read_bytes(&segment, last_start, RECORD_BYTES);
    let want: Vec<LogEntry> = (1..=11).map(|op| entry(op, 1, TAG)).collect();
    for kept in 0..RECORD_BYTES {
        let copy = temp_dir("prealloc-torn");
        copy_dir(source.path(), copy.path());
        let segment = segments(copy.path()).pop().expect("a segment");
        let mut torn = last.clone();
        torn[kept as usize..].fill(0);
        write_bytes(&segment, last_start, &torn);
        let (mut storage, recovered) = open_recover(copy.path(), &config());
        assert_eq!(entries_of(&recovered), want, "{kept} bytes of the last record kept");
        let report = storage.recovery_report().expect("a report").clone();
        if kept == 0 || last[kept as usize..].iter().all(|byte| *byte == 0) {
            assert_eq!(report.torn_tail_bytes, 0, "{kept} bytes kept: only zeros follow");
        } else {
            assert_eq!(report.torn_tail_offset, Some(last_start), "{kept} bytes kept");
        }
        ok(storage.append(GroupId(1), &entry(12, 2, TAG)));
        ok(storage.flush());
        drop(storage);
        let (_, recovered) = open_recover(copy.path(), &config());
        assert_eq!(entries_of(&recovered).len(), 12, "{kept} bytes kept: the log goes on");
    }
}

#[test]
fn k3_a_closed_segment_is_cut_to_its_records_and_read_whole_if_the_cut_was_lost() {
    let dir = temp_dir("prealloc-closed");
    // 64 KiB segments of 112-byte records: 700 records take two segments.
    one_record_per_flush(dir.path(), 700);
    let files = segments(dir.path());
    assert!(files.len() >= 2, "the log rotated");
    let closed = &files[0];
    let closed_len = file_len(closed);
    assert_eq!((closed_len - SEGMENT_HEADER_BYTES) % RECORD_BYTES, 0, "a closed segment holds whole records only");
    // The cut at closing was lost (a crash before it reached the disk).
    write_bytes(closed, closed_len, &vec![0; 5000]);
    let (_, recovered) = open_recover(dir.path(), &config());
    let want: Vec<LogEntry> = (1..=700).map(|op| entry(op, 1, TAG)).collect();
    assert_eq!(entries_of(&recovered), want);
}

#[test]
fn k3_zeros_in_place_of_a_closed_segments_last_record_are_corruption() {
    let dir = temp_dir("prealloc-closed-damaged");
    one_record_per_flush(dir.path(), 700);
    let closed = segments(dir.path()).remove(0);
    let closed_len = file_len(&closed);
    write_bytes(&closed, closed_len - RECORD_BYTES, &[0; RECORD_BYTES as usize]);
    let mut storage = cohort_wal::FileStorage::open(dir.path(), config()).expect("valid config");
    match storage.recover() {
        Err(StorageError::Corrupt { reason, .. }) => {
            assert!(reason.contains("LSN"), "the next segment shows the missing record: {reason}");
        }
        Err(other) => panic!("expected Corrupt, got {other}"),
        Ok(_) => panic!("a synced record turned to zeros went unnoticed"),
    }
}

#[test]
fn k3_a_full_disk_while_writing_zeros_fails_no_flush() {
    let dir = temp_dir("prealloc-full");
    let (mut storage, _) = open_recover(dir.path(), &config());
    // Room for one record and a little: the zeros after it do not fit.
    storage.inject_fault(InjectedFault::SpaceLeft { bytes: RECORD_BYTES + 100 });
    ok(storage.append(GroupId(1), &entry(1, 1, TAG)));
    ok(storage.flush());
    ok(storage.append(GroupId(1), &entry(2, 1, TAG)));
    let error = storage.flush().expect_err("no room for the second record");
    assert!(matches!(error, StorageError::Full { .. }), "{error}");
    storage.inject_fault(InjectedFault::Clear);
    ok(storage.flush());
    for op in 3..=100 {
        ok(storage.append(GroupId(1), &entry(op, 1, TAG)));
        ok(storage.flush());
    }
    drop(storage);
    let (_, recovered) = open_recover(dir.path(), &config());
    let want: Vec<LogEntry> = (1..=100).map(|op| entry(op, 1, TAG)).collect();
    assert_eq!(entries_of(&recovered), want);
}

#[test]
fn o2_log_size_counts_the_preallocated_zeros_until_a_rotation_cuts_them() {
    let dir = temp_dir("prealloc-size");
    let (mut storage, _) = open_recover(dir.path(), &config());
    // The closed segments' files, and the active one's records and the
    // zeros written ahead of them (its file is created at its whole size,
    // H2, but the rest is a hole that takes no space).
    let closed_on_disk = |dir: &Path| {
        let mut files = segments(dir);
        files.pop();
        files.iter().map(|segment| file_len(segment)).sum::<u64>()
    };
    let mut records_end = SEGMENT_HEADER_BYTES;
    for op in 1..=1_000u64 {
        ok(storage.append(GroupId(1), &entry(op, 1, TAG)));
        ok(storage.flush());
        records_end += RECORD_BYTES;
        if storage.segment_count() > 1 {
            records_end = SEGMENT_HEADER_BYTES + RECORD_BYTES;
        }
        let active = storage.log_size_bytes() - closed_on_disk(dir.path());
        assert!(active > records_end && active <= records_end + PREALLOCATION_BYTES, "after op {op}: {active}");
        if storage.segment_count() > 1 {
            break;
        }
    }
    assert!(storage.segment_count() > 1, "rotated");
    let active = segments(dir.path()).last().map(|path| file_len(path)).expect("an active segment");
    assert_eq!(active, SEGMENT_BYTES, "the active segment keeps the size it was created with");
    drop(storage);
    // After recovery the zeros ahead are not known (they may be a hole):
    // the records are, and the next flush writes zeros again.
    let (storage, _) = open_recover(dir.path(), &config());
    assert_eq!(storage.log_size_bytes(), closed_on_disk(dir.path()) + records_end, "after recovery");
}
