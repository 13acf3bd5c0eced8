//! The applied stream that a host's custom group actor follows
//! (`Effect::Applied` and `Effect::Restored`): on each member and group,
//! the reports list exactly the ops the state machine applied, in op order,
//! each once; a `Restored` moves the position to its snapshot's op; the
//! position never goes back. The state machine's own record of its applies is
//! the reference. A crash starts a new stream (a restarted shard starts new
//! actors).

use std::collections::{HashMap, VecDeque};

use cohort_messages::{GroupId, Op};

/// Streams per (node, group).
#[derive(Debug, Default)]
pub struct AppliedStream {
    streams: HashMap<(usize, GroupId), Stream>,
}

#[derive(Debug, Default)]
struct Stream {
    position: Op,
    reported: VecDeque<(Op, u64)>,
    applied: VecDeque<(Op, u64)>,
}

impl AppliedStream {
    /// `node` reported `ops` (op, digest of the operation) of `group`, then
    /// its applied point `through`.
    pub fn reported(&mut self, node: usize, group: GroupId, ops: &[(Op, u64)], through: Op) -> Result<(), String> {
        let stream = self.streams.entry((node, group)).or_default();
        for &(op, digest) in ops {
            if op <= stream.position || op > through {
                return Err(format!(
                    "applied stream broken: node {node} reported {group} {op} at position {} (through {through})",
                    stream.position
                ));
            }
            stream.position = op;
            stream.reported.push_back((op, digest));
        }
        if through < stream.position {
            return Err(format!("applied stream broken: node {node} {group} went back to {through}"));
        }
        stream.position = through;
        stream.matched(node, group)
    }

    /// `node` restored `group` from a snapshot at `op`.
    pub fn restored(&mut self, node: usize, group: GroupId, op: Op) -> Result<(), String> {
        let stream = self.streams.entry((node, group)).or_default();
        if op < stream.position {
            return Err(format!("applied stream broken: node {node} {group} restored {op} below {}", stream.position));
        }
        stream.position = op;
        Ok(())
    }

    /// `node`'s state machine of `group` applied `op` (digest of the operation).
    pub fn state_machine_applied(&mut self, node: usize, group: GroupId, op: Op, digest: u64) -> Result<(), String> {
        let stream = self.streams.entry((node, group)).or_default();
        stream.applied.push_back((op, digest));
        stream.matched(node, group)
    }

    /// `node` crashed: its streams end.
    pub fn crashed(&mut self, node: usize) {
        self.streams.retain(|(owner, _), _| *owner != node);
    }

    /// `node` unloaded `group`: that stream ends.
    pub fn unloaded(&mut self, node: usize, group: GroupId) {
        self.streams.remove(&(node, group));
    }

    /// Streams with applies never reported (or reports of nothing applied).
    pub fn unmatched(&self) -> Vec<String> {
        let mut found: Vec<String> = self
            .streams
            .iter()
            .filter(|(_, stream)| !stream.reported.is_empty() || !stream.applied.is_empty())
            .map(|((node, group), stream)| {
                format!(
                    "applied stream broken: node {node} {group}: {} applies never reported, {} reports never applied",
                    stream.applied.len(),
                    stream.reported.len()
                )
            })
            .collect();
        found.sort();
        found
    }
}

impl Stream {
    fn matched(&mut self, node: usize, group: GroupId) -> Result<(), String> {
        while !self.reported.is_empty() && !self.applied.is_empty() {
            let (reported, applied) = (self.reported.pop_front(), self.applied.pop_front());
            if reported != applied {
                return Err(format!(
                    "applied stream broken: node {node} {group} reported {reported:?} where the state machine applied {applied:?}"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_match_applies_in_order() {
        let mut stream = AppliedStream::default();
        let group = GroupId(1);
        stream.state_machine_applied(0, group, Op(1), 11).expect("ok");
        stream.reported(0, group, &[(Op(1), 11), (Op(3), 33)], Op(3)).expect("ok");
        stream.state_machine_applied(0, group, Op(3), 33).expect("ok");
        assert!(stream.unmatched().is_empty());
        assert!(stream.reported(0, group, &[(Op(3), 33)], Op(3)).is_err(), "an op reported twice");
    }

    #[test]
    fn a_report_of_another_op_is_caught() {
        let mut stream = AppliedStream::default();
        stream.state_machine_applied(0, GroupId(1), Op(1), 11).expect("ok");
        assert!(stream.reported(0, GroupId(1), &[(Op(1), 12)], Op(1)).is_err());
    }

    #[test]
    fn restore_moves_the_position_and_a_crash_ends_the_stream() {
        let mut stream = AppliedStream::default();
        stream.restored(0, GroupId(1), Op(10)).expect("ok");
        assert!(stream.reported(0, GroupId(1), &[(Op(9), 1)], Op(9)).is_err());
        stream.crashed(0);
        stream.state_machine_applied(0, GroupId(1), Op(1), 1).expect("ok");
        assert_eq!(stream.unmatched().len(), 1, "an apply never reported");
    }
}
