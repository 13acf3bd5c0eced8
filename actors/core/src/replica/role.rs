//! A replica's role, with the state that only that role keeps.
//!
//! Why one enum: a primary's acknowledgements, quorum waits and heartbeat
//! schedule mean nothing to a backup, and an election's DoViewChanges
//! nothing to a primary. As flat fields they outlived their role and every
//! transition had to reset them by hand; here a transition builds the new
//! role's state whole ([`Primary::new`], [`Backup::new`], [`Election::new`])
//! and drops the old one, and a handler reaches a role's state only by
//! matching it (or through [`Replica::lead`], which asserts the role).
//!
//! What stays on the replica across roles, and why:
//! - the view, the log, the commit points and the superblock state;
//! - the lease this member granted (`lease_expiry`) and the newest Commit
//!   it accepted: promises of the member, not of one view (V7);
//! - the repair target and deadline, and a state transfer under way: a
//!   member fetches across a view change;
//! - its Commit timestamps, which only grow while the process lives (R14);
//! - queued requests (`request_queue`): a primary that a StartView makes a
//!   backup keeps them until its next view change or its seal answers them;
//! - the quiescence state (Z3), which `check_quiet` clears after any input
//!   that moved the replica away from where it quiesced.
//!
//! A learner never changes role: it is `Learner` from its creation on.

use cohort_messages::{MemberIndex, NodeId, Op, View};

use super::heartbeat::PrimaryHeartbeat;
use super::{DoViewChangeSummary, QuorumWait, Replica, Status};
use crate::effect::{FlushId, Role};
use crate::quorum::MemberSet;

/// What this replica does in its view, with that role's state.
pub(crate) enum RoleState {
    /// Normal, and the primary of its view (`log_view == view`).
    Primary(Box<Primary>),
    /// Normal, and a voter that follows the primary of its view; its log
    /// may still lag behind the view (`log_view < view`).
    Backup(Backup),
    /// Electing the primary of its view.
    ViewChange(Election),
    /// Normal, and a learner (P4): it follows and never votes.
    Learner,
}

/// What a primary knows of one learner (P4), in `spec.learners` order.
/// Never read by quorum math.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LearnerTrack {
    /// The learner's node.
    pub(crate) node: NodeId,
    /// The highest op it acknowledged (PrepareOk) as durably held in this
    /// view's log.
    pub(crate) acked: Op,
    /// It confirmed this view (a PrepareOk or CommitReply of this view).
    pub(crate) confirmed: bool,
    /// The last tick it was heard from in this view (a PrepareOk's arrival,
    /// or the send tick of a Commit it answered), or when tracking began.
    pub(crate) heard_tick: u64,
}

impl LearnerTrack {
    /// Nothing known of learner `node` yet, tracked from `now`.
    pub(crate) fn new(node: NodeId, now: u64) -> LearnerTrack {
        LearnerTrack { node, acked: Op(0), confirmed: false, heard_tick: now }
    }
}

/// The primary's state of the view it leads.
#[derive(Debug)]
pub(crate) struct Primary {
    /// Per voter: the highest op it acknowledged as durably held in this
    /// view's log. The primary's own slot stays 0: it counts itself by its
    /// `durable_op`.
    pub(crate) acked: Vec<Op>,
    /// Per voter: it confirmed this view (a PrepareOk or CommitReply of it).
    pub(crate) confirmed: Vec<bool>,
    /// Per voter: the send tick of the newest Commit it answered in this
    /// view (`None`: no answer in this view yet).
    pub(crate) contact_tick: Vec<Option<u64>>,
    /// Per voter: the tick this primary last sent it the view's StartView
    /// (see `send_start_view`).
    pub(crate) start_view_sent_tick: Vec<u64>,
    /// The last op it inherited: nothing new is prepared before it commits
    /// (Q3).
    pub(crate) start_view_op: Op,
    /// Async groups: writes acknowledged up to here.
    pub(crate) async_acked_op: Op,
    /// Quorum waits (Q1, Q2) under way.
    pub(crate) waits: Vec<QuorumWait>,
    /// Its heartbeat schedule (R1–R6, R20).
    pub(crate) heartbeat: PrimaryHeartbeat,
    /// Voters that hear this primary but are stuck without a quorum in a
    /// later view (they answer Commits from that view, or, recovering, ask
    /// for its state and lent their vote to that view: H1): the highest
    /// such view, with when it was first and last heard of (see `on_tick`).
    pub(crate) stranded: Option<(View, u64, u64)>,
    /// H1: when each voter last asked this primary, recovering, for its
    /// state (a RecoveryQuery); a recovering voter's vote lent to a later
    /// view strands it as a Commit answered from that view does.
    pub(crate) recovery_asked_tick: Vec<Option<u64>>,
    /// What it knows of each learner (P4). Kept apart from the voters'
    /// vectors so that no quorum, window or lease can count a learner.
    pub(crate) learners: Vec<LearnerTrack>,
    /// Prepares wait for this flush: the one carrying the superblock of the
    /// view this replica leads. For view 0 of an incarnation it switched
    /// to (no view change), that is safety: until that view is durable, a
    /// crash would forget it led it, and a restart that switches again
    /// would lead the same view with another log (V2). After a view change
    /// it is order: the StartView waits for that flush too, and a Prepare
    /// that reached a backup before it would be dropped there (the backup
    /// is still electing) and its op would wait for a repair. 0: no wait.
    pub(crate) lead_after_flush: FlushId,
    /// D1: what its snapshots dropped that lagging members still need
    /// (see `backlog`); goes with the role.
    pub(crate) backlog: Option<super::backlog::Backlog>,
}

impl Primary {
    /// A primary that starts leading at `now`: no voter or learner has
    /// confirmed the view (this member aside), so no read is served until a
    /// quorum answers, and the step-down clock starts with the view (R24,
    /// V7). `inherited` is the last op of the log it starts with (Q3);
    /// its first heartbeat goes on the next send tick (R2).
    pub(crate) fn new(
        voters: usize,
        me: MemberIndex,
        learners: &[NodeId],
        now: u64,
        inherited: Op,
        lead_after_flush: FlushId,
    ) -> Primary {
        assert!((me.0 as usize) < voters, "P4: only a voter leads");
        let mut confirmed = vec![false; voters];
        confirmed[me.0 as usize] = true;
        let mut heartbeat = PrimaryHeartbeat::default();
        heartbeat.reset(now);
        Primary {
            acked: vec![Op(0); voters],
            confirmed,
            contact_tick: vec![None; voters],
            start_view_sent_tick: vec![now; voters],
            start_view_op: inherited,
            async_acked_op: inherited,
            waits: Vec::new(),
            heartbeat,
            stranded: None,
            recovery_asked_tick: vec![None; voters],
            learners: learners.iter().map(|node| LearnerTrack::new(*node, now)).collect(),
            lead_after_flush,
            backlog: None,
        }
    }
}

/// A backup's state: when it gives up on its primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Backup {
    /// It starts a view change at this tick unless a newer Commit of its
    /// primary comes first (R8, R22).
    pub(crate) heartbeat_deadline: u64,
    /// The newest Commit seen said `Idle`: the timeout is the idle one (R22).
    pub(crate) follows_idle: bool,
}

impl Backup {
    /// A backup that starts following at `now`: one heartbeat timeout
    /// before it gives up on a primary it has not heard.
    pub(crate) fn new(now: u64, heartbeat_timeout_ticks: u64) -> Backup {
        Backup { heartbeat_deadline: now + heartbeat_timeout_ticks, follows_idle: false }
    }
}

/// An election's state: who takes part, and what the new primary collected.
#[derive(Debug)]
pub(crate) struct Election {
    /// When the election is given up for the next view (or, alone in it,
    /// asked again).
    pub(crate) deadline_tick: u64,
    /// When its StartViewChange and DoViewChange are sent again.
    pub(crate) resend_tick: u64,
    /// Voters known to take part in this view's election.
    pub(crate) svc_from: MemberSet,
    /// Per voter: its DoViewChange (the new primary collects Qv of them).
    pub(crate) dvcs: Vec<Option<DoViewChangeSummary>>,
}

impl Election {
    /// An election among `voters` with nothing collected yet, in which
    /// `svc_from` already take part.
    pub(crate) fn new(voters: usize, deadline_tick: u64, resend_tick: u64, svc_from: MemberSet) -> Election {
        Election { deadline_tick, resend_tick, svc_from, dvcs: vec![None; voters] }
    }
}

impl RoleState {
    /// Take a primary's quorum waits (none on any other role), for the
    /// role that follows to fail them.
    pub(crate) fn take_waits(&mut self) -> Vec<QuorumWait> {
        match self {
            RoleState::Primary(primary) => std::mem::take(&mut primary.waits),
            _ => Vec::new(),
        }
    }

    /// The role as the driver sees it.
    pub(crate) fn role(&self) -> Role {
        match self {
            RoleState::Primary(_) => Role::Primary,
            RoleState::Backup(_) => Role::Backup,
            RoleState::ViewChange(_) => Role::ViewChange,
            RoleState::Learner => Role::Learner,
        }
    }

    /// Where the replica is in the protocol.
    pub(crate) fn status(&self) -> Status {
        match self {
            RoleState::ViewChange(_) => Status::ViewChange,
            RoleState::Primary(_) | RoleState::Backup(_) | RoleState::Learner => Status::Normal,
        }
    }
}

impl Replica {
    /// The state of the view this replica leads. Call only where
    /// [`Replica::is_primary`] holds: on any other role it panics.
    pub(crate) fn lead(&self) -> &Primary {
        match &self.role {
            RoleState::Primary(primary) => primary,
            _ => panic!("{self:?}: only a primary has a primary's state"),
        }
    }

    /// [`Replica::lead`], to change.
    pub(crate) fn lead_mut(&mut self) -> &mut Primary {
        if !self.is_primary() {
            panic!("{self:?}: only a primary has a primary's state");
        }
        match &mut self.role {
            RoleState::Primary(primary) => primary,
            _ => unreachable!("checked above"),
        }
    }

    /// The state of the election this replica is in, if it is in one.
    pub(crate) fn election(&self) -> Option<&Election> {
        match &self.role {
            RoleState::ViewChange(election) => Some(election),
            _ => None,
        }
    }

    /// [`Replica::election`], to change.
    pub(crate) fn election_mut(&mut self) -> Option<&mut Election> {
        match &mut self.role {
            RoleState::ViewChange(election) => Some(election),
            _ => None,
        }
    }

    /// The role's share of [`Replica::invariants`]: the role is the one
    /// the view says (a primary leads exactly when it is the normal
    /// primary index of a view whose log it holds, a learner is always one),
    /// and each role's state is sized for the group.
    pub(crate) fn role_invariants(&self) {
        let voters = self.spec.members.len();
        let normal_primary = self.log_view == self.view && self.primary_index() == self.spec.me;
        let learner = !self.spec.is_voter(self.spec.me);
        match &self.role {
            RoleState::Primary(primary) => {
                assert!(normal_primary && !learner, "{self:?}: a primary that is not its view's");
                assert_eq!(primary.acked.len(), voters, "{self:?}: acks of non-voters");
                assert_eq!(primary.confirmed.len(), voters, "{self:?}: confirmations of non-voters");
                assert_eq!(primary.contact_tick.len(), voters, "{self:?}: quorum window over non-voters");
                assert_eq!(primary.start_view_sent_tick.len(), voters, "{self:?}: StartViews to non-voters");
                assert_eq!(primary.acked[self.spec.me.0 as usize], Op(0), "primary counts itself by durable_op");
                assert!(
                    primary.learners.iter().map(|track| track.node).eq(self.spec.learners.iter().copied()),
                    "{self:?}: learner tracking out of step with the spec"
                );
                for track in &primary.learners {
                    assert!(track.acked <= self.log.op(), "{self:?}: learner acked past the log");
                }
                assert!(primary.start_view_op <= self.log.op(), "{self:?}: inherited past its log (Q3)");
            }
            RoleState::Backup(_) => {
                assert!(!learner, "{self:?}: a learner as a backup");
                // H1: a recovering member listens as a backup, even of a view
                // it would lead.
                if self.recovery.is_none() {
                    assert_ne!(self.primary_index(), self.spec.me, "{self:?}: a backup of a view it leads");
                }
            }
            RoleState::ViewChange(election) => {
                assert!(!learner, "{self:?}: a learner in a view change (P4)");
                assert_eq!(election.dvcs.len(), voters, "{self:?}: DoViewChanges of non-voters");
                assert!(
                    election
                        .dvcs
                        .iter()
                        .enumerate()
                        .all(|(member, dvc)| dvc.as_ref().is_none_or(|dvc| dvc.replica.0 as usize == member)),
                    "{self:?}: a DoViewChange kept in another voter's slot"
                );
            }
            RoleState::Learner => assert!(learner, "{self:?}: a voter as a learner"),
        }
    }
}

impl std::fmt::Debug for RoleState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RoleState::Primary(primary) => f
                .debug_struct("Primary")
                .field("acked", &primary.acked)
                .field("start_view_op", &primary.start_view_op)
                .finish_non_exhaustive(),
            RoleState::Backup(backup) => backup.fmt(f),
            RoleState::ViewChange(election) => f
                .debug_struct("ViewChange")
                .field("svc_from", &election.svc_from.count())
                .field("dvcs", &election.dvcs.iter().flatten().count())
                .finish_non_exhaustive(),
            RoleState::Learner => f.write_str("Learner"),
        }
    }
}
