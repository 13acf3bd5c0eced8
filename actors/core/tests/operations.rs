//! Multi-step operations in the metadata state machine (M2–M5, P4).

use cohort_core::StateMachine;
use cohort_core::metadata::{Metadata, MetadataStateMachine};
use cohort_messages::metadata::{MetadataCommand, MetadataResult, OperationSpec};
use cohort_messages::replication::{Replication, WriteMode};
use cohort_messages::{Epoch, GroupId, Incarnation, NodeId, Op, OperationId, SessionId, View};
use proptest::prelude::*;

/// The metadata, with the next epoch to apply at.
struct Log {
    metadata: Metadata,
}

impl Log {
    /// `nodes` registered nodes with sessions, and groups of the given members.
    fn new(nodes: u64, groups: &[&[u64]]) -> Log {
        let mut log = Log { metadata: Metadata::default() };
        for node in 1..=nodes {
            log.apply(MetadataCommand::RegisterNode { node: NodeId(node), address: format!("n{node}") });
            log.apply(MetadataCommand::OpenSession { node: NodeId(node) });
        }
        for (group, members) in groups.iter().enumerate() {
            let members = members.iter().map(|node| NodeId(*node)).collect();
            log.apply(MetadataCommand::CreateGroup {
                group: GroupId(group as u64),
                kind: "kv".into(),
                members,
                replication: Default::default(),
            });
        }
        log
    }

    fn apply(&mut self, command: MetadataCommand) -> MetadataResult {
        let epoch = Epoch(self.metadata.epoch.0 + 1);
        self.metadata.apply(epoch, command)
    }

    fn start(&mut self, spec: OperationSpec) -> OperationId {
        match self.apply(MetadataCommand::StartOperation { spec }) {
            MetadataResult::OperationStarted { operation, .. } => operation,
            other => panic!("not started: {other:?}"),
        }
    }

    /// `nodes` ack everything applied so far.
    fn ack(&mut self, nodes: &[u64]) {
        for node in nodes {
            let epoch = self.metadata.epoch;
            self.apply(MetadataCommand::AckEpoch { node: NodeId(*node), epoch });
        }
    }

    fn caught_up(&mut self, group: u64, node: u64) -> MetadataResult {
        let incarnation = self.metadata.groups[&GroupId(group)].incarnation;
        self.apply(MetadataCommand::ReportCaughtUp {
            group: GroupId(group),
            incarnation,
            node: NodeId(node),
            op: Op(10),
        })
    }

    fn members(&self, group: u64) -> Vec<u64> {
        self.metadata.groups[&GroupId(group)].members.iter().map(|node| node.0).collect()
    }

    fn learners(&self, group: u64) -> Vec<u64> {
        self.metadata.groups[&GroupId(group)].learners.iter().map(|node| node.0).collect()
    }

    /// The groups carry out their pending member changes: every next member
    /// reports holding the seal (what each node's agent does once its
    /// replica holds it durably).
    fn seal_pending(&mut self) {
        let pending: Vec<(GroupId, Incarnation, Vec<NodeId>)> = self
            .metadata
            .groups
            .iter()
            .filter_map(|(group, record)| {
                Some((*group, record.incarnation, record.pending.as_ref()?.seal.members.clone()))
            })
            .collect();
        for (group, incarnation, members) in pending {
            for node in members {
                self.apply(MetadataCommand::ReportSealed { group, incarnation, node });
            }
        }
    }

    fn incarnation(&self, group: u64) -> u64 {
        self.metadata.groups[&GroupId(group)].incarnation.0
    }

    /// What the metadata primary's driver proposes next, applied.
    fn drive(&mut self) -> Option<MetadataResult> {
        let step = self.metadata.next_operation_step()?;
        Some(self.apply(step))
    }

    /// Every group's primary reports every learner caught up.
    fn all_learners_caught_up(&mut self) {
        let learners: Vec<(u64, u64)> = self
            .metadata
            .groups
            .iter()
            .flat_map(|(group, record)| record.learners.iter().map(move |node| (group.0, node.0)))
            .collect();
        for (group, node) in learners {
            self.caught_up(group, node);
        }
    }

    /// Drive to the end: every node acks, every learner is reported caught up.
    fn drive_to_end(&mut self, nodes: &[u64]) {
        for _ in 0..100 {
            if self.metadata.operations.is_empty() {
                return;
            }
            self.ack(nodes);
            self.all_learners_caught_up();
            self.drive();
            self.seal_pending();
        }
        panic!("operations did not finish: {:?}", self.metadata.operations);
    }
}

fn refused(result: MetadataResult) -> String {
    match result {
        MetadataResult::Refused { reason } => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn m2_next_step_waits_for_majority_ack() {
    let mut log = Log::new(4, &[&[1, 2, 3]]);
    let id = log.start(OperationSpec::Move { group: GroupId(0), from: NodeId(3), to: NodeId(4) });
    assert_eq!(log.learners(0), vec![4], "the first step applied with the plan");
    log.caught_up(0, 4);
    // Replicas of group 0 are now 1, 2, 3 and learner 4: a majority is 3.
    assert_eq!(log.metadata.next_operation_step(), None, "no replica acked the first step yet");
    let early = refused(log.apply(MetadataCommand::AdvanceOperation { operation: id, step: 1 }));
    assert!(early.contains("waiting for a majority"), "{early}");
    log.ack(&[1, 2]);
    assert_eq!(log.metadata.next_operation_step(), None, "2 of 4 is not a majority");
    log.ack(&[4]);
    assert_eq!(log.metadata.next_operation_step(), Some(MetadataCommand::AdvanceOperation { operation: id, step: 1 }));
    assert!(matches!(log.drive(), Some(MetadataResult::Done { .. })));
    assert_eq!(log.members(0), vec![1, 2, 3], "the promotion is decided; the group carries it out");
    log.ack(&[1, 2, 3, 4]);
    assert_eq!(log.metadata.next_operation_step(), None, "not before the group switched");
    log.seal_pending();
    assert_eq!((log.members(0), log.incarnation(0)), (vec![1, 2, 3, 4], 2), "promoted by a switch");
    assert_eq!(log.metadata.next_operation_step(), None, "the switch is not acked yet");
    log.ack(&[1, 2, 4]);
    log.drive();
    log.seal_pending();
    assert_eq!((log.members(0), log.incarnation(0)), (vec![1, 2, 4], 3), "the old replica leaves last");
    assert!(log.metadata.operations.is_empty());
    assert_eq!(log.metadata.operation_totals.completed, 1);
    // Other metadata changes went on meanwhile: the log took acks between steps.
}

#[test]
fn m3_overlapping_operation_rejected() {
    let mut log = Log::new(5, &[&[1, 2, 3], &[2, 3, 4]]);
    let first = log.start(OperationSpec::Move { group: GroupId(0), from: NodeId(1), to: NodeId(4) });
    let reason =
        refused(log.apply(MetadataCommand::StartOperation { spec: OperationSpec::Decommission { node: NodeId(3) } }));
    assert!(reason.contains(&first.to_string()) && reason.contains("group:0"), "names the operation: {reason}");
    // A disjoint operation runs side by side.
    let second = log.start(OperationSpec::Move { group: GroupId(1), from: NodeId(4), to: NodeId(5) });
    assert_ne!(first, second);
    assert_eq!(log.metadata.operations.len(), 2);
    let deleting = refused(log.apply(MetadataCommand::DeleteGroup { group: GroupId(0) }));
    assert!(deleting.contains(&first.to_string()), "{deleting}");
    log.drive_to_end(&[1, 2, 3, 4, 5]);
    assert_eq!(log.members(0), vec![2, 3, 4], "node 4 took node 1's place");
    assert_eq!(log.members(1), vec![2, 3, 5]);
}

#[test]
fn m4_driver_restart_resumes_plan() {
    let mut log = Log::new(4, &[&[1, 2, 3]]);
    let id = log.start(OperationSpec::Replace { group: GroupId(0), dead: NodeId(2), with: NodeId(4) });
    let record = &log.metadata.operations[&id];
    assert_eq!(
        (record.plan.len(), record.done),
        (2, 1),
        "the whole plan (add learner, swap) is stored with the first step"
    );
    log.ack(&[1, 3, 4]);
    log.caught_up(0, 4);
    // The metadata primary fails: its successor restores the state machine
    // (snapshot) and, holding no driver state of its own, proposes the same step.
    let mut old = MetadataStateMachine::default();
    old.restore(&encode(&log.metadata)).expect("restores");
    let mut successor = MetadataStateMachine::default();
    successor.restore(&old.snapshot()).expect("restores");
    assert_eq!(
        successor.state().next_operation_step(),
        Some(MetadataCommand::AdvanceOperation { operation: id, step: 1 })
    );
    log.metadata = successor.state().clone();
    // The dead node never acks: a Replace does not wait for it.
    log.drive_to_end(&[1, 3, 4]);
    assert_eq!(log.members(0), vec![1, 4, 3], "node 4 took the dead node's member index");
}

fn encode(metadata: &Metadata) -> Vec<u8> {
    cohort_messages::metadata::encode_value(metadata).to_vec()
}

#[test]
fn m5_cancel_reverts_steps() {
    let mut log = Log::new(5, &[&[1, 2, 3], &[3, 4, 1]]);
    let before = log.metadata.groups.clone();
    let id = log.start(OperationSpec::Decommission { node: NodeId(3) });
    // Finish group 0's move entirely (steps 1 and 2) and group 1's first step.
    for _ in 0..3 {
        log.seal_pending();
        log.ack(&[1, 2, 3, 4, 5]);
        log.all_learners_caught_up();
        log.drive();
    }
    log.seal_pending();
    assert!(!log.members(0).contains(&3), "group 0 no longer has node 3: {:?}", log.members(0));
    assert!(!log.learners(1).is_empty(), "group 1 has its learner");
    assert!(matches!(log.apply(MetadataCommand::CancelOperation { operation: id }), MetadataResult::Done { .. }));
    assert!(log.metadata.operations[&id].cancelled);
    let again = refused(log.apply(MetadataCommand::CancelOperation { operation: id }));
    assert!(again.contains("already being reverted"), "{again}");
    log.drive_to_end(&[1, 2, 3, 4, 5]);
    for (group, record) in &before {
        let now = &log.metadata.groups[group];
        assert_eq!((&now.members, &now.learners), (&record.members, &record.learners), "{group} is as before");
    }
    assert_eq!(log.metadata.operation_totals.reverted, 1);
    let finished = refused(log.apply(MetadataCommand::CancelOperation { operation: id }));
    assert!(finished.contains("not in flight"), "{finished}");
}

#[test]
fn p4_learner_catches_up_before_voting() {
    let mut log = Log::new(4, &[&[1, 2, 3]]);
    let id = log.start(OperationSpec::Join { node: NodeId(4), groups: vec![GroupId(0)] });
    assert_eq!((log.members(0), log.learners(0)), (vec![1, 2, 3], vec![4]), "a learner does not vote");
    log.ack(&[1, 2, 3, 4]);
    assert_eq!(log.metadata.next_operation_step(), None, "not caught up");
    let early = refused(log.apply(MetadataCommand::AdvanceOperation { operation: id, step: 1 }));
    assert!(early.contains("has not caught up"), "{early}");
    // A learner cannot be recorded as owner either.
    let report = MetadataCommand::ReportOwnership {
        group: GroupId(0),
        incarnation: Incarnation(1),
        node: NodeId(4),
        session: log.metadata.nodes[&NodeId(4)].session.unwrap_or(SessionId(1)),
        view: View(1),
    };
    assert!(refused(log.apply(report)).contains("not a member"));
    assert!(matches!(log.caught_up(0, 4), MetadataResult::Done { .. }));
    log.drive();
    log.seal_pending();
    assert_eq!(log.members(0), vec![1, 2, 3, 4]);
    assert!(log.metadata.operations.is_empty());
    assert!(refused(log.caught_up(0, 4)).contains("not a learner"), "only learners are reported");
}

/// A group created write-all and asynchronous keeps both through member
/// changes: every replica added later is built from what the metadata
/// records (one hosting path), and each next incarnation's seal keeps the
/// group's rule for its quorum.
#[test]
fn m2_member_changes_keep_the_groups_replication() {
    let mut log = Log { metadata: Metadata::default() };
    for node in 1..=5 {
        log.apply(MetadataCommand::RegisterNode { node: NodeId(node), address: format!("n{node}") });
        log.apply(MetadataCommand::OpenSession { node: NodeId(node) });
    }
    let replication = Replication { quorum: Some(3), write_mode: WriteMode::Async };
    let members = vec![NodeId(1), NodeId(2), NodeId(3)];
    log.apply(MetadataCommand::CreateGroup { group: GroupId(0), kind: "kv".into(), members, replication });
    log.start(OperationSpec::Move { group: GroupId(0), from: NodeId(3), to: NodeId(4) });
    log.drive_to_end(&[1, 2, 3, 4, 5]);
    assert_eq!(log.members(0), vec![1, 2, 4]);
    assert_eq!(log.metadata.groups[&GroupId(0)].replication, replication, "a move keeps write-all");
    log.start(OperationSpec::Join { node: NodeId(5), groups: vec![GroupId(0)] });
    log.drive_to_end(&[1, 2, 3, 4, 5]);
    assert_eq!(log.members(0).len(), 4);
    let record = &log.metadata.groups[&GroupId(0)];
    assert_eq!(record.replication.quorum, Some(4), "write-all stays write-all as the group grows");
    assert_eq!(record.replication.write_mode, WriteMode::Async);
}

#[test]
fn m2_a_majority_group_stays_a_majority() {
    let mut log = Log::new(5, &[&[1, 2, 3]]);
    log.start(OperationSpec::Join { node: NodeId(4), groups: vec![GroupId(0)] });
    log.drive_to_end(&[1, 2, 3, 4, 5]);
    assert_eq!(log.members(0), vec![1, 2, 3, 4]);
    assert_eq!(log.metadata.groups[&GroupId(0)].replication.quorum, None, "still a majority, of four now");
}

#[test]
fn operations_refuse_what_they_cannot_do() {
    let mut log = Log::new(3, &[&[1, 2, 3]]);
    let no_target =
        refused(log.apply(MetadataCommand::StartOperation { spec: OperationSpec::Decommission { node: NodeId(1) } }));
    assert!(no_target.contains("no live node outside group:0"), "{no_target}");
    let not_member = refused(log.apply(MetadataCommand::StartOperation {
        spec: OperationSpec::Move { group: GroupId(0), from: NodeId(9), to: NodeId(2) },
    }));
    assert!(not_member.contains("not registered") || not_member.contains("not a member"), "{not_member}");
    let unknown = refused(log.apply(MetadataCommand::StartOperation {
        spec: OperationSpec::Join { node: NodeId(1), groups: vec![GroupId(5)] },
    }));
    assert!(unknown.contains("group:5 does not exist"), "{unknown}");
}

/// Any mix of operations, acks, caught-up reports, cancels and forced steps:
/// no group ever has fewer voters than before its operation, a node is never
/// both member and learner, no group is in two operations, and members
/// applying the same commands stay identical.
fn command(nodes: u64, groups: u64) -> impl Strategy<Value = MetadataCommand> {
    let node = 1..=nodes;
    let group = 0..groups;
    prop_oneof![
        (group.clone(), node.clone(), node.clone()).prop_map(|(g, from, to)| MetadataCommand::StartOperation {
            spec: OperationSpec::Move { group: GroupId(g), from: NodeId(from), to: NodeId(to) }
        }),
        (node.clone())
            .prop_map(|n| MetadataCommand::StartOperation { spec: OperationSpec::Decommission { node: NodeId(n) } }),
        (node.clone(), group.clone()).prop_map(|(n, g)| MetadataCommand::StartOperation {
            spec: OperationSpec::Join { node: NodeId(n), groups: vec![GroupId(g)] }
        }),
        (1u64..4, 0u32..8).prop_map(|(o, s)| MetadataCommand::AdvanceOperation { operation: OperationId(o), step: s }),
        (1u64..4).prop_map(|o| MetadataCommand::CancelOperation { operation: OperationId(o) }),
        (group.clone(), node.clone()).prop_map(|(g, n)| MetadataCommand::ReportCaughtUp {
            group: GroupId(g),
            incarnation: Incarnation(1),
            node: NodeId(n),
            op: Op(1)
        }),
        (node.clone(), 0u64..200).prop_map(|(n, e)| MetadataCommand::AckEpoch { node: NodeId(n), epoch: Epoch(e) }),
        (group.clone(), 1u64..4, node.clone()).prop_map(|(g, i, n)| MetadataCommand::ReportSealed {
            group: GroupId(g),
            incarnation: Incarnation(i),
            node: NodeId(n)
        }),
        (group.clone(), node.clone(), 1u64..4).prop_map(|(g, n, i)| MetadataCommand::ReportCaughtUp {
            group: GroupId(g),
            incarnation: Incarnation(i),
            node: NodeId(n),
            op: Op(1)
        }),
        Just(MetadataCommand::DeleteGroup { group: GroupId(0) }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn no_step_leaves_a_group_below_its_voters(commands in proptest::collection::vec(command(5, 3), 1..120)) {
        let mut log = Log::new(5, &[&[1, 2, 3], &[2, 3, 4], &[3, 4, 5]]);
        let mut replica = MetadataStateMachine::default();
        replica.restore(&encode(&log.metadata)).expect("restores");
        for command in commands {
            let epoch = log.metadata.epoch.0 + 1;
            let bytes = command.encode();
            log.apply(command);
            replica.apply(Op(epoch), &bytes);
            let mut seen = std::collections::BTreeSet::new();
            for record in log.metadata.operations.values() {
                for (group, voters) in &record.voters_before {
                    prop_assert!(seen.insert(*group), "{group} in two operations");
                    let live = &log.metadata.groups[group];
                    prop_assert!(live.members.len() >= *voters, "{group} below its voters: {live:?}");
                    if let Some(pending) = &live.pending {
                        prop_assert!(pending.seal.members.len() >= *voters, "{group} would fall below: {live:?}");
                    }
                }
            }
            for (group, record) in &log.metadata.groups {
                prop_assert!(record.learners.iter().all(|c| !record.members.contains(c)), "{group}: {record:?}");
                prop_assert!(!record.live || !record.members.is_empty(), "{group} has no voter");
            }
            // Steps of live ops follow their plans only.
            if let Some(next) = log.metadata.next_operation_step() {
                prop_assert!(matches!(next, MetadataCommand::AdvanceOperation { .. }), "{next:?}");
            }
        }
        prop_assert_eq!(replica.state(), &log.metadata);
    }
}

/// The metadata group as its primary records it (Z6): voters 1 to 5,
/// learners 6 and 7, on seven registered nodes.
fn with_metadata_group() -> Log {
    let mut log = Log::new(7, &[]);
    let record = MetadataCommand::RecordMetadataGroup {
        incarnation: Incarnation(1),
        members: (1..=5).map(NodeId).collect(),
        learners: vec![NodeId(6), NodeId(7)],
    };
    assert!(matches!(log.apply(record.clone()), MetadataResult::Done { .. }));
    assert!(matches!(log.apply(record), MetadataResult::Refused { .. }), "recorded once");
    log
}

const META: u64 = u64::MAX;

#[test]
fn z6_a_dead_metadata_voter_is_replaced_by_a_learner_that_caught_up() {
    let mut log = with_metadata_group();
    log.start(OperationSpec::Replace { group: GroupId::METADATA, dead: NodeId(1), with: NodeId(6) });
    // Node 6 learns the log already: the plan keeps it and waits for its catch-up.
    assert_eq!(log.learners(META), vec![6, 7]);
    log.ack(&[2, 3, 4, 5, 6, 7]);
    assert!(log.drive().is_none_or(|result| matches!(result, MetadataResult::Refused { .. })), "not caught up yet");
    log.caught_up(META, 6);
    assert!(matches!(log.drive(), Some(MetadataResult::Done { .. })));
    let pending = log.metadata.groups[&GroupId::METADATA].pending.clone().expect("a pending switch");
    assert_eq!(pending.seal.members, [6, 2, 3, 4, 5].map(NodeId).to_vec(), "node 6 takes node 1's member index");
    assert_eq!(pending.learners, vec![NodeId(1), NodeId(7)], "the replaced voter stays a learner, in node order");
    log.seal_pending();
    assert_eq!((log.incarnation(META), log.members(META)), (2, vec![6, 2, 3, 4, 5]));
    assert!(log.metadata.operations.is_empty(), "the replace finished with the switch");
    assert_eq!(log.metadata.metadata_voters(), Some([6, 2, 3, 4, 5].map(NodeId).to_vec()));
}

#[test]
fn z6_metadata_voters_grow_by_join_and_shrink_to_a_learner() {
    let mut log = with_metadata_group();
    log.start(OperationSpec::Join { node: NodeId(7), groups: vec![GroupId::METADATA] });
    log.drive_to_end(&[1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(log.members(META), vec![1, 2, 3, 4, 5, 7]);
    assert_eq!(log.learners(META), vec![6]);
    log.start(OperationSpec::Shrink { group: GroupId::METADATA, node: NodeId(2) });
    log.drive_to_end(&[1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(log.members(META), vec![1, 3, 4, 5, 7], "one voter fewer");
    assert_eq!(log.learners(META), vec![2, 6], "the voter that left learns on");
}

#[test]
fn z6_the_metadata_group_is_never_deleted_created_transferred_or_decommissioned() {
    let mut log = with_metadata_group();
    let refused = |result: MetadataResult| matches!(result, MetadataResult::Refused { .. });
    assert!(refused(log.apply(MetadataCommand::DeleteGroup { group: GroupId::METADATA })));
    assert!(refused(log.apply(MetadataCommand::TransferPrimary { group: GroupId::METADATA, to: NodeId(2) })));
    let create = MetadataCommand::CreateGroup {
        group: GroupId::METADATA,
        kind: "kv".into(),
        members: vec![NodeId(1)],
        replication: Replication::default(),
    };
    assert!(refused(log.apply(create)));
    // A decommission moves the node's partition replicas; the metadata
    // group's voters change only by name.
    let result = log.apply(MetadataCommand::StartOperation { spec: OperationSpec::Decommission { node: NodeId(1) } });
    assert!(refused(result), "node 1 hosts no partition replica here");
    assert_eq!(log.members(META), vec![1, 2, 3, 4, 5]);
}
