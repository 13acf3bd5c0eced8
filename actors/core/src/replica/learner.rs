//! Learners (P4; PacificA calls them candidates): replicas that receive a group's log and apply
//! its committed ops, but never vote.
//!
//! Why: a new replica must catch up before it is given a vote, or adding it
//! would weaken the group while it lags (a majority that counts an empty
//! member may be one real copy short). So a new replica first joins as a
//! learner; once it holds the log through the primary's commit point, the
//! metadata's multi-step operation promotes it by switching the group to a
//! new incarnation whose voters include it. Every running incarnation's
//! quorums stay fixed: they are computed over the voters only.
//!
//! Rules:
//! - Member indexes `0..members.len()` are voters; learners follow
//!   (`members.len() + i`). A learner index is never the primary of any
//!   view (`view mod voters`).
//! - The primary sends Prepares, Commit heartbeats (in the same per-peer
//!   batches, R11) and StartView to learners too, and answers their repair
//!   and state-transfer requests like a lagging backup's (V3). It tracks what
//!   each learner acknowledged in [`LearnerTrack`], apart from the
//!   voters' vectors: no commit point, quorum wait, quorum window (R24) or
//!   lease ever counts a learner.
//! - A learner sends no StartViewChange or DoViewChange, none is awaited
//!   from it, and its messages of that kind are refused at the door. Its
//!   heartbeat timeout does nothing: a view change among the voters reaches
//!   it as the new primary's StartView, re-sent until it confirms.
//! - A backup stuck in an older view times out and asks for the view (its
//!   StartViewChange draws the primary's StartView); a learner cannot. So
//!   the primary counts a learner that has not answered for
//!   `commit_heartbeat_timeout_ticks` as unconfirmed again and re-sends it
//!   the StartView. The simulator found why (seed 2081 with 2 learners): a
//!   learner acknowledged a view, crashed before that view was durable,
//!   came back in the older view, and ignored the newer view's Commits
//!   forever while the primary believed it confirmed.
//! - Learners are not persisted: the superblock holds the voters. The host
//!   passes the current learners in the spec when it recovers a group.

use cohort_messages::{GroupId, Incarnation, MemberIndex, Message, NodeId, Op, REPLICAS_MAX};

use super::Context;
use super::role::LearnerTrack;
use super::{GroupSpec, Replica, RoleState, Status, WriteMode};
use crate::effect::Role;
use crate::effects::Effects;
use crate::quorum::Quorums;

/// Why a [`GroupSpec`] (or a change of its learners) is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// A group needs at least one voter.
    #[error("{group}: a group needs at least one voting member")]
    NoVoters {
        /// The group.
        group: GroupId,
    },
    /// The quorums were computed for another number of voters.
    #[error("{group}: quorums are for {quorum_members} members, but the group has {voters} voters")]
    QuorumSize {
        /// The group.
        group: GroupId,
        /// Members the quorums were computed for.
        quorum_members: usize,
        /// Voters in the spec.
        voters: usize,
    },
    /// A node is listed twice (among voters, among learners, or in both).
    #[error("{group}: {node} is listed twice among the members and learners")]
    Duplicate {
        /// The group.
        group: GroupId,
        /// The node listed twice.
        node: NodeId,
    },
    /// More voters and learners than a member index can name.
    #[error("{group}: {total} members and learners exceed {REPLICAS_MAX}")]
    TooMany {
        /// The group.
        group: GroupId,
        /// Voters plus learners.
        total: usize,
    },
    /// `me` names no voter or learner.
    #[error("{group}: member index {me} is outside the {total} members and learners")]
    MeOutOfRange {
        /// The group.
        group: GroupId,
        /// The index in the spec.
        me: MemberIndex,
        /// Voters plus learners.
        total: usize,
    },
    /// The replication quorum does not fit the voters.
    #[error("{group}: {error}")]
    Quorum {
        /// The group.
        group: GroupId,
        /// Why.
        error: crate::quorum::QuorumError,
    },
    /// The node a spec is built for is neither a voter nor a learner.
    #[error("{group}: {node} is neither a member nor a learner")]
    NotListed {
        /// The group.
        group: GroupId,
        /// The node.
        node: NodeId,
    },
    /// A learner's own node is missing from its new learner list: a
    /// removed learner is unloaded (`Shard::remove_group`), not changed.
    #[error("{group}: this learner ({node}) is not in the new learner list; unload the group instead")]
    RemovesSelf {
        /// The group.
        group: GroupId,
        /// This replica's node.
        node: NodeId,
    },
}

/// What a node knows of a group it hosts a replica of: everything
/// [`GroupSpec::of_node`] builds the replica's spec from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The group.
    pub group: GroupId,
    /// Its incarnation.
    pub incarnation: Incarnation,
    /// Voting members in member-index order; member 0 leads view 0.
    pub members: Vec<NodeId>,
    /// Learners, whose indexes follow the voters'.
    pub learners: Vec<NodeId>,
    /// Q4's replication quorum (`None`: a majority of the voters).
    pub replication_quorum: Option<usize>,
    /// Q4: synchronous or asynchronous writes.
    pub write_mode: WriteMode,
}

impl GroupSpec {
    /// The one way a node builds the spec of its replica of a group, at
    /// start-up, for a learner hosted at run time and after a restart:
    /// `me` is `node`'s index among the voters, then the learners. The spec
    /// is validated; `report_applied` is off (the shard sets it from the
    /// group's kind).
    ///
    /// ```
    /// use cohort_core::replica::Placement;
    /// use cohort_core::{GroupSpec, WriteMode};
    /// use cohort_messages::{GroupId, Incarnation, MemberIndex, NodeId};
    /// let placement = Placement {
    ///     group: GroupId(3),
    ///     incarnation: Incarnation(1),
    ///     members: vec![NodeId(1), NodeId(2), NodeId(3)],
    ///     learners: vec![NodeId(4)],
    ///     replication_quorum: None,
    ///     write_mode: WriteMode::Sync,
    /// };
    /// let spec = GroupSpec::of_node(&placement, NodeId(4)).expect("a valid placement");
    /// assert_eq!(spec.me, MemberIndex(3));
    /// assert_eq!(spec.quorums.replication, 2);
    /// ```
    pub fn of_node(placement: &Placement, node: NodeId) -> Result<GroupSpec, SpecError> {
        let group = placement.group;
        let quorums = Quorums::new(placement.members.len(), placement.replication_quorum)
            .map_err(|error| SpecError::Quorum { group, error })?;
        let mut spec = GroupSpec {
            group,
            incarnation: placement.incarnation,
            members: placement.members.clone(),
            learners: placement.learners.clone(),
            me: MemberIndex(0),
            quorums,
            write_mode: placement.write_mode,
            report_applied: false,
        };
        spec.me = spec.index_of(node).ok_or(SpecError::NotListed { group, node })?;
        spec.validate()?;
        Ok(spec)
    }

    /// Voters plus learners.
    pub fn total(&self) -> usize {
        self.members.len() + self.learners.len()
    }

    /// The node of member index `member` (voter or learner), or `None` if
    /// the index names neither: what the door checks on every message.
    pub fn node_at(&self, member: MemberIndex) -> Option<NodeId> {
        let index = member.0 as usize;
        match index.checked_sub(self.members.len()) {
            None => self.members.get(index).copied(),
            Some(learner) => self.learners.get(learner).copied(),
        }
    }

    /// The member index of `node`: its place among the voters, then among
    /// the learners (the inverse of [`GroupSpec::node_at`]).
    pub fn index_of(&self, node: NodeId) -> Option<MemberIndex> {
        let index = self.members.iter().chain(&self.learners).position(|member| *member == node)?;
        u8::try_from(index).ok().map(MemberIndex)
    }

    /// True if `member` is a voter's index.
    pub fn is_voter(&self, member: MemberIndex) -> bool {
        (member.0 as usize) < self.members.len()
    }

    /// The one place a spec is checked: at least one voter, quorums computed
    /// over the voters (so at most [`GROUP_MEMBERS_MAX`](cohort_messages::GROUP_MEMBERS_MAX) of them), no node
    /// twice, at most [`REPLICAS_MAX`] voters and learners together, and `me`
    /// inside them.
    pub fn validate(&self) -> Result<(), SpecError> {
        let group = self.group;
        let voters = self.members.len();
        if voters == 0 {
            return Err(SpecError::NoVoters { group });
        }
        if self.quorums.members != voters {
            return Err(SpecError::QuorumSize { group, quorum_members: self.quorums.members, voters });
        }
        let total = self.total();
        if total > REPLICAS_MAX {
            return Err(SpecError::TooMany { group, total });
        }
        let all: Vec<NodeId> = self.members.iter().chain(&self.learners).copied().collect();
        for (index, node) in all.iter().enumerate() {
            if all[..index].contains(node) {
                return Err(SpecError::Duplicate { group, node: *node });
            }
        }
        if self.me.0 as usize >= total {
            return Err(SpecError::MeOutOfRange { group, me: self.me, total });
        }
        Ok(())
    }
}

impl Replica {
    /// True if this replica is a learner of its group.
    pub fn is_learner(&self) -> bool {
        !self.spec.is_voter(self.spec.me)
    }

    /// The learner slot (position in `spec.learners`) of member index
    /// `member`, if it is a learner's.
    pub(crate) fn learner_slot(&self, member: MemberIndex) -> Option<usize> {
        let slot = (member.0 as usize).checked_sub(self.spec.members.len())?;
        (slot < self.spec.learners.len()).then_some(slot)
    }

    /// The primary: the highest op `member` (voter or learner) acknowledged
    /// in this view.
    pub(crate) fn acked_of(&self, member: MemberIndex) -> Op {
        let primary = self.lead();
        match self.learner_slot(member) {
            Some(slot) => primary.learners[slot].acked,
            None => primary.acked[member.0 as usize],
        }
    }

    /// The primary: true if `member` (voter or learner) confirmed this view.
    pub(crate) fn confirmed_of(&self, member: MemberIndex) -> bool {
        let primary = self.lead();
        match self.learner_slot(member) {
            Some(slot) => primary.learners[slot].confirmed,
            None => primary.confirmed[member.0 as usize],
        }
    }

    /// The primary counts a learner's PrepareOk: progress only, no quorum.
    pub(crate) fn on_learner_prepare_ok(&mut self, slot: usize, op: Op, now: u64, cx: &mut Context<'_>) {
        let log_op = self.log.op();
        let track = &mut self.lead_mut().learners[slot];
        track.confirmed = true;
        track.heard_tick = track.heard_tick.max(now);
        if op > track.acked && op <= log_op {
            track.acked = op;
            self.backlog_acked();
            // Z6: a seal waits for its next members, learners among them.
            if self.seal_in_log() {
                self.advance_commit(now, cx);
            }
        }
        let track = &self.lead().learners[slot];
        assert!(track.confirmed && track.acked <= self.log.op(), "P4: a learner acknowledged only what the log holds");
    }

    /// The primary notes a learner's CommitReply: it is in this view. The
    /// quorum window (R24) is dated from voters' replies only.
    pub(crate) fn on_learner_commit_reply(&mut self, slot: usize, sent_tick: u64) {
        let track = &mut self.lead_mut().learners[slot];
        track.confirmed = true;
        track.heard_tick = track.heard_tick.max(sent_tick);
        debug_assert!(track.heard_tick >= sent_tick, "a learner's last contact never goes back");
    }

    /// On the primary's send ticks: a learner silent for a heartbeat
    /// timeout may sit in an older view (see the module docs); count it as
    /// unconfirmed so the StartView is re-sent until it answers in this view.
    pub(crate) fn unconfirm_silent_learners(&mut self, now: u64) {
        let timeout = self.config.timing.commit_heartbeat_timeout_ticks;
        for track in &mut self.lead_mut().learners {
            if track.confirmed && now.saturating_sub(track.heard_tick) >= timeout {
                track.confirmed = false;
                track.heard_tick = now;
            }
        }
        debug_assert!(
            self.lead().learners.iter().all(|track| !track.confirmed || now.saturating_sub(track.heard_tick) < timeout),
            "P4: a learner silent for a heartbeat timeout is unconfirmed"
        );
    }

    /// R6 for learners: an eager Commit to each learner that holds the
    /// new commit point.
    pub(crate) fn eager_commits_to_learners(&mut self, commit: Op, now: u64, out: &mut Effects) {
        debug_assert!(commit <= self.commit_max, "R6: only a commit point reached");
        for slot in 0..self.spec.learners.len() {
            let track = &self.lead().learners[slot];
            if track.acked >= commit {
                let node = track.node;
                let entry = self.commit_entry(cohort_messages::HeartbeatState::Eager, now);
                out.queue_commit(node, entry, self.superblock_flush);
            }
        }
    }

    /// A learner that adopted a view's log tells the primary at once how
    /// far it holds it, once the adoption is durable: otherwise an idle
    /// group's primary would not learn a learner's progress until the next
    /// write. (Voters confirm by CommitReply; their progress counts only
    /// through later PrepareOks, which keeps their behaviour as it was.)
    pub(crate) fn confirm_view_as_learner(&mut self, out: &mut Effects) {
        debug_assert!(self.is_learner());
        if self.durable_op == Op(0) || self.status() != Status::Normal || self.log_view != self.view {
            return;
        }
        out.send_durable(self.node_of(self.primary_index()), Message::PrepareOk(self.prepare_ok()));
    }

    /// Replace the group's learners (P4), on any replica. Tracking of a
    /// kept learner carries over (by node), a removed one's is dropped, an
    /// added one starts empty; a primary sends each added learner the
    /// StartView at once and includes it in every later send. A learner's
    /// own member index follows its position in the new list.
    pub(crate) fn set_learners(&mut self, learners: Vec<NodeId>, now: u64, out: &mut Effects) -> Result<(), SpecError> {
        let role_before = self.role();
        let mut spec = self.spec.clone();
        spec.learners = learners;
        if self.is_learner() {
            let node = self.node_of(self.spec.me);
            let Some(slot) = spec.learners.iter().position(|learner| *learner == node) else {
                return Err(SpecError::RemovesSelf { group: spec.group, node });
            };
            spec.me = MemberIndex(u8::try_from(spec.members.len() + slot).unwrap_or(u8::MAX));
        }
        spec.validate()?;
        // R25: a kept learner's link keeps its state; an added one's counts
        // as connected until a batch to it says otherwise.
        let voters = spec.members.len();
        let mut link_connected = self.link_connected[..voters].to_vec();
        let mut added = Vec::new();
        for node in &spec.learners {
            match self.spec.learners.iter().position(|learner| learner == node) {
                Some(slot) => link_connected.push(self.link_connected[voters + slot]),
                None => {
                    added.push(*node);
                    link_connected.push(true);
                }
            }
        }
        self.link_connected = link_connected;
        if let RoleState::Primary(primary) = &mut self.role {
            let old = std::mem::take(&mut primary.learners);
            primary.learners = spec
                .learners
                .iter()
                .map(|node| {
                    let kept = old.iter().find(|track| track.node == *node).cloned();
                    kept.unwrap_or_else(|| LearnerTrack::new(*node, now))
                })
                .collect();
        }
        self.spec = spec;
        // A transfer from a learner's index may now name another node.
        if self.state_transfer.as_ref().is_some_and(|transfer| !self.spec.is_voter(transfer.source)) {
            self.state_transfer = None;
        }
        if self.is_primary() && !added.is_empty() {
            let message = self.start_view_message();
            for node in added {
                self.send_view_change(node, Message::StartView(message.clone()), out);
            }
        }
        assert_eq!(self.role(), role_before, "{self:?}: a change of learners keeps the role");
        assert_eq!(self.link_connected.len(), self.spec.total(), "R25: link state per member");
        if let RoleState::Primary(primary) = &self.role {
            assert!(primary.learners.iter().map(|track| track.node).eq(self.spec.learners.iter().copied()));
        }
        Ok(())
    }

    /// P4, on the primary: per learner, the op through which it holds this
    /// view's log durably (as acknowledged). Empty on any other replica.
    pub fn learner_progress(&self) -> Vec<(NodeId, Op)> {
        match &self.role {
            RoleState::Primary(primary) => primary.learners.iter().map(|track| (track.node, track.acked)).collect(),
            _ => Vec::new(),
        }
    }

    /// P4, on the primary: true if learner `node` confirmed this view and
    /// durably holds its log through the primary's commit point. What a host
    /// waits for before reporting `ReportCaughtUp`. False on any other
    /// replica and for nodes that are not learners.
    pub fn learner_caught_up(&self, node: NodeId) -> bool {
        let caught_up = |track: &LearnerTrack| track.node == node && track.confirmed && track.acked >= self.commit_max;
        matches!(&self.role, RoleState::Primary(primary) if primary.learners.iter().any(caught_up))
    }

    /// The learners' share of [`Replica::invariants`].
    pub(crate) fn learner_invariants(&self) {
        assert!(self.spec.validate().is_ok(), "{self:?}: invalid spec");
        assert_eq!(self.link_connected.len(), self.spec.total(), "{self:?}: link state per member");
        // Quorum math reads only voter-sized vectors (`role_invariants`): a
        // learner is never counted in a commit point, quorum wait, window
        // or election.
        if self.is_learner() {
            assert_eq!(self.role(), Role::Learner, "{self:?}: a learner in another role");
            assert!(self.request_queue.is_empty(), "{self:?}: a learner holds requests");
        }
    }
}
