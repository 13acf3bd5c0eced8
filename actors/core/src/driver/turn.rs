//! What one turn of a shard asks its shell to do, as one typed value.
//!
//! The core's own output is a flat list of [`Effect`]s in the order its
//! handlers made them. Every rule about what happens to them next (which go
//! to storage, which peer a message goes to, which answer goes back over the
//! network because a peer asked, which sends are dropped because the link is
//! down) is the driver's, and the driver decides it once
//! ([`super::ShardDriver::end_turn`]). A shell only carries out a [`Turn`]:
//! hand [`Turn::storage`] to its storage worker as one job, each
//! [`PeerBatch`] to that peer's connection, and each [`Note`] to whoever
//! listens in this process. The node's actors and the simulator are such
//! shells, so neither can drift from the other in a decision.

use cohort_messages::{ClientId, GroupId, Incarnation, Message, NodeId, Op, Redirect, Reply, RequestNumber, View};

use crate::effect::{AppliedOp, ApplyId, Effect, QuorumWaitError, Role, WaitId};
use crate::state_machine::{LentState, Work};

/// The answer to a client request made in this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientAnswer {
    /// Applied (or read), or refused with a reason.
    Reply(Reply),
    /// Not the primary: go there (V5).
    Redirect(Redirect),
}

impl ClientAnswer {
    /// The group, client and request number the answer is about.
    pub fn key(&self) -> (GroupId, ClientId, RequestNumber) {
        match self {
            ClientAnswer::Reply(reply) => (reply.group, reply.client, reply.request),
            ClientAnswer::Redirect(redirect) => (redirect.group, redirect.client, redirect.request),
        }
    }
}

/// Everything one turn sends one peer, in the order the core made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerBatch {
    /// The peer.
    pub to: NodeId,
    /// Its messages: single-group messages, at most one Commit and one
    /// CommitReply batch (R11, R27), and answers to requests the peer sent.
    pub messages: Vec<Message>,
}

/// Something a group's listeners in this process hear of, in the order the
/// core made it (for one group, answers and role changes keep their order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    /// The answer to a request made in this process (not one a peer sent:
    /// those travel in that peer's [`PeerBatch`]).
    Answer(ClientAnswer),
    /// A replica's role changed.
    Role {
        /// The group.
        group: GroupId,
        /// The incarnation the replica is in.
        incarnation: Incarnation,
        /// The view.
        view: View,
        /// The new role.
        role: Role,
    },
    /// Ops up to `op` are committed and applied here.
    Committed {
        /// The group.
        group: GroupId,
        /// The commit point.
        op: Op,
    },
    /// Ops applied this turn (groups whose spec sets `report_applied`).
    Applied {
        /// The group.
        group: GroupId,
        /// The ops, in op order.
        ops: Vec<AppliedOp>,
        /// The applied point after them.
        through: Op,
    },
    /// The state machine was replaced by a snapshot at `op`.
    Restored {
        /// The group.
        group: GroupId,
        /// The snapshot's applied point.
        op: Op,
        /// The state machine's snapshot.
        state: bytes::Bytes,
    },
    /// A quorum wait ended (Q1, Q2).
    WaitDone {
        /// The wait.
        wait: WaitId,
        /// Reached, or why not.
        result: Result<(), QuorumWaitError>,
    },
}

impl Note {
    /// The group the note is about (none for a quorum wait's end: its
    /// caller knows the wait by id).
    pub fn group(&self) -> Option<GroupId> {
        match self {
            Note::Answer(answer) => Some(answer.key().0),
            Note::Role { group, .. }
            | Note::Committed { group, .. }
            | Note::Applied { group, .. }
            | Note::Restored { group, .. } => Some(*group),
            Note::WaitDone { .. } => None,
        }
    }
}

/// One turn's work for the shell. See the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Turn {
    /// Storage effects in the order they must run: one job for the
    /// storage worker. A `Flush` among them is reported back with
    /// [`super::ShardDriver::on_flushed`] once durable.
    pub storage: Vec<Effect>,
    /// One batch per peer, in peer order, never empty.
    pub peers: Vec<PeerBatch>,
    /// What this process's listeners hear, in the order the core made it.
    pub notes: Vec<Note>,
    /// Messages not sent because the peer's link was down (the link would
    /// only drop them).
    pub dropped_link_down: u64,
    /// D2: jobs for the apply worker (runs of committed ops, D3 chunks to
    /// stage), in the order lent (the worker does them in this order):
    /// each comes back through [`super::ShardDriver::on_applied`].
    pub applies: Vec<ApplyJob>,
}

/// D2: work for the shard's apply worker, with the state machine of the
/// group it is for: a run of committed ops to apply, or (D3) a chunk of a
/// streamed transfer to stage. Take the state machine
/// ([`LentState::take`]), do the work with
/// [`crate::state_machine::work_on`], and hand both back with
/// [`super::ShardDriver::on_applied`]. A clone (a recording) holds no
/// state machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplyJob {
    /// The group.
    pub group: GroupId,
    /// The job's id.
    pub id: ApplyId,
    /// What to do.
    pub work: Work,
    /// The group's state machine, lent for the job.
    pub state: LentState,
}

impl Turn {
    /// True if the turn asks nothing of the shell.
    pub fn is_empty(&self) -> bool {
        self.storage.is_empty()
            && self.peers.is_empty()
            && self.notes.is_empty()
            && self.dropped_link_down == 0
            && self.applies.is_empty()
    }

    /// Messages in the turn, over all peers.
    pub fn message_count(&self) -> usize {
        self.peers.iter().map(|batch| batch.messages.len()).sum()
    }

    pub(super) fn push_message(&mut self, to: NodeId, message: Message) {
        // Peers are few (a node's peers); turns keep them sorted so that
        // every shell sends in the same order.
        match self.peers.binary_search_by_key(&to, |batch| batch.to) {
            Ok(at) => self.peers[at].messages.push(message),
            Err(at) => self.peers.insert(at, PeerBatch { to, messages: vec![message] }),
        }
    }
}
