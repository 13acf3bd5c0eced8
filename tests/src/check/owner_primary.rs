//! P1 as the metadata states it: the metadata agrees with the primaries.
//! Whenever a node's applied metadata records (node, view) as the owner of a
//! group, that node must really have become primary of the group in that
//! view (as [`super::single_primary`] saw it happen). And on each node, the
//! recorded owner view of a group never goes back while the incarnation
//! stays the same: ownership records are fenced by the view (S4), so a stale
//! primary's report must never replace a newer one, not even after an expiry
//! emptied the record (S2).

use std::collections::HashMap;

use cohort_core::metadata::Metadata;
use cohort_messages::{GroupId, Incarnation, View};

use super::single_primary::SinglePrimary;
use crate::node::node_index;

/// The highest owner view each node has applied, per group.
#[derive(Debug, Default)]
pub struct OwnerPrimary {
    highest: HashMap<(usize, GroupId), (Incarnation, View)>,
}

impl OwnerPrimary {
    /// Check `node`'s applied `metadata` against the primaries seen so far.
    pub fn check(&mut self, node: usize, metadata: &Metadata, primaries: &SinglePrimary) -> Vec<String> {
        let mut violations = Vec::new();
        for (group, record) in &metadata.groups {
            let Some(owner) = record.owner else { continue };
            let owner_index = owner.node.0.checked_sub(1).map(|_| node_index(owner.node));
            let primary = primaries.primary_of(*group, record.incarnation, owner.view);
            if owner_index.is_none() || primary != owner_index {
                violations.push(format!(
                    "P1 broken: node {node}'s metadata ({}) records {} as owner of {group} in {}, but the primary \
                     of that view was {primary:?}",
                    metadata.epoch, owner.node, owner.view
                ));
            }
            let seen = self.highest.entry((node, *group)).or_insert((record.incarnation, owner.view));
            if seen.0 == record.incarnation && owner.view < seen.1 {
                violations.push(format!(
                    "P1 broken: node {node}'s metadata ({}) records owner view {} of {group} after {}",
                    metadata.epoch, owner.view, seen.1
                ));
            }
            if seen.0 != record.incarnation || owner.view > seen.1 {
                *seen = (record.incarnation, owner.view);
            }
        }
        violations
    }

    /// `node` crashed: its next process replays the metadata from the start.
    pub fn crashed(&mut self, node: usize) {
        self.highest.retain(|(owner, _), _| *owner != node);
    }
}

#[cfg(test)]
mod tests {
    use cohort_core::metadata::{GroupRecord, Ownership};
    use cohort_messages::{NodeId, SessionId};

    use super::*;

    fn owned_by(node: u64, view: u32) -> Metadata {
        let mut metadata = Metadata::default();
        let owner = Ownership { node: NodeId(node), view: View(view), session: SessionId(1) };
        let record = GroupRecord {
            kind: "kv".into(),
            incarnation: Incarnation(1),
            members: vec![NodeId(1), NodeId(2)],
            learners: Vec::new(),
            replication: Default::default(),
            caught_up: Default::default(),
            pending: None,
            live: true,
            owner: Some(owner),
            owner_view_max: View(view),
            created: Incarnation(1),
            transfer: None,
        };
        metadata.groups.insert(GroupId(0), record);
        metadata
    }

    #[test]
    fn an_owner_that_was_not_primary_of_its_view_is_caught() {
        let mut primaries = SinglePrimary::default();
        primaries.record(GroupId(0), Incarnation(1), View(3), 0).expect("first");
        let mut owners = OwnerPrimary::default();
        assert!(owners.check(0, &owned_by(1, 3), &primaries).is_empty(), "node 0 (NodeId 1) led view 3");
        assert_eq!(owners.check(0, &owned_by(2, 3), &primaries).len(), 1, "node 1 did not");
        assert_eq!(owners.check(0, &owned_by(1, 4), &primaries).len(), 1, "nobody led view 4");
    }

    #[test]
    fn an_owner_view_going_back_is_caught_until_a_crash() {
        let mut primaries = SinglePrimary::default();
        primaries.record(GroupId(0), Incarnation(1), View(2), 0).expect("first");
        primaries.record(GroupId(0), Incarnation(1), View(5), 0).expect("first");
        let mut owners = OwnerPrimary::default();
        assert!(owners.check(1, &owned_by(1, 5), &primaries).is_empty());
        assert_eq!(owners.check(1, &owned_by(1, 2), &primaries).len(), 1, "view 5 then view 2");
        owners.crashed(1);
        assert!(owners.check(1, &owned_by(1, 2), &primaries).is_empty(), "a restarted node replays from the start");
    }
}
