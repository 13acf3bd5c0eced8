//! The shard's apply worker (D2): a thread that applies the runs of
//! committed ops that state machines asked to have applied off the shard's
//! thread ([`cohort_core::StateMachine::apply_off_shard`]).
//!
//! The shard actor hands over each run with its group's state machine
//! ([`ApplyJob`]) and goes on serving every group; the worker applies runs
//! in the order they came, one at a time, with the same call an inline
//! apply makes ([`cohort_core::apply_run`]), and reports each back, state
//! machine and results together. The thread starts with the first run, so
//! a shard whose groups all apply inline has none. A state machine that
//! panics in its apply is reported, and the shard fails as it would have
//! with the apply on its own thread.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc;
use std::thread::JoinHandle;

use bytes::Bytes;
use cohort_core::driver::ApplyJob;
use cohort_core::{ApplyId, StateMachine};
use cohort_messages::GroupId;

/// What the worker reports for one run.
pub(crate) enum ApplyEvent {
    /// The run is applied: its state machine and one result per op.
    Applied {
        /// The group.
        group: GroupId,
        /// The run.
        id: ApplyId,
        /// The state machine, back.
        state: Box<dyn StateMachine>,
        /// The results.
        results: Vec<Bytes>,
    },
    /// The state machine panicked in the run: its replica cannot go on.
    Panicked {
        /// The group.
        group: GroupId,
        /// The panic's message.
        reason: String,
    },
}

struct Work {
    job: ApplyJob,
    state: Box<dyn StateMachine>,
}

/// Handle to the worker thread; dropping it lets the thread finish the
/// run it is on and waits for it, so that no state machine outlives its
/// shard on another thread (a shard restarted from storage would open its
/// files a second time).
pub(crate) struct ApplyWorker {
    work: Option<mpsc::Sender<Work>>,
    thread: Option<JoinHandle<()>>,
}

impl ApplyWorker {
    /// Start the thread; `report` is called from it for every run.
    pub(crate) fn start(name: String, report: impl Fn(ApplyEvent) + Send + 'static) -> std::io::Result<ApplyWorker> {
        let (work, receive) = mpsc::channel::<Work>();
        let thread = std::thread::Builder::new().name(name).spawn(move || {
            while let Ok(Work { job, mut state }) = receive.recv() {
                let ops = job.ops;
                let applied =
                    std::panic::catch_unwind(AssertUnwindSafe(|| cohort_core::apply_run(state.as_mut(), &ops)));
                match applied {
                    Ok(results) => report(ApplyEvent::Applied { group: job.group, id: job.id, state, results }),
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
        self.work.as_ref().is_some_and(|work| work.send(Work { job, state }).is_ok())
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
