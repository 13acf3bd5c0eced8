//! The agent's primary transfers (C4, C5): on the node that leads a group
//! the metadata asks to hand over, start the directed view change; and on
//! the metadata primary, if balancing is on, ask for at most
//! `balance_transfers_per_tick` transfers per tick
//! ([`super::super::next_transfer`] picks them).
//!
//! Together because they are the two ends of one thing: the balancer
//! records a transfer in the metadata, and the leader of the group carries
//! it out; a later view reported for the group ends it.

use cohort_messages::metadata::MetadataCommand;
use cohort_messages::{GroupId, NodeId};

use super::super::Metadata;
use super::asked::Asked;
use super::{AgentConfig, AgentOutput, HostedReplica};

/// The balancer's budget of this tick and the transfers asked of the shards.
#[derive(Debug, Default)]
pub(super) struct Balance {
    /// The tick the balancer last asked for a transfer in, and how many it
    /// asked for in it.
    balanced: (u64, u32),
    /// Primary transfers asked of the shard, by group, with when.
    transfers_asked: Asked,
}

impl Balance {
    /// True while a transfer is wanted of this node's shards (timed work).
    pub(super) fn transfers_wanted(&self) -> bool {
        !self.transfers_asked.is_empty()
    }

    /// How many transfers the balancer asked for in tick `now`.
    fn balanced_in(&self, now: u64) -> u32 {
        if self.balanced.0 == now { self.balanced.1 } else { 0 }
    }

    /// True if the balancer may ask for another transfer in tick `now`.
    pub(super) fn budget_left(&self, now: u64, config: &AgentConfig) -> bool {
        config.balance_transfers_per_tick.is_some_and(|budget| self.balanced_in(now) < budget)
    }

    /// C5: the balancer's next transfer, within its budget of this tick.
    pub(super) fn next_transfer(
        &mut self,
        now: u64,
        config: &AgentConfig,
        metadata: &Metadata,
    ) -> Option<MetadataCommand> {
        if !self.budget_left(now, config) {
            return None;
        }
        let transfer = super::super::next_transfer(metadata)?;
        self.balanced = (now, self.balanced_in(now) + 1);
        debug_assert!(config.balance_transfers_per_tick.is_some_and(|budget| self.balanced.1 <= budget));
        Some(transfer)
    }

    /// C4: the groups this node leads that the metadata asks to hand to
    /// another member. The shard refuses while that member is behind; it is
    /// asked again after a retry period until a report of a later view
    /// ends the transfer.
    pub(super) fn carry_out_transfers(
        &mut self,
        now: u64,
        config: &AgentConfig,
        metadata: &Metadata,
        hosted: &[HostedReplica],
        out: &mut Vec<AgentOutput>,
    ) {
        let node = config.node;
        let wanted: Vec<(GroupId, NodeId)> = hosted
            .iter()
            .filter(|hosted| hosted.primary && hosted.sealed.is_none() && hosted.group != config.metadata_group)
            .filter_map(|hosted| {
                let record = metadata.groups.get(&hosted.group).filter(|record| record.live)?;
                let transfer = record.transfer?;
                let current = record.incarnation == hosted.incarnation && hosted.view >= transfer.view;
                (current && transfer.to != node).then_some((hosted.group, transfer.to))
            })
            .collect();
        self.transfers_asked.retain(|group| wanted.iter().any(|(wanted, _)| *wanted == group));
        for (group, to) in wanted {
            assert_ne!(to, node, "a leader never hands its group to itself");
            if self.transfers_asked.again(group, now, config.request_retry_ticks) {
                out.push(AgentOutput::TransferPrimary { group, to });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use cohort_messages::View;
    use cohort_messages::metadata::OwnedGroup;

    use super::super::fixture::{self, NODE, hosted};
    use super::*;

    #[test]
    fn c4_the_leader_carries_out_a_transfer_asking_again_after_a_retry_period() {
        let config = fixture::config();
        let mut metadata = fixture::metadata(&[1, 2], &[(0, &[1, 2])]);
        fixture::apply(&mut metadata, MetadataCommand::TransferPrimary { group: GroupId(0), to: NodeId(2) });
        let mut balance = Balance::default();
        let mut asked = Vec::new();
        for now in 10..=14 {
            let mut out = Vec::new();
            balance.carry_out_transfers(now, &config, &metadata, &[hosted(0, true, 1)], &mut out);
            asked.push(out);
        }
        let transfer = AgentOutput::TransferPrimary { group: GroupId(0), to: NodeId(2) };
        assert_eq!(asked, vec![vec![transfer.clone()], vec![], vec![], vec![], vec![transfer]]);
        assert!(balance.transfers_wanted());
        // A backup asks nothing, and forgets the transfer.
        let mut out = Vec::new();
        balance.carry_out_transfers(15, &config, &metadata, &[hosted(0, false, 2)], &mut out);
        assert_eq!(out, Vec::new());
        assert!(!balance.transfers_wanted());
    }

    #[test]
    fn c5_the_balancer_asks_within_its_budget_of_each_tick() {
        let mut config = fixture::config();
        config.balance_transfers_per_tick = Some(1);
        let groups: Vec<(u64, &[u64])> = (0..4).map(|group| (group, &[1u64, 2][..])).collect();
        let mut metadata = fixture::metadata(&[1, 2], &groups);
        let session = fixture::session(&metadata, 1);
        let reports = (0..4)
            .map(|group| OwnedGroup {
                group: GroupId(group),
                incarnation: cohort_messages::Incarnation(1),
                view: View(1),
            })
            .collect();
        fixture::apply(&mut metadata, MetadataCommand::ReportOwnerships { node: NODE, session, reports });
        let mut balance = Balance::default();
        let first = balance.next_transfer(10, &config, &metadata);
        assert_eq!(first, Some(MetadataCommand::TransferPrimary { group: GroupId(0), to: NodeId(2) }));
        assert!(!balance.budget_left(10, &config));
        assert_eq!(balance.next_transfer(10, &config, &metadata), None, "spent for tick 10");
        assert!(balance.budget_left(11, &config));
        config.balance_transfers_per_tick = None;
        assert_eq!(balance.next_transfer(11, &config, &metadata), None, "no balancer");
    }
}
