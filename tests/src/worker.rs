//! One simulated shard's storage worker, run the way
//! `actors/src/storage_worker.rs` runs it on a node: the shard hands over
//! each turn's storage effects as one job and goes on; the worker, when
//! idle, executes every job queued by then, in order, with the core's one
//! executor, then makes them durable with one flush and reports its id (the
//! last one staged, which completes every earlier one). Jobs that arrive
//! while a flush is in flight wait for it: group commit across turns.
//!
//! The one difference is time: a flush starts when the worker takes its
//! jobs and completes (its sync returns) a seeded number of ticks later. A
//! crash in between finds it *in flight*: what `FileStorage` writes then
//! reaches the page cache and the simulated disk decides what survives.

use std::collections::VecDeque;

use cohort_core::storage::deferred::{DEFERRED_SNAPSHOTS_PER_STEP, FLUSHES_PER_FORCED_SNAPSHOT_STEP};
use cohort_core::storage::{self, Executed, Storage, StorageError};
use cohort_core::{Effect, FlushId};
use cohort_messages::GroupId;

/// One unit of work, in the order the shard handed it over.
#[derive(Debug)]
pub enum Job {
    /// One turn's storage effects.
    Run(Vec<Effect>),
    /// Remove everything of a group (an unload), after the jobs before it.
    RemoveGroup(GroupId),
}

/// A flush whose sync has not returned yet.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct InFlight {
    /// The flush id to report.
    pub id: FlushId,
    /// The tick its sync returns.
    pub due_tick: u64,
}

/// The worker's queue. See the module docs.
#[derive(Debug, Default)]
pub struct StorageWorker {
    jobs: VecDeque<Job>,
    in_flight: Option<InFlight>,
    flushes_since_snapshot_step: u32,
}

impl StorageWorker {
    /// Queue a job; [`StorageWorker::pump`] runs it when the worker is idle.
    pub fn queue(&mut self, job: Job) {
        self.jobs.push_back(job);
    }

    /// The flush in flight, if one is.
    pub fn in_flight(&self) -> Option<InFlight> {
        self.in_flight
    }

    /// If idle, execute every queued job against `storage`; a flush among
    /// them starts now and returns at `now + latency_ticks()`. Failed
    /// superblock stages (R12) are returned for the shard, in order; `Err`
    /// means the node must stop.
    pub fn pump(
        &mut self,
        storage: &mut impl Storage,
        now: u64,
        latency_ticks: impl FnOnce() -> u64,
    ) -> Result<Vec<GroupId>, StorageError> {
        let mut failed_superblocks = Vec::new();
        if self.in_flight.is_some() {
            return Ok(failed_superblocks);
        }
        let mut flush = None;
        while let Some(job) = self.jobs.pop_front() {
            match job {
                Job::Run(effects) => {
                    for effect in effects {
                        match storage::execute(storage, effect)? {
                            Executed::Done | Executed::NotStorage(_) => {}
                            Executed::Flush(id) => flush = Some(id),
                            Executed::SuperblockFailed(group) => failed_superblocks.push(group),
                        }
                    }
                }
                Job::RemoveGroup(group) => storage.remove_group(group)?,
            }
        }
        if let Some(id) = flush {
            self.in_flight = Some(InFlight { id, due_tick: now + latency_ticks().max(1) });
        }
        Ok(failed_superblocks)
    }

    /// The flush in flight, if its sync returns by `now`: made durable, its
    /// id returned for `Shard::on_flushed`. A worker with nothing to do
    /// writes deferred snapshots that are due instead, as a node's does when
    /// no job waits. `Err` means the node must stop.
    pub fn complete(&mut self, storage: &mut impl Storage, now: u64) -> Result<Option<FlushId>, StorageError> {
        match self.in_flight {
            Some(flight) if flight.due_tick <= now => {
                self.in_flight = None;
                storage.flush()?;
                self.flushes_since_snapshot_step += 1;
                if self.flushes_since_snapshot_step >= FLUSHES_PER_FORCED_SNAPSHOT_STEP
                    && storage.deferred_snapshots_due() > 0
                {
                    self.flushes_since_snapshot_step = 0;
                    storage.write_deferred_snapshots(DEFERRED_SNAPSHOTS_PER_STEP)?;
                }
                Ok(Some(flight.id))
            }
            None if self.jobs.is_empty() && storage.deferred_snapshots_due() > 0 => {
                self.flushes_since_snapshot_step = 0;
                storage.write_deferred_snapshots(DEFERRED_SNAPSHOTS_PER_STEP)?;
                Ok(None)
            }
            _ => Ok(None),
        }
    }
}
