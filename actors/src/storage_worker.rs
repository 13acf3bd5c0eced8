//! The shard's storage, on a thread of its own.
//!
//! The shard actor never waits for a disk: it hands each turn's storage
//! effects to this worker in one job, and goes on. The worker executes them
//! in order against [`FileStorage`] (group commit: one `fdatasync` per
//! `Flush`), and reports each completed flush, each failed superblock stage
//! (R12) and any fatal error back through a callback. A failed fsync is fatal
//! and never retried as if the data were safe: the worker stops and reports
//! it, and the node shuts down.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use cohort_core::Effect;
use cohort_core::storage::deferred::{DEFERRED_SNAPSHOTS_PER_STEP, FLUSHES_PER_FORCED_SNAPSHOT_STEP};
use cohort_core::storage::{self, Executed, Recovered, Storage, StorageError};
use cohort_messages::GroupId;

use cohort_wal::{FileStorage, FileStorageConfig, FileStorageStats};

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
    Run(Vec<Effect>),
    /// Remove everything of a group (S4 unload), after the jobs before it.
    RemoveGroup(GroupId),
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
    /// directory.
    pub fn start(
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
            .name(name)
            .spawn(move || {
                let _directory = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                let mut storage = match FileStorage::open(&dir, config) {
                    Ok(storage) => storage,
                    Err(error) => {
                        let _ = ready_tx.send(Err(StartError::Open { dir, reason: error.to_string() }));
                        return;
                    }
                };
                match storage.recover() {
                    Ok(recovered) => {
                        let _ = ready_tx.send(Ok(recovered));
                    }
                    Err(error) => {
                        let _ = ready_tx.send(Err(StartError::Recover { dir, error }));
                        return;
                    }
                }
                let mut published = SyncsPublished::default();
                published.publish(&storage, &metrics);
                serve(&mut storage, &job_rx, &report, &mut |storage| published.publish(storage, &metrics));
            })
            .map_err(|error| StartError::Open { dir: PathBuf::new(), reason: error.to_string() })?;
        Ok(StartingWorker { worker: StorageWorker { jobs, thread: Some(thread) }, ready: ready_rx })
    }

    /// Queue the removal of a group's data, after every job queued before.
    /// False if the worker stopped.
    pub fn remove_group(&self, group: GroupId) -> bool {
        self.jobs.send(Job::RemoveGroup(group)).is_ok()
    }

    /// Queue one turn's storage effects, in order. False if the worker stopped.
    pub fn run(&self, effects: Vec<Effect>) -> bool {
        self.jobs.send(Job::Run(effects)).is_ok()
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

/// Serve jobs until told to stop. Every job queued by the time the worker
/// looks is executed before one sync: the log records of many shard turns
/// share one `fdatasync` (group commit across turns), and only the last
/// flush id is reported, which the core takes as completing every earlier
/// one.
///
/// Deferred snapshots (`cohort_core::storage::deferred`) are written once
/// they are due (the log has a segment they could let go), when no job
/// waits, [`DEFERRED_SNAPSHOTS_PER_STEP`] at a time, so their files never
/// hold a flush; under a load that never leaves the worker idle, a
/// step follows every [`FLUSHES_PER_FORCED_SNAPSHOT_STEP`] flushes, so the log
/// can still let go of old segments.
fn serve(
    storage: &mut FileStorage,
    jobs: &mpsc::Receiver<Job>,
    report: &impl Fn(StorageEvent),
    publish: &mut impl FnMut(&FileStorage),
) {
    let mut flushes_since_step = 0u32;
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
                    if let Err(error) = storage.write_deferred_snapshots(DEFERRED_SNAPSHOTS_PER_STEP) {
                        report(StorageEvent::Fatal(error));
                        return;
                    }
                    flushes_since_step = 0;
                    publish(storage);
                    continue;
                }
                Err(mpsc::TryRecvError::Disconnected) => return,
            }
        };
        let mut batch = vec![first];
        while let Ok(more) = jobs.try_recv() {
            batch.push(more);
        }
        let mut stop = false;
        let mut flush = None;
        for job in batch {
            let effects = match job {
                Job::Run(effects) => effects,
                Job::RemoveGroup(group) => {
                    if let Err(error) = storage.remove_group(group) {
                        report(StorageEvent::Fatal(error));
                        return;
                    }
                    continue;
                }
                Job::Stop => {
                    stop = true;
                    break;
                }
            };
            for effect in effects {
                match storage::execute(storage, effect) {
                    Ok(Executed::Done | Executed::NotStorage(_)) => {}
                    Ok(Executed::Flush(id)) => flush = Some(id),
                    Ok(Executed::SuperblockFailed(group)) => report(StorageEvent::SuperblockFailed(group)),
                    Err(error) => {
                        report(StorageEvent::Fatal(error));
                        return;
                    }
                }
            }
        }
        if let Some(id) = flush {
            if let Err(error) = storage.flush() {
                report(StorageEvent::Fatal(error));
                return;
            }
            report(StorageEvent::Flushed(id));
            flushes_since_step += 1;
            if flushes_since_step >= FLUSHES_PER_FORCED_SNAPSHOT_STEP && storage.deferred_snapshots_due() > 0 {
                flushes_since_step = 0;
                if let Err(error) = storage.write_deferred_snapshots(DEFERRED_SNAPSHOTS_PER_STEP) {
                    report(StorageEvent::Fatal(error));
                    return;
                }
            }
        }
        publish(storage);
        if stop {
            return;
        }
    }
}

/// The syncs already published to the node's metrics, to publish only what
/// each batch of jobs added (`cohort_syncs_total`, K3).
#[derive(Default)]
struct SyncsPublished(FileStorageStats);

impl SyncsPublished {
    fn publish(&mut self, storage: &FileStorage, metrics: &NodeMetrics) {
        let now = storage.stats();
        metrics.add_syncs(SyncKind::Log, now.log_syncs.saturating_sub(self.0.log_syncs));
        metrics.add_syncs(SyncKind::Segment, now.segment_syncs.saturating_sub(self.0.segment_syncs));
        metrics.add_syncs(SyncKind::Superblock, now.superblock_syncs.saturating_sub(self.0.superblock_syncs));
        metrics.add_syncs(SyncKind::Snapshot, now.snapshot_syncs.saturating_sub(self.0.snapshot_syncs));
        metrics.add_syncs(SyncKind::Directory, now.directory_syncs.saturating_sub(self.0.directory_syncs));
        metrics.add_flushes(now.flushes.saturating_sub(self.0.flushes));
        self.0 = now;
    }
}
