//! One member of one group: the VSR state machine with flexible quorums.
//!
//! Handlers are split by concern: `normal` (requests, prepares, commit and
//! apply), `heartbeat` (Commit heartbeats and replies, busy/idle),
//! `view_change` (StartViewChange, DoViewChange, StartView), `repair`
//! (missing prepares and state transfer), `snapshot` (V6), `wait`
//! (quorum waits), `jump` (T5: how far one message may move a view),
//! `transfer` (C4: a directed view change to a chosen member) and `quiet`
//! (Z3). `role` holds each role's state.
//! Every handler leaves the replica in a state that passes
//! [`Replica::invariants`].
//!
//! A handler gets the tick by value, and borrows of what it touches outside
//! the replica: the shard's output buffer alone, or a `Context` (the buffer,
//! the counters, the congested peers), and the quiescence pairs only where
//! it quiesces or wakes (see `context`).
//!
//! # Status and role
//! - `Normal` with `log_view == view`: primary or backup of `view`.
//! - `Normal` with `log_view < view`: a backup that knows the primary of
//!   `view` but has not yet adopted its log (it is catching up by state
//!   transfer); it acknowledges nothing until it has.
//! - `ViewChange`: gave up on the primary of `view - 1` or earlier and is
//!   electing the primary of `view`.
//!
//! The replica holds its role as one value (`role`: primary, backup, view
//! change or learner), with the state only that role keeps; the status is
//! read from it, and a transition builds the next role's state whole (see
//! `role` for what stays on the replica across roles, and why).
//!
//! # Voters and learners (P4)
//! Member indexes `0..members.len()` are the voters; the group's learners
//! follow (`members.len() + i`). A learner receives the log and applies
//! committed ops but never votes: see `learner`.

mod apply;
mod backlog;
mod context;
mod heartbeat;
mod jump;
mod learner;
mod normal;
mod quiet;
mod recovery;
mod repair;
pub use repair::REPAIR_ANSWER_SIZE_MAX_BYTES;
mod role;
mod seal;
mod snapshot;
mod stream;
mod transfer;
mod view_change;
mod wait;

use std::collections::VecDeque;
use std::sync::Arc;

use cohort_messages::{GroupId, Incarnation, MemberIndex, NodeId, Op, Request, StartView, Timestamp, View};

use crate::client_table::ClientTable;
use crate::config::CoreConfig;
use crate::effect::{FlushId, Role};
use crate::effects::Effects;
use crate::log::Log;
use crate::quiesce::Pairs;
use crate::quorum::Quorums;
use crate::state_machine::StateMachine;
use crate::storage::{Snapshot, Superblock};

pub(crate) use context::Context;
pub use heartbeat::GroupActivity;
pub use learner::{Placement, SpecError};
pub(crate) use role::{Backup, Election, Primary, RoleState};

/// Heartbeat timeouts a healthy primary waits for a voter stuck alone in a
/// later view before the group moves up to that view.
const STRANDED_TIMEOUTS: u64 = 3;
pub use seal::{SealError, Sealed};
pub(crate) use snapshot::with_checkpoint;
pub use transfer::TransferError;
pub(crate) use view_change::DoViewChangeSummary;
pub(crate) use wait::QuorumWait;

/// Where a replica is in the protocol.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// Serving or following `view`.
    Normal,
    /// Electing the primary of `view`.
    ViewChange,
}

pub use cohort_messages::replication::WriteMode;

/// Static facts about a group member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupSpec {
    /// The group.
    pub group: GroupId,
    /// Its incarnation.
    pub incarnation: Incarnation,
    /// Voting members in member-index order.
    pub members: Vec<NodeId>,
    /// Learners (P4; PacificA calls them candidates): they receive the log and apply committed
    /// ops but are counted in no quorum. Their member indexes follow the
    /// voters' (`members.len() + i`).
    pub learners: Vec<NodeId>,
    /// This node's member index (a voter's, or a learner's).
    pub me: MemberIndex,
    /// Quorum sizes.
    pub quorums: Quorums,
    /// Q4: synchronous or asynchronous writes.
    pub write_mode: WriteMode,
    /// Emit [`crate::Effect::Applied`] and [`crate::Effect::Restored`]
    /// for this group (a host's custom group actor follows it).
    pub report_applied: bool,
}

/// One group member. See the module docs.
pub struct Replica {
    pub(crate) spec: GroupSpec,
    /// Shared by every replica of the shard (Z1: a copy was 120 bytes a replica).
    pub(crate) config: Arc<CoreConfig>,
    /// What it does in `view`, with that role's state (see `role`).
    pub(crate) role: RoleState,
    pub(crate) view: View,
    pub(crate) log_view: View,
    pub(crate) log: Log,
    /// Applied up to here.
    pub(crate) commit_min: Op,
    /// Known committed up to here (may exceed `log.op()` on a lagging backup).
    pub(crate) commit_max: Op,
    /// Durable up to here, as part of the current `log_view`'s log.
    pub(crate) durable_op: Op,
    pending_durable: VecDeque<(FlushId, Op)>,
    /// The group's state machine; [`apply::Away`] while a run is lent.
    pub(crate) state: Box<dyn StateMachine>,
    /// D1: where the state machine keeps its state (asked once: the
    /// replica asks it while the state machine is away too).
    pub(crate) durability: crate::state_machine::Durability,
    /// D2: runs go to the apply worker ([`StateMachine::apply_off_shard`]).
    pub(crate) apply_off_shard: bool,
    /// K5: every write's operation is an op batch
    /// ([`crate::StateMachine::takes_op_batches`], kept here because the state
    /// machine may be away on the apply worker).
    pub(crate) op_batches: bool,
    /// D2: the run on the apply worker, if one is.
    pub(crate) lent: Option<Box<apply::Lent>>,
    /// D2: requests that came while the state machine was away.
    pub(crate) waiting_for_state: apply::WaitingForState,
    pub(crate) clients: ClientTable,
    pub(crate) snapshot: Option<Snapshot>,
    /// What a state transfer is served from (see `stream`): kept while
    /// the log still joins it.
    pub(crate) served: Option<stream::Served>,
    /// D1: no checkpoint is asked for below this op (one failed).
    pub(crate) checkpoint_retry_op: Op,
    /// Client requests waiting for room in a primary's pipeline. A primary
    /// that a StartView makes a backup keeps them until its next view
    /// change (or its seal) answers them.
    pub(crate) request_queue: VecDeque<Request>,
    /// The newest Commit timestamp this process sent: they only grow, in
    /// every view (R14).
    pub(crate) timestamp: Timestamp,
    /// The lease this member granted: it joins no view change before this
    /// tick (V7). A promise of the member, kept across views.
    pub(crate) lease_expiry: u64,
    /// The newest Commit accepted, as (view, timestamp): an older one
    /// restarts no timeout (R8).
    pub(crate) last_commit_seen: (View, Timestamp),
    /// When a missing range or a state chunk is asked for again.
    pub(crate) repair_deadline: u64,
    /// The highest op known to exist that this member lacks.
    pub(crate) repair_target: Op,
    /// The range the last repair request asked for (0..0: none yet), and
    /// the bytes of operations taken from that range since.
    pub(crate) repair_asked: (Op, Op),
    pub(crate) repair_answer_bytes: u64,
    /// A snapshot being fetched (it may span a view change).
    pub(crate) state_transfer: Option<Box<repair::StateTransfer>>,
    /// The highest view this member heard an election of (it joins it once
    /// its lease ends).
    pub(crate) svc_view_seen: View,
    /// DoViewChanges for a later view that we lead, kept while our lease runs.
    pub(crate) early_dvcs: Vec<cohort_messages::DoViewChange>,
    // Superblock.
    pub(crate) superblock_saved: Option<Superblock>,
    pub(crate) superblock_retry: bool,
    /// After a failed superblock stage (R12): durability of this group does
    /// not advance until this flush (the retry's) completes; `FlushId::MAX`
    /// until the retry is staged.
    pub(crate) superblock_blocked: Option<FlushId>,
    /// The flush that carries the latest staged superblock (R12).
    pub(crate) superblock_flush: FlushId,
    pub(crate) role_reported: Option<(View, Role)>,
    /// The seal this replica applied: its incarnation's state is final.
    pub(crate) sealed: Option<Box<Sealed>>,
    /// Z6: a Commit of the next incarnation reached this replica: the group
    /// switched without it (a learner that missed the seal).
    pub(crate) outpaced: bool,
    /// The commit point of the newest durable superblock.
    pub(crate) superblock_durable_commit: Op,
    /// The log view of the newest durable superblock (None: none of this
    /// incarnation yet). A backup's PrepareOk says "I hold these ops durably
    /// in this view"; it may leave only once this is the replica's log view,
    /// or a crash could take the view back after the primary counted it (V2).
    pub(crate) superblock_durable_log_view: Option<View>,
    /// H1: whether the newest durable superblock says this member is
    /// recovering (or none is durable yet for a member that joined without
    /// its data): a crash now would leave it recovering.
    pub(crate) superblock_durable_recovering: bool,
    /// R25: per member (voters, then learners), whether the last Commit
    /// batch to it went to a connected link.
    pub(crate) link_connected: Vec<bool>,
    /// Z3, primary: members (bits by index) the group is quiesced for, and
    /// members it was proposed to, at `quiet_at` (view, commit). Kept off
    /// the primary's role state: `check_quiet` wakes the group after any
    /// input that moved it away, its role included.
    pub(crate) quiet_members: u64,
    pub(crate) quiet_proposed: u64,
    pub(crate) quiet_at: (View, Op),
    /// Z3, backup: whom it follows quiesced, in which view.
    pub(crate) follow_quiet: Option<quiet::QuietFollow>,
    /// H1: set while this member recovers the data it was created without
    /// (see `recovery`): it votes, acknowledges and serves nothing.
    pub(crate) recovery: Option<Box<recovery::Recovery>>,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica")
            .field("group", &self.spec.group)
            .field("me", &self.spec.me)
            .field("role", &self.role)
            .field("view", &self.view)
            .field("log_view", &self.log_view)
            .field("op", &self.log.op())
            .field("commit_min", &self.commit_min)
            .field("commit_max", &self.commit_max)
            .field("durable_op", &self.durable_op)
            .field("base", &self.log.base())
            .finish()
    }
}

impl Replica {
    fn blank(spec: GroupSpec, config: Arc<CoreConfig>, state: Box<dyn StateMachine>, now: u64) -> Replica {
        if let Err(error) = spec.validate() {
            panic!("a replica needs a valid spec (validated by the shard): {error}");
        }
        // A voter starts as a backup of view 0 (member 0 then leads it:
        // `start_view_zero`), a learner as a learner.
        let role = if spec.is_voter(spec.me) {
            RoleState::Backup(Backup::new(now, config.timing.commit_heartbeat_timeout_ticks))
        } else {
            RoleState::Learner
        };
        let clients = ClientTable::new(config.clients_max).with_mutant(&config);
        Replica {
            role,
            view: View(0),
            log_view: View(0),
            log: Log::new(Op(0), View(0)),
            commit_min: Op(0),
            commit_max: Op(0),
            durable_op: Op(0),
            pending_durable: VecDeque::new(),
            durability: state.durability(),
            apply_off_shard: state.apply_off_shard(),
            op_batches: state.takes_op_batches(),
            lent: None,
            waiting_for_state: VecDeque::new(),
            state,
            clients,
            snapshot: None,
            served: None,
            checkpoint_retry_op: Op(0),
            request_queue: VecDeque::new(),
            timestamp: Timestamp(0),
            lease_expiry: now + config.timing.commit_heartbeat_timeout_ticks,
            last_commit_seen: (View(0), Timestamp(0)),
            repair_deadline: 0,
            repair_target: Op(0),
            repair_asked: (Op(0), Op(0)),
            repair_answer_bytes: 0,
            state_transfer: None,
            svc_view_seen: View(0),
            early_dvcs: Vec::new(),
            superblock_saved: None,
            superblock_retry: false,
            superblock_blocked: None,
            superblock_flush: 0,
            role_reported: None,
            sealed: None,
            outpaced: false,
            superblock_durable_commit: Op(0),
            superblock_durable_log_view: None,
            superblock_durable_recovering: false,
            link_connected: vec![true; spec.total()],
            quiet_members: 0,
            quiet_proposed: 0,
            quiet_at: (View(0), Op(0)),
            follow_quiet: None,
            recovery: None,
            spec,
            config,
        }
    }

    /// A brand-new member of a brand-new group: view 0, empty log. Member 0
    /// is the primary of view 0. Stages the first superblock.
    pub(crate) fn create(
        spec: GroupSpec,
        config: Arc<CoreConfig>,
        state: Box<dyn StateMachine>,
        now: u64,
        cx: &mut Context<'_>,
    ) -> Replica {
        let mut replica = Replica::blank(spec, config, state, now);
        replica.start_view_zero(now, cx);
        assert_eq!(replica.view, View(0), "a new group starts in view 0");
        assert!(replica.superblock_saved.is_some(), "a new member stages its first superblock");
        replica
    }

    /// H1: a voter created without its data, which cannot tell whether its
    /// group is new: it starts recovering (durably, in the superblock it
    /// stages) and asks the other voters at once (see `recovery`).
    pub(crate) fn join(
        spec: GroupSpec,
        config: Arc<CoreConfig>,
        state: Box<dyn StateMachine>,
        now: u64,
        cx: &mut Context<'_>,
    ) -> Replica {
        if config.mutated(crate::mutants::Mutant::RecoveryIgnored) {
            return Replica::create(spec, config, state, now, cx);
        }
        let mut replica = Replica::blank(spec, config, state, now);
        if !replica.spec.is_voter(replica.spec.me) {
            // A learner never votes or counts: it needs no recovery.
            replica.report_role(cx.out);
            replica.stage_superblock(cx.out);
            return replica;
        }
        replica.begin_recovery(now);
        // Nothing of it is durable yet: a crash now leaves it joining again.
        replica.superblock_durable_recovering = true;
        replica.stage_superblock(cx.out);
        replica.report_role(cx.out);
        assert!(replica.superblock_saved.as_ref().is_some_and(|sb| sb.recovering), "H1: recovering, durably");
        if replica.spec.members.len() == 1 {
            // The only voter has no one to ask: it decides at once.
            replica.recover_alone(now, cx);
        }
        replica
    }

    /// Stage the superblock and take the role of view 0: member 0 leads it.
    pub(crate) fn start_view_zero(&mut self, now: u64, cx: &mut Context<'_>) {
        assert!(self.view == View(0) && self.log_view == View(0), "a replica starts in view 0");
        self.stage_superblock(cx.out);
        if self.primary_index() == self.spec.me {
            self.become_primary(now, cx);
        } else {
            self.report_role(cx.out);
        }
        assert_eq!(self.is_primary(), self.primary_index() == self.spec.me, "member 0 leads view 0, alone");
    }

    /// Rebuild a member from what storage recovered (V4).
    ///
    /// A member that was the normal primary of its view never leads that
    /// view again: Prepares it sent may be held by backups beyond what it made
    /// durable itself, so it starts a view change to the next view. Every
    /// restarted member waits a full heartbeat timeout before it joins a view
    /// change, because it no longer knows what lease it granted (V7, R24).
    pub(crate) fn recover(
        spec: GroupSpec,
        config: Arc<CoreConfig>,
        state: Box<dyn StateMachine>,
        recovered: crate::storage::RecoveredGroup,
        now: u64,
        cx: &mut Context<'_>,
    ) -> Result<Replica, String> {
        let mut replica = Replica::blank(spec, config, state, now);
        if let Some(snapshot) = &recovered.snapshot {
            let kept = replica.install_snapshot_state(snapshot, cx.out)?;
            replica.snapshot = Some(kept);
        }
        let base = replica.log.base();
        // A snapshot with no superblock of this incarnation is a switch's
        // (`into_next_incarnation`) whose first flush was lost: entries past
        // it are the earlier incarnation's (a learner that switched from its
        // applied point, Z6) or that flush's, never acknowledged. Neither is
        // this incarnation's log.
        let switched = recovered.snapshot.is_some()
            && recovered.superblock.as_ref().is_none_or(|sb| sb.incarnation != replica.spec.incarnation);
        let entries = if switched { Vec::new() } else { recovered.entries };
        // H2: a replica marked recovering lost records its storage had
        // synced, a group's removal among them perhaps (its older entries
        // then come back without the snapshot that covered them). What
        // follows a gap cannot be trusted, and it is repaired from the
        // other members anyway: its log ends before the gap.
        let lost_records = recovered.superblock.as_ref().is_some_and(|sb| sb.recovering);
        let mut cut_at_gap = false;
        for entry in entries {
            if entry.op <= base {
                continue;
            }
            if entry.op != replica.log.op().next() && lost_records {
                cut_at_gap = true;
                break;
            }
            if entry.op != replica.log.op().next() {
                return Err(format!("{}: recovered log has a gap before {}", replica.spec.group, entry.op));
            }
            // Leftovers older than the entry before them were superseded
            // (see install_snapshot); the log ends there.
            if replica.log.view_at(replica.log.op()).is_some_and(|view| entry.view < view) {
                break;
            }
            replica.log.push(entry);
        }
        replica.durable_op = replica.log.op();
        if cut_at_gap {
            let op = replica.log.op();
            replica.stage_truncate(op, cx.out);
        }
        // A superblock of an earlier incarnation (a crash right after a
        // member change saved the new incarnation's snapshot) says nothing
        // about this one: it starts at view 0 from that snapshot.
        if let Some(superblock) = recovered.superblock.as_ref().filter(|sb| sb.incarnation == replica.spec.incarnation)
        {
            replica.view = superblock.view;
            replica.log_view = superblock.log_view;
            replica.commit_max = superblock.commit.max(base);
            replica.superblock_saved = Some(superblock.clone());
            // A recovered snapshot is a durable commit point too: the next
            // restart replays at least through it.
            replica.superblock_durable_commit = superblock.commit.max(base);
        }
        // The log becomes durable before the superblock that describes it,
        // so a crash between the two leaves entries of a newer view than the
        // superblock names. Adoption writes a view's log in op order from the
        // first op that differs, so such a log is a prefix of that view's log
        // that already holds the view's whole StartView log: it is that
        // view's log, and the member was in that view.
        if let Some(newest) = replica.log.view_at(replica.log.op())
            && newest > replica.log_view
        {
            replica.log_view = newest;
            replica.view = replica.view.max(newest);
            // The superblock this replica counts as saved says so too: the
            // next flush takes its log view as durable, and an older one
            // would withhold every PrepareOk until some later change of the
            // superblock (a learner makes none: seed 602502, Z6 shape).
            if let Some(saved) = replica.superblock_saved.as_mut() {
                saved.log_view = newest;
                saved.view = saved.view.max(newest);
            }
        }
        // Everything recovered is durable, the log view read from it too.
        replica.superblock_durable_log_view = Some(replica.log_view);
        // H1: a voter that was recovering goes on recovering. (One with
        // nothing at all on a storage that was already there never
        // acknowledged anything here: it starts as before. The caller
        // joins one on a storage it just created: `Shard::join_group`.)
        let was_recovering = recovered.superblock.as_ref().is_some_and(|sb| sb.recovering);
        replica.superblock_durable_recovering = was_recovering;
        if replica.spec.is_voter(replica.spec.me) && was_recovering {
            replica.begin_recovery(now);
            replica.apply_committed(cx.out);
            replica.report_role(cx.out);
            assert!(replica.is_recovering() && !replica.is_primary());
            return Ok(replica);
        }
        // A switch whose superblock was lost: this incarnation's superblock
        // goes in the first flush, ahead of anything this replica
        // acknowledges. Without it, the entries it acknowledges from now on
        // would sit behind the earlier incarnation's superblock, and the
        // next restart would drop them as that flush's (seed 906519,
        // reconfigure scenario: an acknowledged write lost).
        if switched {
            replica.stage_superblock(cx.out);
        }
        let was_normal = replica.view == replica.log_view;
        let was_primary = was_normal && replica.primary_index() == replica.spec.me;
        if was_primary {
            // It applies what it committed as the primary it was (with no
            // acknowledgement of this process: every applied op is
            // answered), then leaves that view.
            let spec = &replica.spec;
            let primary = Primary::new(spec.members.len(), spec.me, &spec.learners, now, Op(0), 0);
            replica.role = RoleState::Primary(Box::new(primary));
        }
        replica.apply_committed(cx.out);
        if was_primary {
            let next = replica.view.next();
            replica.lease_expiry = now;
            replica.start_view_change(next, now, cx);
        } else if was_normal || replica.is_learner() || replica.primary_index() != replica.spec.me {
            // A learner never takes part in a view change: it waits for
            // the primary's StartView, which is re-sent until it confirms.
            // A backup follows the view it was in (its role from `blank`).
            // V7: so does a member whose view is past its log's view and
            // led by another: on disk, a backup that had not taken its
            // primary's log yet (normal, lagging) looks like one electing
            // that view, and the first answered Commits and granted a
            // lease. Back as a backup it keeps the lease `blank` gives a
            // restarted member and joins no election before it ends (an
            // election it was in goes on after its heartbeat timeout).
            // Coming back electing at once, a lagging backup voted the
            // next view in while the primary it had confirmed still served
            // reads (seed 6001456, quiesce-ticks-20 disk shape).
            replica.report_role(cx.out);
        } else {
            // It was electing a view it leads (no backup is in a view it
            // leads): it goes on (its election messages go at once).
            let deadline = now + replica.config.timing.view_change_timeout_ticks;
            let voters = replica.spec.members.len();
            // Its own StartViewChange counts, as when it started this
            // election: with one voter silent (recovering, H1) the other
            // voters' alone never make a quorum.
            let mut svc_from = crate::quorum::MemberSet::EMPTY;
            svc_from.insert(replica.spec.me);
            replica.role = RoleState::ViewChange(Election::new(voters, deadline, 0, svc_from));
            replica.report_role(cx.out);
        }
        replica.lease_expiry = now + replica.config.timing.commit_heartbeat_timeout_ticks;
        assert_eq!(replica.durable_op, replica.log.op(), "everything recovered is durable");
        assert!(replica.view >= replica.log_view, "a recovered member is in its log's view or later");
        Ok(replica)
    }

    /// R25: record whether a Commit batch to `node` reached a connected link.
    pub(crate) fn record_link(&mut self, node: NodeId, connected: bool) {
        if let Some(member) = self.spec.index_of(node) {
            self.link_connected[member.0 as usize] = connected;
        }
    }

    /// R25: whether the last Commit batch to `member` went to a connected link.
    pub fn link_connected(&self, member: MemberIndex) -> bool {
        self.link_connected.get(member.0 as usize).copied().unwrap_or(false)
    }

    /// A primary's heartbeat state (R20); `Busy` for other roles.
    pub fn activity(&self) -> GroupActivity {
        match &self.role {
            RoleState::Primary(primary) => primary.heartbeat.activity,
            _ => GroupActivity::Busy,
        }
    }

    /// Whether this is a backup that waits `commit_idle_heartbeat_timeout`
    /// before a view change: the newest Commit of its primary said `Idle`
    /// (R22), or the group is quiesced (Z3). A primary's failover bound is
    /// set by what its backups wait, not by what it believes.
    pub fn waits_idle_timeout(&self) -> bool {
        let quiet = self.follow_quiet.is_some();
        matches!(self.role, RoleState::Backup(backup) if backup.follows_idle || quiet)
    }

    /// The group.
    pub fn group(&self) -> GroupId {
        self.spec.group
    }

    /// The member index of the primary of `view`.
    pub fn primary_index_of(&self, view: View) -> MemberIndex {
        MemberIndex((view.0 as usize % self.spec.members.len()) as u8)
    }

    /// The member index of the primary of the current view.
    pub fn primary_index(&self) -> MemberIndex {
        self.primary_index_of(self.view)
    }

    /// The node of a member (voter or learner). Indexes from the network
    /// are checked at the door ([`GroupSpec::node_at`]) before they get here.
    pub fn node_of(&self, member: MemberIndex) -> NodeId {
        match self.spec.node_at(member) {
            Some(node) => node,
            None => panic!("{}: member index {member} outside the group", self.spec.group),
        }
    }

    /// This member's role.
    pub fn role(&self) -> Role {
        self.role.role()
    }

    /// True if normal and the primary of the current view.
    pub fn is_primary(&self) -> bool {
        matches!(self.role, RoleState::Primary(_))
    }

    /// True if this replica is primary and a replication quorum confirmed
    /// it within the last `commit_heartbeat_timeout_ticks` (R24), so no newer
    /// view can have started: what a host should use before acting as the
    /// group's leader outside the protocol (ownership reports, the metadata
    /// primary's session judgements). `pairs` are its shard's (Z3: a
    /// quiesced primary's contact is its pairs'); hosts ask
    /// [`crate::Shard::is_confirmed_primary`].
    pub(crate) fn is_confirmed_primary(&self, pairs: &crate::quiesce::Pairs, now: u64) -> bool {
        self.is_primary() && self.quorum_window_holds(Some(pairs), now)
    }

    /// The group's incarnation.
    pub fn incarnation(&self) -> Incarnation {
        self.spec.incarnation
    }

    /// The voting members, in member-index order.
    pub fn members(&self) -> &[NodeId] {
        &self.spec.members
    }

    /// The learners (P4), in order.
    pub fn learner_nodes(&self) -> &[NodeId] {
        &self.spec.learners
    }

    /// The current view.
    pub fn view(&self) -> View {
        self.view
    }

    /// The last view this member's log belongs to.
    pub fn log_view(&self) -> View {
        self.log_view
    }

    /// Highest op in the log.
    pub fn op(&self) -> Op {
        self.log.op()
    }

    /// Applied up to here.
    pub fn commit_min(&self) -> Op {
        self.commit_min
    }

    /// Known committed up to here.
    pub fn commit_max(&self) -> Op {
        self.commit_max
    }

    /// Status.
    pub fn status(&self) -> Status {
        self.role.status()
    }

    /// The log entry at `op`, if held in memory.
    pub fn entry(&self, op: Op) -> Option<&cohort_messages::LogEntry> {
        self.log.get(op)
    }

    /// The snapshot op the in-memory log starts after.
    pub fn log_base(&self) -> Op {
        self.log.base()
    }

    /// D3: true while this replica fetches a streamed state and its state
    /// machine stages it (for the simulator's faults).
    pub fn staging_a_stream(&self) -> bool {
        self.state_transfer
            .as_ref()
            .is_some_and(|transfer| transfer.stream.as_ref().is_some_and(|stream| stream.staging))
    }

    /// The state machine (for reads by tests and checkers); `None` while
    /// a run of it is on the apply worker (D2).
    pub fn state_machine(&self) -> Option<&dyn StateMachine> {
        self.lent.is_none().then_some(self.state.as_ref())
    }

    /// D1: drop a persistent state machine's state (the replica is
    /// removed). D2: not while it is away: the shard clears it when it
    /// comes back.
    pub(crate) fn clear_state(&mut self) -> Result<(), String> {
        assert!(self.lent.is_none(), "{self:?}: D2: a state machine away is cleared when it is back");
        // D3: a view of the state being served goes first.
        self.served = None;
        self.state.clear()
    }

    /// D2: take the state machine back from a run lent in the turn still
    /// open (its effect not yet handed to the shell), as if never lent.
    pub(crate) fn recall_lent(&mut self, out: &mut Effects) {
        let Some(id) = self.lent.as_ref().map(|lent| lent.id) else { return };
        if let Some(state) = out.take_lent(self.spec.group, id) {
            self.state = state;
            self.lent = None;
        }
    }

    /// Other voters' indexes: who takes part in a view change.
    pub(crate) fn others(&self) -> impl Iterator<Item = MemberIndex> + use<> {
        let me = self.spec.me;
        (0..self.spec.members.len() as u8).map(MemberIndex).filter(move |m| *m != me)
    }

    /// The membership a snapshot records.
    pub(crate) fn membership(&self) -> snapshot::SnapshotMembership {
        snapshot::SnapshotMembership {
            incarnation: self.spec.incarnation,
            replication_quorum: self.spec.quorums.replication as u8,
            members: self.spec.members.clone(),
        }
    }

    /// Every other voter, then every learner: who receives the log
    /// (Prepares, Commits, StartView). Only quorum-free work uses this.
    pub(crate) fn receivers(&self) -> impl Iterator<Item = MemberIndex> + use<> {
        let me = self.spec.me;
        (0..self.spec.total() as u8).map(MemberIndex).filter(move |m| *m != me)
    }

    pub(crate) fn superblock(&self) -> Superblock {
        Superblock {
            view: self.view,
            log_view: self.log_view,
            // The applied point: always backed by this member's own log,
            // even when it lags behind the view it knows.
            commit: self.commit_min,
            incarnation: self.spec.incarnation,
            members: self.spec.members.clone(),
            replication_quorum: self.spec.quorums.replication as u8,
            recovering: self.recovery.is_some(),
        }
    }

    /// Send a Prepare: at once (unless the link is congested, K4), or once
    /// the view this replica leads is durable (see `Primary::lead_after_flush`).
    pub(crate) fn send_prepare(&self, to: NodeId, prepare: cohort_messages::Prepare, cx: &mut Context<'_>) {
        cx.send_prepare_after(to, prepare, self.lead().lead_after_flush);
    }

    /// Stage the superblock if it changed since the last save.
    pub(crate) fn stage_superblock(&mut self, out: &mut Effects) {
        let superblock = self.superblock();
        if self.superblock_saved.as_ref() == Some(&superblock) && !self.superblock_retry {
            return;
        }
        self.superblock_retry = false;
        self.superblock_saved = Some(superblock.clone());
        let flush =
            out.stage(self.spec.group, crate::effect::Effect::StageSuperblock { group: self.spec.group, superblock });
        self.superblock_flush = flush;
        self.pending_durable.push_back((flush, self.log.op()));
        if self.superblock_blocked.is_some() {
            self.superblock_blocked = Some(flush);
            out.unpark_group(self.spec.group, flush);
        }
    }

    /// Staging the superblock failed (R12). The next tick stages it again.
    /// Until that retry is durable, nothing of this group that depends on the
    /// superblock may leave or count as durable: its held sends are parked
    /// (view-change messages too, whose promise rests on the durable view),
    /// and `on_flushed` does not advance its durable point. The other groups
    /// go on.
    pub(crate) fn superblock_failed(&mut self, out: &mut Effects) {
        self.superblock_retry = true;
        self.superblock_blocked = Some(FlushId::MAX);
        out.park_group(self.spec.group);
        assert_eq!(self.next_wakeup(), 0, "R12: the retry is staged on the next tick");
    }

    /// Stage an append and remember when it becomes durable.
    pub(crate) fn stage_append(&mut self, entry: cohort_messages::LogEntry, out: &mut Effects) {
        let op = entry.op;
        debug_assert!(op > self.log.base(), "appends go above the snapshot");
        debug_assert!(op <= self.log.op().next(), "appends never leave a gap");
        debug_assert!(entry.view <= self.view, "an entry of a view this replica has not reached");
        self.log.push(entry.clone());
        debug_assert_eq!(self.log.op(), op, "the appended entry is the log's last");
        let flush = out.stage(self.spec.group, crate::effect::Effect::Append { group: self.spec.group, entry });
        self.pending_durable.push_back((flush, op));
    }

    /// Stage a truncation; durability claims shrink at once.
    pub(crate) fn stage_truncate(&mut self, after: Op, out: &mut Effects) {
        debug_assert!(after >= self.commit_min, "committed and applied ops are never truncated");
        assert!(
            self.lent.as_ref().and_then(|lent| lent.last_op()).is_none_or(|op| after >= op),
            "{self:?}: D2: the committed ops of a run away are never truncated"
        );
        self.log.truncate_after(after);
        self.durable_op = self.durable_op.min(after);
        for pending in self.pending_durable.iter_mut() {
            pending.1 = pending.1.min(after);
        }
        let flush = out.stage(self.spec.group, crate::effect::Effect::Truncate { group: self.spec.group, after });
        self.pending_durable.push_back((flush, after));
        debug_assert!(self.log.op() <= after && self.durable_op <= after, "nothing past the truncation is held");
    }

    /// A flush completed: what was staged before it is durable.
    pub(crate) fn on_flushed(&mut self, id: FlushId, now: u64, cx: &mut Context<'_>) {
        assert!(id > 0, "flush ids start at 1");
        debug_assert!(
            self.pending_durable.iter().zip(self.pending_durable.iter().skip(1)).all(|(a, b)| a.0 <= b.0),
            "staged writes wait for their flushes in order"
        );
        if let Some(until) = self.superblock_blocked {
            if id < until {
                return; // The superblock this durability rests on is not durable yet.
            }
            self.superblock_blocked = None;
        }
        let durable_log_view_before = self.superblock_durable_log_view;
        if id >= self.superblock_flush
            && let Some(saved) = &self.superblock_saved
        {
            // Never down: a recovered snapshot may be past the saved commit.
            self.superblock_durable_commit = self.superblock_durable_commit.max(saved.commit);
            self.superblock_durable_log_view = Some(saved.log_view);
            self.superblock_durable_recovering = saved.recovering;
        }
        let view_became_durable = self.superblock_durable_log_view != durable_log_view_before
            && self.superblock_durable_log_view == Some(self.log_view);
        let mut advanced = false;
        let pending_before = self.pending_durable.len();
        while let Some((flush, op)) = self.pending_durable.front().copied() {
            if flush > id {
                break;
            }
            self.pending_durable.pop_front();
            if op.min(self.log.op()) != self.durable_op {
                self.durable_op = op.min(self.log.op());
                advanced = true;
            }
        }
        if self.pending_durable.is_empty() && self.log.op() == self.log.base() {
            // Z1: nothing in flight and everything snapshotted (a group that
            // turned idle): give the queue's room back.
            self.pending_durable = VecDeque::new();
        }
        debug_assert!(self.pending_durable.len() <= pending_before, "a flush only completes what was staged");
        debug_assert!(self.pending_durable.front().is_none_or(|(flush, _)| *flush > id), "flushes complete in order");
        debug_assert!(self.durable_op <= self.log.op(), "durable only what is in the log");
        if advanced || view_became_durable {
            self.on_durable(now, cx);
        }
    }

    /// Tell the driver's followers the replica's role in its view, once
    /// per change.
    pub(crate) fn report_role(&mut self, out: &mut Effects) {
        let now = (self.view, self.role());
        debug_assert!(self.role_reported.is_none_or(|(view, _)| view <= now.0), "roles are reported in view order");
        if self.role_reported != Some(now) {
            self.role_reported = Some(now);
            out.push(crate::effect::Effect::RoleChanged {
                group: self.spec.group,
                incarnation: self.spec.incarnation,
                view: self.view,
                role: now.1,
            });
        }
        assert_eq!(self.role_reported, Some(now), "the reported role is the replica's");
    }

    /// The earliest tick at which this replica has timed work.
    pub fn next_wakeup(&self) -> u64 {
        let mut wake = if self.superblock_retry { 0 } else { u64::MAX };
        // D3: a stream served and no longer asked for is dropped.
        if let Some(expiry) = self.stream_expiry_tick() {
            wake = wake.min(expiry);
        }
        if let Some(recovery) = &self.recovery {
            // H1: its rounds of questions, and a state transfer it fetches.
            wake = wake.min(recovery.next_query_tick);
            if self.state_transfer.is_some() {
                wake = wake.min(self.repair_deadline);
            }
            return wake;
        }
        match &self.role {
            RoleState::ViewChange(election) => {
                wake = wake.min(election.deadline_tick).min(election.resend_tick);
                if self.state_transfer.is_some() {
                    wake = wake.min(self.repair_deadline);
                }
            }
            RoleState::Primary(primary) => {
                // Z3: a group quiesced for every member has no heartbeat;
                // its pairs wake it if their replies stop.
                if !self.fully_quiet() {
                    wake = wake.min(primary.heartbeat.next_due_tick(&self.config, self.commit_max, self.view));
                    wake = wake.min(self.step_down_tick());
                }
                for wait in &primary.waits {
                    wake = wake.min(wait.deadline_tick);
                }
            }
            RoleState::Learner => {
                // No heartbeat timeout: a learner never starts a view change.
                if self.needs_repair() {
                    wake = wake.min(self.repair_deadline);
                }
            }
            RoleState::Backup(backup) => {
                // Z3: a quiesced backup's timeout is its pair's.
                if self.follow_quiet.is_none() {
                    wake = wake.min(backup.heartbeat_deadline);
                }
                if self.svc_view_seen > self.view {
                    wake = wake.min(self.lease_expiry);
                }
                if self.needs_repair() || (self.log_view < self.view && self.state_transfer.is_none()) {
                    wake = wake.min(self.repair_deadline);
                }
            }
        }
        wake
    }

    /// Timed work due at `now`; a primary's idle heartbeat may propose
    /// quiescence into `pairs` (Z3).
    pub(crate) fn on_tick(&mut self, now: u64, cx: &mut Context<'_>, pairs: &mut Pairs) {
        debug_assert!(self.next_wakeup() <= now, "{self:?}: ticked before its timed work is due");
        let view_before = self.view;
        self.run_due_work(now, cx, pairs);
        assert!(self.view >= view_before, "{self:?}: a tick moved the view back");
        assert!(!self.superblock_retry, "R12: a tick stages the retried superblock");
    }

    /// The timed work of [`Replica::on_tick`], by role.
    fn run_due_work(&mut self, now: u64, cx: &mut Context<'_>, pairs: &mut Pairs) {
        if self.superblock_retry {
            self.stage_superblock(cx.out);
        }
        self.expire_stream(now);
        if self.recovery.is_some() {
            if self.state_transfer.is_some() && now >= self.repair_deadline {
                self.retry_state_transfer(now, cx.out);
            }
            if self.spec.members.len() == 1 {
                return self.recover_alone(now, cx);
            }
            return self.recovery_tick(now, cx.out);
        }
        let timing = self.config.timing.clone();
        match &mut self.role {
            RoleState::ViewChange(election) => {
                let evidence = election.svc_from.count() >= self.spec.quorums.view_change;
                if now >= election.deadline_tick && (evidence || self.svc_view_seen > self.view) {
                    // This view's election failed with a quorum taking part:
                    // try the next one (or join a later one under way).
                    let next = self.view.next().max(self.svc_view_seen);
                    self.start_view_change(next, now, cx);
                } else if now >= election.deadline_tick {
                    // Alone in this election (the others still follow a
                    // primary): stay in this view and keep asking, instead
                    // of dragging the group through views (pre-vote).
                    election.deadline_tick = now + timing.view_change_timeout_ticks;
                    election.resend_tick = now + timing.repair_timeout_ticks;
                    self.send_view_change_messages(now, cx);
                } else if now >= election.resend_tick {
                    // Loss must not stall the election: say it again.
                    election.resend_tick = now + timing.repair_timeout_ticks;
                    self.send_view_change_messages(now, cx);
                }
                if self.state_transfer.is_some() && now >= self.repair_deadline {
                    self.retry_state_transfer(now, cx.out);
                }
            }
            RoleState::Primary(_) => {
                self.expire_waits(now, cx.out);
                if now >= self.step_down_tick() {
                    // R24: no quorum heard within the window: step down.
                    let next = self.view.next().max(self.svc_view_seen);
                    self.start_view_change(next, now, cx);
                    return;
                }
                // A voter alone in a later view cannot come back: it promised
                // not to act in earlier views. If it keeps answering this
                // primary's Commits from that view for several heartbeat
                // timeouts (so it hears us: a member that cannot hear the
                // primary never does), the group moves up to its view once.
                let window = timing.commit_heartbeat_timeout_ticks;
                if let Some((view, since, last)) = self.lead().stranded
                    && view > self.view
                    && now >= since.saturating_add(STRANDED_TIMEOUTS * window)
                    && now < last.saturating_add(window)
                {
                    self.lead_mut().stranded = None;
                    self.start_view_change(view, now, cx);
                    return;
                }
                self.heartbeat_tick(now, cx, pairs);
            }
            RoleState::Learner => {
                if self.needs_repair() && now >= self.repair_deadline {
                    self.request_repair(now, cx.out);
                }
            }
            RoleState::Backup(backup) => {
                let lease_over = now >= self.lease_expiry || self.config.mutated(crate::mutants::Mutant::LeaseIgnored);
                let lease_over_with_election = self.svc_view_seen > self.view && lease_over;
                if now >= backup.heartbeat_deadline || lease_over_with_election {
                    let next = self.view.next().max(self.svc_view_seen);
                    self.start_view_change(next, now, cx);
                    return;
                }
                if self.needs_repair() && now >= self.repair_deadline {
                    self.request_repair(now, cx.out);
                } else if self.log_view < self.view && self.state_transfer.is_none() && now >= self.repair_deadline {
                    // Lagging with nothing to fetch (the state transfer is
                    // done, or the StartView was lost): ask the primary for
                    // its StartView again. It may count us as confirmed from
                    // before a crash, and then would not re-send it unasked.
                    self.repair_deadline = now + timing.repair_timeout_ticks;
                    self.request_start_view(cx.out);
                }
            }
        }
    }

    /// What only grows across any input: the view, the log view and the
    /// applied point (the shard asserts it around every handler).
    pub(crate) fn progress(&self) -> (View, View, Op) {
        (self.view, self.log_view, self.commit_min)
    }

    /// Assertions that hold between any two inputs. Panics on a broken one.
    pub fn invariants(&self) {
        assert!(self.log_view <= self.view, "{self:?}: log_view after view");
        if self.recovery.is_some() {
            assert!(matches!(self.role, RoleState::Backup(_)), "{self:?}: H1: a recovering member only listens");
            assert!(self.spec.is_voter(self.spec.me), "{self:?}: H1: only a voter recovers");
        }
        assert!(self.commit_min <= self.commit_max.max(self.log.base()), "{self:?}: applied past commit");
        assert!(self.commit_min <= self.log.op(), "{self:?}: applied past the log");
        assert!(self.log.base() <= self.commit_min, "{self:?}: snapshot of uncommitted ops");
        assert!(self.durable_op <= self.log.op(), "{self:?}: durable past the log");
        if let RoleState::Primary(primary) = &self.role {
            assert!(self.commit_max <= self.log.op(), "{self:?}: primary committed past its log");
            // Inherited ops may exceed the pipeline (a restarted member's
            // commit point lags its durable log); ops this primary prepares
            // may not.
            assert!(
                self.log.op().0 <= self.commit_max.max(primary.start_view_op).0 + self.config.pipeline_max_ops,
                "{self:?}: pipeline over its limit"
            );
        }
        self.role_invariants();
        self.learner_invariants();
        // T5: what peer input could grow stays bounded (a seal may go ahead
        // of a full request queue).
        assert!(
            self.request_queue.len() <= self.config.request_queue_max + 1,
            "{self:?}: request queue past its limit"
        );
        // D2: requests wait only for a state machine that is away (it
        // serves them when it comes back), and no more than a queue holds.
        assert!(self.lent.is_some() || self.waiting_for_state.is_empty(), "{self:?}: requests wait for nothing");
        assert!(self.lent.is_none() || self.apply_off_shard, "{self:?}: a run lent by a replica that applies inline");
        assert!(
            self.waiting_for_state.len() <= self.config.request_queue_max,
            "{self:?}: requests waiting for the state machine past the queue's limit"
        );
        assert!(self.early_dvcs.len() <= self.spec.members.len(), "{self:?}: early DoViewChanges past one per voter");
        assert!(
            self.state_transfer.as_ref().is_none_or(|transfer| transfer.source != self.spec.me),
            "{self:?}: a state transfer from itself"
        );
        if let Some(previous) = self.log.view_at(self.log.base()) {
            let mut view = previous;
            for entry in self.log.entries_from(self.log.base().next()) {
                assert!(entry.view >= view, "{self:?}: log views go backwards at {}", entry.op);
                assert!(entry.view <= self.log_view.max(self.view), "{self:?}: entry from a future view");
                view = entry.view;
            }
        }
    }

    /// The latest tick from which a replication quorum (this primary
    /// included) has confirmed this view with CommitReplies (R24), or `None`
    /// before such a quorum answered in this view. With other members, at
    /// least one of them must be in it, even if the replication quorum is 1:
    /// a primary of a stale view (elected late from old DoViewChanges) never
    /// hears from members that moved on, so it never serves a read (V7).
    pub(crate) fn quorum_contact_tick(&self) -> Option<u64> {
        self.quorum_contact_with(None)
    }

    /// [`Replica::quorum_contact_tick`], for a query between inputs with
    /// the contact of each member the group is quiesced for read from
    /// `pairs` as the next settle would (Z3, [`Replica::settle_quiet`]).
    fn quorum_contact_with(&self, pairs: Option<&crate::quiesce::Pairs>) -> Option<u64> {
        let members = self.spec.members.len();
        // Backups that must have answered, besides this primary.
        let needed = self.spec.quorums.replication.max(2.min(members)) - 1;
        if needed == 0 {
            return Some(u64::MAX);
        }
        let mut answered = [0u64; cohort_messages::GROUP_MEMBERS_MAX];
        let mut count = 0;
        for (member, tick) in self.lead().contact_tick.iter().enumerate() {
            if member == self.spec.me.0 as usize {
                continue;
            }
            let settled = pairs.and_then(|pairs| self.settled_contact(pairs, MemberIndex(member as u8)));
            if let Some(tick) = (*tick).max(settled) {
                answered[count] = tick;
                count += 1;
            }
        }
        (count >= needed).then(|| crate::quorum::kth_largest(&answered[..count], needed))
    }

    /// When this primary must step down if no quorum answers (R24): one
    /// window after the quorum's last confirmation, or after the view began.
    pub(crate) fn step_down_tick(&self) -> u64 {
        let view_start_tick = self.lead().heartbeat.view_start_tick;
        let since = self.quorum_contact_tick().unwrap_or(view_start_tick);
        since.max(view_start_tick).saturating_add(self.quorum_window_ticks())
    }

    /// The pending StartView of a lagging backup, re-sent by the primary.
    pub(crate) fn start_view_message(&self) -> StartView {
        StartView {
            group: self.spec.group,
            incarnation: self.spec.incarnation,
            view: self.view,
            op: self.log.op(),
            commit: self.commit_max.min(self.log.op()),
            replica: self.spec.me,
            log: self.log.entries_from(self.log.base().next()).cloned().collect(),
        }
    }
}
