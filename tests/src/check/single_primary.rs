//! P1: at most one primary per group and view (PacificA's Primary invariant).
//! Every `RoleChanged` to primary is recorded; a second node claiming the same
//! (group, view) is a violation.

use std::collections::HashMap;

use cohort_messages::{GroupId, View};

/// Who became primary of each (group, view).
#[derive(Debug, Default)]
pub struct SinglePrimary {
    primaries: HashMap<(GroupId, View), usize>,
}

impl SinglePrimary {
    /// Record `node` as primary; `Ok(true)` if this (group, view) is new.
    pub fn record(&mut self, group: GroupId, view: View, node: usize) -> Result<bool, String> {
        match self.primaries.get(&(group, view)) {
            Some(existing) if *existing != node => {
                Err(format!("P1 broken: {group} {view} has two primaries, node {existing} and node {node}"))
            }
            Some(_) => Ok(false),
            None => {
                self.primaries.insert((group, view), node);
                Ok(true)
            }
        }
    }

    /// The node that became primary of `group` in `view`, if any did.
    pub fn primary_of(&self, group: GroupId, view: View) -> Option<usize> {
        self.primaries.get(&(group, view)).copied()
    }
}
