//! One simulated shard's storage worker, on the schedule a node's worker
//! thread follows (`cohort_core::driver::storage_jobs`): the shard hands
//! over each turn's storage effects as one job and goes on; the worker,
//! when idle, runs every job queued by then, in order, then makes them
//! durable with one flush and reports its id (the last one staged, which
//! completes every earlier one). Jobs that arrive while a flush is in
//! flight wait for it: group commit across turns.
//!
//! The one difference is time: a flush starts when the worker takes its
//! jobs and completes (its sync returns) a seeded number of ticks later. A
//! crash in between finds it *in flight*: what `FileStorage` writes then
//! reaches the page cache and the simulated disk decides what survives.

use std::collections::VecDeque;

use cohort_core::FlushId;
use cohort_core::driver::{SnapshotSteps, StorageJob, run_jobs};
use cohort_core::storage::{Storage, StorageError};
use cohort_messages::GroupId;

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
    jobs: VecDeque<StorageJob>,
    in_flight: Option<InFlight>,
    steps: SnapshotSteps,
}

impl StorageWorker {
    /// Queue a job; [`StorageWorker::pump`] runs it when the worker is idle.
    pub fn queue(&mut self, job: StorageJob) {
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
        if self.in_flight.is_some() {
            return Ok(Vec::new());
        }
        let ran = run_jobs(storage, self.jobs.drain(..))?;
        if let Some(id) = ran.flush {
            self.in_flight = Some(InFlight { id, due_tick: now + latency_ticks().max(1) });
        }
        Ok(ran.failed_superblocks)
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
                self.steps.after_flush(storage)?;
                Ok(Some(flight.id))
            }
            None if self.jobs.is_empty() => {
                self.steps.when_idle(storage)?;
                Ok(None)
            }
            _ => Ok(None),
        }
    }
}
