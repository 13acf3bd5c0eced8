//! The shard's apply worker (D2): a thread that applies the runs of
//! committed ops that state machines asked to have applied off the shard's
//! thread ([`cohort_core::StateMachine::apply_off_shard`]).
//!
//! The shard actor hands over each run with its group's state machine
//! ([`ApplyJob`]) and goes on serving every group; the worker applies runs
//! in the order they came, one at a time, with the same call an inline
//! apply makes ([`cohort_core::work_on`]), and reports each back, state
//! machine and results together. D3: a state machine that applies here
//! also stages the chunks of a streamed transfer here, one job per chunk. The thread starts with the first run, so
//! a shard whose groups all apply inline has none. A state machine that
//! panics in its apply is reported, and the shard fails as it would have
//! with the apply on its own thread.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc;
use std::thread::JoinHandle;

use cohort_core::driver::ApplyJob;
use cohort_core::{ApplyId, Done, StateMachine};
use cohort_messages::GroupId;

/// What the worker reports for one job.
pub(crate) enum ApplyEvent {
    /// The job is done: its state machine and what the work did.
    Applied {
        /// The group.
        group: GroupId,
        /// The job.
        id: ApplyId,
        /// The state machine, back.
        state: Box<dyn StateMachine>,
        /// What it did.
        done: Done,
    },
    /// The state machine panicked in the run: its replica cannot go on.
    Panicked {
        /// The group.
        group: GroupId,
        /// The panic's message.
        reason: String,
    },
}

struct Queued {
    job: ApplyJob,
    state: Box<dyn StateMachine>,
}

/// Handle to the worker thread; dropping it lets the thread finish the
/// run it is on and waits for it, so that no state machine outlives its
/// shard on another thread (a shard restarted from storage would open its
/// files a second time).
pub(crate) struct ApplyWorker {
    work: Option<mpsc::Sender<Queued>>,
    thread: Option<JoinHandle<()>>,
}

impl ApplyWorker {
    /// Start the thread; `report` is called from it for every run.
    pub(crate) fn start(name: String, report: impl Fn(ApplyEvent) + Send + 'static) -> std::io::Result<ApplyWorker> {
        let (work, receive) = mpsc::channel::<Queued>();
        let thread = std::thread::Builder::new().name(name).spawn(move || {
            while let Ok(Queued { job, mut state }) = receive.recv() {
                let work = job.work;
                let done = std::panic::catch_unwind(AssertUnwindSafe(|| cohort_core::work_on(state.as_mut(), &work)));
                match done {
                    Ok(done) => report(ApplyEvent::Applied { group: job.group, id: job.id, state, done }),
                    Err(panic) => {
                        let reason = panic
                            .downcast_ref::<&str>()
                            .map(|reason| reason.to_string())
                            .or_else(|| panic.downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "a panic without a message".into());
                        report(ApplyEvent::Panicked { group: job.group, reason });
                        return;
                    }
                }
            }
        })?;
        Ok(ApplyWorker { work: Some(work), thread: Some(thread) })
    }

    /// Queue a run (its state machine taken out of the job). False if the
    /// thread has stopped (a state machine panicked).
    pub(crate) fn lend(&self, mut job: ApplyJob) -> bool {
        let Some(state) = job.state.take() else { return false };
        self.work.as_ref().is_some_and(|work| work.send(Queued { job, state }).is_ok())
    }
}

impl Drop for ApplyWorker {
    fn drop(&mut self) {
        drop(self.work.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
