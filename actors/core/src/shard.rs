//! A shard: thousands of group replicas behind one driving interface.
//!
//! # Driving contract
//! A node runs a shard through [`crate::driver::ShardDriver`], which owns
//! it; the node's shard actor and the simulator are shells around that
//! driver, and its module docs give the contract a shell follows. What the
//! driver does with a shard, and what a unit test that drives a shard by
//! hand must do the same way:
//! 1. **Time.** [`Shard::on_tick`] once per tick with the tick number, which
//!    never goes backwards (the same tick again is allowed). Inputs between
//!    two ticks belong to the earlier one. After a pause, deliver the ticks
//!    (the driver runs up to 100 of them late) before any message, so
//!    leases are judged on the present (V7).
//! 2. **Inputs.** Peer messages ([`Shard::on_message`], shard-pair
//!    heartbeats and their replies too, Z3); Commit and CommitReply entries
//!    routed to this shard ([`Shard::on_commit_entries`],
//!    [`Shard::on_commit_reply_entries`], each entry alone, R17; or whole
//!    frames, [`Shard::on_commit_batch`], [`Shard::on_commit_reply_batch`];
//!    or one entry, [`Shard::on_commit_entry`],
//!    [`Shard::on_commit_reply_entry`]); client requests
//!    ([`Shard::on_request`]); storage completions ([`Shard::on_flushed`],
//!    [`Shard::on_superblock_failed`]); quorum waits ([`Shard::wait_quorum`],
//!    [`Shard::cancel_wait`], Q1, Q2).
//! 3. **Links.** [`Shard::set_peer_congested`] when a peer's link congests
//!    or drains (K4); [`Shard::on_commit_batch_sent`] for each Commit batch
//!    handed to a link, with whether it was connected (R25).
//! 4. **Hosting.** [`Shard::set_pair_identity`] once at start (Z3);
//!    [`Shard::create_group`], [`Shard::recover_group`],
//!    [`Shard::remove_group`], [`Shard::propose_seal`],
//!    [`Shard::transfer_primary`], [`Shard::switch_incarnation`],
//!    [`Shard::switch_incarnation_as_learner`], [`Shard::set_learners`].
//! 5. **Output.** [`Shard::drain_effects`] at the end of each turn (after a
//!    batch of inputs, and after every tick), until it is empty; the
//!    effects are executed in order: storage effects go to storage in that
//!    order, a `Flush` is reported back with `on_flushed` once durable
//!    (flushes complete in id order), sends go to the network. Nothing in
//!    the list needs to be held back: sends that need durability are only
//!    emitted once it is reported. `RoleChanged`, `Committed`, `Applied`
//!    and `Restored` are for the driver's own followers of a group (the
//!    host's actors); `Applied` and `Restored` appear only for groups whose
//!    spec sets `report_applied`.
//!
//! Cost: a tick touches only the groups whose next timed work is due (a
//! lazily-updated wakeup set; an entry that finds its group not yet due is
//! re-filed at the group's real wakeup), so idle groups cost nothing between
//! their idle heartbeats.

use std::collections::{BTreeSet, HashMap};

use cohort_messages::{CommitEntry, CommitReplyEntry, GroupId, Message, NodeId, Op, Request};

use crate::config::CoreConfig;
use crate::effect::{Effect, FlushId, WaitId};
use crate::effects::Effects;
use crate::group_map::GroupMap;
use crate::metadata::HostedReplica;
use crate::metrics::ShardMetrics;
use crate::quiesce::Pairs;
use crate::refusal::Refusals;
use crate::replica::{Context, GroupSpec, Replica, SealError, TransferError};
use crate::state_machine::StateMachine;
use crate::storage::RecoveredGroup;

mod footprint;
mod pairs;

/// The groups of one shard. See the module docs for the driving contract.
pub struct Shard {
    node: NodeId,
    config: std::sync::Arc<CoreConfig>,
    pub(crate) groups: GroupMap<Box<Replica>>,
    /// The current tick: the last one given to [`Shard::on_tick`].
    now: u64,
    /// The output buffer of every replica here.
    out: Effects,
    /// Counters (R19, R32).
    metrics: ShardMetrics,
    /// T5: peer messages refused, by reason.
    refused: Refusals,
    /// K4: peers whose link is congested: Prepares to them are held back
    /// (the primary sends them again once the link drains).
    congested: BTreeSet<NodeId>,
    /// Z3: the shard's pairs of quiesced groups.
    quiet: Pairs,
    wakeups: BTreeSet<(u64, GroupId)>,
    filed: GroupMap<u64>,
    next_wait: WaitId,
    wait_groups: HashMap<WaitId, GroupId>,
    /// D2: groups removed while a run of theirs was on the apply worker,
    /// with that run: not hosted again until it is back and cleared.
    away: HashMap<GroupId, crate::effect::ApplyId>,
}

/// Why a group could not be added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    /// Already hosted.
    #[error("{0} is already on this shard")]
    Exists(GroupId),
    /// This node is not the member the spec names.
    #[error("{group}: member {me} is node {member_node}, not this node {node}")]
    NotAMember {
        /// The group.
        group: GroupId,
        /// The member index in the spec.
        me: cohort_messages::MemberIndex,
        /// The node at that index.
        member_node: NodeId,
        /// This node.
        node: NodeId,
    },
    /// Recovery found an inconsistent log.
    #[error("{0}")]
    Recovery(String),
    /// The group switched to an incarnation this node is not a member of
    /// before the restart: the host should drop it (and its data).
    #[error("{0}")]
    NotInIncarnation(SealError),
    /// H3: storage holds the group's data of an incarnation older than the
    /// one this replica was placed at empty: not its data. The host should
    /// remove that data and host the replica empty.
    #[error("{group}: storage holds incarnation {} of it, older than the {} this replica was placed at", found.0, placed.0)]
    EarlierLife {
        /// The group.
        group: GroupId,
        /// The incarnation the data was written at.
        found: cohort_messages::Incarnation,
        /// The incarnation of the spec.
        placed: cohort_messages::Incarnation,
    },
    /// D1: storage's snapshot of the group needs state its persistent state
    /// machine no longer has (its newest checkpoint is behind, or gone). The
    /// host should remove the group's data and join it empty
    /// ([`Shard::join_group`]): it is rebuilt from the other members (H1).
    #[error("{group}: the state machine's newest checkpoint ({}) is behind the snapshot at op {} that storage holds", checkpoint.map_or("none".to_string(), |op| format!("op {}", op.0)), snapshot.0)]
    StateMachineBehind {
        /// The group.
        group: GroupId,
        /// The op of the state machine's newest checkpoint.
        checkpoint: Option<Op>,
        /// The op of storage's snapshot.
        snapshot: Op,
    },
    /// D1: the replica's state machine failed to clear its state (an I/O
    /// error on its disk) before the replica was hosted empty. Nothing is
    /// hosted; the host should fail the start and try again.
    #[error("{group}: clearing its state machine: {reason}")]
    StateMachine {
        /// The group.
        group: GroupId,
        /// The state machine's error.
        reason: String,
    },
    /// The spec (or a change of learners) is invalid.
    #[error(transparent)]
    Spec(#[from] crate::replica::SpecError),
    /// The group is not hosted here.
    #[error("{0} is not on this shard")]
    UnknownGroup(GroupId),
    /// D2: a replica of the group removed from this shard has a run on
    /// the apply worker; its state machine is cleared when it comes back,
    /// and only then may the group be hosted here again (H3: a new replica
    /// never shares its state with the removed one). Ask again.
    #[error("{0}: the state machine of its removed replica is still on the apply worker; host it once that is back")]
    StateAway(GroupId),
}

/// How an empty replica is made: `Replica::create` or `Replica::join`.
type BuildEmpty = fn(GroupSpec, std::sync::Arc<CoreConfig>, Box<dyn StateMachine>, u64, &mut Context<'_>) -> Replica;

impl Shard {
    /// An empty shard of `node`.
    pub fn new(node: NodeId, config: CoreConfig) -> Shard {
        Shard {
            node,
            config: std::sync::Arc::new(config),
            groups: Default::default(),
            now: 0,
            out: Effects::new(),
            metrics: ShardMetrics::default(),
            refused: Refusals::default(),
            congested: BTreeSet::new(),
            quiet: Pairs::default(),
            wakeups: BTreeSet::new(),
            filed: Default::default(),
            next_wait: 1,
            wait_groups: HashMap::new(),
            away: HashMap::new(),
        }
    }

    /// This shard's node.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The core configuration.
    pub fn config(&self) -> &CoreConfig {
        &self.config
    }

    /// Z3: this shard's index on its node (the same-index shard of a peer
    /// hosts the same groups, K2) and this process's epoch, a value no
    /// earlier process of this node used (a random number, or a restart
    /// count). Both only matter with `commit_quiesce_timeout_ticks` set.
    pub fn set_pair_identity(&mut self, shard_index: u16, epoch: u64) {
        self.quiet.shard_index = shard_index;
        self.quiet.epoch = epoch;
    }

    /// Z3: the shard's pairs of quiesced groups.
    pub fn quiet_pairs(&self) -> &Pairs {
        &self.quiet
    }

    /// The current tick.
    pub fn now(&self) -> u64 {
        self.now
    }

    fn check_spec(&self, spec: &GroupSpec) -> Result<(), ShardError> {
        if self.groups.contains_key(&spec.group) {
            return Err(ShardError::Exists(spec.group));
        }
        if self.state_away(spec.group) {
            return Err(ShardError::StateAway(spec.group));
        }
        spec.validate()?;
        let member_node = spec.node_at(spec.me).unwrap_or(NodeId(u64::MAX));
        if member_node != self.node {
            return Err(ShardError::NotAMember { group: spec.group, me: spec.me, member_node, node: self.node });
        }
        Ok(())
    }

    /// Host a brand-new group (R2: if primary, it heartbeats on the next send
    /// tick). With `me` a learner's index this is a new learner replica
    /// of an existing group (P4): it starts empty at view 0 and catches up by
    /// repair and state transfer once it hears the primary.
    pub fn create_group(&mut self, spec: GroupSpec, state: Box<dyn StateMachine>) -> Result<(), ShardError> {
        self.host_empty(spec, state, Replica::create)
    }

    /// H1: host a voter created without its data, which cannot tell
    /// whether the group is new: it recovers before it votes or
    /// acknowledges anything (see `replica::recovery`). A learner's index
    /// makes a learner replica, as [`Shard::create_group`] does.
    pub fn join_group(&mut self, spec: GroupSpec, state: Box<dyn StateMachine>) -> Result<(), ShardError> {
        self.host_empty(spec, state, Replica::join)
    }

    /// D1: host a replica rebuilt from the other members because its
    /// state machine is behind what storage still holds
    /// ([`ShardError::StateMachineBehind`]): joined empty, as by
    /// [`Shard::join_group`]. Returns the superblock it staged (recovering,
    /// for a voter), which the group's storage must be reset to
    /// ([`crate::storage::Storage::reset_group`]) before anything staged
    /// from now on is run: a removal alone would let a crash leave no trace
    /// of the group, and the next start would host it as a member that never
    /// acknowledged anything (seed 6007052).
    pub fn rebuild_group(
        &mut self,
        spec: GroupSpec,
        state: Box<dyn StateMachine>,
    ) -> Result<crate::storage::Superblock, ShardError> {
        let group = spec.group;
        self.join_group(spec, state)?;
        let replica = self.groups.get(&group).expect("a group just joined is hosted");
        let superblock = replica.superblock();
        assert!(
            superblock.recovering || !replica.spec.is_voter(replica.spec.me) || replica.spec.members.len() == 1,
            "H1: a rebuilt voter recovers before it votes"
        );
        Ok(superblock)
    }

    /// Host a replica `build` makes empty (`BuildEmpty`): [`Shard::create_group`] and
    /// [`Shard::join_group`] differ only in that.
    fn host_empty(
        &mut self,
        spec: GroupSpec,
        state: Box<dyn StateMachine>,
        build: BuildEmpty,
    ) -> Result<(), ShardError> {
        self.check_spec(&spec)?;
        let mut state = state;
        // D1: a replica that starts empty has no state, whatever a
        // persistent state machine kept from an earlier one.
        state.clear().map_err(|reason| ShardError::StateMachine { group: spec.group, reason })?;
        let group = spec.group;
        let (config, now) = (std::sync::Arc::clone(&self.config), self.now);
        let (_, mut cx, _) = self.parts();
        let replica = build(spec, config, state, now, &mut cx);
        self.insert(group, replica);
        Ok(())
    }

    /// Host a group rebuilt from storage (V4). Data of an incarnation
    /// older than `spec`'s is refused ([`ShardError::EarlierLife`], H3).
    pub fn recover_group(
        &mut self,
        spec: GroupSpec,
        state: Box<dyn StateMachine>,
        recovered: RecoveredGroup,
    ) -> Result<(), ShardError> {
        let saved_op = recovered.snapshot.as_ref().map(|snapshot| snapshot.op);
        let mut recovered = recovered;
        let ignored = self.config.mutated(crate::mutants::Mutant::CheckpointAheadIgnored);
        let saved = if ignored { recovered.snapshot.clone() } else { None };
        if let Err((checkpoint, snapshot)) = crate::replica::with_checkpoint(state.as_ref(), &mut recovered)
            && !self.config.mutated(crate::mutants::Mutant::CheckpointBehindAccepted)
        {
            return Err(ShardError::StateMachineBehind { group: spec.group, checkpoint, snapshot });
        }
        if saved.is_some() {
            recovered.snapshot = saved;
        }
        // D1: a checkpoint past storage's snapshot (a crash before cohort
        // saved its copy) is saved now, ahead of anything appended after it.
        let checkpoint_ahead =
            recovered.snapshot.as_ref().filter(|snapshot| saved_op.is_none_or(|op| snapshot.op > op));
        let checkpoint_ahead = checkpoint_ahead.cloned();
        if let Some(found) = spec.earlier_life(&recovered) {
            return Err(ShardError::EarlierLife { group: spec.group, found, placed: spec.incarnation });
        }
        // The group may have switched to a later incarnation before the restart.
        let spec = spec.adopt_recovered(&recovered, self.node).map_err(|error| match error {
            SealError::NotNextMember { .. } => ShardError::NotInIncarnation(error),
            other => ShardError::Recovery(other.to_string()),
        })?;
        self.check_spec(&spec)?;
        let group = spec.group;
        let (config, now) = (std::sync::Arc::clone(&self.config), self.now);
        let (_, mut cx, _) = self.parts();
        if let Some(snapshot) = checkpoint_ahead {
            cx.out.stage(group, crate::effect::Effect::SaveSnapshot { group, snapshot, deferrable: false });
        }
        let replica = Replica::recover(spec, config, state, recovered, now, &mut cx).map_err(ShardError::Recovery)?;
        self.insert(group, replica);
        Ok(())
    }

    fn insert(&mut self, group: GroupId, replica: Replica) {
        assert_eq!(replica.group(), group, "a replica is filed under its own group");
        self.groups.insert(group, Box::new(replica));
        self.refile(group);
        assert!(self.filed.contains_key(&group), "a hosted group has its next wakeup filed");
    }

    /// Seal `group`'s log for a member change (only its primary can).
    pub fn propose_seal(&mut self, group: GroupId, seal: cohort_messages::seal::Seal) -> Result<(), SealError> {
        self.with_group_waking(group, |replica, _, cx| replica.propose_seal(seal, cx))
            .unwrap_or(Err(SealError::NotSealed(group)))
    }

    /// C4: hand `group`'s primary role to voter `to` by a directed view
    /// change (only its primary can, once `to` has acknowledged every
    /// committed op; the rules are in `replica::transfer`).
    pub fn transfer_primary(&mut self, group: GroupId, to: NodeId) -> Result<(), TransferError> {
        self.with_group_waking(group, |replica, now, cx| replica.transfer_primary(to, now, cx))
            .unwrap_or(Err(TransferError::UnknownGroup(group)))
    }

    /// Switch a sealed group to the incarnation its seal names. Call only
    /// once every member of that incarnation has applied the seal.
    pub fn switch_incarnation(&mut self, group: GroupId) -> Result<(), SealError> {
        let spec = self.groups.get(&group).ok_or(SealError::NotSealed(group))?.next_spec(self.node)?;
        self.replace_with_next(group, spec)
    }

    /// The replica of `group` goes on in the incarnation `spec` names.
    fn replace_with_next(&mut self, group: GroupId, spec: GroupSpec) -> Result<(), SealError> {
        if self.groups.get(&group).is_some_and(|replica| replica.applying_away()) {
            return Err(SealError::StateAway(group));
        }
        let mut replica = self.groups.remove(&group).ok_or(SealError::NotSealed(group))?;
        let now = self.now;
        let (_, mut cx, pairs) = self.parts();
        replica.settle_quiet(pairs);
        replica.leave_quiet(pairs, cx.metrics);
        let next = replica.into_next_incarnation(spec, now, &mut cx);
        self.filed.remove(&group);
        self.insert(group, next);
        Ok(())
    }

    /// Z6: switch a replica to the incarnation `seal` opens as one of its
    /// `learners` (the metadata group's nodes past its next voters), once
    /// it applied that seal or heard the next incarnation run without it
    /// (see [`Replica::next_learner_spec`]).
    pub fn switch_incarnation_as_learner(
        &mut self,
        group: GroupId,
        seal: &cohort_messages::seal::Seal,
        learners: Vec<NodeId>,
    ) -> Result<(), SealError> {
        let replica = self.groups.get(&group).ok_or(SealError::NotSealed(group))?;
        let spec = replica.next_learner_spec(self.node, seal, learners)?;
        self.replace_with_next(group, spec)
    }

    /// Replace the learners of a running group (P4), on any of its
    /// replicas (voter or learner). Every replica of the group should get
    /// the same list. A primary starts sending to added learners at once
    /// and forgets removed ones; a learner's own node must stay in the list
    /// (a removed learner is unloaded with [`Shard::remove_group`]). The
    /// list is not persisted: pass it again in the spec on recovery.
    pub fn set_learners(&mut self, group: GroupId, learners: Vec<NodeId>) -> Result<(), ShardError> {
        let result = self.with_group_waking(group, |replica, now, cx| replica.set_learners(learners, now, cx.out));
        result.ok_or(ShardError::UnknownGroup(group))?.map_err(ShardError::from)
    }

    /// Stop hosting a group (its storage is the caller's to remove, after
    /// the storage jobs already handed over). What the group staged in the
    /// open turn, and its sends and Commit entries waiting for a flush, are
    /// dropped ([`crate::effects::Effects::forget_group`]): nothing of it
    /// reaches storage after the removal.
    pub fn remove_group(&mut self, group: GroupId) -> bool {
        self.filed.remove(&group);
        if let Some(replica) = self.groups.get_mut(&group) {
            // D2: a run lent in this turn has not left yet: it stays.
            replica.recall_lent(&mut self.out);
        }
        self.out.forget_group(group);
        match self.groups.remove(&group) {
            Some(mut replica) => {
                // D1: a persistent state machine's state goes with the
                // replica, as the group's storage does (a failure leaves
                // files that the next replica hosted here clears). D2: one
                // away is cleared when it comes back.
                match replica.lent_job() {
                    Some(id) => {
                        self.away.insert(group, id);
                    }
                    None => {
                        let _ = replica.clear_state();
                    }
                }
                replica.settle_quiet(&self.quiet);
                replica.leave_quiet(&mut self.quiet, &mut self.metrics);
                debug_assert!(
                    self.quiet.lead_groups().chain(self.quiet.follow_groups()).all(|(_, quiet)| quiet != group),
                    "Z3: a removed group leaves its pairs"
                );
                true
            }
            None => false,
        }
    }

    /// A hosted group's replica.
    pub fn replica(&self, group: GroupId) -> Option<&Replica> {
        self.groups.get(&group).map(Box::as_ref)
    }

    /// All hosted groups' replicas.
    pub fn replicas(&self) -> impl Iterator<Item = &Replica> {
        self.groups.values().map(Box::as_ref)
    }

    /// True if this shard hosts `group`'s primary, confirmed by a quorum
    /// within its window at `now` (see `Replica::is_confirmed_primary`).
    pub fn is_confirmed_primary(&self, group: GroupId, now: u64) -> bool {
        self.groups.get(&group).is_some_and(|replica| replica.is_confirmed_primary(&self.quiet, now))
    }

    /// What the hosted replica of `group` says of itself at `now`, for the
    /// metadata agent's scans.
    pub fn hosted_replica(&self, group: GroupId, now: u64) -> Option<HostedReplica> {
        self.groups.get(&group).map(|replica| HostedReplica::of(replica, &self.quiet, now))
    }

    /// What every hosted replica says of itself at `now`.
    pub fn hosted_replicas(&self, now: u64) -> impl Iterator<Item = HostedReplica> + '_ {
        self.groups.values().map(move |replica| HostedReplica::of(replica, &self.quiet, now))
    }

    /// Z3: the sum of `HostedReplica::fingerprint` over the hosted
    /// replicas at `now`: O(groups) hashing and no allocation.
    pub fn hosted_fingerprint(&self, now: u64) -> u64 {
        let pairs = &self.quiet;
        self.groups
            .values()
            .fold(0u64, |sum, replica| sum.wrapping_add(HostedReplica::fingerprint(replica, pairs, now)))
    }

    /// How many groups this shard hosts.
    pub fn group_count(&self) -> usize {
        self.groups.len()
    }

    /// File the group's wakeup if it is earlier than what is filed.
    pub(crate) fn refile(&mut self, group: GroupId) {
        let Some(replica) = self.groups.get(&group) else { return };
        let wake = replica.next_wakeup().max(self.now + 1);
        match self.filed.get(&group) {
            // What is filed is in `wakeups`: only `on_tick` takes entries
            // out, and it forgets the filed tick of what it takes.
            Some(filed) if *filed <= wake => debug_assert!(self.wakeups.contains(&(*filed, group))),
            _ => {
                self.wakeups.insert((wake, group));
                self.filed.insert(group, wake);
            }
        }
    }

    /// The shard's parts one input may touch, borrowed apart: the hosted
    /// replicas, what a replica's handler reaches ([`Context`]), and the
    /// quiescence pairs (Z3).
    fn parts(&mut self) -> (&mut GroupMap<Box<Replica>>, Context<'_>, &mut Pairs) {
        let cx = Context {
            out: &mut self.out,
            metrics: &mut self.metrics,
            refused: &mut self.refused,
            congested: &self.congested,
        };
        (&mut self.groups, cx, &mut self.quiet)
    }

    /// Handle an input of `group` that leaves a quiesced primary quiesced
    /// if its state did not move (Z3: a CommitReply, a flush, a tick); its
    /// answer, or None if the group is not hosted.
    fn with_group<R>(
        &mut self,
        group: GroupId,
        handle: impl FnOnce(&mut Replica, u64, &mut Context<'_>) -> R,
    ) -> Option<R> {
        self.with_group_and_pairs(group, |replica, now, cx, _| handle(replica, now, cx))
    }

    /// [`Shard::with_group`], with the quiescence pairs lent to `handle`
    /// too (to wake the group's primary).
    fn with_group_and_pairs<R>(
        &mut self,
        group: GroupId,
        handle: impl FnOnce(&mut Replica, u64, &mut Context<'_>, &mut Pairs) -> R,
    ) -> Option<R> {
        let now = self.now;
        let (groups, mut cx, pairs) = self.parts();
        let replica = groups.get_mut(&group)?;
        replica.settle_quiet(pairs);
        let before = replica.progress();
        let answer = handle(replica, now, &mut cx, pairs);
        replica.check_quiet(pairs, cx.metrics);
        let after = replica.progress();
        assert!(after.0 >= before.0 && after.1 >= before.1 && after.2 >= before.2, "{replica:?}: an input went back");
        self.refile(group);
        debug_assert!(self.filed.get(&group).is_some_and(|wake| *wake > now), "the group's next wakeup is filed");
        Some(answer)
    }

    /// Handle an input of `group` that wakes a quiesced primary first (Z3:
    /// a request or a quorum wait; a peer message wakes it once the door
    /// let it in, see [`Shard::on_message`]; a seal, a transfer, a learner
    /// change).
    fn with_group_waking<R>(
        &mut self,
        group: GroupId,
        handle: impl FnOnce(&mut Replica, u64, &mut Context<'_>) -> R,
    ) -> Option<R> {
        self.with_group_and_pairs(group, |replica, now, cx, pairs| {
            replica.wake_lead(pairs, cx.metrics);
            handle(replica, now, cx)
        })
    }

    /// A tick: run the groups that are due, then close the tick's batches.
    pub fn on_tick(&mut self, now: u64) {
        assert!(now >= self.now, "ticks went backwards: {now} after {}", self.now);
        self.now = now;
        while let Some(&(wake, group)) = self.wakeups.first() {
            if wake > now {
                break;
            }
            self.wakeups.pop_first();
            if self.filed.get(&group) == Some(&wake) {
                self.filed.remove(&group);
            }
            let (groups, mut cx, pairs) = self.parts();
            let Some(replica) = groups.get_mut(&group) else { continue };
            replica.settle_quiet(pairs);
            if replica.next_wakeup() <= now {
                let before = replica.progress();
                replica.on_tick(now, &mut cx, pairs);
                replica.check_quiet(pairs, cx.metrics);
                let after = replica.progress();
                assert!(
                    after.0 >= before.0 && after.1 >= before.1 && after.2 >= before.2,
                    "{replica:?}: a tick went back"
                );
            }
            self.refile(group);
        }
        assert!(self.wakeups.first().is_none_or(|(wake, _)| *wake > now), "every group due at {now} ran");
        self.quiet_tick();
        self.out.end_tick(&mut self.metrics);
        let queued = self.out.queued();
        debug_assert!(queued.queued_commits + queued.queued_replies == 0, "R11, R28: the tick's batches are out");
    }

    /// A single-group message from a peer node. One with a view or op out
    /// of range is refused and counted (T5, [`crate::refusal`]).
    pub fn on_message(&mut self, from: NodeId, message: Message) {
        let message = match message {
            Message::PairHeartbeat(heartbeat) => return self.on_pair_heartbeat(from, heartbeat),
            Message::PairHeartbeatReply(reply) => return self.on_pair_heartbeat_reply(from, reply),
            message => message,
        };
        let Some(group) = message.group() else { return };
        if let Err(refusal) = crate::refusal::check_message(&message) {
            return self.refused.count(refusal);
        }
        self.with_group_and_pairs(group, |replica, now, cx, pairs| {
            if let Err(refusal) = replica.accepts_from(from, &message) {
                if refusal == crate::refusal::Refusal::OtherIncarnation
                    && let Some(incarnation) = replica.incarnation_of(&message)
                    && replica.on_other_incarnation(from, incarnation, cx.out)
                {
                    return;
                }
                return cx.refuse(refusal);
            }
            // Z3: a message the door let in wakes a quiesced primary (a
            // refused one, forged or late, changes nothing).
            replica.wake_lead(pairs, cx.metrics);
            if replica.is_recovering() && !Replica::heard_while_recovering(&message) {
                // H1: a recovering member takes part in nothing.
                return;
            }
            match message {
                Message::Prepare(m) => replica.on_prepare(m, cx),
                Message::PrepareOk(m) => replica.on_prepare_ok(m, now, cx),
                Message::StartViewChange(m) => replica.on_start_view_change(m, now, cx),
                Message::DoViewChange(m) => replica.on_do_view_change(m, now, cx),
                Message::StartView(m) => replica.on_start_view(m, now, cx),
                Message::RequestPrepares(m) => replica.on_request_prepares(m, now, cx),
                Message::RequestStateTransfer(m) => replica.on_request_state_transfer(m, now, cx),
                Message::StateChunk(m) => replica.on_state_chunk(m, now, cx),
                Message::Request(m) => replica.on_request(from, m, now, cx),
                Message::RecoveryQuery(m) => replica.on_recovery_query(m, now, cx),
                Message::RecoveryAnswer(m) => replica.on_recovery_answer(m, now, cx),
                _ => {}
            }
        });
    }

    /// A whole Commit batch frame from `from`: each entry handled as a single
    /// Commit, a bad one rejected alone (R17); counted (R19).
    pub fn on_commit_batch(&mut self, from: NodeId, batch: &cohort_messages::CommitBatch) {
        self.metrics.commit_batches_received += 1;
        for entry in batch.entries() {
            self.metrics.commit_entries_received += 1;
            match entry {
                Ok(entry) => self.on_commit_entry(from, entry),
                Err(_) => self.metrics.commit_entries_rejected += 1,
            }
        }
    }

    /// Entries of a Commit frame routed to this shard by a peer link (R16):
    /// counted as one received batch.
    pub fn on_commit_entries(&mut self, from: NodeId, entries: &[CommitEntry]) {
        self.metrics.commit_batches_received += 1;
        self.metrics.commit_entries_received += entries.len() as u64;
        for entry in entries {
            self.on_commit_entry(from, *entry);
        }
    }

    /// A whole CommitReply batch frame from `from` (R29, R32).
    pub fn on_commit_reply_batch(&mut self, from: NodeId, batch: &cohort_messages::CommitReplyBatch) {
        self.metrics.reply_batches_received += 1;
        for entry in batch.entries() {
            self.metrics.reply_entries_received += 1;
            match entry {
                Ok(entry) => self.on_commit_reply_entry(from, entry),
                Err(_) => self.metrics.reply_entries_rejected += 1,
            }
        }
    }

    /// Entries of a CommitReply frame routed to this shard (R16, R29).
    pub fn on_commit_reply_entries(&mut self, from: NodeId, entries: &[CommitReplyEntry]) {
        self.metrics.reply_batches_received += 1;
        self.metrics.reply_entries_received += entries.len() as u64;
        for entry in entries {
            self.on_commit_reply_entry(from, *entry);
        }
    }

    /// R25: a Commit batch to `to` was handed to a link that was (or was not)
    /// connected; each group in it records that for its member on `to`.
    pub fn on_commit_batch_sent(&mut self, to: NodeId, entries: &[CommitEntry], connected: bool) {
        if !connected {
            self.metrics.commit_batches_unconnected += 1;
        }
        for entry in entries {
            if let Some(replica) = self.groups.get_mut(&entry.group) {
                replica.record_link(to, connected);
            }
        }
    }

    /// K4: the link to `peer` is congested (its unsent bytes passed the
    /// high-water mark), or drained again. While it is congested, Prepares to
    /// `peer` are held back; once it drains, every primary here sends its
    /// member on `peer` the ops it has not acknowledged, at once.
    pub fn set_peer_congested(&mut self, peer: NodeId, congested: bool) {
        let changed = if congested { self.congested.insert(peer) } else { self.congested.remove(&peer) };
        if !changed || congested {
            return;
        }
        let mut groups: Vec<GroupId> = self
            .groups
            .iter()
            .filter(|(_, replica)| replica.is_primary() && replica.spec.index_of(peer).is_some())
            .map(|(group, _)| *group)
            .collect();
        // In group order, not the map's: the simulator replays a seed exactly.
        groups.sort_unstable();
        for group in groups {
            self.with_group(group, |replica, _, cx| {
                if let Some(member) = replica.spec.index_of(peer) {
                    replica.send_held_back_prepares(member, cx);
                }
            });
        }
    }

    /// Counters of this shard (R19, R32).
    pub fn metrics(&self) -> &ShardMetrics {
        &self.metrics
    }

    /// T5: peer messages this shard refused, by reason (see [`crate::refusal`]).
    pub fn refused(&self) -> &Refusals {
        &self.refused
    }

    /// Groups per heartbeat state (R32). Walks every group: for scrapes, not ticks.
    pub fn heartbeat_gauges(&self) -> crate::metrics::HeartbeatGauges {
        let mut gauges = crate::metrics::HeartbeatGauges::default();
        for replica in self.groups.values() {
            match replica.role() {
                crate::effect::Role::Primary => match replica.activity() {
                    crate::replica::GroupActivity::Busy => gauges.busy += 1,
                    crate::replica::GroupActivity::Idle => gauges.idle += 1,
                },
                // Learners follow like backups (and heartbeat like them).
                crate::effect::Role::Backup | crate::effect::Role::Learner => gauges.backup += 1,
                crate::effect::Role::ViewChange => gauges.view_change += 1,
            }
        }
        gauges
    }

    /// One Commit entry of a batch from `from` (R16, R17).
    pub fn on_commit_entry(&mut self, from: NodeId, entry: CommitEntry) {
        if let Err(refusal) = crate::refusal::check_commit(&entry) {
            return self.refused.count(refusal);
        }
        self.with_group(entry.group, |replica, now, cx| {
            if replica.is_recovering() {
                // H1: it follows no primary until it recovered. A later
                // incarnation's Commit still tells it the group went on
                // without it (Z6: its agent then reads where; seed 6004344).
                replica.outpaced |= entry.partition_incarnation > replica.spec.incarnation;
                return;
            }
            let any_incarnation = replica.config.mutated(crate::mutants::Mutant::OtherIncarnationAccepted);
            if entry.partition_incarnation != replica.spec.incarnation && !any_incarnation {
                // Z6: the next incarnation running says this one's seal committed.
                let next = entry.partition_incarnation.0 == replica.spec.incarnation.0 + 1;
                if next && replica.on_next_incarnation_commit(from, entry.partition_incarnation, cx.out) {
                    return;
                }
                replica.outpaced |= entry.partition_incarnation > replica.spec.incarnation;
                return cx.refuse(crate::refusal::Refusal::OtherIncarnation);
            }
            // Only a member's own Commits count (the primary's, or a
            // stranded member's view of them): `on_commit` checks which.
            if replica.spec.node_at(entry.replica) != Some(from) {
                return cx.refuse(crate::refusal::Refusal::NotTheMember);
            }
            replica.on_commit(from, entry, now, cx);
        });
    }

    /// One CommitReply entry of a batch from `from` (R29).
    pub fn on_commit_reply_entry(&mut self, from: NodeId, entry: CommitReplyEntry) {
        if let Err(refusal) = crate::refusal::check_commit_reply(&entry) {
            return self.refused.count(refusal);
        }
        self.with_group(entry.group, |replica, now, cx| {
            let any_incarnation = replica.config.mutated(crate::mutants::Mutant::OtherIncarnationAccepted);
            if entry.partition_incarnation != replica.spec.incarnation && !any_incarnation {
                return cx.refuse(crate::refusal::Refusal::OtherIncarnation);
            }
            if replica.spec.node_at(entry.replica) != Some(from) {
                return cx.refuse(crate::refusal::Refusal::NotTheMember);
            }
            replica.on_commit_reply(entry, now, cx);
        });
    }

    /// A client request (from a local submitter or a client connection).
    pub fn on_request(&mut self, request: Request) {
        let group = request.group;
        if request.client == cohort_messages::ClientId::SEAL {
            let detail = "client 0 is reserved for seal entries".to_string();
            return self.refuse_request(&request, cohort_messages::ReplyError::Rejected, detail);
        }
        if !self.groups.contains_key(&group) {
            let detail = format!("{group} is not hosted on {}", self.node);
            return self.refuse_request(&request, cohort_messages::ReplyError::UnknownGroup, detail);
        }
        let node = self.node;
        self.with_group_waking(group, |replica, now, cx| replica.on_request(node, request, now, cx));
    }

    /// Answer a request no group here takes.
    fn refuse_request(&mut self, request: &Request, code: cohort_messages::ReplyError, detail: String) {
        self.out.push(Effect::Reply(cohort_messages::Reply {
            client: request.client,
            request: request.request,
            group: request.group,
            view: cohort_messages::View(0),
            op: Op(0),
            outcome: cohort_messages::Outcome::Error { code, detail },
        }));
    }

    /// A flush completed durably.
    pub fn on_flushed(&mut self, id: FlushId) {
        for (flush, group) in self.out.flushed(id, &self.congested, &mut self.metrics) {
            self.with_group(group, |replica, now, cx| replica.on_flushed(flush, now, cx));
        }
    }

    /// D2: the apply worker is done with job `id` of `group`: its state
    /// machine comes back with what the work did (one result per op of a
    /// run, D3 the outcome of a staged chunk). A job of a replica removed
    /// meanwhile has its state cleared (as the removal would have) and
    /// dropped. A job this shard does not know (a shell's bug) is dropped
    /// and counted.
    pub fn on_applied(
        &mut self,
        group: GroupId,
        id: crate::effect::ApplyId,
        state: Box<dyn StateMachine>,
        done: crate::state_machine::Done,
    ) {
        let mut state = state;
        if self.away.get(&group) == Some(&id) {
            self.away.remove(&group);
            let _ = state.clear();
            return;
        }
        let returned = self.with_group(group, |replica, now, cx| replica.on_applied(id, state, done, now, cx));
        if !matches!(returned, Some(Ok(()))) {
            self.metrics.apply_runs_unknown += 1;
        }
    }

    /// D2: true while the state machine of a removed replica of `group` is
    /// on the apply worker: the group cannot be hosted here until it is
    /// back ([`ShardError::StateAway`]).
    pub fn state_away(&self, group: GroupId) -> bool {
        self.away.contains_key(&group)
    }

    /// Staging the superblock of `group` failed (R12).
    pub fn on_superblock_failed(&mut self, group: GroupId) {
        self.with_group(group, |replica, _, cx| replica.superblock_failed(cx.out));
    }

    /// Q1: wait until `quorum` members durably hold `op` of `group`.
    pub fn wait_quorum(&mut self, group: GroupId, op: Op, quorum: usize, timeout_ticks: u64) -> WaitId {
        let id = self.next_wait;
        self.next_wait += 1;
        self.wait_groups.insert(id, group);
        if !self.groups.contains_key(&group) {
            self.out.push(Effect::QuorumWaitDone {
                wait: id,
                result: Err(crate::effect::QuorumWaitError::NotPrimary { group, view: cohort_messages::View(0) }),
            });
        }
        self.with_group_waking(group, |replica, now, cx| {
            replica.wait_quorum(id, op, quorum, timeout_ticks, now, cx.out)
        });
        id
    }

    /// Q2: cancel a wait; its `QuorumWaitDone` carries the cancellation.
    pub fn cancel_wait(&mut self, wait: WaitId) -> bool {
        let Some(group) = self.wait_groups.remove(&wait) else { return false };
        self.with_group(group, |replica, now, cx| replica.cancel_wait(wait, now, cx.out)).unwrap_or(false)
    }

    /// End of a turn: everything to do, in order.
    pub fn drain_effects(&mut self) -> Vec<Effect> {
        self.out.take_counts(&mut self.metrics);
        let effects = self.out.end_turn();
        for effect in &effects {
            if let Effect::QuorumWaitDone { wait, .. } = effect {
                self.wait_groups.remove(wait);
            }
        }
        debug_assert!(self.wait_groups.keys().all(|wait| *wait < self.next_wait), "Q1: wait ids are handed out once");
        effects
    }

    /// Check every replica's invariants (the simulator calls this after every step).
    pub fn invariants(&self) {
        // Every hosted group, and only those, has its next wakeup filed.
        assert_eq!(self.filed.len(), self.groups.len(), "a filed wakeup per hosted group");
        for (group, wake) in self.filed.iter() {
            assert!(self.groups.contains_key(group), "{group}: filed, not hosted");
            assert!(self.wakeups.contains(&(*wake, *group)), "{group}: filed at {wake}, not in the wakeups");
        }
        for replica in self.groups.values() {
            replica.invariants();
            replica.quiet_invariants(&self.quiet);
        }
        self.quiet.invariants();
        // Z3: each pair holds exactly the replicas quiesced with it, so that
        // settling a replica from its pairs renews exactly those.
        for (peer, group) in self.quiet.lead_groups() {
            let replica = self.groups.get(&group).unwrap_or_else(|| panic!("Z3: {group} quiet for {peer} is hosted"));
            let member = replica.spec.index_of(peer);
            assert!(member.is_some_and(|member| replica.quiet_member(member)), "Z3: {group} is quiet for {peer}");
        }
        for (primary, group) in self.quiet.follow_groups() {
            let replica =
                self.groups.get(&group).unwrap_or_else(|| panic!("Z3: {group} quiet under {primary} is hosted"));
            assert_eq!(
                replica.follow_quiet.map(|follow| follow.primary),
                Some(primary),
                "Z3: {group} follows {primary} quiet"
            );
        }
    }
}

impl Replica {
    /// The incarnation and member index a group message says it is from
    /// (none for a client request or a batch command).
    fn sender_of(message: &Message) -> Option<(cohort_messages::Incarnation, cohort_messages::MemberIndex)> {
        Some(match message {
            Message::Prepare(m) => (m.incarnation, m.replica),
            Message::PrepareOk(m) => (m.incarnation, m.replica),
            Message::StartViewChange(m) => (m.incarnation, m.replica),
            Message::DoViewChange(m) => (m.incarnation, m.replica),
            Message::StartView(m) => (m.incarnation, m.replica),
            Message::RequestPrepares(m) => (m.incarnation, m.replica),
            Message::RequestStateTransfer(m) => (m.incarnation, m.replica),
            Message::StateChunk(m) => (m.incarnation, m.replica),
            Message::RecoveryQuery(m) => (m.incarnation, m.replica),
            Message::RecoveryAnswer(m) => (m.incarnation, m.replica),
            _ => return None,
        })
    }

    /// The incarnation a group message is of, if it names one.
    pub(crate) fn incarnation_of(&self, message: &Message) -> Option<cohort_messages::Incarnation> {
        Self::sender_of(message).map(|(incarnation, _)| incarnation)
    }

    /// Fencing at the door: a group message must come from the node that is
    /// the member it claims to be, for this incarnation; election messages
    /// only from voters (P4: an index past the group, or a learner's
    /// StartViewChange or DoViewChange, is refused here). The error is the
    /// reason, for the shard to count (T5).
    pub(crate) fn accepts_from(&self, from: NodeId, message: &Message) -> Result<(), crate::refusal::Refusal> {
        use crate::refusal::Refusal;
        let (incarnation, replica) = match Self::sender_of(message) {
            Some(sender) => sender,
            None if matches!(message, Message::Request(_)) => return Ok(()),
            None => return Err(Refusal::UnexpectedCommand),
        };
        let election = matches!(message, Message::StartViewChange(_) | Message::DoViewChange(_));
        let any_incarnation = self.config.mutated(crate::mutants::Mutant::OtherIncarnationAccepted);
        if incarnation != self.spec.incarnation && !any_incarnation {
            return Err(Refusal::OtherIncarnation);
        }
        if self.spec.node_at(replica) != Some(from) {
            return Err(Refusal::NotTheMember);
        }
        if election && !self.spec.is_voter(replica) {
            return Err(Refusal::ElectionFromLearner);
        }
        Ok(())
    }
}
