//! P2/P3: committed prefixes agree and never shrink. Each member reports every
//! op it applies with a digest of the operation; the first report of an op
//! fixes it, and any member applying something else at that op breaks the
//! invariant. Because an op is applied only once committed, this checks that
//! what was committed is never replaced, across view changes and restarts.

use std::collections::{BTreeMap, HashMap};

use cohort_messages::{GroupId, Op};

/// The agreed op sequence per group.
#[derive(Debug, Default)]
pub struct Agreement {
    committed: HashMap<GroupId, BTreeMap<Op, u64>>,
}

impl Agreement {
    /// `node` applied `op` of `group` with `digest`.
    pub fn record(&mut self, node: usize, group: GroupId, op: Op, digest: u64) -> Result<(), String> {
        let log = self.committed.entry(group).or_default();
        match log.get(&op) {
            Some(existing) if *existing != digest => {
                Err(format!("P3 broken: node {node} applied a different op at {group} {op}"))
            }
            Some(_) => Ok(()),
            None => {
                log.insert(op, digest);
                Ok(())
            }
        }
    }

    /// The agreed digest at `op`.
    pub fn digest(&self, group: GroupId, op: Op) -> Option<u64> {
        self.committed.get(&group).and_then(|log| log.get(&op)).copied()
    }

    /// Ops agreed over all groups.
    pub fn ops(&self) -> u64 {
        self.committed.values().map(|log| log.len() as u64).sum()
    }
}
