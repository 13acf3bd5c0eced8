//! The member-change operator of the `reconfigure` scenario.
//!
//! It plays the part the metadata group will play for a member change: it
//! picks a group and its next members (the same nodes in another order, or
//! one node fewer), asks the group's primary to seal the current incarnation
//! until the seal is in, waits until every next member holds the seal
//! durably, then switches each next member to the new incarnation as it
//! comes up, and finally drops the group from the nodes left out. A next
//! member that restarts in the sealed incarnation after the change is done
//! (its switch was not yet durable when it crashed) is switched again. Crashes,
//! pauses and partitions go on all the while; the usual checkers (P1 per
//! incarnation and view, agreement, acknowledged writes, linearizability,
//! liveness after healing) judge the result.

use std::collections::BTreeMap;

use cohort_messages::seal::Seal;
use cohort_messages::{GroupId, Incarnation, NodeId};

use super::Sim;
use crate::node::{node_id, node_index};

/// One member change in progress.
#[derive(Clone, Debug)]
pub(crate) struct Change {
    /// The incarnation being sealed.
    pub from: Incarnation,
    /// What the seal says.
    pub seal: Seal,
    /// True once every next member held the seal durably: switching may start.
    pub all_sealed: bool,
}

/// The operator's state.
#[derive(Clone, Debug, Default)]
pub(crate) struct Reconfigurations {
    /// Changes in progress, by group.
    pub active: BTreeMap<GroupId, Change>,
    /// Changes started.
    pub started: u64,
    /// Changes whose every next member switched.
    pub completed: u64,
    /// The incarnation each group's last completed change switched to, as
    /// the metadata would record it: what a member restarting in an older,
    /// sealed incarnation is switched to, even if no running node hosts it
    /// (every switch may have been lost, with the power, before it was durable).
    pub switched: BTreeMap<GroupId, Incarnation>,
}

/// Chance per tick (per mille) that a change starts during the fault phase.
const START_PER_MILLE: u64 = 8;

impl Sim {
    /// For hand-written scenarios: ask the running primary of `group`'s
    /// incarnation `from` to seal it. False if no such primary runs now.
    pub fn propose_seal(&mut self, group: GroupId, from: Incarnation, seal: &Seal) -> bool {
        let now = self.now;
        for index in 0..self.nodes.len() {
            if !self.nodes[index].is_running(now) {
                continue;
            }
            let Some(shard) = self.nodes[index].shard_for_mut(group) else { continue };
            if shard.replica(group).is_some_and(|r| r.incarnation() == from && r.is_primary()) {
                let proposed = shard.propose_seal(group, seal.clone()).is_ok();
                self.drain(index);
                return proposed;
            }
        }
        false
    }

    /// For hand-written scenarios: switch node `index`'s sealed replica of
    /// `group` to the next incarnation.
    pub fn switch_incarnation(&mut self, index: usize, group: GroupId) -> Result<(), String> {
        let shard = self.nodes[index].shard_for_mut(group).ok_or("the node is down")?;
        shard.switch_incarnation(group).map_err(|error| error.to_string())?;
        self.drain(index);
        Ok(())
    }

    /// For hand-written scenarios: switch node `index`'s replica of `group`
    /// to the incarnation `seal` opens as one of its `learners` (Z6: the
    /// nodes past the next voters, as the metadata group's agents do; see
    /// `Shard::switch_incarnation_as_learner`).
    pub fn switch_incarnation_as_learner(
        &mut self,
        index: usize,
        group: GroupId,
        seal: &Seal,
        learners: &[usize],
    ) -> Result<(), String> {
        let learners = learners.iter().map(|learner| node_id(*learner)).collect();
        let shard = self.nodes[index].shard_for_mut(group).ok_or("the node is down")?;
        shard.switch_incarnation_as_learner(group, seal, learners).map_err(|error| error.to_string())?;
        self.drain(index);
        Ok(())
    }

    /// One tick of the operator.
    pub(super) fn drive_reconfigurations(&mut self, faults: bool) {
        if faults && self.rng.chance(START_PER_MILLE) {
            self.start_reconfiguration();
        }
        let groups: Vec<GroupId> = self.reconfigurations.active.keys().copied().collect();
        for group in groups {
            self.drive_change(group);
        }
        self.switch_stragglers();
    }

    /// A next member whose switch was not durable when it crashed restarts
    /// in the sealed incarnation, after the change completed. The host
    /// follows the group's newest incarnation (the metadata names it), so it
    /// switches the member again.
    fn switch_stragglers(&mut self) {
        let now = self.now;
        for spec in self.specs.clone() {
            let group = spec.group;
            let hosted = self.current_members(group).map(|(incarnation, _)| incarnation);
            let recorded = self.reconfigurations.switched.get(&group).copied();
            let Some(newest) = hosted.max(recorded) else { continue };
            for index in 0..self.nodes.len() {
                if !self.nodes[index].is_running(now) {
                    continue;
                }
                let Some(shard) = self.nodes[index].shard_for_mut(group) else { continue };
                let behind = shard.replica(group).is_some_and(|replica| {
                    replica.incarnation() < newest
                        && replica.sealed().is_some_and(|sealed| sealed.seal.incarnation <= newest)
                });
                if behind && shard.switch_incarnation(group).is_ok() {
                    self.drain(index);
                }
            }
        }
    }

    /// The newest incarnation any running node hosts, and its members.
    fn current_members(&self, group: GroupId) -> Option<(Incarnation, Vec<NodeId>)> {
        self.nodes
            .iter()
            .filter_map(|node| node.replica(group))
            .map(|replica| (replica.incarnation(), replica.members().to_vec()))
            .max_by_key(|(incarnation, _)| *incarnation)
    }

    fn start_reconfiguration(&mut self) {
        let group = GroupId(self.rng.below(self.specs.len() as u64));
        if self.reconfigurations.active.contains_key(&group) {
            return;
        }
        let Some((from, mut members)) = self.current_members(group) else { return };
        // Another order (a new primary for view 0), and sometimes one member
        // fewer while the group keeps at least three.
        for i in (1..members.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            members.swap(i, j);
        }
        if members.len() > 3 && self.rng.chance(400) {
            members.pop();
        }
        let replication = self.config.replication_quorum.unwrap_or(members.len() / 2 + 1).min(members.len());
        let seal = Seal { incarnation: Incarnation(from.0 + 1), members, replication_quorum: replication as u8 };
        self.reconfigurations.started += 1;
        self.reconfigurations.active.insert(group, Change { from, seal, all_sealed: false });
    }

    fn drive_change(&mut self, group: GroupId) {
        let Some(change) = self.reconfigurations.active.get(&group).cloned() else { return };
        let now = self.now;
        let next: Vec<usize> = change.seal.members.iter().map(|node| node_index(*node)).collect();
        if !change.all_sealed {
            // Ask whoever leads the sealed incarnation now; a lost or dropped
            // seal is simply proposed again.
            for index in 0..self.nodes.len() {
                if !self.nodes[index].is_running(now) {
                    continue;
                }
                let Some(shard) = self.nodes[index].shard_for_mut(group) else { continue };
                let leads = shard.replica(group).is_some_and(|r| r.incarnation() == change.from && r.is_primary());
                if leads {
                    let _ = shard.propose_seal(group, change.seal.clone());
                    self.drain(index);
                }
            }
            let all_sealed = next.iter().all(|&index| {
                self.replica(index, group).is_some_and(|replica| {
                    replica.incarnation() == change.from
                        && replica.seal_durable().is_some_and(|sealed| sealed.seal == change.seal)
                })
            });
            if !all_sealed {
                return;
            }
            if let Some(change) = self.reconfigurations.active.get_mut(&group) {
                change.all_sealed = true;
            }
        }
        for &index in &next {
            if !self.nodes[index].is_running(now) {
                continue;
            }
            let Some(shard) = self.nodes[index].shard_for_mut(group) else { continue };
            if shard.replica(group).is_some_and(|r| r.incarnation() == change.from && r.sealed().is_some()) {
                shard.switch_incarnation(group).expect("a sealed next member switches");
                self.drain(index);
            }
        }
        let switched = next.iter().all(|&index| {
            self.replica(index, group).is_some_and(|replica| replica.incarnation() == change.seal.incarnation)
        });
        if !switched {
            return;
        }
        // Every next member is in; the nodes left out drop the group.
        for index in 0..self.nodes.len() {
            if change.seal.members.contains(&node_id(index)) {
                continue;
            }
            self.nodes[index].unloaded.insert(group);
            self.drop_replica(index, group);
        }
        self.reconfigurations.active.remove(&group);
        self.reconfigurations.switched.insert(group, change.seal.incarnation);
        self.reconfigurations.completed += 1;
    }
}
