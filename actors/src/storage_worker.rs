//! The shard's storage, on a thread of its own.
//!
//! The shard actor never waits for a disk: it hands each turn's storage
//! effects to this worker in one job, and goes on. How the worker takes its
//! jobs (all queued at once, one sync for them, deferred snapshots between)
//! is the driver's schedule, [`cohort_core::driver::storage_jobs`], which
//! the simulator's worker follows too; this file is the thread around it
//! against [`FileStorage`]. It reports each completed flush, each failed
//! superblock stage (R12) and any fatal error back through a callback. A
//! failed fsync is fatal and never retried as if the data were safe: the
//! worker stops and reports it, and the node shuts down. Recovery is logged
//! when it starts and when it ends, with what it read and the bytes on disk
//! (O1: how long a restart takes, and why).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use cohort_core::driver::{SnapshotSteps, StorageJob, run_jobs};
use cohort_core::storage::{Recovered, Storage, StorageError};
use cohort_messages::GroupId;

use cohort_wal::{FileStorage, FileStorageConfig, FileStorageStats, LostRecords};

use crate::metrics::{NodeMetrics, SyncKind};

/// What the worker reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageEvent {
    /// Everything staged before `Flush { id }` is durable.
    Flushed(u64),
    /// Staging a group's superblock failed (R12); the group retries later.
    SuperblockFailed(GroupId),
    /// The environment is dead; the node must stop.
    Fatal(StorageError),
}

enum Job {
    Storage(StorageJob),
    Stop,
}

/// Handle to the worker thread.
pub struct StorageWorker {
    jobs: mpsc::Sender<Job>,
    thread: Option<JoinHandle<()>>,
}

/// A worker whose thread is still opening and recovering its storage.
pub struct StartingWorker {
    worker: StorageWorker,
    ready: mpsc::Receiver<Result<Recovered, StartError>>,
}

impl StartingWorker {
    /// Wait until the storage is recovered: the worker, and what it read.
    pub fn recovered(self) -> Result<(StorageWorker, Recovered), StartError> {
        let recovered = self.ready.recv().map_err(|_| StartError::Open {
            dir: PathBuf::new(),
            reason: "storage thread died while opening".into(),
        })??;
        Ok((self.worker, recovered))
    }
}

/// Why the worker could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The directory or limits are unusable.
    #[error("storage in {dir}: {reason}")]
    Open {
        /// The shard directory.
        dir: PathBuf,
        /// Why.
        reason: String,
    },
    /// Recovery failed (for example, corruption in the middle of the log).
    #[error("recovering storage in {dir}: {error}")]
    Recover {
        /// The shard directory.
        dir: PathBuf,
        /// The storage error, naming file and offset.
        error: StorageError,
    },
}

impl StorageWorker {
    /// Open and recover the shard's storage in `dir` on a new thread, then
    /// serve jobs. `report` is called from the worker thread. Returns at
    /// once: [`StartingWorker::recovered`] waits for the recovery, so the
    /// shards of a node recover side by side (Z2).
    ///
    /// `lock` is held by the worker thread for its whole life, so a worker
    /// restarted for the same directory (after its shard died) waits until
    /// the previous one has finished: two `FileStorage`s never share a
    /// directory. `shard` labels what the worker publishes to `metrics`.
    pub fn start(
        shard: usize,
        dir: PathBuf,
        config: FileStorageConfig,
        name: String,
        lock: Arc<Mutex<()>>,
        metrics: Arc<NodeMetrics>,
        report: impl Fn(StorageEvent) + Send + 'static,
    ) -> Result<StartingWorker, StartError> {
        let (ready_tx, ready_rx) = mpsc::channel::<Result<Recovered, StartError>>();
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                let _directory = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                let began = std::time::Instant::now();
                tracing::info!(storage = %name, dir = %dir.display(), "recovering storage in {}", dir.display());
                let mut storage = match FileStorage::open(&dir, config) {
                    Ok(storage) => storage,
                    Err(error) => {
                        let _ = ready_tx.send(Err(StartError::Open { dir, reason: error.to_string() }));
                        return;
                    }
                };
                match storage.recover() {
                    Ok(recovered) => {
                        log_recovered(&name, &dir, &recovered, began.elapsed());
                        let lost = storage.recovery_report().and_then(|report| report.lost.as_ref());
                        if let Some(lost) = lost {
                            log_lost(&name, lost);
                        }
                        metrics.add_wal_losses(shard, u64::from(lost.is_some()));
                        let _ = ready_tx.send(Ok(recovered));
                    }
                    Err(error) => {
                        let _ = ready_tx.send(Err(StartError::Recover { dir, error }));
                        return;
                    }
                }
                let mut published = Published { shard, syncs: FileStorageStats::default() };
                published.publish(&storage, &metrics);
                serve(&mut storage, &job_rx, &report, &mut |storage| published.publish(storage, &metrics));
            })
            .map_err(|error| StartError::Open { dir: PathBuf::new(), reason: error.to_string() })?;
        Ok(StartingWorker { worker: StorageWorker { jobs, thread: Some(thread) }, ready: ready_rx })
    }

    /// Queue the removal of a group's data, after every job queued before.
    /// False if the worker stopped.
    pub fn remove_group(&self, group: GroupId) -> bool {
        self.run(StorageJob::RemoveGroup(group))
    }

    /// Queue a job (one turn's storage effects in order, a removal or a
    /// reset). False if the worker stopped.
    pub fn run(&self, job: StorageJob) -> bool {
        self.jobs.send(Job::Storage(job)).is_ok()
    }
}

impl Drop for StorageWorker {
    fn drop(&mut self) {
        let _ = self.jobs.send(Job::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Say what a recovery read: groups, log entries, snapshots, the bytes the
/// shard's directory holds, and how long it took.
fn log_recovered(name: &str, dir: &std::path::Path, recovered: &Recovered, took: std::time::Duration) {
    let groups = recovered.groups.len();
    let log_entries: usize = recovered.groups.values().map(|group| group.entries.len()).sum();
    let snapshots = recovered.groups.values().filter(|group| group.snapshot.is_some()).count();
    let bytes_on_disk = bytes_under(dir);
    let took_ms = took.as_millis() as u64;
    tracing::info!(
        storage = %name,
        dir = %dir.display(),
        groups,
        log_entries,
        snapshots,
        bytes_on_disk,
        took_ms,
        "storage recovered in {took_ms} ms: {groups} groups, {log_entries} log entries, {snapshots} snapshots, \
         {bytes_on_disk} bytes on disk in {}",
        dir.display()
    );
}

/// H2: say, at error level, which file lost synced records, and what the
/// node does about it.
fn log_lost(name: &str, lost: &LostRecords) {
    tracing::error!(
        storage = %name,
        path = %lost.path,
        offset = lost.offset,
        "{lost}; the log was cut there and every group of this shard recovers from its peers before it votes or \
         acknowledges again (docs/storage.md, \"Lost synced records\")"
    );
}

/// Bytes of the files in `dir` and its subdirectories, one level down (the
/// write-ahead log keeps its files flat); what cannot be read counts as 0.
fn bytes_under(dir: &std::path::Path) -> u64 {
    fn walk(dir: &std::path::Path, depth: u32) -> u64 {
        let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
        entries
            .flatten()
            .map(|entry| match entry.metadata() {
                Ok(metadata) if metadata.is_dir() && depth > 0 => walk(&entry.path(), depth - 1),
                Ok(metadata) if metadata.is_file() => metadata.len(),
                _ => 0,
            })
            .sum()
    }
    walk(dir, 1)
}

/// Serve jobs until told to stop, on the driver's schedule
/// ([`cohort_core::driver::storage_jobs`]): every job queued by the time
/// the worker looks runs before one sync, and deferred snapshots are
/// written while no job waits.
fn serve(
    storage: &mut FileStorage,
    jobs: &mpsc::Receiver<Job>,
    report: &impl Fn(StorageEvent),
    publish: &mut impl FnMut(&FileStorage),
) {
    let mut steps = SnapshotSteps::default();
    let fatal = |error: StorageError| report(StorageEvent::Fatal(error));
    loop {
        let first = if storage.deferred_snapshots_due() == 0 {
            match jobs.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        } else {
            match jobs.try_recv() {
                Ok(job) => job,
                Err(mpsc::TryRecvError::Empty) => {
                    if let Err(error) = steps.when_idle(storage) {
                        return fatal(error);
                    }
                    publish(storage);
                    continue;
                }
                Err(mpsc::TryRecvError::Disconnected) => return,
            }
        };
        let mut batch = Vec::new();
        let mut stop = false;
        for job in std::iter::once(first).chain(std::iter::from_fn(|| jobs.try_recv().ok())) {
            match job {
                Job::Storage(job) => batch.push(job),
                Job::Stop => {
                    stop = true;
                    break;
                }
            }
        }
        let ran = match run_jobs(storage, batch) {
            Ok(ran) => ran,
            Err(error) => return fatal(error),
        };
        for group in ran.failed_superblocks {
            report(StorageEvent::SuperblockFailed(group));
        }
        if let Some(id) = ran.flush {
            if let Err(error) = storage.flush() {
                return fatal(error);
            }
            report(StorageEvent::Flushed(id));
            if let Err(error) = steps.after_flush(storage) {
                return fatal(error);
            }
        }
        publish(storage);
        if stop {
            return;
        }
    }
}

/// What the worker publishes to the node's metrics after each batch of
/// jobs: the syncs it added (`cohort_syncs_total`, K3; the ones already
/// published are kept to add only the difference) and the log's size on
/// disk (`cohort_wal_size_bytes`, O2).
struct Published {
    shard: usize,
    syncs: FileStorageStats,
}

impl Published {
    fn publish(&mut self, storage: &FileStorage, metrics: &NodeMetrics) {
        let now = storage.stats();
        let last = &self.syncs;
        metrics.add_syncs(SyncKind::Log, now.log_syncs.saturating_sub(last.log_syncs));
        metrics.add_syncs(SyncKind::Segment, now.segment_syncs.saturating_sub(last.segment_syncs));
        metrics.add_syncs(SyncKind::Superblock, now.superblock_syncs.saturating_sub(last.superblock_syncs));
        metrics.add_syncs(SyncKind::Snapshot, now.snapshot_syncs.saturating_sub(last.snapshot_syncs));
        metrics.add_syncs(SyncKind::Directory, now.directory_syncs.saturating_sub(last.directory_syncs));
        metrics.add_flushes(now.flushes.saturating_sub(last.flushes));
        self.syncs = now;
        metrics.set_wal_size_bytes(self.shard, storage.log_size_bytes());
    }
}
