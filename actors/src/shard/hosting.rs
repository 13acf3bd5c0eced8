//! How a shard hosts, drops and switches group replicas.
//!
//! There is one way to host a group ([`ShardActor::host`]), used at
//! start-up, when the shard is rebuilt after a crash, and for a learner
//! hosted at run time: the state machine comes from the group's kind
//! (wrapped so the shard sees every apply), the replica is recovered from
//! storage or created empty, `report_applied` follows whether the kind has a
//! custom actor, and the group actor starts with the kind's custom actor.

use actix::prelude::*;
use cohort_core::ShardError;
use cohort_core::driver::StorageJob;
use cohort_core::replica::Placement;
use cohort_core::storage::{Recovered, RecoveredGroup};
use cohort_messages::seal::Seal;
use cohort_messages::{GroupId, NodeId};

use super::{GroupLink, ShardActor};
use crate::custom::GroupReplica;
use crate::kind::{GroupKind, HostedGroup};
use crate::observed::ObservedStateMachine;
use crate::placement_recorder::{RecordPlacement, RemovePlacement, SetRecordedLearners};
use crate::placements::RecordedPlacement;

/// How a group with nothing recovered is hosted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hosting {
    /// Empty, as a new member ([`cohort_core::Shard::create_group`]).
    Created,
    /// Empty and recovering first (H1, [`cohort_core::Shard::join_group`]).
    Joined,
    /// Joined, its storage's leftovers reset (D1,
    /// [`cohort_core::Shard::rebuild_group`]).
    Rebuilt,
}

impl ShardActor {
    /// Host every group of `groups`, recovering those `recovered` holds.
    /// Their actors start with the shard actor.
    pub(super) fn build(&mut self, groups: Vec<HostedGroup>, mut recovered: Recovered) -> Result<(), String> {
        for hosted in groups {
            let group = hosted.spec.group;
            let kind = hosted.kind.clone();
            let mut data = recovered.groups.remove(&group);
            if recovered.lost_synced_records && data.as_ref().is_some_and(|data| data.superblock.is_none()) {
                // H2: its superblock may be among the lost records; with
                // none to mark recovering, it starts empty and recovers
                // (`storage_formatted` is set), its leftovers removed.
                if !self.storage.remove_group(group) {
                    return Err(format!("shard {}: the storage worker stopped", self.index));
                }
                data = None;
            }
            match self.host(hosted.clone(), data) {
                Ok(()) => self.built.push((group, kind)),
                Err(error @ ShardError::EarlierLife { .. }) => {
                    // H3: left from a replica hosted before this one was
                    // placed here empty; its removal did not reach the disk.
                    let (node, shard) = (self.node.0, self.index);
                    tracing::warn!(node, shard, group = group.0, %error, "removing {group}'s data and hosting it empty: {error}");
                    if !self.storage.remove_group(group) {
                        return Err(format!("shard {}: the storage worker stopped", self.index));
                    }
                    self.host(hosted, None).map_err(|error| format!("shard {}: {error}", self.index))?;
                    self.built.push((group, kind));
                }
                Err(error @ ShardError::StateMachineBehind { .. }) => {
                    // D1: the state machine lost what storage's log no
                    // longer holds: the replica is rebuilt from the others,
                    // its storage reset to its recovering superblock in one
                    // step (a removal alone could leave no trace of it).
                    let (node, shard) = (self.node.0, self.index);
                    tracing::error!(node, shard, group = group.0, %error, "rebuilding {group} from its other members: {error}");
                    let reset = self.host_as(hosted, None, Hosting::Rebuilt);
                    let reset = reset.map_err(|error| format!("shard {}: {error}", self.index))?;
                    if let Some(job) = reset
                        && !self.storage.run(job)
                    {
                        return Err(format!("shard {}: the storage worker stopped", self.index));
                    }
                    self.built.push((group, kind));
                }
                Err(ShardError::NotInIncarnation(error)) => {
                    // Removed from the group before the restart: what is
                    // left here is not this node's any more (S4).
                    let (node, shard) = (self.node.0, self.index);
                    tracing::warn!(
                        node,
                        shard,
                        group = group.0,
                        %error,
                        "dropping {group} and its data: this node left the group before it restarted ({error})"
                    );
                    if !self.storage.remove_group(group) {
                        return Err(format!("shard {}: the storage worker stopped", self.index));
                    }
                    self.placements.do_send(RemovePlacement(group));
                }
                Err(error) => return Err(format!("shard {}: {error}", self.index)),
            }
        }
        Ok(())
    }

    /// Host `hosted` in the core: recovered from `recovered` if storage
    /// holds the group, else created empty. See the module docs.
    fn host(&mut self, hosted: HostedGroup, recovered: Option<RecoveredGroup>) -> Result<(), ShardError> {
        let how = if self.storage_formatted { Hosting::Joined } else { Hosting::Created };
        self.host_as(hosted, recovered, how).map(|_| ())
    }

    /// [`ShardActor::host`], saying how a group with nothing `recovered` is
    /// hosted. A rebuilt one returns the job that resets its storage,
    /// which the caller queues before the next turn's.
    fn host_as(
        &mut self,
        hosted: HostedGroup,
        recovered: Option<RecoveredGroup>,
        how: Hosting,
    ) -> Result<Option<StorageJob>, ShardError> {
        let HostedGroup { mut spec, kind } = hosted;
        let group = spec.group;
        if self.driver.state_away(group) {
            // D2: no second state machine of the group while the removed
            // replica's is on the apply worker (it would open the same
            // files); the agent places it again at its next scan.
            return Err(ShardError::StateAway(group));
        }
        let kind_spec = self.kinds.get(&kind).ok_or_else(|| {
            ShardError::Recovery(format!("{group}: group kind {kind} is not registered on this node"))
        })?;
        spec.report_applied = kind_spec.actor.is_some();
        let label = self.metrics.group_kind(kind.as_str());
        let state = (kind_spec.state_machines)(group);
        let state = Box::new(ObservedStateMachine::new(state, group, label, std::sync::Arc::clone(&self.traces)));
        match (recovered, how) {
            (Some(data), _) => self.driver.recover_group(spec, state, data).map(|()| None),
            // H1: on a storage this process created, a voter cannot tell a
            // new group from one whose history it lost: it recovers first.
            // On one that was there, no superblock means it never
            // acknowledged anything here: it starts empty, as ever.
            (None, Hosting::Joined) => self.driver.join_group(spec, state).map(|()| None),
            (None, Hosting::Created) => self.driver.create_group(spec, state).map(|()| None),
            // D1: joined, its storage reset to the superblock it staged.
            (None, Hosting::Rebuilt) => self.driver.rebuild_group(spec, state).map(Some),
        }
    }

    /// Link a hosted group: with its kind's custom actor, if it has one,
    /// and then its group actor at once; otherwise the group actor starts
    /// when first needed ([`ShardActor::group_actor`], Z1).
    pub(super) fn start_group_actors(&mut self, group: GroupId, kind: &GroupKind, ctx: &mut Context<Self>) {
        if self.driver.shard().replica(group).is_none() {
            return;
        }
        let replica = GroupReplica { node: self.node, group, kind: kind.clone() };
        let custom = self.kinds.get(kind).and_then(|spec| spec.actor.as_ref()).map(|factory| factory(&replica));
        let followed = custom.is_some();
        self.groups.insert(group, GroupLink { actor: None, followed });
        if let Some(custom) = custom {
            self.start_group_actor(group, Some(custom), ctx);
        }
    }

    /// Stop hosting `group` here: its replica, its actor (dropping the link
    /// drops its last address, and with it the callers waiting on it) and
    /// its data. `Ok(false)` if it was not hosted: its data goes all the
    /// same, if any is left (a restart that hosted no replica of it, its
    /// placement gone), or a replica placed here later would start on top
    /// of it and save a snapshot below the old one's (a storage contract
    /// panic: simulator seed 6002371). `Err` if the storage worker stopped
    /// (the shard has failed).
    fn forget_group(&mut self, group: GroupId) -> Result<bool, ()> {
        let hosted = self.driver.remove_group(group);
        if hosted {
            self.groups.remove(&group);
            self.unhosted.retain(|key, _| key.0 != group);
            self.resync_pending.retain(|pending| *pending != group);
        }
        if !self.storage.remove_group(group) {
            self.fail("the storage worker stopped".into());
            return Err(());
        }
        Ok(hosted)
    }
}

/// Stop hosting a group: its actors stop, waiting callers are dropped, and
/// its data is removed from the shard's storage (S4, the metadata placed it
/// elsewhere).
#[derive(Message)]
#[rtype(result = "()")]
pub struct UnloadGroup(pub GroupId);

impl Handler<UnloadGroup> for ShardActor {
    type Result = ();

    fn handle(&mut self, UnloadGroup(group): UnloadGroup, _ctx: &mut Self::Context) {
        if self.forget_group(group) == Ok(true) {
            self.placements.do_send(RemovePlacement(group));
        }
    }
}

/// The metadata decided a member change of a group this shard leads: seal
/// its incarnation (refused quietly if it is not the primary, or already
/// sealed; the agent asks again while the change is pending).
#[derive(Message)]
#[rtype(result = "()")]
pub struct ProposeSeal {
    /// The group.
    pub group: GroupId,
    /// The seal.
    pub seal: Seal,
}

impl Handler<ProposeSeal> for ShardActor {
    type Result = ();

    fn handle(&mut self, ProposeSeal { group, seal }: ProposeSeal, _ctx: &mut Self::Context) {
        if let Err(error) = self.driver.propose_seal(group, seal) {
            tracing::debug!(group = group.0, %error, "seal not proposed");
        }
        self.run();
    }
}

/// The metadata names this node a learner of a group (P4), or a voting
/// member of a group created at run time (C3): host an empty replica of it,
/// in place of a replica of an older incarnation and its data. A learner
/// catches up from the primary; a member's group never held anything else
/// at its first incarnation (an older replica here is from a life of the
/// group id that a delete ended, H3). The placement is recorded durably first (see
/// [`crate::placements`]), so the next start hosts the group again; if it
/// cannot be recorded the replica is not hosted (the agent asks again).
#[derive(Message)]
#[rtype(result = "()")]
pub struct HostPlaced {
    /// The group as the metadata places it, this node among its members
    /// (`voter`) or its learners.
    pub placement: Placement,
    /// Its kind.
    pub kind: GroupKind,
    /// True for a voting member, false for a learner.
    pub voter: bool,
}

impl ShardActor {
    /// The spec of this node's replica of `placement`, if hosting it is
    /// right now: its kind is registered, this node has the role asked for,
    /// and no replica of this incarnation or a later one is hosted
    /// ([`cohort_core::metadata::placed_replaces`]).
    fn placed_to_host(&self, placement: &Placement, kind: &GroupKind, voter: bool) -> Option<HostedGroup> {
        let group = placement.group;
        if !self.kinds.contains_key(kind) {
            // The agent asks again on its scans: once per window and group.
            if crate::repeats::admit("group of an unregistered kind not hosted", &format!("{group} on {}", self.node)) {
                let node = self.node.0;
                tracing::warn!(
                    node,
                    group = group.0,
                    %kind,
                    "{group} not hosted: the metadata placed it here, but its kind {kind} is not registered on node \
                     {node} (NodeBuilder::group_kind)"
                );
            }
            return None;
        }
        let hosted = self.driver.shard().replica(group).map(cohort_core::Replica::incarnation);
        if !cohort_core::metadata::placed_replaces(placement.incarnation, hosted) {
            return None;
        }
        match cohort_core::GroupSpec::of_node(placement, self.node) {
            Ok(spec) if spec.is_voter(spec.me) == voter => Some(HostedGroup { spec, kind: kind.clone() }),
            Ok(_) => {
                tracing::warn!(
                    node = self.node.0,
                    group = group.0,
                    voter,
                    "replica spec refused: this node has the other role"
                );
                None
            }
            Err(error) => {
                tracing::warn!(node = self.node.0, group = group.0, %error, "replica spec refused: {error}");
                None
            }
        }
    }
}

impl Handler<HostPlaced> for ShardActor {
    type Result = ();

    fn handle(&mut self, HostPlaced { placement, kind, voter }: HostPlaced, ctx: &mut Self::Context) {
        let Some(hosted) = self.placed_to_host(&placement, &kind, voter) else { return };
        let role = if voter { "a member" } else { "a learner" };
        let record = RecordedPlacement::of(&hosted.spec, &hosted.kind);
        let recorded = self.placements.send(RecordPlacement(record));
        ctx.spawn(recorded.into_actor(self).map(move |written, actor, ctx| {
            let (group, node) = (placement.group, actor.node.0);
            match written {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    return tracing::warn!(node, group = group.0, %error, "{group} not hosted as {role}: {error}");
                }
                Err(_) => {
                    return tracing::warn!(
                        node,
                        group = group.0,
                        "{group} not hosted as {role}: the placement recorder stopped"
                    );
                }
            }
            // Checked again: the shard went on while the record was written.
            let Some(hosted) = actor.placed_to_host(&placement, &kind, voter) else { return };
            if actor.forget_group(group).is_err() {
                return;
            }
            let incarnation = hosted.spec.incarnation;
            if let Err(error) = actor.host(hosted, None) {
                tracing::warn!(node, group = group.0, %error, "{group} not hosted as {role}: {error}");
                actor.placements.do_send(RemovePlacement(group));
                return;
            }
            actor.start_group_actors(group, &kind, ctx);
            let incarnation = incarnation.0;
            tracing::info!(
                node,
                group = group.0,
                incarnation,
                role,
                "hosting {group} (incarnation {incarnation}) as {role}"
            );
            actor.run();
        }));
    }
}

/// The metadata asks that `to` lead `group`, which this shard's replica
/// leads (C4): start the directed view change. Refused quietly (the agent
/// asks again) while `to` is behind or this replica is not the primary.
#[derive(Message)]
#[rtype(result = "()")]
pub struct TransferPrimary {
    /// The group.
    pub group: GroupId,
    /// The member that is to lead it.
    pub to: NodeId,
}

impl Handler<TransferPrimary> for ShardActor {
    type Result = ();

    fn handle(&mut self, TransferPrimary { group, to }: TransferPrimary, _ctx: &mut Self::Context) {
        match self.driver.transfer_primary(group, to) {
            Ok(()) => tracing::info!(
                node = self.node.0,
                group = group.0,
                to = to.0,
                "primary transfer of {group} to {to} started"
            ),
            Err(error) => tracing::debug!(group = group.0, %error, "primary transfer not started yet"),
        }
        self.run();
    }
}

/// The metadata's learners of a hosted group changed (P4).
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetLearners {
    /// The group.
    pub group: GroupId,
    /// Its learners.
    pub learners: Vec<NodeId>,
}

impl Handler<SetLearners> for ShardActor {
    type Result = ();

    fn handle(&mut self, SetLearners { group, learners }: SetLearners, _ctx: &mut Self::Context) {
        match self.driver.set_learners(group, learners.clone()) {
            // A recorded learner's index follows the list: keep the record's
            // in step (a record of an older incarnation keeps its own).
            Ok(()) => {
                if let Some(replica) = self.driver.shard().replica(group) {
                    let incarnation = replica.incarnation();
                    self.placements.do_send(SetRecordedLearners { group, incarnation, learners });
                }
            }
            Err(error) => {
                tracing::warn!(node = self.node.0, group = group.0, %error, "learners of {group} not set: {error}")
            }
        }
        self.run();
    }
}

/// Every next member held the seal and the metadata switched the group:
/// switch this shard's sealed replica to the next incarnation.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SwitchIncarnation(pub GroupId);

impl Handler<SwitchIncarnation> for ShardActor {
    type Result = ();

    fn handle(&mut self, SwitchIncarnation(group): SwitchIncarnation, _ctx: &mut Self::Context) {
        let switched = self.driver.switch_incarnation(group);
        self.after_switch(group, switched, "with members");
    }
}

impl ShardActor {
    /// Say how a switch of `group` to its next incarnation went (`how`
    /// names the members listed), and run the turn it produced.
    fn after_switch(&mut self, group: GroupId, switched: Result<(), cohort_core::replica::SealError>, how: &str) {
        match switched {
            Ok(()) => {
                if let Some(replica) = self.driver.shard().replica(group) {
                    let (incarnation, members) = (replica.incarnation().0, replica.members());
                    let node = self.node.0;
                    tracing::info!(
                        node,
                        group = group.0,
                        incarnation,
                        ?members,
                        "{group} switched to incarnation {incarnation} {how} {members:?}"
                    );
                }
            }
            Err(error) => {
                tracing::warn!(node = self.node.0, group = group.0, %error, "switch of {group} refused: {error}")
            }
        }
        self.run();
    }
}

/// Z6: this node learns the metadata group's log and is no voter of the
/// incarnation its applied seal names: go on as one of its learners.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SwitchIncarnationAsLearner {
    /// The group (the metadata group).
    pub group: GroupId,
    /// The seal of the switch.
    pub seal: cohort_messages::seal::Seal,
    /// The next incarnation's learners, this node among them.
    pub learners: Vec<NodeId>,
}

impl Handler<SwitchIncarnationAsLearner> for ShardActor {
    type Result = ();

    fn handle(&mut self, switch: SwitchIncarnationAsLearner, _ctx: &mut Self::Context) {
        let group = switch.group;
        let switched = self.driver.switch_incarnation_as_learner(group, &switch.seal, switch.learners);
        self.after_switch(group, switched, "as a learner, voters");
    }
}
