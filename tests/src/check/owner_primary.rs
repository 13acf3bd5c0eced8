//! P1 as the metadata states it: the metadata agrees with the primaries.
//! Whenever a node's applied metadata records (node, view) as the owner of a
//! group, that node must really have become primary of the group in that
//! view (as [`super::single_primary`] saw it happen). And on each node, the
//! recorded owner view of a group never goes back while the incarnation
//! stays the same: ownership records are fenced by the view (S4), so a stale
//! primary's report must never replace a newer one, not even after an expiry
//! emptied the record (S2).

use std::collections::HashMap;

use cohort_actors::core::metadata::Metadata;
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
            let primary = primaries.primary_of(*group, owner.view);
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
