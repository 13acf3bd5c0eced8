//! M2: each next step of a multi-step operation is applied only after a
//! majority of the previous step's group replicas acked that step's epoch.
//!
//! The metadata's state machine judges the gate itself, and the metadata
//! primary proposes a step only once it holds; before this checker nothing
//! outside them looked, so a gate that let a step through early changed no
//! outcome any other checker sees: the step only came sooner. Two halves,
//! so that the check rests on what nodes did and not on the metadata's own
//! word:
//!
//! - **Each step behind its gate** ([`check_apply`], on every apply of the
//!   metadata log, from the state before and after it): when an
//!   operation's `done` moves from k to k + 1 (or the operation finishes
//!   with its last step), the state before that apply must show step k − 1's
//!   group with no member change pending and a majority of its replicas
//!   (members and learners, less a replaced dead node) acked at least the
//!   operation's `last_step_epoch`.
//! - **Acks are true** ([`AckTruth`], after every turn in which a node's
//!   metadata moved): no node's recorded ack is past the highest epoch that
//!   node's own metadata replica was seen to apply, in any of its
//!   processes. An agent that acked what it had not applied would make the
//!   first half vacuous.
//!
//! The restatement is written from the rule in docs/metadata.md, not by
//! calling `Metadata::step_gate`: a checker that called the gate would
//! agree with any break of it.

use std::collections::HashMap;

use cohort_core::metadata::{Metadata, OperationRecord};
use cohort_messages::{Epoch, NodeId, OperationId};

/// Violations of the step gate in one apply that took `before` to `after`.
pub fn check_apply(before: &Metadata, after: &Metadata) -> Vec<String> {
    let mut violations = Vec::new();
    for (id, record) in &before.operations {
        if !stepped(*id, record, before, after) {
            continue;
        }
        if let Err(why) = gate_held(before, record) {
            violations.push(format!(
                "M2 broken: {id} applied step {} of {:?} at {} although {why}",
                record.done, record.spec, after.epoch
            ));
        }
    }
    violations
}

/// True if the apply moved `record` (operation `id`) one step on: its
/// `done` went up by one in the same plan, or it left the table with a step
/// still to go and was counted finished the way its plan finishes (its
/// last step applied and it finished at once). A cancel whose revert has
/// no step (the inverse of a `KeepLearner` is none) also leaves at once,
/// counted reverted while the record was not cancelled: no step.
fn stepped(id: OperationId, record: &OperationRecord, before: &Metadata, after: &Metadata) -> bool {
    match after.operations.get(&id) {
        Some(next) => next.cancelled == record.cancelled && next.plan == record.plan && next.done == record.done + 1,
        None => {
            let (was, now) = (&before.operation_totals, &after.operation_totals);
            let finished = if record.cancelled { now.reverted > was.reverted } else { now.completed > was.completed };
            record.done < record.plan.len() && finished
        }
    }
}

/// The gate of `record`'s next step, as the state before the step shows it.
fn gate_held(before: &Metadata, record: &OperationRecord) -> Result<(), String> {
    let Some(previous) = record.done.checked_sub(1).and_then(|done| record.plan.get(done)) else {
        return Ok(()); // Step 0 applies with the start, ungated.
    };
    let group = previous.group();
    let Some(group_record) = before.groups.get(&group) else { return Ok(()) };
    if let Some(pending) = &group_record.pending {
        return Err(format!("{group} was still switching to incarnation {}", pending.seal.incarnation.0));
    }
    let replicas: Vec<NodeId> = group_record
        .members
        .iter()
        .chain(&group_record.learners)
        .copied()
        .filter(|node| Some(*node) != record.dead)
        .collect();
    let acked: Vec<NodeId> = replicas
        .iter()
        .copied()
        .filter(|node| before.nodes.get(node).is_some_and(|node| node.acked >= record.last_step_epoch))
        .collect();
    if 2 * acked.len() > replicas.len() {
        return Ok(());
    }
    Err(format!(
        "only {acked:?} of {group}'s replicas {replicas:?} had acked the previous step's {}",
        record.last_step_epoch
    ))
}

/// The highest metadata epoch each node was seen to apply, over all its
/// processes.
#[derive(Debug, Default)]
pub struct AckTruth {
    applied: HashMap<NodeId, Epoch>,
}

impl AckTruth {
    /// `node`'s metadata replica holds `metadata` now: remember its epoch,
    /// then check every ack the metadata records against what each node applied.
    pub fn observed(&mut self, node: NodeId, metadata: &Metadata) -> Vec<String> {
        let seen = self.applied.entry(node).or_default();
        *seen = (*seen).max(metadata.epoch);
        metadata
            .nodes
            .iter()
            .filter(|(_, record)| record.acked > Epoch(0))
            .filter_map(|(acker, record)| {
                let applied = self.applied.get(acker).copied().unwrap_or_default();
                (record.acked > applied).then(|| {
                    format!(
                        "M2 broken: the metadata at {} records {acker} acked {}, but that node applied at most {applied}",
                        metadata.epoch, record.acked
                    )
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use cohort_core::metadata::{GroupRecord, Step};
    use cohort_messages::metadata::OperationSpec;
    use cohort_messages::replication::Replication;
    use cohort_messages::{GroupId, Incarnation, View};

    use super::*;

    fn operation(done: usize, last_step_epoch: Epoch) -> OperationRecord {
        let (group, from, to) = (GroupId(1), NodeId(1), NodeId(4));
        OperationRecord {
            spec: OperationSpec::Move { group, from, to },
            plan: vec![
                Step::AddLearner { group, node: to },
                Step::Swap { group, out: from, into: to },
                Step::RemoveLearner { group, node: from },
            ],
            done,
            last_step_epoch,
            cancelled: false,
            voters_before: BTreeMap::new(),
            dead: None,
            placement_before: BTreeMap::new(),
        }
    }

    /// Group 1 on nodes 1–3 with learner 4; `acked` lists who acked epoch 5.
    fn metadata(epoch: u64, acked: &[u64], done: usize) -> Metadata {
        let mut metadata = Metadata { epoch: Epoch(epoch), ..Metadata::default() };
        let group = GroupRecord {
            kind: "kv".into(),
            incarnation: Incarnation(0),
            members: vec![NodeId(1), NodeId(2), NodeId(3)],
            learners: vec![NodeId(4)],
            replication: Replication::default(),
            caught_up: BTreeSet::new(),
            pending: None,
            live: true,
            owner: None,
            owner_view_max: View(0),
            created: Incarnation(0),
            transfer: None,
        };
        metadata.groups.insert(GroupId(1), group);
        for node in 1..=4 {
            metadata.nodes.entry(NodeId(node)).or_default().acked =
                if acked.contains(&node) { Epoch(5) } else { Epoch(4) };
        }
        metadata.operations.insert(OperationId(1), operation(done, Epoch(5)));
        metadata
    }

    #[test]
    fn m2_a_step_after_a_majority_of_acks_passes() {
        let before = metadata(9, &[1, 2, 4], 1);
        let after = Metadata { epoch: Epoch(10), ..metadata(9, &[1, 2, 4], 2) };
        assert_eq!(check_apply(&before, &after), Vec::<String>::new());
    }

    #[test]
    fn m2_a_step_before_a_majority_of_acks_is_a_violation() {
        // Two of four replicas is no majority.
        let before = metadata(9, &[1, 2], 1);
        let after = Metadata { epoch: Epoch(10), ..metadata(9, &[1, 2], 2) };
        let violations = check_apply(&before, &after);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(violations[0].contains("M2 broken: operation"), "{violations:?}");
        // An operation that finished with the step is judged the same.
        let mut finished = after.clone();
        finished.operations.clear();
        finished.operation_totals.completed += 1;
        let mut last = metadata(9, &[1], 2);
        last.operations.get_mut(&OperationId(1)).expect("in flight").done = 2;
        assert_eq!(check_apply(&last, &finished).len(), 1);
    }

    #[test]
    fn m2_a_cancel_or_an_unrelated_apply_is_no_step() {
        let before = metadata(9, &[], 1);
        let mut cancelled = before.clone();
        let record = cancelled.operations.get_mut(&OperationId(1)).expect("in flight");
        record.cancelled = true;
        record.plan.truncate(1);
        record.done = 0;
        assert!(check_apply(&before, &cancelled).is_empty());
        assert!(check_apply(&before, &before).is_empty());
        // A cancel whose revert has no step leaves at once, counted reverted.
        let mut reverted = before.clone();
        reverted.operations.clear();
        reverted.operation_totals.reverted += 1;
        assert!(check_apply(&before, &reverted).is_empty());
    }

    #[test]
    fn m2_an_ack_past_what_the_node_applied_is_a_violation() {
        let mut truth = AckTruth::default();
        let metadata = metadata(9, &[1, 2], 1);
        // Node 1 applied epoch 9; nobody was seen applying anything else yet.
        let violations = truth.observed(NodeId(1), &metadata);
        assert!(violations.iter().any(|violation| violation.contains("node:2 acked")), "{violations:?}");
        assert!(!violations.iter().any(|violation| violation.contains("node:1 acked")), "{violations:?}");
        assert!(truth.observed(NodeId(2), &metadata).iter().all(|violation| !violation.contains("node:2 acked")));
    }
}
