//! Multi-step operations as each node's metadata records them (M2–M5, P4):
//! - no step leaves a group with fewer voters than before its operation,
//!   nor decides a member change that would;
//! - a node is never both member and learner of a group;
//! - an operation that is cancelled and then gone (reverted) left every
//!   group it touched with the members and learners it had before;
//! - the replicas of a group's current incarnation have the members the
//!   metadata names (checked by the simulator against the shards).

use std::collections::HashMap;

use cohort_core::metadata::{Metadata, OperationRecord};
use cohort_messages::{GroupId, Incarnation, OperationId};

/// What one node's metadata last showed of each operation.
#[derive(Debug, Default)]
pub struct Placement {
    /// Each operation as the node's metadata last showed it, with the life
    /// (incarnation created at, H3) of each group it had touched then.
    seen: HashMap<(usize, OperationId), (OperationRecord, HashMap<GroupId, Incarnation>)>,
    /// Per node, at its last look: operations reverted, operations
    /// completed, and the last operation started.
    totals_seen: HashMap<usize, (u64, u64, OperationId)>,
}

impl Placement {
    /// Check `node`'s applied `metadata`.
    pub fn check(&mut self, node: usize, metadata: &Metadata) -> Vec<String> {
        let mut violations = Vec::new();
        for (id, record) in &metadata.operations {
            for (group, voters) in &record.voters_before {
                let Some(live) = metadata.groups.get(group) else { continue };
                if live.members.len() < *voters {
                    violations.push(format!(
                        "node {node}'s metadata ({}): {group} has {} voters during {id}, fewer than its {voters}",
                        metadata.epoch,
                        live.members.len()
                    ));
                }
                if let Some(pending) = live.pending.as_ref().filter(|p| p.seal.members.len() < *voters) {
                    violations.push(format!(
                        "node {node}'s metadata ({}): {group} would switch to {} voters during {id}",
                        metadata.epoch,
                        pending.seal.members.len()
                    ));
                }
            }
        }
        for (group, record) in &metadata.groups {
            if let Some(both) = record.learners.iter().find(|c| record.members.contains(c)) {
                violations.push(format!("node {node}'s metadata: {both} is member and learner of {group}"));
            }
        }
        let totals = (metadata.operation_totals.reverted, metadata.operation_totals.completed, metadata.last_operation);
        let (reverted, completed, last_started) = totals;
        let (before, completed_before, last_started_before) =
            self.totals_seen.insert(node, totals).unwrap_or((0, 0, OperationId(0)));
        // A node's metadata can jump many epochs between two looks (it was
        // down, or catches up from a snapshot): an operation started and
        // completed in the jump may have changed the group again, which
        // the look cannot tell from a bad revert.
        let jumped_over_others = completed != completed_before || last_started != last_started_before;
        let gone: Vec<OperationId> = self
            .seen
            .keys()
            .filter(|(owner, id)| *owner == node && !metadata.operations.contains_key(id))
            .map(|(_, id)| *id)
            .collect();
        for id in gone {
            let Some((last, lives)) = self.seen.remove(&(node, id)) else { continue };
            // Only a revert that finished just now can be judged exactly.
            if !last.cancelled || reverted <= before || jumped_over_others {
                continue;
            }
            for (group, (members, learners)) in &last.placement_before {
                // A later operation may already have touched the group again
                // before this node's metadata was looked at.
                if metadata.operation_of(*group).is_some() {
                    continue;
                }
                let Some(now) = metadata.groups.get(group) else { continue };
                // A delete is refused while an operation touches the group,
                // so a group deleted in the jump was deleted after the
                // revert: the delete emptied it, not the revert (seed
                // 6002738).
                if !now.live {
                    continue;
                }
                // H3: the group id was deleted and created again since: the
                // revert owes the new life nothing.
                if lives.get(group).is_some_and(|created| *created != now.created) {
                    continue;
                }
                if &now.members != members || &now.learners != learners {
                    violations.push(format!(
                        "M5 broken: node {node}'s metadata ({}): reverting {id} left {group} with members {:?} \
                         learners {:?}, not {members:?} {learners:?}",
                        metadata.epoch, now.members, now.learners
                    ));
                }
            }
        }
        for (id, record) in &metadata.operations {
            let lives = record
                .placement_before
                .keys()
                .filter_map(|group| metadata.groups.get(group).map(|live| (*group, live.created)))
                .collect();
            self.seen.insert((node, *id), (record.clone(), lives));
        }
        violations
    }

    /// `node` restarted: it replays its metadata from the start.
    pub fn crashed(&mut self, node: usize) {
        self.seen.retain(|(owner, _), _| *owner != node);
        self.totals_seen.remove(&node);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use cohort_core::metadata::{GroupRecord, Metadata, OperationRecord};
    use cohort_messages::metadata::OperationSpec;
    use cohort_messages::replication::Replication;
    use cohort_messages::{Epoch, GroupId, Incarnation, NodeId, OperationId, View};

    use super::Placement;

    const G: GroupId = GroupId(4);

    fn nodes(ids: &[u64]) -> Vec<NodeId> {
        ids.iter().copied().map(NodeId).collect()
    }

    /// A node's metadata: group G on `members`, and operation 1 replacing
    /// node 1 by node 4 being reverted.
    fn with_revert_in_flight() -> Metadata {
        let mut metadata = Metadata::default();
        metadata.groups.insert(
            G,
            GroupRecord {
                kind: "kv".into(),
                incarnation: Incarnation(2),
                members: nodes(&[2, 3, 4]),
                learners: nodes(&[1]),
                replication: Replication::default(),
                caught_up: BTreeSet::new(),
                pending: None,
                live: true,
                owner: None,
                owner_view_max: View(0),
                created: Incarnation(1),
                transfer: None,
            },
        );
        let operation = OperationRecord {
            spec: OperationSpec::Replace { group: G, dead: NodeId(1), with: NodeId(4) },
            plan: Vec::new(),
            done: 0,
            last_step_epoch: Epoch(0),
            cancelled: true,
            voters_before: BTreeMap::from([(G, 3)]),
            dead: Some(NodeId(1)),
            placement_before: BTreeMap::from([(G, (nodes(&[1, 2, 3]), Vec::new()))]),
        };
        metadata.operations.insert(OperationId(1), operation);
        metadata.last_operation = OperationId(1);
        metadata
    }

    /// The revert of operation 1 finished: it is gone and counted.
    fn reverted(mut metadata: Metadata, members: &[u64], learners: &[u64]) -> Metadata {
        metadata.operations.clear();
        metadata.operation_totals.reverted += 1;
        if let Some(group) = metadata.groups.get_mut(&G) {
            group.members = nodes(members);
            group.learners = nodes(learners);
        }
        metadata
    }

    #[test]
    fn m5_a_revert_that_restored_the_placement_passes() {
        let mut placement = Placement::default();
        let metadata = with_revert_in_flight();
        assert!(placement.check(0, &metadata).is_empty());
        assert_eq!(placement.check(0, &reverted(metadata, &[1, 2, 3], &[])), Vec::<String>::new());
    }

    #[test]
    fn m5_a_revert_that_left_other_members_is_a_violation() {
        let mut placement = Placement::default();
        let metadata = with_revert_in_flight();
        assert!(placement.check(0, &metadata).is_empty());
        let violations = placement.check(0, &reverted(metadata, &[2, 3, 4], &[1]));
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(violations[0].starts_with("M5 broken"), "{violations:?}");
    }

    /// Seed 702168 of the Z6 shape: a node's metadata jumped from the
    /// revert in flight to after a later operation that completed and moved
    /// the group again; that look cannot judge the revert.
    #[test]
    fn m5_a_look_past_a_later_operation_does_not_judge_the_revert() {
        let mut placement = Placement::default();
        let metadata = with_revert_in_flight();
        assert!(placement.check(0, &metadata).is_empty());
        let mut later = reverted(metadata, &[2, 3, 4], &[1]);
        later.last_operation = OperationId(2);
        later.operation_totals.completed += 1;
        assert_eq!(placement.check(0, &later), Vec::<String>::new());
    }

    /// Seed 5004386 of the metadata shape: the group id was deleted and
    /// created again (on other members) between two looks, while a revert
    /// of an operation on its earlier life finished; the new life's members
    /// are not the revert's to restore.
    #[test]
    fn h3_a_revert_over_a_group_created_again_is_not_judged_by_the_new_life() {
        let mut placement = Placement::default();
        let metadata = with_revert_in_flight();
        assert!(placement.check(0, &metadata).is_empty());
        let mut later = reverted(metadata.clone(), &[2, 3, 4], &[]);
        if let Some(group) = later.groups.get_mut(&G) {
            group.created = Incarnation(group.created.0 + 3);
            group.incarnation = group.created;
        }
        assert_eq!(placement.check(0, &later), Vec::<String>::new());
        // The same placement in the same life is still a violation.
        let mut again = Placement::default();
        assert!(again.check(0, &metadata).is_empty());
        assert_eq!(again.check(0, &reverted(metadata, &[2, 3, 4], &[])).len(), 1);
    }

    /// Seed 6002738 of the metadata shape: between two looks the revert
    /// finished and the group was then deleted (a delete is refused while
    /// an operation touches the group); the delete emptied it, not the
    /// revert.
    #[test]
    fn m5_a_group_deleted_after_its_revert_is_not_judged_by_the_delete() {
        let mut placement = Placement::default();
        let metadata = with_revert_in_flight();
        assert!(placement.check(0, &metadata).is_empty());
        let mut later = reverted(metadata.clone(), &[], &[]);
        if let Some(group) = later.groups.get_mut(&G) {
            group.live = false;
        }
        assert_eq!(placement.check(0, &later), Vec::<String>::new());
        // The same emptied placement on a live group is still a violation.
        let mut again = Placement::default();
        assert!(again.check(0, &metadata).is_empty());
        assert_eq!(again.check(0, &reverted(metadata, &[], &[])).len(), 1);
    }
}
