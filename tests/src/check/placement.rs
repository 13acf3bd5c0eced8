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
use cohort_messages::OperationId;

/// What one node's metadata last showed of each operation.
#[derive(Debug, Default)]
pub struct Placement {
    seen: HashMap<(usize, OperationId), OperationRecord>,
    reverted_seen: HashMap<usize, u64>,
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
        let reverted = metadata.operation_totals.reverted;
        let before = self.reverted_seen.insert(node, reverted).unwrap_or(0);
        let gone: Vec<OperationId> = self
            .seen
            .keys()
            .filter(|(owner, id)| *owner == node && !metadata.operations.contains_key(id))
            .map(|(_, id)| *id)
            .collect();
        for id in gone {
            let Some(last) = self.seen.remove(&(node, id)) else { continue };
            // Only a revert that finished just now can be judged exactly.
            if !last.cancelled || reverted <= before {
                continue;
            }
            for (group, (members, learners)) in &last.placement_before {
                // A later operation may already have touched the group again
                // before this node's metadata was looked at.
                if metadata.operation_of(*group).is_some() {
                    continue;
                }
                let Some(now) = metadata.groups.get(group) else { continue };
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
            self.seen.insert((node, *id), record.clone());
        }
        violations
    }

    /// `node` restarted: it replays its metadata from the start.
    pub fn crashed(&mut self, node: usize) {
        self.seen.retain(|(owner, _), _| *owner != node);
        self.reverted_seen.remove(&node);
    }
}
