//! How a shard's storage worker takes its jobs: the one schedule the node's
//! worker thread and the simulator's worker both follow.
//!
//! A worker that looks for work takes every job queued by then and runs
//! them in order with the core's one executor ([`storage::execute()`]); if
//! any of them asked for a flush, one sync then makes all of them durable
//! (group commit across turns, K3) and only the last flush id is reported,
//! which the core takes as completing every earlier one. Superblock stages
//! that failed (R12) are reported for their groups; any other error stops
//! the node.
//!
//! Deferred snapshots (`storage::deferred`) are written a few at a time
//! ([`DEFERRED_SNAPSHOTS_PER_STEP`]) while no job waits, so their files
//! never hold a flush back; a load that never leaves the worker idle still
//! gets a step after every [`FLUSHES_PER_FORCED_SNAPSHOT_STEP`] flushes, so
//! the log can let go of old segments. [`SnapshotSteps`] keeps that count.
//!
//! What differs between the two workers is only time: the node's thread
//! syncs at once, the simulator completes the sync a seeded number of ticks
//! later (a crash in between finds it in flight).

use cohort_messages::GroupId;

use crate::effect::{Effect, FlushId};
use crate::storage::deferred::{DEFERRED_SNAPSHOTS_PER_STEP, FLUSHES_PER_FORCED_SNAPSHOT_STEP};
use crate::storage::{self, Executed, Storage, StorageError, Superblock};

/// One unit of a worker's work, in the order the shard handed it over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StorageJob {
    /// One turn's storage effects ([`super::Turn::storage`]).
    Run(Vec<Effect>),
    /// Remove everything of a group (an unload), after the jobs before it.
    RemoveGroup(GroupId),
    /// D1: replace everything of a group by this superblock alone (a
    /// replica rebuilt from the other members, [`Storage::reset_group`]).
    ResetGroup(GroupId, Superblock),
}

/// What running a batch of jobs left to do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RanJobs {
    /// The last flush the jobs asked for: sync, then report it.
    pub flush: Option<FlushId>,
    /// Groups whose superblock stage failed (R12), in order: report each.
    pub failed_superblocks: Vec<GroupId>,
}

/// Run `jobs` in order against `storage` (everything but the sync).
/// `Err` means the node must stop.
pub fn run_jobs(
    storage: &mut impl Storage,
    jobs: impl IntoIterator<Item = StorageJob>,
) -> Result<RanJobs, StorageError> {
    let mut ran = RanJobs::default();
    for job in jobs {
        match job {
            StorageJob::Run(effects) => {
                for effect in effects {
                    match storage::execute(storage, effect)? {
                        Executed::Done => {}
                        Executed::NotStorage(effect) => {
                            debug_assert!(false, "a storage job holds only storage effects: {:?}", effect.kind())
                        }
                        Executed::Flush(id) => {
                            debug_assert!(ran.flush.is_none_or(|earlier| earlier < id), "flush ids grow");
                            ran.flush = Some(id);
                        }
                        Executed::SuperblockFailed(group) => ran.failed_superblocks.push(group),
                    }
                }
            }
            StorageJob::RemoveGroup(group) => storage.remove_group(group)?,
            StorageJob::ResetGroup(group, superblock) => storage.reset_group(group, &superblock)?,
        }
    }
    Ok(ran)
}

/// When a worker writes deferred snapshots. See the module docs.
#[derive(Clone, Debug, Default)]
pub struct SnapshotSteps {
    flushes_since_step: u32,
}

impl SnapshotSteps {
    /// After a completed flush: a step if the load has kept the worker busy
    /// for [`FLUSHES_PER_FORCED_SNAPSHOT_STEP`] flushes and snapshots wait.
    pub fn after_flush(&mut self, storage: &mut impl Storage) -> Result<(), StorageError> {
        self.flushes_since_step += 1;
        if self.flushes_since_step >= FLUSHES_PER_FORCED_SNAPSHOT_STEP && storage.deferred_snapshots_due() > 0 {
            self.step(storage)?;
        }
        Ok(())
    }

    /// With no job waiting: a step if snapshots wait. True if it wrote one
    /// (the worker should look for jobs again before the next).
    pub fn when_idle(&mut self, storage: &mut impl Storage) -> Result<bool, StorageError> {
        if storage.deferred_snapshots_due() == 0 {
            return Ok(false);
        }
        self.step(storage)?;
        Ok(true)
    }

    fn step(&mut self, storage: &mut impl Storage) -> Result<(), StorageError> {
        self.flushes_since_step = 0;
        storage.write_deferred_snapshots(DEFERRED_SNAPSHOTS_PER_STEP).map(|_written| ())
    }
}
