//! The agent's primary transfers (C4, C5): on the node that leads a group
//! the metadata asks to hand over, start the directed view change; and on
//! the metadata primary, if balancing is on, ask for at most
//! `balance_transfers_per_tick` transfers per tick, many in one command
//! ([`super::super::next_transfers`] picks them).
//!
//! Together because they are the two ends of one thing: the balancer
//! records a transfer in the metadata, and the leader of the group carries
//! it out; a later view reported for the group ends it.
//!
//! The budget is a rate, not a count per command: a tick the balancer
//! did not ask in leaves its share for later, up to
//! [`BUDGET_TICKS_SAVED_MAX`] ticks' worth, so one command carries what
//! the ticks since the last one allow. Each command is a metadata commit,
//! and the metadata group commits a few commands per tick on a busy node:
//! one transfer per command held the balancer near 6 transfers a second
//! at 10,000 groups whatever its rate (a restarted node had 127 of its
//! 3,333 primaries back 20 s later).

use cohort_messages::metadata::{METADATA_BATCH_ENTRIES_MAX, MetadataCommand};
use cohort_messages::{GroupId, NodeId};

use super::super::Metadata;
use super::asked::Asked;
use super::{AgentConfig, AgentOutput, HostedReplica};

/// The most ticks whose unused budget the balancer keeps for later: a burst
/// is at most this many ticks' worth of transfers (and at most
/// [`METADATA_BATCH_ENTRIES_MAX`], one command's).
pub(super) const BUDGET_TICKS_SAVED_MAX: u64 = 10;

/// The balancer's budget and the transfers asked of the shards.
#[derive(Debug, Default)]
pub(super) struct Balance {
    /// The tick the balancer last asked for transfers in, and how many it
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

    /// How many transfers the balancer may ask for in tick `now`: what is
    /// left of this tick's share, or the shares of the ticks since it last
    /// asked (at most [`BUDGET_TICKS_SAVED_MAX`] of them).
    fn budget(&self, now: u64, config: &AgentConfig) -> usize {
        let Some(per_tick) = config.balance_transfers_per_tick else { return 0 };
        let (last, asked) = self.balanced;
        let budget = if last == now {
            u64::from(per_tick.saturating_sub(asked))
        } else {
            u64::from(per_tick) * now.saturating_sub(last).min(BUDGET_TICKS_SAVED_MAX)
        };
        usize::try_from(budget).unwrap_or(usize::MAX).min(METADATA_BATCH_ENTRIES_MAX)
    }

    /// True if the balancer may ask for another transfer in tick `now`.
    pub(super) fn budget_left(&self, now: u64, config: &AgentConfig) -> bool {
        self.budget(now, config) > 0
    }

    /// C5: the balancer's next transfers, as many as its budget allows, in
    /// one command.
    pub(super) fn next_transfer(
        &mut self,
        now: u64,
        config: &AgentConfig,
        metadata: &Metadata,
    ) -> Option<MetadataCommand> {
        let budget = self.budget(now, config);
        let transfers = super::super::next_transfers(metadata, budget);
        if transfers.is_empty() {
            return None;
        }
        let asked = u32::try_from(transfers.len()).unwrap_or(u32::MAX);
        self.balanced =
            if self.balanced.0 == now { (now, self.balanced.1.saturating_add(asked)) } else { (now, asked) };
        debug_assert!(transfers.len() <= budget, "C5: within the budget");
        Some(MetadataCommand::TransferPrimaries { transfers })
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
    use cohort_messages::metadata::{GroupTransfer, OwnedGroup};

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
        let one = |group: u64| GroupTransfer { group: GroupId(group), to: NodeId(2) };
        // Ten ticks' budget saved up at the start; as many transfers as
        // narrow the spread (4 and 0 to 2 and 2), in one command.
        assert_eq!(first, Some(MetadataCommand::TransferPrimaries { transfers: vec![one(0), one(1)] }));
        assert!(!balance.budget_left(10, &config));
        assert_eq!(balance.next_transfer(10, &config, &metadata), None, "spent for tick 10");
        assert_eq!(balance.budget(11, &config), 1, "one a tick");
        assert_eq!(balance.budget(14, &config), 4, "ticks 11 to 14, saved");
        assert_eq!(balance.budget(100, &config), BUDGET_TICKS_SAVED_MAX as usize, "at most ten ticks saved");
        fixture::apply(&mut metadata, first.expect("asked"));
        assert_eq!(balance.next_transfer(14, &config, &metadata), None, "balanced: nothing to ask");
        config.balance_transfers_per_tick = None;
        assert_eq!(balance.next_transfer(11, &config, &metadata), None, "no balancer");
    }
}
