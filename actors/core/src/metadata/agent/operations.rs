//! The agent's part in multi-step operations (M2, M4, P4; see
//! docs/metadata.md, "How the nodes carry operations out"): the metadata
//! decides, each node makes its own replicas match, and says so.
//!
//! - a group's primary seals its incarnation when the metadata records a
//!   pending member change, and a next member switches its sealed replica
//!   once the metadata did;
//! - a next member reports that it holds the seal durably, a primary that
//!   a learner caught up;
//! - a node acks a configuration epoch only when its replicas conform to
//!   the metadata, so a step's gate waits for the groups, not the log.
//!
//! The metadata group's own switch (Z6) is [`super::metadata_group`]'s:
//! its log is the one sealed, so no metadata command can gate it.

use cohort_messages::metadata::MetadataCommand;
use cohort_messages::{NodeId, Op};

use super::super::Metadata;
use super::asked::Asked;
use super::hosted::by_group;
use super::metadata_group::RecordRead;
use super::{AgentConfig, AgentOutput, HostedReplica};

/// The seals asked of the shards, by group, with when.
#[derive(Debug, Default)]
pub(super) struct Switches {
    seals_proposed: Asked,
}

impl Switches {
    /// True if a seal was asked for at `since` or later (maybe asked again).
    pub(super) fn proposed_since(&self, since: u64) -> bool {
        self.seals_proposed.any_since(since)
    }

    /// Member changes: the primary seals, and a next member whose replica
    /// is sealed switches once the metadata did.
    pub(super) fn carry_out(
        &mut self,
        now: u64,
        config: &AgentConfig,
        metadata: &Metadata,
        hosted: &[HostedReplica],
        record_read: &RecordRead,
        out: &mut Vec<AgentOutput>,
    ) {
        let node = config.node;
        for hosted in hosted {
            if hosted.group == config.metadata_group {
                record_read.switch(node, metadata.groups.get(&hosted.group), hosted, &mut self.seals_proposed, out);
            }
            let Some(record) = metadata.groups.get(&hosted.group).filter(|record| record.live) else { continue };
            if let Some(pending) = &record.pending
                && record.incarnation == hosted.incarnation
                && hosted.primary
                && hosted.sealed.is_none()
                && self.seals_proposed.again(hosted.group, now, config.request_retry_ticks)
            {
                out.push(AgentOutput::ProposeSeal { group: hosted.group, seal: pending.seal.clone() });
            }
            let switched_in_metadata = hosted.sealed.as_ref().is_some_and(|seal| {
                seal.incarnation == record.incarnation
                    && seal.members == record.members
                    && record.members.contains(&node)
            });
            if switched_in_metadata && record.incarnation > hosted.incarnation {
                self.seals_proposed.forget(hosted.group);
                out.push(AgentOutput::Switch(hosted.group));
            }
        }
    }
}

/// P4: the primary reports learners that caught up.
pub(super) fn caught_up_report(
    config: &AgentConfig,
    metadata: &Metadata,
    hosted: &[HostedReplica],
) -> Option<MetadataCommand> {
    hosted.iter().filter(|hosted| hosted.primary).find_map(|hosted| {
        let record = metadata.groups.get(&hosted.group).filter(|r| r.live && r.incarnation == hosted.incarnation)?;
        // Every node past the metadata voters learns its log (Z5): only
        // the one an operation is to promote is worth an epoch.
        let wanted = |node: &NodeId| hosted.group != config.metadata_group || metadata.promotes(hosted.group, *node);
        let learner = hosted
            .caught_up
            .iter()
            .find(|node| record.learners.contains(node) && !record.caught_up.contains(node) && wanted(node))?;
        Some(MetadataCommand::ReportCaughtUp {
            group: hosted.group,
            incarnation: hosted.incarnation,
            node: *learner,
            op: Op(0),
        })
    })
}

/// A next member whose replica holds the pending seal durably says so.
pub(super) fn sealed_report(
    config: &AgentConfig,
    metadata: &Metadata,
    hosted: &[HostedReplica],
) -> Option<MetadataCommand> {
    let node = config.node;
    hosted.iter().find_map(|hosted| {
        let record = metadata.groups.get(&hosted.group)?;
        let pending = record.pending.as_ref()?;
        let holds = hosted.seal_durable
            && hosted.sealed.as_ref() == Some(&pending.seal)
            && record.incarnation == hosted.incarnation;
        // Z6: a metadata voter reports from the next incarnation, which
        // it switched to holding the seal (the sealed log takes no more).
        let switched = hosted.group == config.metadata_group && hosted.incarnation == pending.seal.incarnation;
        (((holds || switched) && pending.seal.members.contains(&node)) && !pending.sealed_by.contains(&node))
            .then_some(MetadataCommand::ReportSealed { group: hosted.group, incarnation: record.incarnation, node })
    })
}

/// Whether this node's replicas match the metadata's placement: every
/// group it is a member or learner of is hosted at the metadata's
/// incarnation with the metadata's learners. A node acks a configuration
/// epoch only then, so a step's gate (M2) waits for the groups, not just
/// for the log.
pub(super) fn conforms(node: NodeId, metadata: &Metadata, hosted: &[HostedReplica]) -> bool {
    let hosted = by_group(hosted);
    metadata
        .groups
        .iter()
        .filter(|(_, record)| record.live && (record.members.contains(&node) || record.learners.contains(&node)))
        .all(|(group, record)| {
            hosted
                .get(group)
                .is_some_and(|hosted| hosted.incarnation == record.incarnation && hosted.learners == record.learners)
        })
}

#[cfg(test)]
mod tests {
    use cohort_messages::{GroupId, Incarnation};

    use super::super::super::PendingSwitch;
    use super::super::fixture::{self, NODE, hosted};
    use super::*;

    fn nodes(ids: &[u64]) -> Vec<NodeId> {
        ids.iter().copied().map(NodeId).collect()
    }

    fn pending(metadata: &mut Metadata, group: u64, incarnation: u64, members: &[u64]) {
        metadata.groups.get_mut(&GroupId(group)).expect("group").pending = Some(PendingSwitch {
            seal: fixture::seal(incarnation, members),
            learners: Vec::new(),
            sealed_by: Default::default(),
        });
    }

    #[test]
    fn m2_the_primary_seals_a_pending_change_and_asks_again_after_a_retry_period() {
        let config = fixture::config();
        let mut metadata = fixture::metadata(&[1, 2, 3], &[(0, &[1, 2]), (1, &[1, 2])]);
        pending(&mut metadata, 0, 2, &[1, 3]);
        pending(&mut metadata, 1, 2, &[1, 3]);
        // Group 1 is led elsewhere: its primary seals.
        let hosted = [hosted(0, true, 1), hosted(1, false, 1)];
        let mut switches = Switches::default();
        let mut asked = Vec::new();
        for now in 10..=14 {
            let mut out = Vec::new();
            switches.carry_out(now, &config, &metadata, &hosted, &RecordRead::default(), &mut out);
            asked.push(out);
        }
        let seal = AgentOutput::ProposeSeal { group: GroupId(0), seal: fixture::seal(2, &[1, 3]) };
        assert_eq!(asked, vec![vec![seal.clone()], vec![], vec![], vec![], vec![seal]]);
        assert!(switches.proposed_since(14));
    }

    #[test]
    fn m2_a_sealed_next_member_switches_once_the_metadata_switched() {
        let config = fixture::config();
        let mut metadata = fixture::metadata(&[1, 2, 3], &[(0, &[1, 2])]);
        let sealed =
            HostedReplica { sealed: Some(fixture::seal(2, &[1, 3])), seal_durable: true, ..hosted(0, false, 1) };
        let mut switches = Switches::default();
        let mut out = Vec::new();
        pending(&mut metadata, 0, 2, &[1, 3]);
        switches.carry_out(10, &config, &metadata, std::slice::from_ref(&sealed), &RecordRead::default(), &mut out);
        assert_eq!(out, Vec::new(), "not before the metadata switched");
        let record = metadata.groups.get_mut(&GroupId(0)).expect("group 0");
        record.pending = None;
        record.incarnation = Incarnation(2);
        record.members = nodes(&[1, 3]);
        switches.carry_out(11, &config, &metadata, &[sealed], &RecordRead::default(), &mut out);
        assert_eq!(out, vec![AgentOutput::Switch(GroupId(0))]);
    }

    #[test]
    fn m2_a_next_member_reports_its_durable_seal_until_the_metadata_has_it() {
        let config = fixture::config();
        let mut metadata = fixture::metadata(&[1, 2, 3], &[(0, &[2, 3])]);
        pending(&mut metadata, 0, 2, &[1, 3]);
        let undurable = HostedReplica { sealed: Some(fixture::seal(2, &[1, 3])), ..hosted(0, false, 1) };
        assert_eq!(sealed_report(&config, &metadata, std::slice::from_ref(&undurable)), None);
        let durable = HostedReplica { seal_durable: true, ..undurable };
        let report = MetadataCommand::ReportSealed { group: GroupId(0), incarnation: Incarnation(1), node: NODE };
        assert_eq!(sealed_report(&config, &metadata, std::slice::from_ref(&durable)), Some(report));
        let record = metadata.groups.get_mut(&GroupId(0)).expect("group 0");
        record.pending.as_mut().expect("pending").sealed_by.insert(NODE);
        assert_eq!(sealed_report(&config, &metadata, &[durable]), None);
    }

    #[test]
    fn p4_the_primary_reports_a_learner_that_caught_up_once() {
        let config = fixture::config();
        let mut metadata = fixture::metadata(&[1, 2, 3], &[(0, &[1, 2])]);
        metadata.groups.get_mut(&GroupId(0)).expect("group 0").learners = nodes(&[3]);
        let primary = HostedReplica { learners: nodes(&[3]), caught_up: nodes(&[3]), ..hosted(0, true, 1) };
        let backup = HostedReplica { primary: false, ..primary.clone() };
        assert_eq!(caught_up_report(&config, &metadata, std::slice::from_ref(&backup)), None);
        let report = MetadataCommand::ReportCaughtUp {
            group: GroupId(0),
            incarnation: Incarnation(1),
            node: NodeId(3),
            op: Op(0),
        };
        assert_eq!(caught_up_report(&config, &metadata, std::slice::from_ref(&primary)), Some(report));
        metadata.groups.get_mut(&GroupId(0)).expect("group 0").caught_up.insert(NodeId(3));
        assert_eq!(caught_up_report(&config, &metadata, &[primary]), None);
    }

    #[test]
    fn m1_a_node_conforms_once_every_group_placed_on_it_is_hosted_as_the_metadata_says() {
        let mut metadata = fixture::metadata(&[1, 2, 3], &[(0, &[1, 2]), (1, &[2, 3])]);
        metadata.groups.get_mut(&GroupId(1)).expect("group 1").learners = nodes(&[1]);
        assert!(!conforms(NODE, &metadata, &[hosted(0, true, 1)]), "learner of group 1, not hosted");
        let learner = HostedReplica { learners: nodes(&[2]), ..hosted(1, false, 1) };
        assert!(!conforms(NODE, &metadata, &[hosted(0, true, 1), learner.clone()]), "other learners");
        let learner = HostedReplica { learners: nodes(&[1]), ..learner };
        assert!(conforms(NODE, &metadata, &[hosted(0, true, 1), learner]));
    }
}
