//! Benchmark of the shard WAL: group commit against one sync per record.
//!
//! For 1, 100 and 10,000 groups per shard it appends records round-robin over
//! the groups and measures records/s, syncs/s and records per sync, for:
//! - group commit: `RECORDS_PER_FLUSH` records per flush (one log sync each);
//! - group commit with superblocks: the same, plus a superblock staged for
//!   every group touched by the flush (one more sync per flush, however many
//!   superblocks);
//! - one sync per record: a flush after every append;
//! - one sync per record, growing file: the same with K3's preallocation off,
//!   so that every flush also makes the file longer,
//!
//! and prints the ratio of group commit to one sync per record and what
//! preallocation saves per sync (latency, and the thread's CPU time from
//! `/proc/thread-self/schedstat`), all in the same run (sync latency on a shared disk drifts; comparing within one run is
//! what makes the ratio meaningful).
//!
//! `cargo bench -p cohort-runtime --bench wal`. Sizes can be changed with
//! `COHORT_BENCH_RECORDS` (group commit, default 50,000) and
//! `COHORT_BENCH_RECORDS_SYNC_EACH` (one sync per record, default 2,000).
//! Run without `--bench` (as `cargo test --all-targets` does) it does a small
//! smoke run only.

use std::time::{Duration, Instant};

use bytes::Bytes;
use cohort_core::storage::{Storage, Superblock};
use cohort_messages::{ClientId, GroupId, Incarnation, LogEntry, NodeId, Op, RequestNumber, View};
use cohort_wal::{FileStorage, FileStorageConfig};

/// Records per flush in the group-commit runs.
const RECORDS_PER_FLUSH: usize = 100;
/// Bytes of each record's operation.
const OPERATION_SIZE_BYTES: usize = 128;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Mode {
    GroupCommit,
    GroupCommitWithSuperblocks,
    SyncEachRecord,
    SyncEachRecordGrowing,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::GroupCommit => "group commit",
            Mode::GroupCommitWithSuperblocks => "group commit + superblocks",
            Mode::SyncEachRecord => "one sync per record",
            Mode::SyncEachRecordGrowing => "one sync per record, growing",
        }
    }
}

struct Measured {
    records: u64,
    syncs: u64,
    elapsed: Duration,
    /// CPU time of this thread over the run.
    cpu: Duration,
}

impl Measured {
    fn records_per_second(&self) -> f64 {
        self.records as f64 / self.elapsed.as_secs_f64()
    }

    fn syncs_per_second(&self) -> f64 {
        self.syncs as f64 / self.elapsed.as_secs_f64()
    }

    fn records_per_sync(&self) -> f64 {
        self.records as f64 / self.syncs.max(1) as f64
    }

    fn cpu_us_per_sync(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.syncs.max(1) as f64
    }
}

/// This thread's time on a CPU so far (`/proc/thread-self/schedstat`,
/// nanoseconds; zero where there is none).
fn thread_cpu() -> Duration {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    Duration::from_nanos(text.split_whitespace().next().and_then(|ns| ns.parse().ok()).unwrap_or(0))
}

fn superblock(commit: u64) -> Superblock {
    Superblock {
        view: View(1),
        log_view: View(1),
        commit: Op(commit),
        incarnation: Incarnation(1),
        members: vec![NodeId(1), NodeId(2), NodeId(3)],
        replication_quorum: 2,
        recovering: false,
    }
}

fn run(groups: u64, records: u64, mode: Mode) -> Measured {
    let dir = tempfile::Builder::new().prefix("cohort-bench-wal-").tempdir().expect("temp dir");
    let config = match mode {
        Mode::SyncEachRecordGrowing => {
            FileStorageConfig { preallocation_size_bytes: 0, ..FileStorageConfig::default() }
        }
        _ => FileStorageConfig::default(),
    };
    let mut storage = FileStorage::open(dir.path(), config).expect("valid config");
    if let Err(error) = storage.recover() {
        panic!("recover: {error}");
    }
    let operation = Bytes::from(vec![0xA5u8; OPERATION_SIZE_BYTES]);
    let mut next_op = vec![1u64; groups as usize];
    let sync_each = matches!(mode, Mode::SyncEachRecord | Mode::SyncEachRecordGrowing);
    let per_flush = if sync_each { 1 } else { RECORDS_PER_FLUSH as u64 };
    let before = storage.stats();
    let (started, cpu_before) = (Instant::now(), thread_cpu());
    let mut record = 0u64;
    while record < records {
        let mut touched = Vec::with_capacity(per_flush as usize);
        for _ in 0..per_flush.min(records - record) {
            let group = record % groups;
            let op = next_op[group as usize];
            next_op[group as usize] += 1;
            let entry = LogEntry {
                op: Op(op),
                view: View(1),
                client: ClientId(u128::from(group)),
                request: RequestNumber(op),
                operation: operation.clone(),
            };
            if let Err(error) = storage.append(GroupId(group), &entry) {
                panic!("append: {error}");
            }
            touched.push((group, op));
            record += 1;
        }
        if mode == Mode::GroupCommitWithSuperblocks {
            for (group, op) in &touched {
                if let Err(error) = storage.stage_superblock(GroupId(*group), &superblock(*op)) {
                    panic!("stage_superblock: {error}");
                }
            }
        }
        if let Err(error) = storage.flush() {
            panic!("flush: {error}");
        }
    }
    let (elapsed, cpu) = (started.elapsed(), thread_cpu().saturating_sub(cpu_before));
    let after = storage.stats();
    Measured { records, syncs: after.syncs_total() - before.syncs_total(), elapsed, cpu }
}

fn env_count(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

fn main() {
    let benchmarking = std::env::args().any(|arg| arg == "--bench");
    let (records, records_sync_each) = if benchmarking {
        (env_count("COHORT_BENCH_RECORDS", 50_000), env_count("COHORT_BENCH_RECORDS_SYNC_EACH", 2_000))
    } else {
        (200, 20)
    };
    println!(
        "WAL group commit benchmark: {OPERATION_SIZE_BYTES}-byte operations, {RECORDS_PER_FLUSH} records per flush \
         ({records} records), one sync per record ({records_sync_each} records)"
    );
    println!(
        "{:>7}  {:<30} {:>12} {:>10} {:>13} {:>13}",
        "groups", "mode", "records/s", "syncs/s", "records/sync", "CPU µs/sync"
    );
    for groups in [1u64, 100, 10_000] {
        let (mut group_commit_rate, mut sync_each) = (0.0, None);
        let modes =
            [Mode::GroupCommit, Mode::GroupCommitWithSuperblocks, Mode::SyncEachRecord, Mode::SyncEachRecordGrowing];
        for mode in modes {
            let count = if matches!(mode, Mode::GroupCommit | Mode::GroupCommitWithSuperblocks) {
                records
            } else {
                records_sync_each
            };
            let measured = run(groups, count, mode);
            println!(
                "{groups:>7}  {:<30} {:>12.0} {:>10.0} {:>13.1} {:>13.1}",
                mode.label(),
                measured.records_per_second(),
                measured.syncs_per_second(),
                measured.records_per_sync(),
                measured.cpu_us_per_sync()
            );
            match mode {
                Mode::GroupCommit => group_commit_rate = measured.records_per_second(),
                Mode::SyncEachRecord => {
                    println!(
                        "{groups:>7}  ratio group commit / one sync per record: {:.1}x",
                        group_commit_rate / measured.records_per_second()
                    );
                    sync_each = Some(measured);
                }
                Mode::SyncEachRecordGrowing => {
                    if let Some(preallocated) = &sync_each {
                        println!(
                            "{groups:>7}  ratio preallocated / growing: {:.2}x the syncs/s, {:.2}x the CPU per sync",
                            preallocated.syncs_per_second() / measured.syncs_per_second(),
                            preallocated.cpu_us_per_sync() / measured.cpu_us_per_sync().max(f64::MIN_POSITIVE)
                        );
                    }
                }
                Mode::GroupCommitWithSuperblocks => {}
            }
        }
    }
}
