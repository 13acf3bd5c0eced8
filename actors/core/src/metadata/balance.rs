//! Primary transfers (C4) and the balancer that spreads primaries over the
//! live nodes (C5).
//!
//! A transfer is a metadata record, not a message to the primary: the node
//! that leads the group reads it from its copy of the metadata and starts a
//! directed view change once the chosen member is caught up
//! ([`crate::Shard::transfer_primary`]). So a transfer survives a lost
//! message or a restart of the primary's node, a freeze refuses it like any
//! operator change, and the balancer needs no channel of its own: it is the
//! metadata primary's agent asking for one transfer at a time.
//!
//! The balancer waits until every live group has an owner record (start-up
//! and failover are over), then moves a primary only when that strictly
//! narrows the spread:
//! from a node leading `c` groups to a live member leading at most `c - 2`,
//! counting unfinished transfers at their target. It never picks a group in
//! a member change or an operation, nor a node without a live session.
//! Repeated, this ends with every two live nodes' counts at most one apart
//! wherever the placement allows it.

use std::collections::BTreeMap;

use cohort_messages::metadata::{MetadataCommand, MetadataResult};
use cohort_messages::{Epoch, GroupId, NodeId};

use super::{Metadata, Transfer};

impl Metadata {
    pub(super) fn transfer_primary(&mut self, epoch: Epoch, group: GroupId, to: NodeId) -> MetadataResult {
        let refused = |reason: String| MetadataResult::Refused { reason };
        if let Some(id) = self.operation_of(group) {
            return refused(format!("{group} is in {id}; its primary moves once the operation is over"));
        }
        let live = self.nodes.get(&to).is_some_and(|record| record.session.is_some());
        let Some(record) = self.groups.get_mut(&group).filter(|record| record.live) else {
            return refused(format!("{group} does not exist"));
        };
        if !record.members.contains(&to) {
            let members: Vec<String> = record.members.iter().map(ToString::to_string).collect();
            return refused(format!("{to} is not a voting member of {group} (members: {})", members.join(", ")));
        }
        if record.pending.is_some() {
            return refused(format!("{group} is switching to a new incarnation; try again once it switched"));
        }
        if !live {
            return refused(format!("{to} has no live session; it cannot lead {group}"));
        }
        if record.owner.is_some_and(|owner| owner.node == to) {
            return refused(format!("{to} already leads {group}"));
        }
        record.transfer = Some(Transfer { to, view: record.owner_view_max, epoch });
        MetadataResult::Done { epoch }
    }
}

/// Who leads how many groups, as the ownership records say, counting an
/// unfinished transfer at its target. Every node with a live session is
/// listed, with 0 if it leads nothing.
pub fn primaries_per_node(metadata: &Metadata) -> BTreeMap<NodeId, usize> {
    let mut counts: BTreeMap<NodeId, usize> =
        metadata.nodes.iter().filter(|(_, record)| record.session.is_some()).map(|(node, _)| (*node, 0)).collect();
    for (group, record) in &metadata.groups {
        if *group == GroupId::METADATA || !record.live {
            continue;
        }
        let leader = record.transfer.map(|transfer| transfer.to).or(record.owner.map(|owner| owner.node));
        if let Some(count) = leader.and_then(|leader| counts.get_mut(&leader)) {
            *count += 1;
        }
    }
    counts
}

/// The transfer that narrows the spread of primaries the most, if any (see
/// the module docs). Nothing while the metadata is frozen, and nothing while
/// some live group has no owner record: its primary is not known yet (the
/// cluster is starting, or a failover's reports are still coming in), and a
/// spread counted without it would move primaries for nothing.
pub fn next_transfer(metadata: &Metadata) -> Option<MetadataCommand> {
    if metadata.frozen.is_some() {
        return None;
    }
    let unowned = |(group, record): (&GroupId, &super::GroupRecord)| {
        *group != GroupId::METADATA && record.live && record.owner.is_none()
    };
    if metadata.groups.iter().any(unowned) {
        return None;
    }
    let counts = primaries_per_node(metadata);
    let busiest = counts.values().copied().max()?;
    let mut best: Option<(usize, GroupId, NodeId)> = None;
    for (group, record) in &metadata.groups {
        if *group == GroupId::METADATA || !record.live || record.transfer.is_some() || record.pending.is_some() {
            continue;
        }
        let Some(owner) = record.owner else { continue };
        let Some(&from) = counts.get(&owner.node) else { continue };
        if from < 2 || from + 1 < busiest {
            continue; // Only the busiest nodes (within one) give a primary away.
        }
        let target = record
            .members
            .iter()
            .filter(|member| **member != owner.node)
            .filter_map(|member| counts.get(member).map(|count| (*count, *member)))
            .filter(|(count, _)| count + 2 <= from)
            .min();
        if let Some((count, to)) = target {
            let gain = from - count;
            if best.is_none_or(|(best_gain, _, _)| gain > best_gain) && metadata.operation_of(*group).is_none() {
                best = Some((gain, *group, to));
            }
        }
    }
    best.map(|(_, group, to)| MetadataCommand::TransferPrimary { group, to })
}
