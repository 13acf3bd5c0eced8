//! Multi-step operations on group placement (M2–M5, P4; the shape of Cassandra's CEP-21 transactional metadata).
//!
//! Join, decommission, move and replace each change some groups' members,
//! and a member set may only change one small step at a time: a new replica
//! first joins as a *learner* that receives the log but does not vote, is
//! promoted only once its group's primary reports it caught up (P4), and the
//! replica it replaces is removed only after that. So a group never has
//! fewer voting members than it had before the operation, and every voter
//! holds the log.
//!
//! The whole plan is stored with the first step (M4): whichever metadata
//! primary drives it next reads the plan from the metadata and resumes. Each
//! next step is applied only after a majority of the previous step's group
//! replicas acked the epoch of that step (M2); the state machine itself
//! refuses a step whose gate is not met, so a stale or duplicate driver can
//! never skip one. Operations on disjoint groups run side by side; one that
//! touches a group of an in-flight operation is refused with that
//! operation's name (M3). Cancelling replaces the rest of the plan with the
//! inverse of the steps already applied, in reverse order, driven the same
//! way, so the previous placement comes back exactly (M5).

use std::collections::{BTreeMap, BTreeSet};

use cohort_messages::metadata::{MetadataCommand, MetadataResult, OperationSpec};
use cohort_messages::replication::Replication;
use cohort_messages::{Epoch, GroupId, NodeId, OperationId};
use serde::{Deserialize, Serialize};

use super::{GroupRecord, Metadata};

/// One change to one group's member set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Step {
    /// `node` starts receiving the group's log as a non-voting learner.
    AddLearner {
        /// The group.
        group: GroupId,
        /// The node.
        node: NodeId,
    },
    /// `node` learns the group's log already (every node past the metadata
    /// group's voters does, Z5): nothing changes, and the promotion that
    /// follows waits for its catch-up like any learner's (P4). Undone by
    /// nothing: the node stays the learner it was.
    KeepLearner {
        /// The group.
        group: GroupId,
        /// The node.
        node: NodeId,
    },
    /// A learner leaves (the inverse of `AddLearner`); nothing to do if
    /// it is no learner (any more).
    RemoveLearner {
        /// The group.
        group: GroupId,
        /// The node.
        node: NodeId,
    },
    /// A caught-up learner becomes a voting member at member index `index`:
    /// a member change, carried out by the group (see [`PendingSwitch`]).
    Promote {
        /// The group.
        group: GroupId,
        /// The node.
        node: NodeId,
        /// Its member index.
        index: usize,
    },
    /// A caught-up learner takes the place of member `out` in one member
    /// change (replacing a dead replica: the dead one could never hold the
    /// seal of a change that keeps it). Carried out by the group.
    Swap {
        /// The group.
        group: GroupId,
        /// The member leaving.
        out: NodeId,
        /// The learner taking its member index.
        into: NodeId,
    },
    /// A member leaves; `index` is where it was, for the inverse. A member
    /// change, carried out by the group (see [`PendingSwitch`]).
    RemoveMember {
        /// The group.
        group: GroupId,
        /// The node.
        node: NodeId,
        /// Its member index before removal.
        index: usize,
    },
}

impl Step {
    /// The group it changes.
    pub fn group(&self) -> GroupId {
        match self {
            Step::AddLearner { group, .. }
            | Step::KeepLearner { group, .. }
            | Step::RemoveLearner { group, .. }
            | Step::Promote { group, .. }
            | Step::Swap { group, .. }
            | Step::RemoveMember { group, .. } => *group,
        }
    }

    /// The steps that undo this one, in order.
    fn inverse(&self) -> Vec<Step> {
        match *self {
            Step::AddLearner { group, node } => vec![Step::RemoveLearner { group, node }],
            Step::KeepLearner { .. } => Vec::new(),
            Step::RemoveLearner { group, node } => vec![Step::AddLearner { group, node }],
            // The promoted member leaves again; the learner step's inverse
            // that follows then finds nothing left to remove.
            Step::Promote { group, node, index } => vec![Step::RemoveMember { group, node, index }],
            Step::Swap { group, out, into } => {
                vec![Step::AddLearner { group, node: out }, Step::Swap { group, out: into, into: out }]
            }
            // A removed member has missed ops: it comes back through P4.
            Step::RemoveMember { group, node, index } => {
                vec![Step::AddLearner { group, node }, Step::Promote { group, node, index }]
            }
        }
    }
}

/// A member change decided by a step and not yet carried out: the group's
/// primary seals its incarnation with `seal`, each next member reports
/// holding the seal durably, and when all did the metadata switches the
/// group to `seal.incarnation` with `seal.members`. Until then the step is
/// not complete: the next step waits, and a cancel is refused (a sealed
/// incarnation takes no more writes, so the switch must finish).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingSwitch {
    /// What the group seals its incarnation with.
    pub seal: cohort_messages::seal::Seal,
    /// The learners after the switch.
    pub learners: Vec<NodeId>,
    /// Next members that reported the seal durable.
    pub sealed_by: BTreeSet<NodeId>,
}

/// An operation in flight.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationRecord {
    /// What the operator asked for.
    pub spec: OperationSpec,
    /// Every step, applied in order (after a cancel: the reverting steps).
    pub plan: Vec<Step>,
    /// Steps of `plan` applied so far.
    pub done: usize,
    /// The epoch of the last applied step, which the next step's group must ack.
    pub last_step_epoch: Epoch,
    /// True once cancelled: `plan` is then the revert plan.
    pub cancelled: bool,
    /// Voting members of each touched group before the operation: no step
    /// leaves a group with fewer voters than this.
    pub voters_before: BTreeMap<GroupId, usize>,
    /// A node that is dead and need not ack (replace).
    pub dead: Option<NodeId>,
    /// Each touched group's (members, learners) before the operation: what
    /// a cancel restores (M5).
    pub placement_before: BTreeMap<GroupId, (Vec<NodeId>, Vec<NodeId>)>,
}

impl PendingSwitch {
    /// The switch of a group now on `before` voters, with `replication`,
    /// to `members`: the next incarnation keeps the group's rule for its
    /// quorum (see [`Replication::quorum_for`]).
    fn new(
        incarnation: cohort_messages::Incarnation,
        replication: &Replication,
        before: usize,
        members: Vec<NodeId>,
        learners: Vec<NodeId>,
    ) -> PendingSwitch {
        let replication_quorum = replication.quorum_for(before, members.len()) as u8;
        debug_assert!(replication_quorum >= 1 && usize::from(replication_quorum) <= members.len());
        let seal = cohort_messages::seal::Seal {
            incarnation: cohort_messages::Incarnation(incarnation.0 + 1),
            members,
            replication_quorum,
        };
        PendingSwitch { seal, learners, sealed_by: BTreeSet::new() }
    }
}

impl OperationRecord {
    /// The groups it touches.
    pub fn groups(&self) -> BTreeSet<GroupId> {
        self.voters_before.keys().copied().collect()
    }

    /// The next step, if any.
    pub fn next_step(&self) -> Option<&Step> {
        self.plan.get(self.done)
    }
}

/// Counters of finished operations.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationTotals {
    /// Operations whose every step applied.
    pub completed: u64,
    /// Operations cancelled and fully reverted.
    pub reverted: u64,
}

impl Metadata {
    /// `StartOperation`: plan, check M3, store the plan and apply step 0 (M4).
    pub(super) fn start_operation(&mut self, epoch: Epoch, spec: OperationSpec) -> MetadataResult {
        let plan = match self.plan(&spec) {
            Ok(plan) => plan,
            Err(reason) => return MetadataResult::Refused { reason },
        };
        let groups: BTreeSet<GroupId> = plan.iter().map(Step::group).collect();
        for (id, operation) in &self.operations {
            if let Some(group) = operation.groups().intersection(&groups).next() {
                return MetadataResult::Refused {
                    reason: format!(
                        "{group} is already in {id} ({:?}); wait for it or cancel it first",
                        operation.spec
                    ),
                };
            }
        }
        // Z6: a shrink is the one operation that may leave a voter fewer.
        let shrink = matches!(spec, OperationSpec::Shrink { .. });
        let voters_before =
            groups.iter().map(|group| (*group, self.groups[group].members.len() - usize::from(shrink))).collect();
        let placement_before = groups
            .iter()
            .map(|group| (*group, (self.groups[group].members.clone(), self.groups[group].learners.clone())))
            .collect();
        let dead = match spec {
            OperationSpec::Replace { dead, .. } => Some(dead),
            _ => None,
        };
        let id = OperationId(self.last_operation.0 + 1);
        let mut record = OperationRecord {
            spec,
            plan,
            done: 0,
            last_step_epoch: epoch,
            cancelled: false,
            voters_before,
            dead,
            placement_before,
        };
        if let Err(reason) = self.apply_step(&record, 0) {
            return MetadataResult::Refused { reason };
        }
        record.done = 1;
        self.last_operation = id;
        self.operations.insert(id, record);
        self.finish_if_done(id);
        MetadataResult::OperationStarted { operation: id, epoch }
    }

    /// `AdvanceOperation`: apply step `step` if it is next and its gate holds (M2).
    pub(super) fn advance_operation(&mut self, epoch: Epoch, id: OperationId, step: u32) -> MetadataResult {
        let Some(record) = self.operations.get(&id) else {
            return MetadataResult::Refused { reason: format!("{id} is not in flight") };
        };
        if step as usize != record.done {
            return MetadataResult::Refused {
                reason: format!("{id}: step {step} is not next (next is {})", record.done),
            };
        }
        if let Err(reason) = self.step_gate(record) {
            return MetadataResult::Refused { reason: format!("{id}: {reason}") };
        }
        let record = record.clone();
        if let Err(reason) = self.apply_step(&record, record.done) {
            return MetadataResult::Refused { reason: format!("{id}: {reason}") };
        }
        if let Some(record) = self.operations.get_mut(&id) {
            record.done += 1;
            record.last_step_epoch = epoch;
        }
        self.finish_if_done(id);
        MetadataResult::Done { epoch }
    }

    /// `CancelOperation`: the rest of the plan becomes the inverse of what was done (M5).
    pub(super) fn cancel_operation(&mut self, epoch: Epoch, id: OperationId) -> MetadataResult {
        let Some(record) = self.operations.get(&id) else {
            return MetadataResult::Refused { reason: format!("{id} is not in flight (finished or never started)") };
        };
        if record.cancelled {
            return MetadataResult::Refused { reason: format!("{id} is already being reverted") };
        }
        if let Some(group) =
            record.groups().into_iter().find(|g| self.groups.get(g).is_some_and(|r| r.pending.is_some()))
        {
            return MetadataResult::Refused {
                reason: format!("{id}: {group} is switching members; cancel once the switch is done"),
            };
        }
        let Some(record) = self.operations.get_mut(&id) else {
            return MetadataResult::Refused { reason: format!("{id} is not in flight") };
        };
        let mut revert = Vec::new();
        for step in record.plan[..record.done].iter().rev() {
            revert.extend(step.inverse());
        }
        record.plan = revert;
        record.done = 0;
        record.cancelled = true;
        self.finish_if_done(id);
        MetadataResult::Done { epoch }
    }

    /// The command that drives an operation one step on, if one may go now:
    /// what the metadata primary proposes (the driver is stateless, so a new
    /// primary resumes from the stored plan, M4).
    pub fn next_operation_step(&self) -> Option<MetadataCommand> {
        self.operations.iter().find_map(|(id, record)| {
            record.next_step()?;
            self.step_gate(record).ok()?;
            Some(MetadataCommand::AdvanceOperation { operation: *id, step: record.done as u32 })
        })
    }

    /// Whether an operation's next step promotes learner `node` of `group`
    /// (P4: the report of its catch-up is awaited).
    pub fn promotes(&self, group: GroupId, node: NodeId) -> bool {
        self.operations.values().any(|record| {
            matches!(record.next_step(),
                Some(Step::Promote { group: g, node: n, .. } | Step::Swap { group: g, into: n, .. }) if *g == group && *n == node)
        })
    }

    /// Whether the next step of `record` may apply: a majority of the previous
    /// step's group replicas acked its epoch (M2), and a promotion needs a
    /// caught-up learner (P4).
    pub fn step_gate(&self, record: &OperationRecord) -> Result<(), String> {
        let Some(next) = record.next_step() else { return Err("no step left".into()) };
        let previous = record.done.checked_sub(1).and_then(|done| record.plan.get(done)).unwrap_or(next);
        if let Some(pending) = self.groups.get(&previous.group()).and_then(|g| g.pending.as_ref()) {
            return Err(format!(
                "{} is switching to incarnation {} ({} of {} next members hold the seal)",
                previous.group(),
                pending.seal.incarnation.0,
                pending.sealed_by.len(),
                pending.seal.members.len()
            ));
        }
        if let Some(group) = self.groups.get(&previous.group()) {
            let replicas: Vec<NodeId> = group
                .members
                .iter()
                .chain(&group.learners)
                .copied()
                .filter(|node| Some(*node) != record.dead)
                .collect();
            let acked = replicas
                .iter()
                .filter(|node| self.nodes.get(node).is_some_and(|n| n.acked >= record.last_step_epoch))
                .count();
            if acked * 2 <= replicas.len() && !crate::mutants::Mutant::StepGateWithoutAcks.metadata_mutated() {
                return Err(format!(
                    "{acked} of {} replicas of {} acked {}; waiting for a majority",
                    replicas.len(),
                    previous.group(),
                    record.last_step_epoch
                ));
            }
        }
        if let Step::Promote { group, node, .. } | Step::Swap { group, into: node, .. } = next
            && !self.groups.get(group).is_some_and(|g| g.caught_up.contains(node))
        {
            return Err(format!("learner {node} of {group} has not caught up yet"));
        }
        Ok(())
    }

    pub(super) fn finish_if_done(&mut self, id: OperationId) {
        if let Some(record) = self.operations.get(&id)
            && record.done >= record.plan.len()
            && !record.groups().iter().any(|g| self.groups.get(g).is_some_and(|r| r.pending.is_some()))
        {
            if record.cancelled {
                self.operation_totals.reverted += 1;
            } else {
                self.operation_totals.completed += 1;
            }
            self.operations.remove(&id);
        }
    }

    /// The steps of an operation, from the current placement.
    fn plan(&self, spec: &OperationSpec) -> Result<Vec<Step>, String> {
        let registered = |node: &NodeId| {
            if self.nodes.contains_key(node) { Ok(()) } else { Err(format!("{node} is not registered")) }
        };
        match spec {
            OperationSpec::Move { group, from, to } => {
                registered(to)?;
                let record = self.live_group(*group)?;
                self.move_steps(*group, record, *from, *to)
            }
            OperationSpec::Replace { group, dead, with } => {
                registered(with)?;
                let record = self.live_group(*group)?;
                if !record.members.contains(dead) {
                    return Err(format!("{dead} is not a member of {group} (members {:?})", record.members));
                }
                if record.members.contains(with) {
                    return Err(format!("{with} is a member of {group} already"));
                }
                let mut plan = self.learner_first(*group, record, *with)?;
                plan.push(Step::Swap { group: *group, out: *dead, into: *with });
                Ok(plan)
            }
            OperationSpec::Join { node, groups } => {
                registered(node)?;
                let mut plan = Vec::new();
                for group in groups {
                    let record = self.live_group(*group)?;
                    if record.members.contains(node) {
                        return Err(format!("{node} is a member of {group} already"));
                    }
                    plan.extend(self.learner_first(*group, record, *node)?);
                    plan.push(Step::Promote { group: *group, node: *node, index: record.members.len() });
                }
                Ok(plan)
            }
            OperationSpec::Decommission { node } => {
                registered(node)?;
                let mut load: BTreeMap<NodeId, usize> = self
                    .nodes
                    .iter()
                    .filter(|(id, record)| *id != node && record.session.is_some())
                    .map(|(id, _)| (*id, 0))
                    .collect();
                for record in self.groups.values() {
                    for replica in record.members.iter().chain(&record.learners) {
                        if let Some(count) = load.get_mut(replica) {
                            *count += 1;
                        }
                    }
                }
                let mut plan = Vec::new();
                // The metadata group's voters change only by name (Z6): a
                // decommission leaves them to `move` or `shrink`.
                let hosted = |group: &GroupId, record: &GroupRecord| {
                    *group != GroupId::METADATA && record.live && record.members.contains(node)
                };
                for (group, record) in self.groups.iter().filter(|(group, record)| hosted(group, record)) {
                    let target = load
                        .iter()
                        .filter(|(id, _)| !record.members.contains(id) && !record.learners.contains(id))
                        .min_by_key(|(id, count)| (**count, **id))
                        .map(|(id, _)| *id)
                        .ok_or_else(|| format!("no live node outside {group} can take its replica from {node}"))?;
                    *load.entry(target).or_default() += 1;
                    plan.extend(self.move_steps(*group, record, *node, target)?);
                }
                if plan.is_empty() {
                    return Err(format!("{node} hosts no replica; nothing to decommission"));
                }
                Ok(plan)
            }
            OperationSpec::Shrink { group, node } => {
                let record = self.live_group(*group)?;
                let index = record
                    .members
                    .iter()
                    .position(|member| member == node)
                    .ok_or_else(|| format!("{node} is not a member of {group} (members {:?})", record.members))?;
                if record.members.len() == 1 {
                    return Err(format!("{node} is the last voter of {group}; a group needs one"));
                }
                Ok(vec![Step::RemoveMember { group: *group, node: *node, index }])
            }
        }
    }

    /// The steps that make `node` a learner of `group` before it votes
    /// (P4): a `KeepLearner` if it is one already (every node past the
    /// metadata group's voters learns its log, Z5).
    fn learner_first(&self, group: GroupId, record: &GroupRecord, node: NodeId) -> Result<Vec<Step>, String> {
        if record.members.contains(&node) {
            return Err(format!("{node} already hosts {group}"));
        }
        if record.learners.contains(&node) {
            return Ok(vec![Step::KeepLearner { group, node }]);
        }
        Ok(vec![Step::AddLearner { group, node }])
    }

    /// A live group's record, or the refusal to answer with.
    fn live_group_mut(&mut self, group: GroupId) -> Result<&mut GroupRecord, MetadataResult> {
        self.groups
            .get_mut(&group)
            .filter(|record| record.live)
            .ok_or_else(|| MetadataResult::Refused { reason: format!("{group} does not exist") })
    }

    fn live_group(&self, group: GroupId) -> Result<&GroupRecord, String> {
        self.groups.get(&group).filter(|record| record.live).ok_or_else(|| format!("{group} does not exist"))
    }

    fn move_steps(&self, group: GroupId, record: &GroupRecord, from: NodeId, to: NodeId) -> Result<Vec<Step>, String> {
        let index = record
            .members
            .iter()
            .position(|member| *member == from)
            .ok_or_else(|| format!("{from} is not a member of {group} (members {:?})", record.members))?;
        let mut plan = self.learner_first(group, record, to)?;
        plan.push(Step::Promote { group, node: to, index: record.members.len() });
        plan.push(Step::RemoveMember { group, node: from, index });
        Ok(plan)
    }

    /// Apply step `index` of `record` to the placement, or say why it cannot.
    fn apply_step(&mut self, record: &OperationRecord, index: usize) -> Result<(), String> {
        let step = record.plan.get(index).ok_or("no such step")?;
        let voters_before = record.voters_before.get(&step.group()).copied().unwrap_or(1);
        let node_known = |node: &NodeId| self.nodes.contains_key(node);
        let group = step.group();
        if let Step::AddLearner { node, .. } = step
            && !node_known(node)
        {
            return Err(format!("{node} is not registered"));
        }
        let record =
            self.groups.get_mut(&group).filter(|record| record.live).ok_or(format!("{group} does not exist"))?;
        if record.pending.is_some() {
            return Err(format!("{group} is still switching members"));
        }
        match *step {
            Step::AddLearner { node, .. } => {
                if record.members.contains(&node) {
                    return Err(format!("{node} already hosts {group}"));
                }
                // A revert may bring back a learner that stayed one (a
                // metadata voter that left goes on learning, Z5).
                if !record.learners.contains(&node) {
                    record.learners.push(node);
                }
            }
            Step::KeepLearner { node, .. } => {
                if !record.learners.contains(&node) {
                    return Err(format!("{node} is not a learner of {group}"));
                }
            }
            Step::RemoveLearner { node, .. } => {
                record.learners.retain(|learner| *learner != node);
                record.caught_up.remove(&node);
            }
            Step::Promote { node, index, .. } => {
                if !record.learners.contains(&node) {
                    return Err(format!("{node} is not a learner of {group}"));
                }
                if !record.caught_up.contains(&node) {
                    return Err(format!("learner {node} of {group} has not caught up"));
                }
                let mut members = record.members.clone();
                members.insert(index.min(members.len()), node);
                let learners = record.learners.iter().copied().filter(|c| *c != node).collect();
                record.pending = Some(PendingSwitch::new(
                    record.incarnation,
                    &record.replication,
                    record.members.len(),
                    members,
                    learners,
                ));
            }
            Step::Swap { out, into, .. } => {
                if !record.learners.contains(&into) || !record.caught_up.contains(&into) {
                    return Err(format!("learner {into} of {group} has not caught up"));
                }
                let at =
                    record.members.iter().position(|m| *m == out).ok_or(format!("{out} is not a member of {group}"))?;
                let mut members = record.members.clone();
                members[at] = into;
                let mut learners: Vec<NodeId> = record.learners.iter().copied().filter(|c| *c != into).collect();
                if group == GroupId::METADATA {
                    // Z5: the replaced voter stays a node of the cluster, so
                    // it learns the metadata log if it ever comes back.
                    let at = learners.partition_point(|learner| *learner < out);
                    learners.insert(at, out);
                }
                record.pending = Some(PendingSwitch::new(
                    record.incarnation,
                    &record.replication,
                    record.members.len(),
                    members,
                    learners,
                ));
            }
            Step::RemoveMember { node, .. } => {
                if !record.members.contains(&node) {
                    return Err(format!("{node} is not a member of {group}"));
                }
                if record.members.len() - 1 < voters_before {
                    return Err(format!(
                        "removing {node} would leave {group} with {} voters, fewer than its {voters_before}",
                        record.members.len() - 1
                    ));
                }
                let members = record.members.iter().copied().filter(|m| *m != node).collect();
                let mut learners = record.learners.clone();
                if group == GroupId::METADATA {
                    // Z5: every node follows the metadata log; a voter
                    // leaving goes on as a learner, in node order like all.
                    let at = learners.partition_point(|learner| *learner < node);
                    learners.insert(at, node);
                }
                record.pending = Some(PendingSwitch::new(
                    record.incarnation,
                    &record.replication,
                    record.members.len(),
                    members,
                    learners,
                ));
            }
        }
        Ok(())
    }

    /// `ReportSealed`: `node` holds the seal of the pending switch durably;
    /// when every next member did, the group switches in the metadata and
    /// the step that decided it is complete (its epoch is what the next step
    /// waits for).
    pub(super) fn report_sealed(
        &mut self,
        epoch: Epoch,
        group: GroupId,
        incarnation: cohort_messages::Incarnation,
        node: NodeId,
    ) -> MetadataResult {
        let record = match self.live_group_mut(group) {
            Ok(record) => record,
            Err(refused) => return refused,
        };
        let current = record.incarnation == incarnation;
        let Some(pending) = record.pending.as_mut().filter(|_| current) else {
            return MetadataResult::Refused {
                reason: format!("{group} has no member change pending at incarnation {}", incarnation.0),
            };
        };
        if !pending.seal.members.contains(&node) {
            return MetadataResult::Refused { reason: format!("{node} is not a next member of {group}") };
        }
        pending.sealed_by.insert(node);
        if pending.sealed_by.len() < pending.seal.members.len() {
            return MetadataResult::Done { epoch };
        }
        let Some(pending) = record.pending.take() else { return MetadataResult::Done { epoch } };
        for promoted in pending.seal.members.iter().filter(|m| !record.members.contains(m)) {
            record.caught_up.remove(promoted);
        }
        record.incarnation = pending.seal.incarnation;
        // The quorum is recorded for the new members (a majority stays unset).
        if record.replication.quorum.is_some() {
            record.replication.quorum = Some(pending.seal.replication_quorum);
        }
        record.members = pending.seal.members;
        record.learners = pending.learners;
        // Views start again at 0 in the new incarnation.
        record.owner = None;
        record.owner_view_max = cohort_messages::View(0);
        if let Some(id) = self.operation_of(group)
            && let Some(operation) = self.operations.get_mut(&id)
        {
            operation.last_step_epoch = epoch;
            self.finish_if_done(id);
        }
        self.config_epoch = epoch;
        MetadataResult::Done { epoch }
    }

    /// `ReportCaughtUp`: a learner holds the log; it may be promoted (P4).
    pub(super) fn report_caught_up(
        &mut self,
        epoch: Epoch,
        group: GroupId,
        incarnation: cohort_messages::Incarnation,
        node: NodeId,
    ) -> MetadataResult {
        let record = match self.live_group_mut(group) {
            Ok(record) => record,
            Err(refused) => return refused,
        };
        if record.incarnation != incarnation || !record.learners.contains(&node) {
            return MetadataResult::Refused {
                reason: format!("{node} is not a learner of {group} at incarnation {}", incarnation.0),
            };
        }
        record.caught_up.insert(node);
        MetadataResult::Done { epoch }
    }
}
