//! Invariant checkers, run after every step. Each records violations as
//! text; the run reports them with its seed.
//!
//! - P1: at most one primary per group and view.
//! - P2/P3: every member applies the same op sequence (committed prefixes
//!   agree), and what was committed is never replaced.
//! - No acknowledged write lost: the op a client was told its write committed
//!   at holds that write in the agreed sequence.

use std::collections::{BTreeMap, HashMap};

use cohort_messages::{GroupId, Op, View};

/// The checkers' state.
#[derive(Debug, Default)]
pub struct Checkers {
    primaries: HashMap<(GroupId, View), usize>,
    committed: HashMap<GroupId, BTreeMap<Op, u64>>,
    /// Violations found, in order.
    pub violations: Vec<String>,
    /// Views in which some member became primary (after view 0).
    pub view_changes: u64,
}

impl Checkers {
    /// P1: `node` became primary of `group` in `view`.
    pub fn primary(&mut self, tick: u64, group: GroupId, view: View, node: usize) {
        match self.primaries.get(&(group, view)) {
            Some(existing) if *existing != node => self.violations.push(format!(
                "tick {tick}: P1 broken: {group} {view} has two primaries, node {existing} and node {node}"
            )),
            Some(_) => {}
            None => {
                if view.0 > 0 {
                    self.view_changes += 1;
                }
                self.primaries.insert((group, view), node);
            }
        }
    }

    /// P2/P3: `node` applied `op` with this digest.
    pub fn applied(&mut self, tick: u64, node: usize, group: GroupId, op: Op, digest: u64) {
        let log = self.committed.entry(group).or_default();
        match log.get(&op) {
            Some(existing) if *existing != digest => self
                .violations
                .push(format!("tick {tick}: P3 broken: node {node} applied a different op at {group} {op}")),
            Some(_) => {}
            None => {
                log.insert(op, digest);
            }
        }
    }

    /// A client was told its write committed at `op`.
    pub fn acknowledged(&mut self, tick: u64, group: GroupId, op: Op, digest: u64) {
        match self.committed.get(&group).and_then(|log| log.get(&op)) {
            Some(existing) if *existing == digest => {}
            Some(_) => {
                self.violations.push(format!("tick {tick}: acknowledged write lost: {group} {op} holds another write"))
            }
            None => self
                .violations
                .push(format!("tick {tick}: acknowledged write at {group} {op} was never applied anywhere")),
        }
    }

    /// Final check: every acknowledged write is still in the agreed sequence.
    pub fn committed_digest(&self, group: GroupId, op: Op) -> Option<u64> {
        self.committed.get(&group).and_then(|log| log.get(&op)).copied()
    }

    /// Ops applied somewhere, over all groups.
    pub fn ops_committed(&self) -> u64 {
        self.committed.values().map(|log| log.len() as u64).sum()
    }
}
