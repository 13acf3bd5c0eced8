//! T5: peer input that passes the wire's validation but that the core
//! refuses, and the counters of those refusals by reason.
//!
//! `cohort_messages` validates each message on its own. Some values are
//! valid there and still impossible from a correct peer: a view or op so
//! large that the next one overflows (`View::next` and `Op::next` panic),
//! or a new view's log that rewrites ops this member already applied (a
//! committed op is in every later view's log, so only a forging or broken
//! peer sends one). Trusting such a value would reach a panic or an
//! assertion, so the shard drops the message at its door (ranges) or where
//! the replica first sees the contradiction (logs), and counts it here.
//! A correct peer's messages are never refused for these reasons: the range
//! limits leave half of each number space as headroom that no cluster
//! reaches.
//!
//! The other checks a peer's message can fail are counted here too, each
//! under its own reason: the door's (the sender must be the member the
//! message names, of this incarnation; elections only from voters), the
//! bounded view jump ([`crate::CoreConfig::view_jump_max_views`]), state
//! transfer (served by the primary only, a declared snapshot no larger than
//! [`crate::CoreConfig::state_transfer_size_max_bytes`]) and CommitReplies
//! (an echoed timestamp must be one the primary sent). Some of those a
//! correct peer does cause now and then — a frame of the previous
//! incarnation that arrives after a member change, a state-transfer request
//! that reaches a primary that just stepped down — and
//! [`Refusal::honest_possible`] says which; the simulator checks that the
//! others stay at zero in every run without a forging peer
//! (docs/simulator.md, "Forging peer").

use cohort_messages::{CommitEntry, CommitReplyEntry, Message, Op, View};

/// The largest view accepted from a peer. Above it, a member's own
/// timeouts could count the view up to `u32::MAX`, whose successor
/// overflows; two billion view changes of one group never happen.
pub const VIEW_ACCEPTED_MAX: View = View(u32::MAX / 2);

/// The largest op accepted from a peer, for the same reason as
/// [`VIEW_ACCEPTED_MAX`].
pub const OP_ACCEPTED_MAX: Op = Op(u64::MAX / 2);

/// Why a decoded, valid peer message was dropped.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// A view above [`VIEW_ACCEPTED_MAX`].
    ViewOutOfRange,
    /// An op above [`OP_ACCEPTED_MAX`].
    OpOutOfRange,
    /// A StartView's log, or the DoViewChange log a new primary chose,
    /// differs from this member's at an op it already applied.
    LogRewritesApplied,
    /// A StartView's log, the DoViewChange log a new primary chose, or a
    /// Prepare's entry would join this member's log with an entry of an
    /// earlier view than the entry before it.
    LogViewsGoBack,
    /// The message names another incarnation of the group (frames of one
    /// incarnation still arrive after the group switched to the next).
    OtherIncarnation,
    /// The sender is not the node of the member index the message names (or
    /// the index names no member). A learner's index moves when the learner
    /// list changes, so a late frame of a correct learner can fail this.
    NotTheMember,
    /// A StartViewChange or DoViewChange from a learner's index (P4).
    ElectionFromLearner,
    /// A message of a command no replica takes (a Reply, a Redirect: a
    /// metadata answer for an agent that is no longer there).
    UnexpectedCommand,
    /// A view more than `view_jump_max_views` above the view of a replica
    /// that follows a live primary.
    ViewJump,
    /// A RequestStateTransfer to a replica that is neither the primary nor
    /// in the view change the requester is to lead (one that just stepped
    /// down, or left that election, gets a correct member's late request).
    StateTransferNotPrimary,
    /// A StateChunk from a member this replica does not fetch from (a
    /// correct member's late chunk, after the replica moved to another
    /// source).
    StateChunkNotFromSource,
    /// A StateChunk declaring a snapshot larger than
    /// `state_transfer_size_max_bytes`.
    StateTransferTooLarge,
    /// A StateChunk of a snapshot whose view is after the replica's view
    /// (the primary that answers may already lead a later view).
    SnapshotFromLaterView,
    /// A whole transferred snapshot that does not decode or does not
    /// install, or whose state the sender's state machine holds (D1: only
    /// a replica's own saved snapshots hold no state; one sent must carry
    /// it).
    SnapshotUnusable,
    /// A CommitReply echoing a timestamp later than any this primary sent
    /// since it started. A correct one does after a restart: a member
    /// stranded in a later view answers a Commit of an earlier view with
    /// its own view (see `on_commit`), and when that reply comes late, to
    /// the restarted primary now leading that view, its timestamp is of the
    /// process before. Counted, it would date the quorum window (R24, V7)
    /// after the new process's clock.
    ReplyTimestampUnsent,
    /// A CommitReply that would not fit the batch to its peer
    /// (`COMMIT_REPLY_BATCH_ENTRIES_MAX` queued in one tick).
    ReplyBatchFull,
    /// Z3: a shard-pair heartbeat no newer than the last one taken from its
    /// sender's process, or a reply of another process of this node or to a
    /// heartbeat this shard no longer remembers sending (late, replayed or
    /// reordered frames of a correct peer do this).
    PairHeartbeatStale,
    /// Z3: a shard-pair heartbeat or reply to a shard whose node runs
    /// without `commit_quiesce_timeout` (the nodes disagree on it).
    QuiescenceOff,
    /// K5: a Prepare whose entry is a write that is no op batch, to a
    /// replica whose state machine takes op batches (the primary refuses
    /// such a write before it enters the log).
    NotAnOpBatch,
}

impl Refusal {
    /// Every reason, in the order of [`Refusals::by_reason`].
    pub const ALL: [Refusal; 19] = [
        Refusal::ViewOutOfRange,
        Refusal::OpOutOfRange,
        Refusal::LogRewritesApplied,
        Refusal::LogViewsGoBack,
        Refusal::OtherIncarnation,
        Refusal::NotTheMember,
        Refusal::ElectionFromLearner,
        Refusal::UnexpectedCommand,
        Refusal::ViewJump,
        Refusal::StateTransferNotPrimary,
        Refusal::StateChunkNotFromSource,
        Refusal::StateTransferTooLarge,
        Refusal::SnapshotFromLaterView,
        Refusal::SnapshotUnusable,
        Refusal::ReplyTimestampUnsent,
        Refusal::ReplyBatchFull,
        Refusal::PairHeartbeatStale,
        Refusal::QuiescenceOff,
        Refusal::NotAnOpBatch,
    ];

    /// The reason as a metric label (`reason="view_jump"`).
    pub fn name(self) -> &'static str {
        match self {
            Refusal::ViewOutOfRange => "view_out_of_range",
            Refusal::OpOutOfRange => "op_out_of_range",
            Refusal::LogRewritesApplied => "log_rewrites_applied",
            Refusal::LogViewsGoBack => "log_views_go_back",
            Refusal::OtherIncarnation => "other_incarnation",
            Refusal::NotTheMember => "not_the_member",
            Refusal::ElectionFromLearner => "election_from_learner",
            Refusal::UnexpectedCommand => "unexpected_command",
            Refusal::ViewJump => "view_jump",
            Refusal::StateTransferNotPrimary => "state_transfer_not_primary",
            Refusal::StateChunkNotFromSource => "state_chunk_not_from_source",
            Refusal::StateTransferTooLarge => "state_transfer_too_large",
            Refusal::SnapshotFromLaterView => "snapshot_from_later_view",
            Refusal::SnapshotUnusable => "snapshot_unusable",
            Refusal::ReplyTimestampUnsent => "reply_timestamp_unsent",
            Refusal::ReplyBatchFull => "reply_batch_full",
            Refusal::PairHeartbeatStale => "pair_heartbeat_stale",
            Refusal::QuiescenceOff => "quiescence_off",
            Refusal::NotAnOpBatch => "not_an_op_batch",
        }
    }

    /// True if a correct peer's message can be refused for this reason
    /// (late frames across a member change, a learner change or a view
    /// change); the other reasons only ever count forged or broken input.
    /// `state_transfer_too_large` counts as forged: the cap must exceed the
    /// largest snapshot, and the simulator's do.
    pub fn honest_possible(self) -> bool {
        matches!(
            self,
            Refusal::OtherIncarnation
                | Refusal::NotTheMember
                | Refusal::UnexpectedCommand
                | Refusal::StateTransferNotPrimary
                | Refusal::StateChunkNotFromSource
                | Refusal::SnapshotFromLaterView
                | Refusal::ReplyTimestampUnsent
                | Refusal::PairHeartbeatStale
                | Refusal::QuiescenceOff
        )
    }
}

// `Refusal::ALL` lists the reasons in declaration order, so a reason's
// discriminant is its index there (and in `Refusals::by_reason`).
const _: () = {
    let mut index = 0;
    while index < Refusal::ALL.len() {
        assert!(Refusal::ALL[index] as usize == index);
        index += 1;
    }
};

/// Refusals of one shard, per reason; totals since start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Refusals {
    /// [`Refusal::ViewOutOfRange`].
    pub view_out_of_range: u64,
    /// [`Refusal::OpOutOfRange`].
    pub op_out_of_range: u64,
    /// [`Refusal::LogRewritesApplied`].
    pub log_rewrites_applied: u64,
    /// [`Refusal::LogViewsGoBack`].
    pub log_views_go_back: u64,
    /// [`Refusal::OtherIncarnation`].
    pub other_incarnation: u64,
    /// [`Refusal::NotTheMember`].
    pub not_the_member: u64,
    /// [`Refusal::ElectionFromLearner`].
    pub election_from_learner: u64,
    /// [`Refusal::UnexpectedCommand`].
    pub unexpected_command: u64,
    /// [`Refusal::ViewJump`].
    pub view_jump: u64,
    /// [`Refusal::StateTransferNotPrimary`].
    pub state_transfer_not_primary: u64,
    /// [`Refusal::StateChunkNotFromSource`].
    pub state_chunk_not_from_source: u64,
    /// [`Refusal::StateTransferTooLarge`].
    pub state_transfer_too_large: u64,
    /// [`Refusal::SnapshotFromLaterView`].
    pub snapshot_from_later_view: u64,
    /// [`Refusal::SnapshotUnusable`].
    pub snapshot_unusable: u64,
    /// [`Refusal::ReplyTimestampUnsent`].
    pub reply_timestamp_unsent: u64,
    /// [`Refusal::ReplyBatchFull`].
    pub reply_batch_full: u64,
    /// [`Refusal::PairHeartbeatStale`].
    pub pair_heartbeat_stale: u64,
    /// [`Refusal::QuiescenceOff`].
    pub quiescence_off: u64,
    /// [`Refusal::NotAnOpBatch`].
    pub not_an_op_batch: u64,
}

impl Refusals {
    fn counter(&mut self, refusal: Refusal) -> &mut u64 {
        match refusal {
            Refusal::ViewOutOfRange => &mut self.view_out_of_range,
            Refusal::OpOutOfRange => &mut self.op_out_of_range,
            Refusal::LogRewritesApplied => &mut self.log_rewrites_applied,
            Refusal::LogViewsGoBack => &mut self.log_views_go_back,
            Refusal::OtherIncarnation => &mut self.other_incarnation,
            Refusal::NotTheMember => &mut self.not_the_member,
            Refusal::ElectionFromLearner => &mut self.election_from_learner,
            Refusal::UnexpectedCommand => &mut self.unexpected_command,
            Refusal::ViewJump => &mut self.view_jump,
            Refusal::StateTransferNotPrimary => &mut self.state_transfer_not_primary,
            Refusal::StateChunkNotFromSource => &mut self.state_chunk_not_from_source,
            Refusal::StateTransferTooLarge => &mut self.state_transfer_too_large,
            Refusal::SnapshotFromLaterView => &mut self.snapshot_from_later_view,
            Refusal::SnapshotUnusable => &mut self.snapshot_unusable,
            Refusal::ReplyTimestampUnsent => &mut self.reply_timestamp_unsent,
            Refusal::ReplyBatchFull => &mut self.reply_batch_full,
            Refusal::PairHeartbeatStale => &mut self.pair_heartbeat_stale,
            Refusal::QuiescenceOff => &mut self.quiescence_off,
            Refusal::NotAnOpBatch => &mut self.not_an_op_batch,
        }
    }

    /// Count one refusal.
    pub fn count(&mut self, refusal: Refusal) {
        *self.counter(refusal) += 1;
    }

    /// The count of one reason.
    pub fn get(&self, refusal: Refusal) -> u64 {
        self.by_reason()[refusal as usize].1
    }

    /// Every reason with its count, in [`Refusal::ALL`] order. The
    /// destructuring names every field, so a reason added without its
    /// counter does not compile.
    pub fn by_reason(&self) -> [(Refusal, u64); Refusal::ALL.len()] {
        let Refusals {
            view_out_of_range,
            op_out_of_range,
            log_rewrites_applied,
            log_views_go_back,
            other_incarnation,
            not_the_member,
            election_from_learner,
            unexpected_command,
            view_jump,
            state_transfer_not_primary,
            state_chunk_not_from_source,
            state_transfer_too_large,
            snapshot_from_later_view,
            snapshot_unusable,
            reply_timestamp_unsent,
            reply_batch_full,
            pair_heartbeat_stale,
            quiescence_off,
            not_an_op_batch,
        } = *self;
        let counts = [
            view_out_of_range,
            op_out_of_range,
            log_rewrites_applied,
            log_views_go_back,
            other_incarnation,
            not_the_member,
            election_from_learner,
            unexpected_command,
            view_jump,
            state_transfer_not_primary,
            state_chunk_not_from_source,
            state_transfer_too_large,
            snapshot_from_later_view,
            snapshot_unusable,
            reply_timestamp_unsent,
            reply_batch_full,
            pair_heartbeat_stale,
            quiescence_off,
            not_an_op_batch,
        ];
        std::array::from_fn(|index| (Refusal::ALL[index], counts[index]))
    }

    /// Every refusal, whatever the reason.
    pub fn total(&self) -> u64 {
        self.by_reason().iter().map(|(_, count)| count).sum()
    }

    /// Refusals of reasons no correct peer causes ([`Refusal::honest_possible`]).
    pub fn forged(&self) -> u64 {
        self.by_reason().iter().filter(|(reason, _)| !reason.honest_possible()).map(|(_, count)| count).sum()
    }

    /// Add another shard's counters (node totals).
    pub fn add(&mut self, other: &Refusals) {
        for (reason, count) in other.by_reason() {
            *self.counter(reason) += count;
        }
    }
}

fn check(views: &[View], ops: &[Op]) -> Result<(), Refusal> {
    if views.iter().any(|view| *view > VIEW_ACCEPTED_MAX) {
        return Err(Refusal::ViewOutOfRange);
    }
    if ops.iter().any(|op| *op > OP_ACCEPTED_MAX) {
        return Err(Refusal::OpOutOfRange);
    }
    Ok(())
}

/// The ranges of a single-group peer message. Log entries need no check of
/// their own: validation holds their ops at or below the message's `op`
/// and their views at or below its view.
pub(crate) fn check_message(message: &Message) -> Result<(), Refusal> {
    match message {
        Message::Prepare(m) => check(&[m.view, m.entry.view], &[m.commit, m.entry.op]),
        Message::PrepareOk(m) => check(&[m.view], &[m.op]),
        Message::StartViewChange(m) => check(&[m.view], &[]),
        Message::DoViewChange(m) => check(&[m.view, m.log_view], &[m.op, m.commit]),
        Message::StartView(m) => check(&[m.view], &[m.op, m.commit]),
        Message::RequestPrepares(m) => check(&[m.view], &[m.op_min, m.op_max]),
        Message::RequestStateTransfer(m) => check(&[m.view], &[m.snapshot_op]),
        Message::StateChunk(m) => check(&[m.view, m.snapshot_view], &[m.snapshot_op]),
        Message::RecoveryAnswer(m) => check(&[m.view, m.log_view], &[m.op, m.commit]),
        _ => Ok(()),
    }
}

/// The ranges of one Commit entry.
pub(crate) fn check_commit(entry: &CommitEntry) -> Result<(), Refusal> {
    check(&[entry.view], &[entry.commit])
}

/// The ranges of one CommitReply entry.
pub(crate) fn check_commit_reply(entry: &CommitReplyEntry) -> Result<(), Refusal> {
    check(&[entry.view], &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t5_each_reason_counts_apart_and_adds_up() {
        let mut refusals = Refusals::default();
        refusals.count(Refusal::ViewOutOfRange);
        refusals.count(Refusal::OpOutOfRange);
        refusals.count(Refusal::OpOutOfRange);
        assert_eq!((refusals.view_out_of_range, refusals.op_out_of_range, refusals.log_rewrites_applied), (1, 2, 0));
        let mut node = Refusals { log_rewrites_applied: 1, ..Refusals::default() };
        node.add(&refusals);
        assert_eq!(node.total(), 4);
        for (index, reason) in Refusal::ALL.into_iter().enumerate() {
            let mut one = Refusals::default();
            one.count(reason);
            assert_eq!(one.get(reason), 1, "{reason:?}");
            assert_eq!(one.by_reason()[index], (reason, 1), "{reason:?} sits at its place in ALL");
            assert_eq!(one.forged(), u64::from(!reason.honest_possible()));
        }
        let names: std::collections::BTreeSet<&str> = Refusal::ALL.iter().map(|reason| reason.name()).collect();
        assert_eq!(names.len(), Refusal::ALL.len(), "every reason has its own label");
    }

    #[test]
    fn t5_limits_leave_room_for_the_next_view_and_op() {
        assert!(VIEW_ACCEPTED_MAX.0.checked_add(1).is_some());
        assert!(OP_ACCEPTED_MAX.0.checked_add(1).is_some());
        assert_eq!(check(&[VIEW_ACCEPTED_MAX], &[OP_ACCEPTED_MAX]), Ok(()));
        assert_eq!(check(&[View(VIEW_ACCEPTED_MAX.0 + 1)], &[]), Err(Refusal::ViewOutOfRange));
        assert_eq!(check(&[], &[Op(OP_ACCEPTED_MAX.0 + 1)]), Err(Refusal::OpOutOfRange));
    }
}
