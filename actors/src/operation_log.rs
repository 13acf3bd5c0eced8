//! The steps of multi-step operations (move, replace, join, decommission,
//! shrink; M2–M5), for the log (O1).
//!
//! Why here and not where a step is decided: steps are applied by the
//! metadata state machine, which does no I/O, and an operation is driven
//! by whichever node is metadata primary at the time. Each node's agent
//! instead compares the operations in its copy of the metadata with what it
//! last logged, so any one node's log tells an operator how far an
//! operation got: started, each step applied, and finished (completed, or
//! reverted after a cancel). A node that skipped states (it fetched a
//! newer copy) logs where the operation is now.

use std::collections::BTreeMap;

use cohort_core::metadata::{Metadata, OperationRecord};
use cohort_messages::{NodeId, OperationId};

/// What changed in the operations since the last look.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum OperationEvent {
    /// An operation not seen before, with `done` of `steps` applied.
    Started { operation: OperationId, spec: String, done: usize, steps: usize },
    /// Steps applied since the last look; `step` describes the last one.
    Stepped { operation: OperationId, done: usize, steps: usize, step: String },
    /// Cancelled: the rest of the plan is now the revert plan of `steps`.
    Cancelled { operation: OperationId, steps: usize },
    /// Gone from the metadata: finished, `reverted` if it was seen cancelled.
    Finished { operation: OperationId, reverted: bool },
}

/// The operations as last logged: steps done and whether cancelled.
#[derive(Debug, Default)]
pub(crate) struct OperationLog {
    seen: BTreeMap<OperationId, (usize, bool)>,
}

impl OperationLog {
    /// Compare `metadata`'s operations with the last look, log what
    /// changed for node `node`, and remember the new state.
    pub(crate) fn observe(&mut self, node: NodeId, metadata: &Metadata) {
        for event in self.changes(&metadata.operations) {
            log(node, &event);
        }
    }

    /// What changed since the last look (and remember the new state).
    pub(crate) fn changes(&mut self, operations: &BTreeMap<OperationId, OperationRecord>) -> Vec<OperationEvent> {
        let mut events = Vec::new();
        for (&operation, record) in operations {
            let (done, steps) = (record.done, record.plan.len());
            debug_assert!(done <= steps, "an operation never applies more steps than its plan");
            match self.seen.get(&operation) {
                None => {
                    let spec = format!("{:?}", record.spec);
                    events.push(OperationEvent::Started { operation, spec, done, steps });
                }
                Some(&(_, false)) if record.cancelled => events.push(OperationEvent::Cancelled { operation, steps }),
                Some(&(before, _)) if done != before => {
                    let step = record.plan.get(done.saturating_sub(1)).map_or_else(String::new, |s| format!("{s:?}"));
                    events.push(OperationEvent::Stepped { operation, done, steps, step });
                }
                Some(_) => {}
            }
        }
        for (&operation, &(_, reverted)) in &self.seen {
            if !operations.contains_key(&operation) {
                events.push(OperationEvent::Finished { operation, reverted });
            }
        }
        self.seen = operations.iter().map(|(&id, record)| (id, (record.done, record.cancelled))).collect();
        events
    }
}

fn log(node: NodeId, event: &OperationEvent) {
    let node = node.0;
    match event {
        OperationEvent::Started { operation, spec, done, steps } => {
            let operation = operation.0;
            tracing::info!(
                node,
                operation,
                spec,
                done,
                steps,
                "operation {operation} ({spec}): {done} of {steps} steps applied"
            );
        }
        OperationEvent::Stepped { operation, done, steps, step } => {
            let operation = operation.0;
            tracing::info!(
                node,
                operation,
                done,
                steps,
                step,
                "operation {operation}: step {done} of {steps} applied: {step}"
            );
        }
        OperationEvent::Cancelled { operation, steps } => {
            let operation = operation.0;
            tracing::info!(node, operation, steps, "operation {operation} cancelled: reverting in {steps} steps");
        }
        OperationEvent::Finished { operation, reverted } => {
            let (operation, how) = (operation.0, if *reverted { "reverted" } else { "completed" });
            tracing::info!(node, operation, how, "operation {operation} {how}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_core::metadata::Step;
    use cohort_messages::metadata::OperationSpec;
    use cohort_messages::{Epoch, GroupId};

    fn record(done: usize, cancelled: bool) -> OperationRecord {
        let (group, node) = (GroupId(3), NodeId(4));
        OperationRecord {
            spec: OperationSpec::Move { group, from: NodeId(1), to: node },
            plan: vec![Step::AddLearner { group, node }, Step::Promote { group, node, index: 0 }],
            done,
            last_step_epoch: Epoch(1),
            cancelled,
            voters_before: BTreeMap::new(),
            dead: None,
            placement_before: BTreeMap::new(),
        }
    }

    #[test]
    fn o1_an_operation_is_logged_when_it_starts_steps_and_finishes() {
        let mut log = OperationLog::default();
        let id = OperationId(7);
        let mut operations = BTreeMap::from([(id, record(1, false))]);
        let events = log.changes(&operations);
        assert!(matches!(&events[..], [OperationEvent::Started { done: 1, steps: 2, .. }]), "{events:?}");
        assert_eq!(log.changes(&operations), vec![], "nothing new, nothing said");
        operations.insert(id, record(2, false));
        let events = log.changes(&operations);
        assert!(
            matches!(&events[..], [OperationEvent::Stepped { done: 2, steps: 2, step, .. }] if step.contains("Promote"))
        );
        let events = log.changes(&BTreeMap::new());
        assert_eq!(events, vec![OperationEvent::Finished { operation: id, reverted: false }]);
    }

    #[test]
    fn o1_a_cancelled_operation_is_logged_as_reverted() {
        let mut log = OperationLog::default();
        let id = OperationId(8);
        log.changes(&BTreeMap::from([(id, record(1, false))]));
        let events = log.changes(&BTreeMap::from([(id, record(1, true))]));
        assert_eq!(events, vec![OperationEvent::Cancelled { operation: id, steps: 2 }]);
        let events = log.changes(&BTreeMap::new());
        assert_eq!(events, vec![OperationEvent::Finished { operation: id, reverted: true }]);
    }
}
