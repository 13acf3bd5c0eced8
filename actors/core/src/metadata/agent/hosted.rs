//! What the agent knows of this node's replicas: one [`HostedReplica`]
//! record per hosted group, taken by a scan, and the hash that lets a shell
//! tell without a scan that none changed (Z3). The record is the agent's
//! only view of the shards, so every rule of the agent about a group reads
//! it from here, and the hash must cover every field a rule reads.

use std::collections::HashMap;

use cohort_messages::pair_heartbeat::mix64;
use cohort_messages::seal::Seal;
use cohort_messages::{GroupId, Incarnation, NodeId, Op, View};

/// A group this node hosts, as its replica sees itself now
/// ([`crate::Shard::hosted_replica`] fills it from the replica).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostedReplica {
    /// The group.
    pub group: GroupId,
    /// Its incarnation.
    pub incarnation: Incarnation,
    /// True if this node's replica is its primary in normal status and a
    /// quorum confirmed it within its window
    /// ([`crate::Shard::is_confirmed_primary`]): a primary that was
    /// paused neither reports ownership nor judges keepalives.
    pub primary: bool,
    /// The replica's view.
    pub view: View,
    /// The seal the replica applied, if any (its state is final).
    pub sealed: Option<Seal>,
    /// True once that seal is durable on this node.
    pub seal_durable: bool,
    /// The replica's learners (P4).
    pub learners: Vec<NodeId>,
    /// On the primary: learners that hold the log through its commit point.
    pub caught_up: Vec<NodeId>,
    /// The voters, for the metadata group only (Z6: its primary records
    /// them); empty for every other group, which the metadata places.
    pub members: Vec<NodeId>,
    /// Z6: the next incarnation ran without this replica
    /// ([`crate::Replica::outpaced`]).
    pub outpaced: bool,
    /// For the metadata group only: the commit point its durable
    /// superblock holds, the metadata a restart of this node replays at
    /// least (H3: the agent removes a replica only on metadata a restart
    /// keeps). `Op(0)` for every other group.
    pub durable_commit: Op,
}

impl HostedReplica {
    /// Z3: a hash of what [`HostedReplica::of`] would say of `replica` at
    /// `now`, without building it; equal to [`HostedReplica::digest`] of
    /// that record. A shell sums it over its groups to learn, for O(groups)
    /// hashing and no allocation, whether any changed since a scan.
    pub(crate) fn fingerprint(replica: &crate::Replica, pairs: &crate::quiesce::Pairs, now: u64) -> u64 {
        let flags = digest_flags(
            replica.is_confirmed_primary(pairs, now),
            replica.sealed().is_some(),
            replica.seal_durable().is_some(),
        ) | u64::from(replica.outpaced()) << 3;
        let durable_commit = metadata_durable_commit(replica);
        let mut hash = digest_start(replica.group(), replica.incarnation(), replica.view(), flags, durable_commit);
        for node in replica.learner_nodes() {
            hash = digest_learner(hash, *node, replica.learner_caught_up(*node));
        }
        hash
    }

    /// Z3: the hash `HostedReplica::fingerprint` gives of the replica this
    /// record was made from, at the tick it was made.
    pub fn digest(&self) -> u64 {
        let flags =
            digest_flags(self.primary, self.sealed.is_some(), self.seal_durable) | u64::from(self.outpaced) << 3;
        let mut hash = digest_start(self.group, self.incarnation, self.view, flags, self.durable_commit);
        for node in &self.learners {
            hash = digest_learner(hash, *node, self.caught_up.contains(node));
        }
        hash
    }

    /// What `replica` says of itself at tick `now`.
    pub(crate) fn of(replica: &crate::Replica, pairs: &crate::quiesce::Pairs, now: u64) -> HostedReplica {
        let hosted = HostedReplica {
            group: replica.group(),
            incarnation: replica.incarnation(),
            primary: replica.is_confirmed_primary(pairs, now),
            view: replica.view(),
            sealed: replica.sealed().map(|sealed| sealed.seal.clone()),
            seal_durable: replica.seal_durable().is_some(),
            learners: replica.learner_nodes().to_vec(),
            caught_up: replica
                .learner_nodes()
                .iter()
                .copied()
                .filter(|node| replica.learner_caught_up(*node))
                .collect(),
            members: if replica.group() == GroupId::METADATA { replica.spec.members.clone() } else { Vec::new() },
            outpaced: replica.outpaced(),
            durable_commit: metadata_durable_commit(replica),
        };
        debug_assert!(hosted.caught_up.iter().all(|node| hosted.learners.contains(node)), "caught up: a learner");
        debug_assert!(!hosted.seal_durable || hosted.sealed.is_some(), "a durable seal is an applied one");
        hosted
    }
}

fn digest_flags(primary: bool, sealed: bool, seal_durable: bool) -> u64 {
    u64::from(primary) | u64::from(sealed) << 1 | u64::from(seal_durable) << 2
}

/// The metadata group's durable commit point; `Op(0)` for any other group,
/// whose commit points move too often to hash for the agent's sake (Z3).
fn metadata_durable_commit(replica: &crate::Replica) -> Op {
    if replica.group() == GroupId::METADATA { replica.superblock_durable_commit } else { Op(0) }
}

fn digest_start(group: GroupId, incarnation: Incarnation, view: View, flags: u64, durable_commit: Op) -> u64 {
    let mut hash = mix64(group.0 ^ 0x9e37_79b9_7f4a_7c15);
    for field in [incarnation.0, u64::from(view.0), flags, durable_commit.0] {
        hash = mix64(hash ^ field);
    }
    hash
}

fn digest_learner(hash: u64, node: NodeId, caught_up: bool) -> u64 {
    mix64(hash ^ node.0 ^ u64::from(caught_up) << 63)
}

/// The hosted groups by id (a node hosts at most one replica of a group), so
/// per-tick work over every group in the metadata stays linear.
pub(super) fn by_group(hosted: &[HostedReplica]) -> HashMap<GroupId, &HostedReplica> {
    let map: HashMap<GroupId, &HostedReplica> = hosted.iter().map(|hosted| (hosted.group, hosted)).collect();
    debug_assert_eq!(map.len(), hosted.len(), "a node hosts at most one replica of a group");
    map
}

#[cfg(test)]
mod tests {
    use super::super::fixture;
    use super::*;

    #[test]
    fn z3_the_digest_covers_every_field_a_rule_reads_but_the_metadata_voters() {
        let base = fixture::hosted(4, true, 2);
        let mut seen = vec![base.digest()];
        let mut changed = |edit: &dyn Fn(&mut HostedReplica)| {
            let mut record = base.clone();
            edit(&mut record);
            seen.push(record.digest());
        };
        changed(&|r| r.incarnation = Incarnation(2));
        changed(&|r| r.primary = false);
        changed(&|r| r.view = View(3));
        changed(&|r| r.sealed = Some(fixture::seal(2, &[1, 2])));
        changed(&|r| r.seal_durable = true);
        changed(&|r| r.learners = vec![NodeId(3)]);
        changed(&|r| {
            r.learners = vec![NodeId(3)];
            r.caught_up = vec![NodeId(3)];
        });
        changed(&|r| r.outpaced = true);
        changed(&|r| r.durable_commit = Op(9));
        let mut distinct = seen.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), seen.len(), "every edit moves the digest: {seen:?}");
    }
}
