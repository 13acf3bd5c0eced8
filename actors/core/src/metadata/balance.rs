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

use std::collections::{BTreeMap, BTreeSet};

use cohort_messages::metadata::{GroupTransfer, MetadataCommand, MetadataResult};
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
    let transfer = next_transfers(metadata, 1).pop()?;
    Some(MetadataCommand::TransferPrimary { group: transfer.group, to: transfer.to })
}

/// Groups alike to the balancer: their primary and their members.
type Class<'a> = (NodeId, &'a [NodeId]);

/// C5: up to `max` transfers, each the one [`next_transfer`] would choose
/// once the ones before it were asked for (counted at their targets): what
/// the balancer asks for in one [`MetadataCommand::TransferPrimaries`].
/// Groups that share their primary and members are alike to the balancer,
/// so it sorts them into such classes once and then picks per transfer
/// among the classes, not the groups: a command of many transfers costs
/// one pass over the groups, even at 100,000 of them.
pub fn next_transfers(metadata: &Metadata, max: usize) -> Vec<GroupTransfer> {
    if metadata.frozen.is_some() || max == 0 {
        return Vec::new();
    }
    let unowned = |(group, record): (&GroupId, &super::GroupRecord)| {
        *group != GroupId::METADATA && record.live && record.owner.is_none()
    };
    if metadata.groups.iter().any(unowned) {
        return Vec::new();
    }
    let mut counts = primaries_per_node(metadata);
    // The movable groups of each class, lowest id last.
    let mut classes: BTreeMap<Class<'_>, Vec<GroupId>> = BTreeMap::new();
    let in_operation: BTreeSet<GroupId> = metadata.operations.values().flat_map(|record| record.groups()).collect();
    for (group, record) in metadata.groups.iter().rev() {
        if *group == GroupId::METADATA
            || !record.live
            || record.transfer.is_some()
            || record.pending.is_some()
            || in_operation.contains(group)
        {
            continue;
        }
        let Some(owner) = record.owner else { continue };
        if counts.contains_key(&owner.node) {
            classes.entry((owner.node, record.members.as_slice())).or_default().push(*group);
        }
    }
    let mut transfers = Vec::new();
    while transfers.len() < max {
        let Some(busiest) = counts.values().copied().max() else { break };
        // The class whose next group gains most; on a tie, the lowest group.
        let mut best: Option<(usize, GroupId, Class<'_>, NodeId)> = None;
        for (class, groups) in &classes {
            let (owner, members) = *class;
            let (Some(&group), Some(&from)) = (groups.last(), counts.get(&owner)) else { continue };
            if from < 2 || from + 1 < busiest {
                continue; // Only the busiest nodes (within one) give a primary away.
            }
            let target = members
                .iter()
                .filter(|member| **member != owner)
                .filter_map(|member| counts.get(member).map(|count| (*count, *member)))
                .filter(|(count, _)| count + 2 <= from)
                .min();
            if let Some((count, to)) = target {
                let gain = from - count;
                let better = best.is_none_or(|(best_gain, best_group, _, _)| {
                    gain > best_gain || (gain == best_gain && group < best_group)
                });
                if better {
                    best = Some((gain, group, *class, to));
                }
            }
        }
        let Some((_, group, class, to)) = best else { break };
        classes.get_mut(&class).map(Vec::pop);
        *counts.entry(class.0).or_default() -= 1;
        *counts.entry(to).or_default() += 1;
        transfers.push(GroupTransfer { group, to });
    }
    debug_assert!(transfers.len() <= max);
    transfers
}
