//! V4: acknowledged records survive SIGKILL, with a real child process.
//!
//! The parent re-runs this test binary as a child (selected by an
//! environment variable) that appends entries for many groups, stages
//! superblocks, saves snapshots and flushes, printing one line per
//! acknowledgement *after* the flush (or snapshot save) returned. The parent
//! reads the lines, kills the child with SIGKILL at a seeded random point,
//! reads whatever acknowledgements were still in the pipe, reopens the shard
//! directory and checks that every acknowledged entry is present and intact
//! (same view, same checksum), every acknowledged superblock and snapshot is
//! there or newer. Then it starts the next child on the same directory, so
//! recoveries of recoveries are exercised too.
//!
//! `cargo test` does a few dozen kills. For the long run:
//! `COHORT_CRASH_KILLS=200 cargo test -p cohort-wal --release --test storage_crash -- --nocapture`
//! (`COHORT_CRASH_SEED` picks the seed; the seed is printed on failure).

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use bytes::Bytes;
use cohort_core::storage::conformance::splitmix64;
use cohort_core::storage::{Recovered, Snapshot, Storage, StorageError};
use cohort_messages::{ClientId, GroupId, Incarnation, LogEntry, NodeId, Op, RequestNumber, View};
use cohort_wal::{FileStorage, FileStorageConfig};

const CHILD_DIR_ENV: &str = "COHORT_CRASH_CHILD_DIR";
const CHILD_SEED_ENV: &str = "COHORT_CRASH_CHILD_SEED";
const KILLS_ENV: &str = "COHORT_CRASH_KILLS";
const SEED_ENV: &str = "COHORT_CRASH_SEED";
const KILLS_DEFAULT: u64 = 24;
const CHILD_TEST_NAME: &str = "child_process_for_the_sigkill_test";

/// Groups the child writes to.
const GROUPS: u64 = 128;
/// Records per flush.
const RECORDS_PER_FLUSH: u64 = 48;
/// Snapshots saved after each flush.
const SNAPSHOTS_PER_FLUSH: usize = 2;
/// The child stops by itself after this many flushes (the parent kills it long before).
const CHILD_FLUSHES_MAX: u64 = 50_000;

fn config() -> FileStorageConfig {
    // Small segments so that rotation and segment removal happen under fire.
    FileStorageConfig {
        segment_size_max_bytes: 16 * 1024,
        record_size_max_bytes: 4096,
        preallocation_size_bytes: 4096,
        ..FileStorageConfig::default()
    }
}

fn checksum(entry: &LogEntry) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&entry.request.get().to_le_bytes()), &entry.operation)
}

fn recover(dir: &Path) -> Result<(FileStorage, Recovered), StorageError> {
    let mut storage = FileStorage::open(dir, config()).expect("valid config");
    let recovered = storage.recover()?;
    Ok((storage, recovered))
}

/// Not a test on its own: the child process of the SIGKILL test. Without the
/// environment variable it returns at once.
#[test]
fn child_process_for_the_sigkill_test() {
    let Ok(dir) = std::env::var(CHILD_DIR_ENV) else { return };
    let seed: u64 = std::env::var(CHILD_SEED_ENV).ok().and_then(|seed| seed.parse().ok()).unwrap_or(1);
    if let Err(error) = child(Path::new(&dir), seed) {
        eprintln!("crash child failed: {error}");
        std::process::exit(3);
    }
}

fn child(dir: &Path, seed: u64) -> Result<(), StorageError> {
    let (mut storage, recovered) = recover(dir)?;
    let mut next_op: HashMap<u64, u64> = HashMap::new();
    let mut snapshot_ops: HashMap<u64, u64> = HashMap::new();
    for (group, state) in &recovered.groups {
        if let Some(snapshot) = &state.snapshot {
            snapshot_ops.insert(group.get(), snapshot.op.get());
        }
        let last = state.entries.last().map(|entry| entry.op).or(state.snapshot.as_ref().map(|snapshot| snapshot.op));
        next_op.insert(group.get(), last.map_or(1, |op| op.get() + 1));
    }
    let mut rng = seed;
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut lines = Vec::new();
    for flush in 0..CHILD_FLUSHES_MAX {
        lines.clear();
        for _ in 0..RECORDS_PER_FLUSH {
            let group = splitmix64(&mut rng) % GROUPS + 1;
            let op = *next_op.entry(group).or_insert(1);
            let len = (splitmix64(&mut rng) % 200) as usize;
            let operation: Vec<u8> = (0..len).map(|_| splitmix64(&mut rng) as u8).collect();
            let entry = LogEntry {
                op: Op(op),
                view: View((seed % 1000) as u32),
                client: ClientId(u128::from(group)),
                request: RequestNumber(splitmix64(&mut rng)),
                operation: Bytes::from(operation),
            };
            storage.append(GroupId(group), &entry)?;
            next_op.insert(group, op + 1);
            lines.push(format!("ack {group} {op} {} {} .", entry.view.get(), checksum(&entry)));
        }
        if flush % 4 == 0 {
            for group in 1..=GROUPS {
                if let Some(next) = next_op.get(&group) {
                    let commit = next - 1;
                    let superblock = cohort_core::storage::Superblock {
                        view: View(1),
                        log_view: View(1),
                        commit: Op(commit),
                        incarnation: Incarnation(1),
                        members: vec![NodeId(1), NodeId(2), NodeId(3)],
                        replication_quorum: 2,
                        recovering: false,
                    };
                    storage.stage_superblock(GroupId(group), &superblock)?;
                    lines.push(format!("sb {group} {commit} .",));
                }
            }
        }
        storage.flush()?;
        for line in &lines {
            let _ = writeln!(out, "{line}");
        }
        let _ = out.flush();
        // Snapshot the group whose snapshot is oldest, so that old segments
        // become removable in turn.
        for _ in 0..SNAPSHOTS_PER_FLUSH {
            let oldest = (1..=GROUPS)
                .filter(|group| next_op.contains_key(group))
                .min_by_key(|group| snapshot_ops.get(group).copied().unwrap_or(0));
            let Some(group) = oldest else { break };
            let op = next_op[&group] - 1;
            let data = Bytes::from(format!("state of group {group} at op {op}"));
            storage.defer_snapshot(GroupId(group), &Snapshot { op: Op(op), view: View(1), data })?;
            snapshot_ops.insert(group, op);
            lines.push(format!("snap {group} {op} ."));
        }
        // The log reaches these snapshots, so they wait (deferred) until
        // written; a kill before that must find every acknowledged entry.
        storage.write_deferred_snapshots(usize::MAX)?;
        for line in lines.iter().filter(|line| line.starts_with("snap ")) {
            let _ = writeln!(out, "{line}");
        }
        let _ = writeln!(out, "removed {} .", storage.stats().segments_removed);
        let _ = out.flush();
    }
    Ok(())
}

/// What the parent holds acknowledged.
#[derive(Default)]
struct Acknowledged {
    /// Per group: op -> (view, checksum).
    entries: HashMap<u64, BTreeMap<u64, (u32, u32)>>,
    superblock_commits: HashMap<u64, u64>,
    snapshot_ops: HashMap<u64, u64>,
    entry_acks: u64,
    /// Segments removed by the current child so far (its own counter).
    segments_removed_by_child: u64,
    superblock_acks: u64,
    snapshot_acks: u64,
}

impl Acknowledged {
    /// Take one line of the child's output; partial or foreign lines are ignored.
    fn take(&mut self, line: &str) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let number = |index: usize| words.get(index).and_then(|word| word.parse::<u64>().ok());
        match (words.first(), words.last()) {
            (Some(&"ack"), Some(&".")) if words.len() == 6 => {
                if let (Some(group), Some(op), Some(view), Some(sum)) = (number(1), number(2), number(3), number(4)) {
                    self.entries.entry(group).or_default().insert(op, (view as u32, sum as u32));
                    self.entry_acks += 1;
                }
            }
            (Some(&"sb"), Some(&".")) if words.len() == 4 => {
                if let (Some(group), Some(commit)) = (number(1), number(2)) {
                    let known = self.superblock_commits.entry(group).or_default();
                    *known = (*known).max(commit);
                    self.superblock_acks += 1;
                }
            }
            (Some(&"snap"), Some(&".")) if words.len() == 4 => {
                if let (Some(group), Some(op)) = (number(1), number(2)) {
                    let known = self.snapshot_ops.entry(group).or_default();
                    *known = (*known).max(op);
                    self.snapshot_acks += 1;
                }
            }
            (Some(&"removed"), Some(&".")) if words.len() == 3 => {
                if let Some(removed) = number(1) {
                    self.segments_removed_by_child = self.segments_removed_by_child.max(removed);
                }
            }
            _ => {}
        }
    }

    /// Every acknowledgement that the recovered state does not honour.
    fn lost(&self, recovered: &Recovered) -> Vec<String> {
        let mut lost = Vec::new();
        for (group, acked) in &self.entries {
            let state = recovered.groups.get(&GroupId(*group));
            let snapshot_op = state.and_then(|state| state.snapshot.as_ref()).map_or(0, |snapshot| snapshot.op.get());
            let entries = state.map(|state| state.entries.as_slice()).unwrap_or_default();
            for (op, (view, sum)) in acked.range(snapshot_op + 1..) {
                let found = entries.iter().find(|entry| entry.op.get() == *op);
                match found {
                    Some(entry) if entry.view.get() == *view && checksum(entry) == *sum => {}
                    Some(_) => lost.push(format!("group:{group} op:{op} present but different")),
                    None => lost.push(format!("group:{group} op:{op} missing (snapshot op {snapshot_op})")),
                }
            }
        }
        for (group, commit) in &self.superblock_commits {
            let have = recovered.groups.get(&GroupId(*group)).and_then(|state| state.superblock.as_ref());
            if have.is_none_or(|superblock| superblock.commit.get() < *commit) {
                lost.push(format!("group:{group} superblock with commit {commit}"));
            }
        }
        for (group, op) in &self.snapshot_ops {
            let have = recovered.groups.get(&GroupId(*group)).and_then(|state| state.snapshot.as_ref());
            if have.is_none_or(|snapshot| snapshot.op.get() < *op) {
                lost.push(format!("group:{group} snapshot at op {op}"));
            }
        }
        lost
    }
}

fn contiguous(recovered: &Recovered) -> Result<(), String> {
    for (group, state) in &recovered.groups {
        let first = state.snapshot.as_ref().map_or(1, |snapshot| snapshot.op.get() + 1);
        for (index, entry) in state.entries.iter().enumerate() {
            if entry.op.get() != first + index as u64 {
                return Err(format!("{group}: entries not contiguous from op {first}: op {} at {index}", entry.op));
            }
        }
    }
    Ok(())
}

#[test]
fn v4_acknowledged_records_survive_sigkill() {
    let kills: u64 = std::env::var(KILLS_ENV).ok().and_then(|kills| kills.parse().ok()).unwrap_or(KILLS_DEFAULT);
    let seed: u64 = std::env::var(SEED_ENV).ok().and_then(|seed| seed.parse().ok()).unwrap_or(0xC0_4087);
    let dir = tempfile::Builder::new().prefix("cohort-storage-sigkill-").tempdir().expect("temp dir");
    let exe = std::env::current_exe().expect("test binary path");
    let mut rng = seed;
    let mut acked = Acknowledged::default();
    let mut torn_tails = 0u64;
    let mut exits_before_kill = 0u64;
    let mut segments_removed = 0u64;
    for kill in 0..kills {
        let mut child = Command::new(&exe)
            .args(["--exact", CHILD_TEST_NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR_ENV, dir.path())
            .env(CHILD_SEED_ENV, splitmix64(&mut rng).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the child");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut reader = BufReader::new(stdout);
        // One kill in eight lands at once (in start-up or recovery); the rest
        // after a random number of acknowledgements.
        let roll = splitmix64(&mut rng);
        let wait_lines = if roll.is_multiple_of(8) { 0 } else { 1 + (roll >> 8) % 1500 };
        let mut line = String::new();
        let mut seen = 0;
        while seen < wait_lines {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) => {
                    exits_before_kill += 1;
                    break;
                }
                Ok(_) => {
                    acked.take(&line);
                    seen += 1;
                }
                Err(error) => panic!("seed {seed} kill {kill}: reading the child: {error}"),
            }
        }
        child.kill().expect("SIGKILL the child");
        let status = child.wait().expect("reap the child");
        // Whatever is still in the pipe was printed after a flush returned.
        for rest in reader.lines() {
            match rest {
                Ok(rest) => acked.take(&rest),
                Err(_) => break,
            }
        }
        assert!(status.code() != Some(3), "seed {seed} kill {kill}: the child failed");
        segments_removed += std::mem::take(&mut acked.segments_removed_by_child);
        let (storage, recovered) = match recover(dir.path()) {
            Ok(recovered) => recovered,
            Err(error) => panic!("seed {seed} kill {kill}: recovery failed: {error}"),
        };
        if let Some(report) = storage.recovery_report() {
            torn_tails += u64::from(report.torn_tail_bytes > 0);
            segments_removed += report.segments_removed as u64;
        }

        drop(storage);
        let lost = acked.lost(&recovered);
        assert!(
            lost.is_empty(),
            "seed {seed} kill {kill}: {} acknowledged items lost: {:?}",
            lost.len(),
            &lost[..lost.len().min(10)]
        );
        if let Err(problem) = contiguous(&recovered) {
            panic!("seed {seed} kill {kill}: {problem}");
        }
    }
    eprintln!(
        "sigkill crash test: seed {seed}, kills {kills}, acknowledged entries {}, superblocks {}, snapshots {}, \
         lost 0, segments removed {segments_removed}, recoveries that cut a torn tail {torn_tails}, children that ended \
         before the kill {exits_before_kill}",
        acked.entry_acks, acked.superblock_acks, acked.snapshot_acks
    );
    assert!(acked.entry_acks > kills * 100, "too few acknowledgements to mean anything: {}", acked.entry_acks);
}
