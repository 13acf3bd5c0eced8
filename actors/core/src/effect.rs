//! What the core asks its driver to do.
//!
//! The driver ([`crate::driver::ShardDriver`]) drains effects with
//! [`crate::Shard::drain_effects`] and sorts them into one typed
//! [`crate::driver::Turn`] that a shell executes in order. Each variant states what the driver must
//! guarantee. Messages whose sending depends on durability are not emitted
//! until the flush they depend on was reported with
//! [`crate::Shard::on_flushed`], so the driver never has to hold a send
//! back itself.

use bytes::Bytes;
use cohort_messages::{CommitEntry, CommitReplyEntry, GroupId, LogEntry, Message, NodeId, Op, Redirect, Reply, View};

use crate::storage::{Snapshot, Superblock};

/// Identifies one flush of the shard's storage; ids grow by one per flush.
pub type FlushId = u64;

/// A replica's role in its group.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Orders operations and commits them.
    Primary,
    /// Follows the primary of its view.
    Backup,
    /// Between views: neither serves nor follows.
    ViewChange,
    /// A learner (P4): follows the primary and applies committed ops, but
    /// votes in no quorum and never takes part in a view change.
    Learner,
}

/// Why a quorum wait ended without its quorum (Q2).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuorumWaitError {
    /// The timeout passed first.
    #[error("couldn't wait for quorum {quorum}: timeout after {waited_ticks} ticks, collected {acks} acks")]
    Timeout {
        /// The quorum asked for.
        quorum: usize,
        /// Members that held the op when the wait ended.
        acks: usize,
        /// Ticks waited.
        waited_ticks: u64,
    },
    /// The caller cancelled it.
    #[error("quorum wait for quorum {quorum} cancelled after {waited_ticks} ticks, collected {acks} acks")]
    Cancelled {
        /// The quorum asked for.
        quorum: usize,
        /// Members that held the op when the wait ended.
        acks: usize,
        /// Ticks waited.
        waited_ticks: u64,
    },
    /// This member is not (or no longer) the group's primary.
    #[error("quorum wait on {group} ended: this member is not the primary of {view}")]
    NotPrimary {
        /// The group.
        group: GroupId,
        /// The view it knows.
        view: View,
    },
    /// The quorum asked for is larger than the group.
    #[error("quorum {quorum} is larger than the group's {members} members")]
    Impossible {
        /// Asked.
        quorum: usize,
        /// Group size.
        members: usize,
    },
}

/// Identifies one quorum wait.
pub type WaitId = u64;

/// D2: a run of ops lent to the apply worker ([`Effect::Apply`]); ids
/// grow on each shard and are never reused.
pub type ApplyId = u64;

/// One op applied to a group's state machine, as [`Effect::Applied`] reports it.
///
/// ```
/// use bytes::Bytes;
/// use cohort_core::effect::AppliedOp;
/// use cohort_messages::Op;
/// let applied = AppliedOp { op: Op(3), operation: Bytes::from_static(b"add 2"), result: Bytes::from_static(b"5") };
/// assert_eq!(applied.op, Op(3));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppliedOp {
    /// The op.
    pub op: Op,
    /// The operation the state machine applied (shares the log entry's buffer).
    pub operation: Bytes,
    /// What the state machine returned.
    pub result: Bytes,
}

/// One thing for the driver to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Send a single-group message to a node. Best effort: the protocol
    /// survives loss, duplication and reordering.
    Send {
        /// Destination.
        to: NodeId,
        /// The message.
        message: Message,
    },
    /// Send one Commit batch frame to a peer (R10, R11): emitted at the end of
    /// a tick, at most one per peer per tick, never empty. The driver must not
    /// split it (R13) and reports connectivity with
    /// [`crate::Shard::on_commit_batch_sent`] (R25).
    SendCommitBatch {
        /// Destination.
        to: NodeId,
        /// The entries.
        entries: Vec<CommitEntry>,
    },
    /// Send one CommitReply batch frame to a peer (R26, R27): at the end of a
    /// tick, at most one per peer per tick. On failure, drop it (R30).
    SendCommitReplyBatch {
        /// Destination.
        to: NodeId,
        /// The entries.
        entries: Vec<CommitReplyEntry>,
    },
    /// Stage an append in the shard's storage ([`crate::storage::Storage::append`]).
    Append {
        /// The group.
        group: GroupId,
        /// The entry.
        entry: LogEntry,
    },
    /// Stage a truncation ([`crate::storage::Storage::truncate_after`]).
    Truncate {
        /// The group.
        group: GroupId,
        /// Entries after this op go.
        after: Op,
    },
    /// Stage a superblock ([`crate::storage::Storage::stage_superblock`]).
    /// If staging fails, call [`crate::Shard::on_superblock_failed`] (R12).
    StageSuperblock {
        /// The group.
        group: GroupId,
        /// The superblock.
        superblock: Superblock,
    },
    /// Flush everything staged before this effect, then call
    /// [`crate::Shard::on_flushed`] with this id. Flushes complete in id
    /// order. A failed flush stops the node.
    Flush {
        /// This flush's id.
        id: FlushId,
    },
    /// Save a snapshot durably ([`crate::storage::Storage::save_snapshot`]).
    /// Order relative to the log does not matter: the log still holds every
    /// op the snapshot covers until the save returns.
    SaveSnapshot {
        /// The group.
        group: GroupId,
        /// The snapshot.
        snapshot: Snapshot,
        /// The snapshot is of what this replica applied from its own log, so
        /// the storage may write it later
        /// ([`crate::storage::Storage::defer_snapshot`]); false for a
        /// snapshot that replaces the log (a state transfer, a new
        /// incarnation), which must be durable at once.
        deferrable: bool,
    },
    /// Answer a client (local submitter or client connection) by `reply.client`.
    Reply(Reply),
    /// Tell a client to go to the primary (V5).
    Redirect(Redirect),
    /// The replica's role changed; for subscribers and the runtime's actors.
    RoleChanged {
        /// The group.
        group: GroupId,
        /// The incarnation the replica is in (views restart at 0 in each).
        incarnation: cohort_messages::Incarnation,
        /// The view.
        view: View,
        /// The new role.
        role: Role,
    },
    /// Only for groups whose spec sets `report_applied`: ops that the state
    /// machine applied this turn, in op order, each exactly once. `through` is
    /// the applied point after them; the next `Applied` of the group covers
    /// the ops after `through`. An op whose request was already applied (a
    /// client's retry that reached the log twice) is not applied again and
    /// not listed, so op numbers may skip; `through` still moves past it.
    /// Emitted before the [`Effect::Committed`] of the same ops.
    Applied {
        /// The group.
        group: GroupId,
        /// The applied ops, in op order.
        ops: Vec<AppliedOp>,
        /// The applied point after `ops`.
        through: Op,
    },
    /// Only for groups whose spec sets `report_applied`: the state machine was
    /// replaced by a snapshot of its state at `op` (recovery, or state
    /// transfer from the primary). Later [`Effect::Applied`] continue after `op`.
    Restored {
        /// The group.
        group: GroupId,
        /// The applied point of the snapshot.
        op: Op,
        /// The state machine's snapshot, as [`crate::StateMachine::restore`] took it.
        state: Bytes,
    },
    /// D2: do `work` on `group`'s state machine off the shard's thread
    /// (its state machine asked for it,
    /// [`crate::StateMachine::apply_off_shard`]): take the state machine
    /// from `state`, do the work with [`crate::state_machine::work_on`],
    /// and hand it back with what it did through the driver's
    /// `on_applied` under `id`. The group applies nothing more, reads
    /// nothing and stages nothing until then. A run's ops follow the
    /// group's applied point without a gap; a chunk (D3) follows what the
    /// group's transfer staged.
    Apply {
        /// The group.
        group: GroupId,
        /// The job, unique on this shard.
        id: ApplyId,
        /// A run of ops to apply, or a chunk to stage.
        work: crate::state_machine::Work,
        /// The group's state machine, lent for the job.
        state: crate::state_machine::LentState,
    },
    /// Ops up to `op` are committed and applied on this member.
    Committed {
        /// The group.
        group: GroupId,
        /// The new commit point.
        op: Op,
    },
    /// A quorum wait ended (Q1, Q2).
    QuorumWaitDone {
        /// The wait.
        wait: WaitId,
        /// Reached, or why not.
        result: Result<(), QuorumWaitError>,
    },
}

/// Which kind of [`Effect`] one is: a stable name for traces, metrics and
/// tests, and the split a driver makes between storage and the rest.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EffectKind {
    /// [`Effect::Send`].
    Send,
    /// [`Effect::SendCommitBatch`].
    SendCommitBatch,
    /// [`Effect::SendCommitReplyBatch`].
    SendCommitReplyBatch,
    /// [`Effect::Append`].
    Append,
    /// [`Effect::Truncate`].
    Truncate,
    /// [`Effect::StageSuperblock`].
    StageSuperblock,
    /// [`Effect::Flush`].
    Flush,
    /// [`Effect::SaveSnapshot`].
    SaveSnapshot,
    /// [`Effect::Reply`].
    Reply,
    /// [`Effect::Redirect`].
    Redirect,
    /// [`Effect::RoleChanged`].
    RoleChanged,
    /// [`Effect::Applied`].
    Applied,
    /// [`Effect::Restored`].
    Restored,
    /// [`Effect::Apply`].
    Apply,
    /// [`Effect::Committed`].
    Committed,
    /// [`Effect::QuorumWaitDone`].
    QuorumWaitDone,
}

impl EffectKind {
    /// True for the effects a driver hands to storage, in order.
    pub fn is_storage(self) -> bool {
        matches!(
            self,
            EffectKind::Append
                | EffectKind::Truncate
                | EffectKind::StageSuperblock
                | EffectKind::Flush
                | EffectKind::SaveSnapshot
        )
    }
}

impl Effect {
    /// This effect's kind.
    ///
    /// ```
    /// use cohort_core::effect::{Effect, EffectKind};
    /// assert_eq!(Effect::Flush { id: 1 }.kind(), EffectKind::Flush);
    /// assert!(EffectKind::Flush.is_storage());
    /// ```
    pub fn kind(&self) -> EffectKind {
        match self {
            Effect::Send { .. } => EffectKind::Send,
            Effect::SendCommitBatch { .. } => EffectKind::SendCommitBatch,
            Effect::SendCommitReplyBatch { .. } => EffectKind::SendCommitReplyBatch,
            Effect::Append { .. } => EffectKind::Append,
            Effect::Truncate { .. } => EffectKind::Truncate,
            Effect::StageSuperblock { .. } => EffectKind::StageSuperblock,
            Effect::Flush { .. } => EffectKind::Flush,
            Effect::SaveSnapshot { .. } => EffectKind::SaveSnapshot,
            Effect::Reply(_) => EffectKind::Reply,
            Effect::Redirect(_) => EffectKind::Redirect,
            Effect::RoleChanged { .. } => EffectKind::RoleChanged,
            Effect::Applied { .. } => EffectKind::Applied,
            Effect::Restored { .. } => EffectKind::Restored,
            Effect::Apply { .. } => EffectKind::Apply,
            Effect::Committed { .. } => EffectKind::Committed,
            Effect::QuorumWaitDone { .. } => EffectKind::QuorumWaitDone,
        }
    }
}
