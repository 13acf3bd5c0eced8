//! The role changes of a shard's replicas, for the log (O1): each one at
//! `debug`, and at `info` one summary per [`ROLE_SUMMARY_INTERVAL_SECS`]
//! when any happened. Why a rate and not a line each: a node that hosts
//! 100,000 groups changes that many roles when a peer dies; the operator
//! wants to see that it happened, how much and when it stopped, and
//! `COHORT_LOG=cohort_actors::shard=debug` gives every group's line.

use cohort_core::Role;
use cohort_messages::{GroupId, NodeId, View};

/// Seconds between two summaries of a shard's role changes.
pub(super) const ROLE_SUMMARY_INTERVAL_SECS: u64 = 10;

/// Role changes counted since the last summary.
#[derive(Debug, Default)]
pub(super) struct RoleChanges {
    primary: u64,
    backup: u64,
    view_change: u64,
    learner: u64,
    /// The tick of the last summary (or of the first count).
    since_tick: Option<u64>,
}

impl RoleChanges {
    /// Count (and log at `debug`) one replica's new role, at tick `now`.
    pub(super) fn on_role(&mut self, node: NodeId, shard: usize, group: GroupId, view: View, role: Role, now: u64) {
        tracing::debug!(node = node.0, shard, group = group.0, view = view.0, ?role, "{group} is {role:?} in {view}");
        self.since_tick.get_or_insert(now);
        let count = match role {
            Role::Primary => &mut self.primary,
            Role::Backup => &mut self.backup,
            Role::ViewChange => &mut self.view_change,
            Role::Learner => &mut self.learner,
        };
        *count += 1;
    }

    /// Log the summary at `info` if the interval has passed since the
    /// first change counted (ticks of `second_ticks` a second), and start
    /// counting again.
    pub(super) fn summarise(&mut self, node: NodeId, shard: usize, now: u64, second_ticks: u64) {
        let Some(since) = self.since_tick else { return };
        let interval_ticks = ROLE_SUMMARY_INTERVAL_SECS * second_ticks;
        if now < since + interval_ticks {
            return;
        }
        let RoleChanges { primary, backup, view_change, learner, .. } = std::mem::take(self);
        let changes = primary + backup + view_change + learner;
        debug_assert!(changes > 0, "a summary is due only after a change was counted");
        let seconds = (now - since) / second_ticks.max(1);
        tracing::info!(
            node = node.0,
            shard,
            changes,
            became_primary = primary,
            became_backup = backup,
            entered_view_change = view_change,
            became_learner = learner,
            seconds,
            "shard {shard}: {changes} role changes in the last {seconds} s ({primary} became primary, {backup} \
             backup, {view_change} entered a view change, {learner} learner)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn o1_role_changes_are_summarised_once_per_interval_and_then_counted_afresh() {
        let mut changes = RoleChanges::default();
        changes.summarise(NodeId(1), 0, 1000, 10);
        assert_eq!(changes.since_tick, None, "nothing to say before a change");
        changes.on_role(NodeId(1), 0, GroupId(3), View(2), Role::ViewChange, 5);
        changes.on_role(NodeId(1), 0, GroupId(3), View(2), Role::Primary, 6);
        changes.summarise(NodeId(1), 0, 104, 10);
        assert_eq!((changes.view_change, changes.primary), (1, 1), "not before the interval");
        changes.summarise(NodeId(1), 0, 105, 10);
        assert_eq!((changes.view_change, changes.primary, changes.since_tick), (0, 0, None), "counted afresh");
    }
}
