//! The agent's job for the metadata group's own voters (Z6; see
//! docs/metadata.md, "The metadata group's own voters"): its primary
//! records the group once, like any group; a replica switches with the
//! group when its seal commits; and a replica left behind by a switch its
//! copy of the metadata never saw reads the group's record from the
//! primary to learn where the group went.
//!
//! Apart from [`super::operations`] because the metadata group's log is the
//! one sealed: no metadata command can gate its switch, and a node's copy
//! of the metadata may lag behind its own replica's incarnation.

use cohort_messages::metadata::MetadataCommand;
use cohort_messages::seal::Seal;
use cohort_messages::{GroupId, NodeId};

use super::super::{GroupRecord, Metadata};
use super::asked::Asked;
use super::{AgentCounters, AgentOutput, HostedReplica};

/// The metadata group's record as its primary last answered a read of it.
#[derive(Debug, Default)]
pub(super) struct RecordRead {
    record: Option<GroupRecord>,
}

impl RecordRead {
    /// The answer to a read of the record: kept, or counted as a refused
    /// frame if it does not decode.
    pub(super) fn on_read(&mut self, read: Result<Option<GroupRecord>, String>, counters: &mut AgentCounters) {
        match read {
            Ok(record) => self.record = record,
            Err(_) => counters.frames_refused += 1,
        }
    }

    /// Whether this node's metadata replica was left behind by a switch
    /// its copy of the metadata does not know of: it learns the log, heard
    /// a later incarnation run, and applied neither a seal nor a pending
    /// switch that names it (see [`RecordRead::switch`]). Then the
    /// agent reads the metadata group's record from its primary.
    pub(super) fn read_wanted(
        &self,
        node: NodeId,
        group: GroupId,
        metadata: &Metadata,
        hosted: &[HostedReplica],
    ) -> bool {
        let Some(here) = hosted.iter().find(|hosted| hosted.group == group) else { return false };
        let known = metadata
            .groups
            .get(&group)
            .is_some_and(|record| record.incarnation == here.incarnation && record.pending.is_some());
        let read = self.record.as_ref().is_some_and(|record| record.incarnation > here.incarnation);
        let left_behind = here.outpaced && here.sealed.is_none() && !known && !read;
        // A learner that recovered into an incarnation its copy does not
        // know knows no learner but itself: it needs the list too.
        let learner = !here.members.contains(&node);
        let copy = metadata.groups.get(&group);
        let current = copy.is_some_and(|record| record.incarnation == here.incarnation);
        let lost = learner && !current && here.learners == [node] && self.known_learners(copy, here).is_none();
        left_behind || lost
    }

    /// The metadata group's own switch. The seal committed only once every
    /// next member held it (see `replica::seal`), so a replica that applied
    /// it durably switches at once: a next member as a voter, any other
    /// node the pending switch names as a learner.
    pub(super) fn switch(
        &self,
        node: NodeId,
        record: Option<&GroupRecord>,
        hosted: &HostedReplica,
        seals_proposed: &mut Asked,
        out: &mut Vec<AgentOutput>,
    ) {
        // The copy speaks of this replica's incarnation (it may lag behind
        // it after a switch from the applied point, below).
        let current = record.filter(|record| record.incarnation == hosted.incarnation);
        if record.is_none() || current.is_some() {
            if let Some(seal) = hosted.sealed.as_ref().filter(|_| hosted.seal_durable)
                && seal.members.contains(&node)
            {
                seals_proposed.forget(hosted.group);
                out.push(AgentOutput::Switch(hosted.group));
                return;
            }
            let pending = current.and_then(|record| record.pending.as_ref());
            if let Some(pending) = pending.filter(|pending| !pending.seal.members.contains(&node)) {
                let ready = match &hosted.sealed {
                    Some(seal) => *seal == pending.seal,
                    None => hosted.outpaced,
                };
                if ready && pending.learners.contains(&node) {
                    let (seal, learners) = (pending.seal.clone(), pending.learners.clone());
                    out.push(AgentOutput::SwitchLearner { group: hosted.group, seal, learners });
                }
                return;
            }
        }
        // A learner whose copy lags behind its replica's incarnation (it
        // switched from its applied point, or recovered into a later
        // incarnation knowing only itself as a learner): the learners as
        // the pending switch or the record read names them, so its member
        // index is the one the primary sends to.
        if let Some(learners) = self.known_learners(record, hosted)
            && *learners != hosted.learners
            && learners.contains(&node)
            && !hosted.members.contains(&node)
        {
            out.push(AgentOutput::SetLearners { group: hosted.group, learners: learners.clone() });
            return;
        }
        // A switch this node's copy never saw: the record read says where
        // the group went (see `read_wanted`).
        if let Some(read) = self.record.as_ref().filter(|read| read.incarnation > hosted.incarnation)
            && hosted.outpaced
            && hosted.sealed.is_none()
            && read.learners.contains(&node)
        {
            let majority = read.members.len() / 2 + 1;
            let seal = Seal {
                incarnation: read.incarnation,
                members: read.members.clone(),
                replication_quorum: read.replication.quorum.unwrap_or(majority as u8),
            };
            out.push(AgentOutput::SwitchLearner { group: hosted.group, seal, learners: read.learners.clone() });
        }
    }

    /// The metadata group's learners at the incarnation `hosted` runs,
    /// when this node's copy is not at that incarnation: from the pending
    /// switch into it, or from a record read of it.
    fn known_learners<'a>(
        &'a self,
        record: Option<&'a GroupRecord>,
        hosted: &HostedReplica,
    ) -> Option<&'a Vec<NodeId>> {
        if record.is_some_and(|record| record.incarnation == hosted.incarnation) {
            return None; // The hosting job keeps them.
        }
        let pending = record.and_then(|record| record.pending.as_ref());
        if let Some(pending) = pending.filter(|pending| pending.seal.incarnation == hosted.incarnation) {
            return Some(&pending.learners);
        }
        let read = self.record.as_ref()?;
        (read.incarnation == hosted.incarnation).then_some(&read.learners)
    }
}

/// The metadata group as its primary runs it, if the metadata has no
/// record of it yet: the primary records it once, so operations can change
/// its voters like any group's.
pub(super) fn record_command(group: GroupId, metadata: &Metadata, hosted: &[HostedReplica]) -> Option<MetadataCommand> {
    if metadata.groups.contains_key(&group) {
        return None;
    }
    let here = hosted.iter().find(|hosted| hosted.group == group && hosted.primary && hosted.sealed.is_none())?;
    Some(MetadataCommand::RecordMetadataGroup {
        incarnation: here.incarnation,
        members: here.members.clone(),
        learners: here.learners.clone(),
    })
}

#[cfg(test)]
mod tests {
    use cohort_messages::Incarnation;

    use super::super::super::PendingSwitch;
    use super::super::fixture::{self, NODE};
    use super::*;

    const GROUP: GroupId = GroupId::METADATA;

    fn nodes(ids: &[u64]) -> Vec<NodeId> {
        ids.iter().copied().map(NodeId).collect()
    }

    fn switch(read: &RecordRead, record: Option<&GroupRecord>, hosted: &HostedReplica) -> Vec<AgentOutput> {
        let mut out = Vec::new();
        read.switch(NODE, record, hosted, &mut Asked::default(), &mut out);
        out
    }

    /// The metadata group's record at incarnation 1 with voters 1 and 2.
    fn recorded() -> Metadata {
        let mut metadata = fixture::metadata(&[1, 2, 3], &[]);
        let command = MetadataCommand::RecordMetadataGroup {
            incarnation: Incarnation(1),
            members: nodes(&[1, 2]),
            learners: Vec::new(),
        };
        fixture::apply(&mut metadata, command);
        metadata
    }

    #[test]
    fn z6_the_metadata_primary_records_its_own_group_once() {
        let metadata = fixture::metadata(&[1, 2, 3], &[]);
        let primary = fixture::metadata_replica(true, &[1, 2], &[3]);
        let record = MetadataCommand::RecordMetadataGroup {
            incarnation: Incarnation(1),
            members: nodes(&[1, 2]),
            learners: nodes(&[3]),
        };
        assert_eq!(record_command(GROUP, &metadata, std::slice::from_ref(&primary)), Some(record));
        let backup = fixture::metadata_replica(false, &[1, 2], &[3]);
        assert_eq!(record_command(GROUP, &metadata, &[backup]), None);
        assert_eq!(record_command(GROUP, &recorded(), &[primary]), None);
    }

    #[test]
    fn z6_a_next_voter_switches_on_its_durable_seal_and_a_learner_as_a_learner() {
        let voter = HostedReplica {
            sealed: Some(fixture::seal(2, &[1, 3])),
            seal_durable: true,
            ..fixture::metadata_replica(false, &[1, 2], &[])
        };
        let metadata = recorded();
        let record = metadata.groups.get(&GROUP);
        assert_eq!(switch(&RecordRead::default(), record, &voter), vec![AgentOutput::Switch(GROUP)]);
        let mut metadata = recorded();
        let pending =
            PendingSwitch { seal: fixture::seal(2, &[2, 3]), learners: nodes(&[1]), sealed_by: Default::default() };
        metadata.groups.get_mut(&GROUP).expect("record").pending = Some(pending);
        let learner = HostedReplica { sealed: Some(fixture::seal(2, &[2, 3])), ..voter };
        let expected =
            AgentOutput::SwitchLearner { group: GROUP, seal: fixture::seal(2, &[2, 3]), learners: nodes(&[1]) };
        assert_eq!(switch(&RecordRead::default(), metadata.groups.get(&GROUP), &learner), vec![expected]);
    }

    #[test]
    fn z6_a_replica_left_behind_reads_the_record_then_follows_it_as_a_learner() {
        let metadata = recorded();
        let behind = HostedReplica { outpaced: true, ..fixture::metadata_replica(false, &[1, 2], &[]) };
        let mut read = RecordRead::default();
        assert!(read.read_wanted(NODE, GROUP, &metadata, std::slice::from_ref(&behind)));
        assert_eq!(switch(&read, metadata.groups.get(&GROUP), &behind), Vec::new(), "nothing known yet");
        let mut record = metadata.groups[&GROUP].clone();
        (record.incarnation, record.members, record.learners) = (Incarnation(3), nodes(&[2, 3]), nodes(&[1]));
        let mut counters = AgentCounters::default();
        read.on_read(Ok(Some(record)), &mut counters);
        assert!(!read.read_wanted(NODE, GROUP, &metadata, std::slice::from_ref(&behind)));
        let seal = Seal { incarnation: Incarnation(3), members: nodes(&[2, 3]), replication_quorum: 2 };
        let expected = AgentOutput::SwitchLearner { group: GROUP, seal, learners: nodes(&[1]) };
        assert_eq!(switch(&read, metadata.groups.get(&GROUP), &behind), vec![expected]);
        read.on_read(Err("garbled".into()), &mut counters);
        assert_eq!(counters, AgentCounters { frames_refused: 1, ..AgentCounters::default() });
    }
}
