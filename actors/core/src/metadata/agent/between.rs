//! Z2: what the agent goes on with between two scans. A scan of 100,000
//! hosted groups is spaced up to seconds apart, so after each applied
//! command the agent sends the next of the burst the last scan chose, at
//! the metadata group's commit rate rather than one command per scan. The
//! next scan chooses afresh, so what became more urgent meanwhile waits at
//! most until then.

use std::collections::VecDeque;

use cohort_messages::Epoch;
use cohort_messages::metadata::OwnedGroup;

use super::super::Metadata;
use super::{AgentOutput, MetadataAgent, creation};

/// The burst the last scan chose, if nothing more urgent was waiting.
#[derive(Debug)]
pub(super) enum Between {
    /// Nothing: the last scan chose something that needs a scan again.
    Nothing,
    /// The next batch of configured groups the metadata lacks (C3); it needs
    /// the metadata only, and goes on only once this node's copy of it
    /// moved past `sent_epoch`, the epoch it had when the last batch left
    /// (a copy left behind would ask for the same batch again and again).
    Creations { sent_epoch: Epoch },
    /// The next batches of ownership reports (S4) the last scan found, at
    /// tick `scanned_tick`: `backlog` holds what its first batch left out.
    Reports { scanned_tick: u64, backlog: VecDeque<OwnedGroup> },
    /// The balancer's next transfer (C5), on the metadata primary.
    Balancing,
}

impl MetadataAgent {
    /// Between two scans: the next command of the burst the last scan
    /// chose (`Between`), if nothing is in flight and nothing more urgent
    /// is known to wait. The shell calls it after an applied reply when it
    /// will not scan yet, so creations and ownership reports move at the
    /// metadata group's commit rate, and the balancer keeps its rate
    /// (`balance_transfers_per_tick`), with few scans.
    pub fn between_scans(&mut self, now: u64, metadata: &Metadata, metadata_primary: bool) -> Vec<AgentOutput> {
        let mut out = Vec::new();
        if self.stopped || self.requests.busy() || self.wants_scan() {
            return out;
        }
        let next = match &mut self.between {
            Between::Nothing => None,
            Between::Creations { sent_epoch } if metadata.frozen.is_none() && metadata.epoch > *sent_epoch => {
                *sent_epoch = metadata.epoch;
                creation::bootstrap_command(&self.config, metadata)
            }
            Between::Creations { .. } => None,
            Between::Reports { scanned_tick, backlog } => {
                let current = self.session.current();
                self.ownership.backlog_command(&self.config, metadata, current, now, *scanned_tick, backlog)
            }
            Between::Balancing => {
                if !metadata_primary || !self.balance.budget_left(now, &self.config) {
                    // Not now (spent for this tick, or not the metadata
                    // primary this moment); a later call may go on.
                    return out;
                }
                self.balance.next_transfer(now, &self.config, metadata)
            }
        };
        match next {
            Some(command) => self.requests.submit(command, now, &mut out),
            None => self.between = Between::Nothing,
        }
        debug_assert!(out.len() <= 1, "at most the one request: {out:?}");
        out
    }
}

#[cfg(test)]
mod tests {
    use cohort_messages::metadata::{GroupCreation, MetadataCommand, OwnedGroup};
    use cohort_messages::{GroupId, Incarnation, NodeId, View};

    use super::super::fixture::{self, NODE, hosted};
    use super::super::{BootstrapGroup, HostedReplica};
    use super::*;

    fn answer(agent: &mut MetadataAgent, now: u64, metadata: &mut Metadata, out: &[AgentOutput]) {
        for output in out {
            if let AgentOutput::Submit(request) = output {
                let command = MetadataCommand::decode(&request.operation).expect("a valid command");
                let result = fixture::apply(metadata, command);
                assert_eq!(agent.on_reply(now, &fixture::reply(request, &result)), Vec::new());
            }
        }
    }

    /// An agent whose node registered and holds session 1 (open in the
    /// metadata and in the agent).
    fn opened(config: super::super::AgentConfig, metadata: &mut Metadata) -> MetadataAgent {
        let mut agent = MetadataAgent::new(config);
        for now in 1..=2 {
            let out = agent.on_tick(now, metadata, false, &[]);
            let out = fixture::past_registration(&mut agent, now, out);
            let mut replies = Vec::new();
            for output in &out {
                if let AgentOutput::Submit(request) = output {
                    let command = MetadataCommand::decode(&request.operation).expect("a valid command");
                    let result = fixture::apply(metadata, command);
                    replies.extend(agent.on_reply(now, &fixture::reply(request, &result)));
                }
            }
            assert!(replies.iter().all(|reply| matches!(reply, AgentOutput::SessionOpened(_))));
        }
        assert!(agent.session().is_some());
        agent
    }

    /// The fixture's configuration, creating groups `0..count` on this node.
    fn config_creating(count: u64) -> super::super::AgentConfig {
        let mut config = fixture::config();
        config.bootstrap_groups = (0..count)
            .map(|group| BootstrapGroup {
                group: GroupId(group),
                kind: "kv".into(),
                members: vec![NODE],
                replication: Default::default(),
            })
            .collect();
        config
    }

    /// An agent like the one of the creations test, whose first batch
    /// (`sent`) was answered while its copy of the metadata (`before`) was
    /// not yet moved past it.
    fn opened_twin(before: &Metadata, sent: &[AgentOutput]) -> MetadataAgent {
        let config = config_creating(300);
        let mut metadata = Metadata::default();
        let mut agent = opened(config, &mut metadata);
        assert_eq!(&metadata, before, "the twin's copy is the same");
        assert_eq!(agent.on_tick(3, &metadata, false, &[]), sent);
        let mut applied = metadata.clone();
        answer(&mut agent, 3, &mut applied, sent);
        agent
    }

    #[test]
    fn z2_creations_go_on_between_scans_once_the_copy_moved_past_the_last_batch() {
        let config = config_creating(300);
        let creations = |range: std::ops::Range<u64>| {
            let groups = range
                .map(|group| GroupCreation {
                    group: GroupId(group),
                    kind: "kv".into(),
                    members: vec![NODE],
                    replication: Default::default(),
                })
                .collect();
            MetadataCommand::CreateGroups { groups }
        };
        let mut metadata = Metadata::default();
        let mut agent = opened(config, &mut metadata);
        let out = agent.on_tick(3, &metadata, false, &[]);
        assert_eq!(out, vec![fixture::write(3, &creations(0..256))]);
        let unmoved = metadata.clone();
        answer(&mut agent, 3, &mut metadata, &out);
        let mut behind = opened_twin(&unmoved, &out);
        let out = agent.between_scans(3, &metadata, false);
        assert_eq!(out, vec![fixture::write(4, &creations(256..300))]);
        answer(&mut agent, 3, &mut metadata, &out);
        assert_eq!(agent.between_scans(3, &metadata, false), Vec::new(), "none left");
        // A copy that did not move past the batch sent asks nothing, and the
        // burst ends there: the next scan decides.
        assert_eq!(behind.between_scans(3, &unmoved, false), Vec::new());
        assert_eq!(behind.between_scans(3, &metadata, false), Vec::new());
    }

    #[test]
    fn z2_ownership_reports_go_on_between_scans_in_batches() {
        let mut config = fixture::config();
        config.bootstrap_groups.clear();
        let groups: Vec<(u64, &[u64])> = (0..300).map(|group| (group, &[1u64][..])).collect();
        let mut metadata = fixture::metadata(&[], &groups[..0]);
        let mut agent = opened(config, &mut metadata);
        for (group, members) in &groups {
            let command = MetadataCommand::CreateGroup {
                group: GroupId(*group),
                kind: "kv".into(),
                members: members.iter().copied().map(NodeId).collect(),
                replication: Default::default(),
            };
            fixture::apply(&mut metadata, command);
        }
        let session = fixture::session(&metadata, 1);
        let led: Vec<HostedReplica> = (0..300).map(|group| hosted(group, true, 1)).collect();
        let reports = |range: std::ops::Range<u64>| MetadataCommand::ReportOwnerships {
            node: NODE,
            session,
            reports: range
                .map(|group| OwnedGroup { group: GroupId(group), incarnation: Incarnation(1), view: View(1) })
                .collect(),
        };
        let out = agent.on_tick(3, &metadata, false, &led);
        assert_eq!(out, vec![fixture::write(3, &reports(0..256))]);
        answer(&mut agent, 3, &mut metadata, &out);
        let out = agent.between_scans(4, &metadata, false);
        assert_eq!(out, vec![fixture::write(4, &reports(256..300))]);
    }
}
