//! One simulated shard's apply worker (D2), on the schedule a node's
//! apply thread follows: the shard lends a run of committed ops (D3: or a
//! chunk of a streamed transfer to stage) with its group's state machine
//! ([`cohort_core::driver::ApplyJob`]) and goes on; the worker does the
//! jobs in the order lent, one at a time, and hands each back with what
//! it did.
//!
//! The one difference is time: a run comes back a seeded number of ticks
//! after it was lent (none to a few), never before the run lent ahead of
//! it. Meanwhile the node handles everything else, so every input that can
//! reach a group with its state machine away does, in some seed. A crash
//! loses the runs away with the process, as a node's does.

use std::collections::VecDeque;

use cohort_core::driver::ApplyJob;
use cohort_core::{ApplyId, Done, StateMachine, Work};
use cohort_messages::GroupId;

/// A job the worker finished: hand it back with `ShardDriver::on_applied`.
pub struct AppliedRun {
    /// The group.
    pub group: GroupId,
    /// The job.
    pub id: ApplyId,
    /// Its state machine.
    pub state: Box<dyn StateMachine>,
    /// What the work did.
    pub done: Done,
}

struct Queued {
    job: ApplyJob,
    state: Box<dyn StateMachine>,
    due_tick: u64,
}

/// The worker's queue. See the module docs.
#[derive(Default)]
pub struct ApplyWorker {
    queue: VecDeque<Queued>,
    /// Runs applied, over this worker's life.
    pub runs_applied: u64,
    /// Runs that came back later than the tick they were lent in.
    pub runs_late: u64,
}

impl ApplyWorker {
    /// Take `job` (its state machine taken out of it); it is done at
    /// `due_tick` or after the run lent before it, whichever is later.
    pub fn lend(&mut self, mut job: ApplyJob, now: u64, due_tick: u64) {
        let state = job.state.take().expect("D2: a run from the driver holds its state machine");
        let after = self.queue.back().map_or(0, |queued| queued.due_tick);
        let due_tick = due_tick.max(after).max(now);
        if due_tick > now {
            self.runs_late += 1;
        }
        self.queue.push_back(Queued { job, state, due_tick });
    }

    /// The oldest run, applied now, if it is due by `now`. A run whose
    /// replica was removed meanwhile (`removed` says which groups) comes
    /// back unapplied: the shard clears its state machine either way, and
    /// the applied-stream checker ended the replica's stream at the
    /// removal, so an apply now would count for no replica.
    pub fn complete(&mut self, now: u64, removed: impl Fn(GroupId) -> bool) -> Option<AppliedRun> {
        if self.queue.front().is_none_or(|queued| queued.due_tick > now) {
            return None;
        }
        let Queued { job, mut state, .. } = self.queue.pop_front()?;
        let done = if removed(job.group) {
            match job.work {
                Work::Apply(_) => Done::Applied(Vec::new()),
                Work::Stage { .. } => Done::Staged(Err("the replica was removed".into())),
            }
        } else {
            self.runs_applied += 1;
            cohort_core::work_on(state.as_mut(), &job.work)
        };
        Some(AppliedRun { group: job.group, id: job.id, state, done })
    }

    /// The oldest run, done now whether due or not (a shell that waits
    /// for the worker).
    pub fn complete_now(&mut self, removed: impl Fn(GroupId) -> bool) -> Option<AppliedRun> {
        let due = self.queue.front()?.due_tick;
        self.complete(due, removed)
    }

    /// Runs away now.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// True if no run is away.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}
