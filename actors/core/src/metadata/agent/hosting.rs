//! The agent's hosting job (P4, C3): make this node host what the metadata
//! places on it. A learner of a group it does not host (at that
//! incarnation) gets an empty learner replica that catches up from the
//! primary; a voting member of a group created at run time gets an empty
//! voting replica, also in place of a replica of an earlier life of the
//! group id (H3: deleted and created again; the ownership job unloads that
//! one in the same scan); and every hosted replica's learners follow the
//! metadata's list.
//!
//! One pass over the metadata's groups decides all three, at most one
//! output per group, in group order: the shell hosts them in that order.
//! A shard may refuse or defer a replica (a record not yet durable), so a
//! group is asked for again only after a retry period ([`Asked`]).

use cohort_messages::NodeId;

use super::super::Metadata;
use super::asked::Asked;
use super::hosted::by_group;
use super::{AgentConfig, AgentOutput, HostedReplica};

/// The replicas asked of the shards, by group, with when.
#[derive(Debug, Default)]
pub(super) struct Hosting {
    asked: Asked,
}

impl Hosting {
    /// True if a replica was asked for at `since` or later (maybe asked again).
    pub(super) fn asked_since(&self, since: u64) -> bool {
        self.asked.any_since(since)
    }

    /// Host the groups this node is a learner of, or a member of since
    /// their creation, and keep every hosted replica's learners as the
    /// metadata has them.
    pub(super) fn follow(
        &mut self,
        now: u64,
        config: &AgentConfig,
        metadata: &Metadata,
        hosted: &[HostedReplica],
        out: &mut Vec<AgentOutput>,
    ) {
        let node = config.node;
        let hosted = by_group(hosted);
        for (group, record) in metadata.groups.iter().filter(|(_, record)| record.live) {
            // The metadata group is never hosted empty: a node's copy of the
            // metadata is that replica's state (Z6).
            let placeable = *group != config.metadata_group;
            // H3: a replica from before the group's last creation is not
            // this group's any more: a member replaces it as if none were here.
            let here = hosted.get(group).filter(|here| here.incarnation >= record.created);
            match here {
                // Never replace a replica of this incarnation or a later one:
                // the applied metadata may be older than the replica after a
                // restart.
                Some(here) if here.incarnation > record.incarnation => {}
                Some(here) if here.incarnation == record.incarnation => {
                    let keeps_self = record.members.contains(&node) || record.learners.contains(&node);
                    if here.learners != record.learners && keeps_self {
                        out.push(AgentOutput::SetLearners { group: *group, learners: record.learners.clone() });
                    }
                }
                // (A guard that asks fails only when it was asked recently;
                // a member is never a learner, so nothing below matches it.)
                // A member of the group's first incarnation starts empty,
                // as at its creation; so does one while a switch is pending
                // if it is a member of the next incarnation too: the seal
                // commits only once every next member holds it (Z6), and a
                // node that came up too late to host the group at its
                // creation would otherwise hold the switch up for good.
                None if placeable
                    && record.members.contains(&node)
                    && record.incarnation == record.created
                    && record.pending.as_ref().is_none_or(|pending| pending.seal.members.contains(&node))
                    && self.asked.again(*group, now, config.request_retry_ticks) =>
                {
                    out.push(AgentOutput::HostMember {
                        group: *group,
                        kind: record.kind.clone(),
                        incarnation: record.incarnation,
                        members: record.members.clone(),
                        replication: record.replication,
                    });
                }
                _ if placeable
                    && record.learners.contains(&node)
                    && self.asked.again(*group, now, config.request_retry_ticks) =>
                {
                    out.push(AgentOutput::HostLearner {
                        group: *group,
                        kind: record.kind.clone(),
                        incarnation: record.incarnation,
                        members: record.members.clone(),
                        learners: record.learners.clone(),
                        replication: record.replication,
                    });
                }
                _ => {}
            }
        }
        debug_assert!(out.iter().all(|output| places_here(output, node)), "hosting places this node only");
    }
}

/// True unless `output` hosts a replica that does not name `node`.
fn places_here(output: &AgentOutput, node: NodeId) -> bool {
    match output {
        AgentOutput::HostMember { members, .. } => members.contains(&node),
        AgentOutput::HostLearner { learners, .. } => learners.contains(&node),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use cohort_messages::{GroupId, Incarnation};

    use super::super::fixture::{self, hosted};
    use super::*;

    fn nodes(ids: &[u64]) -> Vec<NodeId> {
        ids.iter().copied().map(NodeId).collect()
    }

    #[test]
    fn p4_a_learner_hosts_an_empty_replica_asked_again_after_a_retry_period() {
        let config = fixture::config();
        let mut metadata = fixture::metadata(&[1, 2, 3], &[(5, &[2, 3])]);
        metadata.groups.get_mut(&GroupId(5)).expect("group 5").learners = nodes(&[1]);
        let mut hosting = Hosting::default();
        let learner = AgentOutput::HostLearner {
            group: GroupId(5),
            kind: "kv".into(),
            incarnation: Incarnation(1),
            members: nodes(&[2, 3]),
            learners: nodes(&[1]),
            replication: Default::default(),
        };
        let mut asked = Vec::new();
        for now in 10..=14 {
            let mut out = Vec::new();
            hosting.follow(now, &config, &metadata, &[], &mut out);
            asked.push(out);
        }
        assert_eq!(asked, vec![vec![learner.clone()], vec![], vec![], vec![], vec![learner]]);
        assert!(hosting.asked_since(14) && !hosting.asked_since(15));
    }

    #[test]
    fn c3_a_member_of_a_group_created_at_run_time_hosts_it_empty_once_per_retry_period() {
        let config = fixture::config();
        let metadata = fixture::metadata(&[1, 2], &[(6, &[1, 2]), (7, &[2])]);
        let mut hosting = Hosting::default();
        let mut out = Vec::new();
        hosting.follow(10, &config, &metadata, &[], &mut out);
        hosting.follow(11, &config, &metadata, &[], &mut out);
        let member = AgentOutput::HostMember {
            group: GroupId(6),
            kind: "kv".into(),
            incarnation: Incarnation(1),
            members: nodes(&[1, 2]),
            replication: Default::default(),
        };
        assert_eq!(out, vec![member]);
    }

    #[test]
    fn p4_hosted_learners_follow_the_metadata_and_a_later_incarnation_is_kept() {
        let config = fixture::config();
        let mut metadata = fixture::metadata(&[1, 2, 3], &[(0, &[1, 2]), (1, &[1, 2]), (2, &[2, 3])]);
        metadata.groups.get_mut(&GroupId(0)).expect("group 0").learners = nodes(&[3]);
        // Group 1's replica here runs incarnation 2, past this copy: kept as it is.
        let newer = HostedReplica { incarnation: Incarnation(2), ..hosted(1, false, 0) };
        metadata.groups.get_mut(&GroupId(1)).expect("group 1").learners = nodes(&[3]);
        // Group 2 no longer places this node: the ownership job unloads it.
        metadata.groups.get_mut(&GroupId(2)).expect("group 2").learners = nodes(&[3]);
        let mut out = Vec::new();
        Hosting::default().follow(10, &config, &metadata, &[hosted(0, true, 1), newer, hosted(2, false, 0)], &mut out);
        assert_eq!(out, vec![AgentOutput::SetLearners { group: GroupId(0), learners: nodes(&[3]) }]);
    }
    #[test]
    fn h3_a_member_of_a_group_created_again_hosts_it_empty_in_place_of_the_old_replica() {
        let config = fixture::config();
        let mut metadata = fixture::metadata(&[1, 2], &[(6, &[1, 2])]);
        fixture::recreate(&mut metadata, 6, &[1, 2]);
        let member = AgentOutput::HostMember {
            group: GroupId(6),
            kind: "kv".into(),
            incarnation: Incarnation(2),
            members: nodes(&[1, 2]),
            replication: Default::default(),
        };
        // The replica of incarnation 1 is still here (deleted while this
        // node was down, or not yet unloaded): the new one replaces it.
        let mut out = Vec::new();
        Hosting::default().follow(10, &config, &metadata, &[hosted(6, true, 4)], &mut out);
        assert_eq!(out, vec![member]);
        // Once hosted at incarnation 2, nothing more.
        let current = HostedReplica { incarnation: Incarnation(2), ..hosted(6, true, 0) };
        let mut again = Vec::new();
        Hosting::default().follow(20, &config, &metadata, &[current], &mut again);
        assert_eq!(again, Vec::new());
    }
}
