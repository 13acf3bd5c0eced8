//! Q1/Q2 for hosts: wait until a quorum of a group's members durably hold
//! an op, on the node that leads the group.
//!
//! Replication already waits for the group's replication quorum before it
//! acknowledges a write. A host sometimes needs more: that an op is on
//! every member before it deletes a source, or on `Q` members of a write it
//! made fire-and-forget (Q4's asynchronous groups). [`NodeHandle::wait_quorum`]
//! asks the primary's shard, which counts members that already hold the op
//! at once and later acknowledgements as they arrive, and ends the wait at
//! its timeout or when cancelled, with the acks it collected. The wait runs
//! in the protocol core (`Shard::wait_quorum`), the same code the
//! simulator's quorum-wait scenarios check.

use std::time::Duration;

use actix::prelude::*;
use cohort_actors::{CancelQuorumWait, StartQuorumWait};
use cohort_core::routing::shard_of;
use cohort_core::{QuorumWaitError, WaitId};
use cohort_messages::{GroupId, NodeId, Op};
use tokio::sync::oneshot;

use super::NodeHandle;

/// Why a quorum wait ended without its quorum (Q2), or could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WaitQuorumError {
    /// The timeout passed first.
    #[error("{group}: couldn't wait for quorum {quorum} of op {op}: timeout after {waited:?}, collected {acks} acks")]
    Timeout {
        /// The group.
        group: GroupId,
        /// The op.
        op: Op,
        /// The quorum asked for.
        quorum: usize,
        /// Members that held the op when the wait ended.
        acks: usize,
        /// How long it waited.
        waited: Duration,
    },
    /// The caller cancelled it ([`QuorumWait::cancel`]).
    #[error("{group}: quorum wait for quorum {quorum} of op {op} cancelled after {waited:?}, collected {acks} acks")]
    Cancelled {
        /// The group.
        group: GroupId,
        /// The op.
        op: Op,
        /// The quorum asked for.
        quorum: usize,
        /// Members that held the op when the wait ended.
        acks: usize,
        /// How long it waited.
        waited: Duration,
    },
    /// This node does not lead the group (any more): wait on its primary.
    #[error("{group}: {node} is not the group's primary; wait on the primary")]
    NotPrimary {
        /// The group.
        group: GroupId,
        /// This node.
        node: NodeId,
    },
    /// More members than the group has.
    #[error("{group}: quorum {quorum} is larger than the group's {members} members")]
    Impossible {
        /// The group.
        group: GroupId,
        /// Asked.
        quorum: usize,
        /// The group's voters.
        members: usize,
    },
    /// The shard has as many waits open as it takes; retry later.
    #[error("{group}: the node has too many quorum waits open; retry later")]
    Busy {
        /// The group.
        group: GroupId,
    },
    /// The shard is gone (the node is stopping).
    #[error("{group}: the node is stopping")]
    Stopped {
        /// The group.
        group: GroupId,
    },
}

/// An open quorum wait: await [`QuorumWait::result`], or cancel it.
/// Dropping it without either leaves the wait to end at its timeout.
#[derive(Debug)]
pub struct QuorumWait {
    group: GroupId,
    op: Op,
    quorum: usize,
    node: NodeId,
    tick: Duration,
    wait: WaitId,
    shard: Recipient<CancelQuorumWait>,
    answer: oneshot::Receiver<Result<(), QuorumWaitError>>,
}

impl QuorumWait {
    /// Cancel the wait: [`QuorumWait::result`] then answers
    /// [`WaitQuorumError::Cancelled`] with the acks collected so far (or
    /// what the wait ended with, if it ended first).
    pub fn cancel(&self) {
        // A full mailbox: try again through `send`, which waits for room.
        if self.shard.try_send(CancelQuorumWait(self.wait)).is_err() {
            let shard = self.shard.clone();
            let wait = self.wait;
            actix::spawn(async move {
                let _ = shard.send(CancelQuorumWait(wait)).await;
            });
        }
    }

    /// Wait for the end: `Ok` once `quorum` members durably hold the op.
    pub async fn result(self) -> Result<(), WaitQuorumError> {
        let (group, op, quorum, node, tick) = (self.group, self.op, self.quorum, self.node, self.tick);
        let waited = |ticks: u64| tick.saturating_mul(u32::try_from(ticks).unwrap_or(u32::MAX));
        match self.answer.await {
            Err(_) => Err(WaitQuorumError::Stopped { group }),
            Ok(Ok(())) => Ok(()),
            Ok(Err(QuorumWaitError::Timeout { quorum, acks, waited_ticks })) => {
                Err(WaitQuorumError::Timeout { group, op, quorum, acks, waited: waited(waited_ticks) })
            }
            Ok(Err(QuorumWaitError::Cancelled { quorum, acks, waited_ticks })) => {
                Err(WaitQuorumError::Cancelled { group, op, quorum, acks, waited: waited(waited_ticks) })
            }
            Ok(Err(QuorumWaitError::NotPrimary { .. })) => Err(WaitQuorumError::NotPrimary { group, node }),
            Ok(Err(QuorumWaitError::Impossible { members, .. })) => {
                Err(WaitQuorumError::Impossible { group, quorum, members })
            }
        }
    }
}

impl NodeHandle {
    /// Q1: start waiting until `quorum` members of `group` durably hold
    /// `op` (this node's own copy counts), for at most `timeout`. This node
    /// must be the group's primary. Members that hold it already count at
    /// once.
    ///
    /// ```no_run
    /// # use cohort_runtime::prelude::*;
    /// # use std::time::Duration;
    /// # async fn example(node: NodeHandle) -> Result<(), Box<dyn std::error::Error>> {
    /// let committed = node.submit(GroupId(0), RequestKind::Write, "x".into(), Duration::from_secs(5)).await?;
    /// // On all three members before going on, or an error naming the acks collected.
    /// node.wait_quorum(GroupId(0), committed.op, 3, Duration::from_secs(2)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn start_quorum_wait(
        &self,
        group: GroupId,
        op: Op,
        quorum: usize,
        timeout: Duration,
    ) -> Result<QuorumWait, WaitQuorumError> {
        let Some(shard) = self.shards.shard(shard_of(group, self.shards.shard_count())) else {
            return Err(WaitQuorumError::Stopped { group });
        };
        let tick = self.tick.max(Duration::from_micros(1));
        let timeout_ticks = timeout.as_micros().div_ceil(tick.as_micros()).max(1);
        let timeout_ticks = u64::try_from(timeout_ticks).unwrap_or(u64::MAX);
        let (answer, answered) = oneshot::channel();
        let start = StartQuorumWait { group, op, quorum, timeout_ticks, answer };
        match shard.send(start).await {
            Err(_) => Err(WaitQuorumError::Stopped { group }),
            Ok(None) => Err(WaitQuorumError::Busy { group }),
            Ok(Some(wait)) => {
                let shard = shard.recipient();
                Ok(QuorumWait { group, op, quorum, node: self.node, tick, wait, shard, answer: answered })
            }
        }
    }

    /// Q1/Q2: wait until `quorum` members of `group` durably hold `op`, for
    /// at most `timeout` (see [`NodeHandle::start_quorum_wait`], which can
    /// also cancel). The error names the quorum, the acks collected and
    /// the time waited.
    pub async fn wait_quorum(
        &self,
        group: GroupId,
        op: Op,
        quorum: usize,
        timeout: Duration,
    ) -> Result<(), WaitQuorumError> {
        self.start_quorum_wait(group, op, quorum, timeout).await?.result().await
    }
}
