//! P1: at most one primary per group and view (PacificA's Primary invariant).
//! Every `RoleChanged` to primary is recorded; a second node claiming the same
//! (group, incarnation, view) is a violation. Views restart at 0 in each
//! incarnation of a group (a member change switches incarnation).

use std::collections::HashMap;

use cohort_messages::{GroupId, Incarnation, View};

/// Who became primary of each (group, view).
#[derive(Debug, Default)]
pub struct SinglePrimary {
    primaries: HashMap<(GroupId, Incarnation, View), usize>,
}

impl SinglePrimary {
    /// Record `node` as primary; `Ok(true)` if this (group, view) is new.
    pub fn record(
        &mut self,
        group: GroupId,
        incarnation: Incarnation,
        view: View,
        node: usize,
    ) -> Result<bool, String> {
        match self.primaries.get(&(group, incarnation, view)) {
            Some(existing) if *existing != node => Err(format!(
                "P1 broken: {group} {incarnation} {view} has two primaries, node {existing} and node {node}"
            )),
            Some(_) => Ok(false),
            None => {
                self.primaries.insert((group, incarnation, view), node);
                Ok(true)
            }
        }
    }

    /// The node that became primary of `group` in `view`, if any did.
    pub fn primary_of(&self, group: GroupId, incarnation: Incarnation, view: View) -> Option<usize> {
        self.primaries.get(&(group, incarnation, view)).copied()
    }
}
