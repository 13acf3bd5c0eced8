//! Q1/Q2 for the host: a quorum wait on a group this shard hosts, started
//! and cancelled by message; its end reaches the caller's oneshot.
//!
//! The wait itself is the core's (`Shard::wait_quorum`, counting members
//! that already hold the op at once and later acks as they arrive); the
//! driver bounds how many are open ([`cohort_core::driver::QUORUM_WAITS_MAX`]).
//! A caller that gave up without cancelling (its receiver dropped) leaves
//! the wait to end at its own timeout.

use actix::prelude::*;
use cohort_core::{QuorumWaitError, WaitId};
use cohort_messages::{GroupId, Op};
use tokio::sync::oneshot;

use super::ShardActor;

/// Start a quorum wait: answers its id, or `None` if the shard has as many
/// open as it takes (ask again later).
#[derive(Message)]
#[rtype(result = "Option<WaitId>")]
pub struct StartQuorumWait {
    /// The group.
    pub group: GroupId,
    /// The op that `quorum` members must hold durably.
    pub op: Op,
    /// Members to wait for (the primary's own durable copy counts).
    pub quorum: usize,
    /// Give up after this many ticks.
    pub timeout_ticks: u64,
    /// Where the end of the wait goes.
    pub answer: oneshot::Sender<Result<(), QuorumWaitError>>,
}

/// Cancel a quorum wait (Q2): its caller gets `QuorumWaitError::Cancelled`
/// with the acks collected so far. Answers false if it had already ended.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct CancelQuorumWait(pub WaitId);

impl Handler<StartQuorumWait> for ShardActor {
    type Result = Option<WaitId>;

    fn handle(&mut self, start: StartQuorumWait, ctx: &mut Self::Context) -> Option<WaitId> {
        let wait = self.driver.wait_quorum(start.group, start.op, start.quorum, start.timeout_ticks)?;
        self.quorum_waits.insert(wait, start.answer);
        self.input_done(ctx);
        Some(wait)
    }
}

impl Handler<CancelQuorumWait> for ShardActor {
    type Result = bool;

    fn handle(&mut self, CancelQuorumWait(wait): CancelQuorumWait, ctx: &mut Self::Context) -> bool {
        let cancelled = self.driver.cancel_wait(wait);
        self.input_done(ctx);
        cancelled
    }
}

impl ShardActor {
    /// A wait ended: tell its caller, if it still listens.
    pub(super) fn wait_done(&mut self, wait: WaitId, result: Result<(), QuorumWaitError>) {
        if let Some(caller) = self.quorum_waits.remove(&wait) {
            let _ = caller.send(result);
        }
    }
}
