//! Operator changes of the metadata at run time: groups created and deleted
//! (C3), primary transfers (C4), the balancer (C5) and the upgrade freeze;
//! and the batched creations and ownership reports that keep the metadata
//! of a cluster with many groups moving at start-up and after a failover (Z2).

use cohort_core::client_table::REGISTRATION;
use cohort_core::metadata::{
    AgentConfig, AgentOutput, BootstrapGroup, ExpiredPolicy, HostedReplica, Metadata, MetadataAgent, next_transfer,
    next_transfers, primaries_per_node,
};
use cohort_messages::metadata::{
    GroupCreation, GroupTransfer, METADATA_BATCH_ENTRIES_MAX, MetadataCommand, MetadataResult, OperationSpec,
    OwnedGroup,
};
use cohort_messages::{ClientId, Epoch, GroupId, Incarnation, NodeId, Op, SessionId, View};

/// A metadata state that applies commands at increasing epochs.
struct Log {
    metadata: Metadata,
    epoch: u64,
}

impl Log {
    /// `nodes` registered, each with a session.
    fn with_nodes(nodes: u64) -> Log {
        let mut log = Log { metadata: Metadata::default(), epoch: 0 };
        for node in 1..=nodes {
            log.apply(MetadataCommand::RegisterNode { node: NodeId(node), address: format!("n{node}") });
            log.apply(MetadataCommand::OpenSession { node: NodeId(node) });
        }
        log
    }

    fn apply(&mut self, command: MetadataCommand) -> MetadataResult {
        self.epoch += 1;
        self.metadata.apply(Epoch(self.epoch), command)
    }

    fn create(&mut self, group: u64, members: &[u64]) -> MetadataResult {
        self.apply(MetadataCommand::CreateGroup {
            group: GroupId(group),
            kind: "kv".into(),
            members: members.iter().copied().map(NodeId).collect(),
            replication: Default::default(),
        })
    }

    fn session(&self, node: u64) -> SessionId {
        self.metadata.nodes[&NodeId(node)].session.expect("a live session")
    }

    fn report(&mut self, group: u64, node: u64, view: u32) -> MetadataResult {
        let session = self.session(node);
        self.apply(MetadataCommand::ReportOwnership {
            group: GroupId(group),
            incarnation: Incarnation(1),
            node: NodeId(node),
            session,
            view: View(view),
        })
    }
}

fn refused(result: &MetadataResult) -> &str {
    match result {
        MetadataResult::Refused { reason } => reason,
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn c3_a_group_created_at_run_time_is_refused_on_unknown_nodes_and_when_it_exists() {
    let mut log = Log::with_nodes(3);
    assert!(refused(&log.create(12, &[1, 2, 9])).contains("node:9 is not registered"));
    assert!(matches!(log.create(12, &[1, 2, 3]), MetadataResult::GroupCreated { incarnation: Incarnation(1), .. }));
    assert!(refused(&log.create(12, &[1, 2, 3])).contains("exists"));
    let record = &log.metadata.groups[&GroupId(12)];
    assert_eq!(record.created, record.incarnation, "a new group is at the incarnation it was created at");
    assert!(matches!(log.apply(MetadataCommand::DeleteGroup { group: GroupId(12) }), MetadataResult::Done { .. }));
    assert!(refused(&log.apply(MetadataCommand::DeleteGroup { group: GroupId(12) })).contains("does not exist"));
}

fn agent(node: u64) -> MetadataAgent {
    let config = AgentConfig {
        node: NodeId(node),
        address: format!("n{node}"),
        client: ClientId(u128::from(node)),
        metadata_group: GroupId::METADATA,
        policy: ExpiredPolicy::Reconnect { attempts: 3 },
        keepalive_interval_ticks: 5,
        reconnect_backoff_ticks: 20,
        session_timeout_ticks: 30,
        request_retry_ticks: 4,
        unload_grace_ticks: 10,
        bootstrap_groups: Vec::new(),
        balance_transfers_per_tick: Some(1),
    };
    config.validate().expect("valid");
    MetadataAgent::new(config)
}

fn hosted(group: u64, primary: bool, view: u32) -> HostedReplica {
    HostedReplica {
        group: GroupId(group),
        incarnation: Incarnation(1),
        primary,
        view: View(view),
        sealed: None,
        seal_durable: false,
        learners: Vec::new(),
        caught_up: Vec::new(),
        members: Vec::new(),
        outpaced: false,
        durable_commit: Op(0),
    }
}

#[test]
fn c3_members_host_a_created_group_and_unload_it_once_deleted() {
    let mut log = Log::with_nodes(3);
    log.create(12, &[1, 2, 3]);
    let mut agent = agent(2);
    let out = agent.on_tick(1, &log.metadata, false, &[]);
    let host = out.iter().find_map(|output| match output {
        AgentOutput::HostMember { group, incarnation, members, .. } => Some((*group, *incarnation, members.clone())),
        _ => None,
    });
    assert_eq!(host, Some((GroupId(12), Incarnation(1), vec![NodeId(1), NodeId(2), NodeId(3)])));
    // Hosted: not asked again.
    let out = agent.on_tick(2, &log.metadata, false, &[hosted(12, false, 0)]);
    assert!(!out.iter().any(|output| matches!(output, AgentOutput::HostMember { .. })), "{out:?}");
    // A group that went through a member change is never created empty.
    log.metadata.groups.get_mut(&GroupId(12)).expect("created").incarnation = Incarnation(2);
    let out = agent.on_tick(20, &log.metadata, false, &[]);
    assert!(!out.iter().any(|output| matches!(output, AgentOutput::HostMember { .. })), "{out:?}");
    log.metadata.groups.get_mut(&GroupId(12)).expect("created").incarnation = Incarnation(1);
    // Deleted: unloaded after the grace period.
    log.apply(MetadataCommand::DeleteGroup { group: GroupId(12) });
    let mut unloaded = false;
    for now in 30..50 {
        let out = agent.on_tick(now, &log.metadata, false, &[hosted(12, false, 0)]);
        unloaded |= out.contains(&AgentOutput::Unload(GroupId(12)));
    }
    assert!(unloaded, "a deleted group's replica and data are removed");
}

#[test]
fn c4_a_transfer_is_recorded_then_carried_out_by_the_leader_and_ended_by_a_later_view() {
    let mut log = Log::with_nodes(3);
    log.create(4, &[1, 2, 3]);
    log.report(4, 1, 3);
    assert!(
        refused(&log.apply(MetadataCommand::TransferPrimary { group: GroupId(4), to: NodeId(1) }))
            .contains("already leads")
    );
    assert!(
        refused(&log.apply(MetadataCommand::TransferPrimary { group: GroupId(4), to: NodeId(7) }))
            .contains("not a voting member")
    );
    let config_epoch = log.metadata.config_epoch;
    assert!(matches!(
        log.apply(MetadataCommand::TransferPrimary { group: GroupId(4), to: NodeId(3) }),
        MetadataResult::Done { .. }
    ));
    assert_eq!(log.metadata.config_epoch, config_epoch, "a transfer needs no acks from every node");
    // The leader's agent asks its shard, and again after a retry period.
    let mut leader = agent(1);
    let asks = |out: Vec<AgentOutput>| {
        out.iter().filter(|o| **o == AgentOutput::TransferPrimary { group: GroupId(4), to: NodeId(3) }).count()
    };
    assert_eq!(asks(leader.on_tick(1, &log.metadata, false, &[hosted(4, true, 3)])), 1);
    assert_eq!(asks(leader.on_tick(2, &log.metadata, false, &[hosted(4, true, 3)])), 0, "not every tick");
    assert_eq!(asks(leader.on_tick(6, &log.metadata, false, &[hosted(4, true, 3)])), 1, "again after the retry period");
    // A backup never asks.
    let mut backup = agent(2);
    assert_eq!(asks(backup.on_tick(1, &log.metadata, false, &[hosted(4, false, 3)])), 0);
    // The new primary's report of a later view ends the transfer.
    log.report(4, 3, 5);
    assert_eq!(log.metadata.groups[&GroupId(4)].transfer, None);
    assert_eq!(asks(leader.on_tick(20, &log.metadata, false, &[hosted(4, false, 5)])), 0);
}

#[test]
fn c4_a_transfer_to_a_node_whose_session_expires_is_dropped() {
    let mut log = Log::with_nodes(3);
    log.create(4, &[1, 2, 3]);
    log.report(4, 1, 1);
    log.apply(MetadataCommand::TransferPrimary { group: GroupId(4), to: NodeId(2) });
    let session = log.session(2);
    log.apply(MetadataCommand::ExpireSession { node: NodeId(2), session });
    assert_eq!(log.metadata.groups[&GroupId(4)].transfer, None);
    assert!(
        refused(&log.apply(MetadataCommand::TransferPrimary { group: GroupId(4), to: NodeId(2) }))
            .contains("no live session")
    );
}

#[test]
fn c5_the_balancer_narrows_the_spread_until_counts_are_one_apart() {
    let mut log = Log::with_nodes(3);
    // Nine groups, every node a member, all led by node 1 (as after node
    // 2 and 3 restarted).
    for group in 0..9 {
        log.create(group, &[1, 2, 3]);
        log.report(group, 1, 1);
    }
    let mut transfers = 0;
    while let Some(command) = next_transfer(&log.metadata) {
        let MetadataCommand::TransferPrimary { group, to } = command.clone() else { panic!("{command:?}") };
        assert!(matches!(log.apply(command), MetadataResult::Done { .. }));
        // The transfer completes: the target reports the next view.
        log.report(group.0, to.0, 2);
        transfers += 1;
        assert!(transfers <= 9, "the balancer does not go on for ever");
    }
    let counts: Vec<usize> = primaries_per_node(&log.metadata).into_values().collect();
    assert_eq!(counts, vec![3, 3, 3], "after {transfers} transfers");
    assert_eq!(transfers, 6, "each transfer narrows the spread");
}

/// C5: one command of many transfers picks what one transfer at a time
/// would, each counted at its target before the next, and the metadata
/// records every one; a freeze refuses the whole command.
#[test]
fn c5_many_transfers_in_one_command_pick_as_one_at_a_time_would() {
    let build = || {
        let mut log = Log::with_nodes(3);
        // Twelve groups led by node 1, and three by node 2 whose members
        // leave out node 3.
        for group in 0..12 {
            log.create(group, &[1, 2, 3]);
            log.report(group, 1, 1);
        }
        for group in 12..15 {
            log.create(group, &[1, 2]);
            log.report(group, 2, 1);
        }
        log
    };
    let mut one_at_a_time = build();
    let mut singles = Vec::new();
    while let Some(command) = next_transfer(&one_at_a_time.metadata) {
        let MetadataCommand::TransferPrimary { group, to } = command.clone() else { panic!("{command:?}") };
        one_at_a_time.apply(command);
        singles.push(GroupTransfer { group, to });
        assert!(singles.len() <= 15, "the balancer does not go on for ever");
    }
    let mut batched = build();
    let transfers = next_transfers(&batched.metadata, 256);
    assert_eq!(transfers, singles, "the same transfers, in the same order");
    assert_eq!(next_transfers(&batched.metadata, 2), singles[..2], "at most as many as asked for");
    let command = MetadataCommand::TransferPrimaries { transfers };
    let mut frozen = build();
    frozen.apply(MetadataCommand::Freeze { by: NodeId(1) });
    assert!(matches!(frozen.apply(command.clone()), MetadataResult::Refused { .. }), "a freeze refuses them all");
    assert!(matches!(batched.apply(command), MetadataResult::Done { .. }));
    let counts: Vec<usize> = primaries_per_node(&batched.metadata).into_values().collect();
    assert_eq!(counts, vec![5, 5, 5], "counted at their targets");
    assert!(next_transfers(&batched.metadata, 256).is_empty(), "balanced");
}

#[test]
fn c5_the_balancer_counts_unfinished_transfers_and_skips_nodes_without_a_session() {
    let mut log = Log::with_nodes(3);
    for group in 0..4 {
        log.create(group, &[1, 2, 3]);
        log.report(group, 1, 1);
    }
    let session = log.session(3);
    log.apply(MetadataCommand::ExpireSession { node: NodeId(3), session });
    // Node 1 leads 4, node 2 none, node 3 is gone: two transfers to node 2,
    // counted while unfinished.
    for _ in 0..2 {
        let command = next_transfer(&log.metadata).expect("a transfer");
        assert!(matches!(command, MetadataCommand::TransferPrimary { to: NodeId(2), .. }), "{command:?}");
        log.apply(command);
    }
    assert_eq!(next_transfer(&log.metadata), None, "2 and 2 once the asked transfers are done");
}

#[test]
fn c5_the_balancer_waits_until_every_group_has_an_owner() {
    let mut log = Log::with_nodes(2);
    for group in 0..4 {
        log.create(group, &[1, 2]);
    }
    for group in 0..3 {
        log.report(group, 1, 1);
    }
    assert_eq!(next_transfer(&log.metadata), None, "group:3's primary is not known yet");
    log.report(3, 1, 1);
    assert!(next_transfer(&log.metadata).is_some(), "4 and 0 once every group is owned");
}

#[test]
fn freeze_refuses_operator_changes_naming_its_epoch_and_lets_failover_go_on() {
    let mut log = Log::with_nodes(4);
    log.create(1, &[1, 2, 3]);
    let MetadataResult::Done { epoch: since } = log.apply(MetadataCommand::Freeze { by: NodeId(2) }) else {
        panic!("not frozen")
    };
    assert!(refused(&log.apply(MetadataCommand::Freeze { by: NodeId(1) })).contains("already frozen"));
    let expected = format!("frozen since epoch {}", since.0);
    let changes = [
        MetadataCommand::CreateGroup {
            group: GroupId(2),
            kind: "kv".into(),
            members: vec![NodeId(1)],
            replication: Default::default(),
        },
        MetadataCommand::DeleteGroup { group: GroupId(1) },
        MetadataCommand::TransferPrimary { group: GroupId(1), to: NodeId(2) },
        MetadataCommand::StartOperation {
            spec: OperationSpec::Move { group: GroupId(1), from: NodeId(3), to: NodeId(4) },
        },
    ];
    for change in changes {
        let result = log.apply(change.clone());
        assert!(refused(&result).contains(&expected), "{change:?}: {result:?}");
    }
    // Sessions, registrations and ownership reports (failover) go on.
    assert!(matches!(log.report(1, 2, 4), MetadataResult::Done { .. }));
    assert!(matches!(
        log.apply(MetadataCommand::OpenSession { node: NodeId(3) }),
        MetadataResult::SessionOpened { .. }
    ));
    assert!(matches!(
        log.apply(MetadataCommand::RegisterNode { node: NodeId(5), address: "n5".into() }),
        MetadataResult::Done { .. }
    ));
    assert_eq!(next_transfer(&log.metadata), None, "no balancing while frozen");
    assert!(matches!(log.apply(MetadataCommand::Unfreeze { by: NodeId(1) }), MetadataResult::Done { .. }));
    assert!(refused(&log.apply(MetadataCommand::Unfreeze { by: NodeId(1) })).contains("not frozen"));
    let moved = log.apply(MetadataCommand::StartOperation {
        spec: OperationSpec::Move { group: GroupId(1), from: NodeId(3), to: NodeId(4) },
    });
    assert!(matches!(moved, MetadataResult::OperationStarted { .. }), "{moved:?}");
}

#[test]
fn freeze_stops_the_agent_from_asking_for_steps_creations_and_transfers() {
    let mut log = Log::with_nodes(3);
    for group in 0..4 {
        log.create(group, &[1, 2, 3]);
        log.report(group, 1, 1);
    }
    log.apply(MetadataCommand::Freeze { by: NodeId(1) });
    let mut primary = agent(1);
    let hosted: Vec<HostedReplica> = (0..4).map(|group| hosted(group, true, 1)).collect();
    for now in 0..40 {
        for output in tick(&mut primary, now, &log.metadata, true, &hosted) {
            if let AgentOutput::Submit(request) = output {
                let command = MetadataCommand::decode(&request.operation).expect("a command");
                assert!(
                    !matches!(command, MetadataCommand::TransferPrimary { .. } | MetadataCommand::CreateGroup { .. }),
                    "{command:?} asked while frozen"
                );
                let result = log.apply(command);
                primary.on_reply(now, &reply(&request, &result));
            }
        }
    }
}

fn reply(request: &cohort_messages::Request, result: &MetadataResult) -> cohort_messages::Reply {
    cohort_messages::Reply {
        client: request.client,
        request: request.request,
        group: request.group,
        view: View(1),
        op: cohort_messages::Op(1),
        outcome: cohort_messages::Outcome::Ok(result.encode()),
    }
}

#[test]
fn z2_a_batch_creates_each_group_it_can_and_skips_the_others() {
    let mut log = Log::with_nodes(3);
    log.create(1, &[1, 2, 3]);
    let creation = |group: u64, members: &[u64]| GroupCreation {
        group: GroupId(group),
        kind: "kv".into(),
        members: members.iter().copied().map(NodeId).collect(),
        replication: Default::default(),
    };
    let groups = vec![creation(1, &[1, 2]), creation(2, &[1, 9]), creation(3, &[1, 2, 3])];
    assert!(matches!(log.apply(MetadataCommand::CreateGroups { groups }), MetadataResult::Done { .. }));
    let groups = &log.metadata.groups;
    assert_eq!(groups[&GroupId(1)].members.len(), 3, "group:1 existed: left as it was");
    assert!(!groups.contains_key(&GroupId(2)), "node:9 never registered: skipped");
    assert_eq!(groups[&GroupId(3)].incarnation, Incarnation(1), "group:3 created");
    let twice = MetadataCommand::CreateGroups { groups: vec![creation(4, &[1]), creation(4, &[2])] };
    assert!(MetadataCommand::decode(&twice.encode()).is_err(), "a group listed twice is invalid");
}

#[test]
fn z2_a_batch_of_reports_applies_each_and_names_the_refused() {
    let mut log = Log::with_nodes(3);
    for group in 0..3 {
        log.create(group, &[1, 2, 3]);
    }
    log.report(1, 2, 5);
    let session = log.session(1);
    let report =
        |group: u64, view: u32| OwnedGroup { group: GroupId(group), incarnation: Incarnation(1), view: View(view) };
    let result = log.apply(MetadataCommand::ReportOwnerships {
        node: NodeId(1),
        session,
        reports: vec![report(0, 2), report(1, 4), report(2, 7)],
    });
    assert!(
        matches!(&result, MetadataResult::OwnershipsReported { refused, .. } if refused == &[GroupId(1)]),
        "{result:?}"
    );
    let owner = |group: u64| log.metadata.groups[&GroupId(group)].owner.map(|owner| (owner.node, owner.view));
    assert_eq!(owner(0), Some((NodeId(1), View(2))));
    assert_eq!(owner(1), Some((NodeId(2), View(5))), "a stale view is refused alone (S4)");
    assert_eq!(owner(2), Some((NodeId(1), View(7))));
    let forged = MetadataCommand::ReportOwnerships { node: NodeId(2), session, reports: vec![report(0, 9)] };
    assert!(log.metadata.admit(NodeId(1), &[NodeId(1)], &forged).is_err(), "a node reports only for itself (T3)");
}

#[test]
fn z2_the_agent_creates_its_configured_groups_in_batches() {
    let log = Log::with_nodes(1);
    let mut config = agent(1).config().clone();
    config.bootstrap_groups = (0..600)
        .map(|group| BootstrapGroup {
            group: GroupId(group),
            kind: "kv".into(),
            members: vec![NodeId(1)],
            replication: Default::default(),
        })
        .collect();
    let mut agent = MetadataAgent::new(config);
    let mut metadata = log.metadata.clone();
    let mut epoch = log.epoch;
    let mut batches = Vec::new();
    for now in 0..40 {
        for output in tick(&mut agent, now, &metadata, true, &[]) {
            let AgentOutput::Submit(request) = output else { continue };
            let command = MetadataCommand::decode(&request.operation).expect("a command");
            if let MetadataCommand::CreateGroups { groups } = &command {
                batches.push(groups.len());
            }
            epoch += 1;
            let result = metadata.apply(Epoch(epoch), command);
            agent.on_reply(now, &reply(&request, &result));
        }
    }
    assert_eq!(batches, vec![METADATA_BATCH_ENTRIES_MAX, METADATA_BATCH_ENTRIES_MAX, 88]);
    assert_eq!(metadata.groups.len(), 600);
}

/// Z2: at 100,000 groups a node scans its groups seconds apart, so creations
/// and ownership reports that waited for a scan each moved at one batch per
/// scan (about 1.5 commands a second across three nodes: ten minutes before
/// the metadata went idle). After one scan they go on at the commit rate.
#[test]
fn z2_creations_and_ownership_reports_go_on_between_scans_after_one_scan() {
    let mut log = Log::with_nodes(3);
    let mut config = agent(2).config().clone();
    let member_orders = [[1, 2, 3], [2, 3, 1], [3, 1, 2]];
    config.bootstrap_groups = (0..900)
        .map(|group| BootstrapGroup {
            group: GroupId(group),
            kind: "kv".into(),
            members: member_orders[group as usize % 3].iter().copied().map(NodeId).collect(),
            replication: Default::default(),
        })
        .collect();
    let mut agent = MetadataAgent::new(config);
    // The agent registers and opens its own session first (the log's is another's).
    let mut now = 0;
    let first = loop {
        now += 1;
        assert!(now < 50, "the agent creates within 50 ticks");
        let Some(request) = submitted(tick(&mut agent, now, &log.metadata, false, &[])) else { continue };
        let command = MetadataCommand::decode(&request.operation).expect("a command");
        let result = log.apply(command.clone());
        agent.on_reply(now, &reply(&request, &result));
        if let MetadataCommand::CreateGroups { groups } = command {
            break groups;
        }
    };
    // Groups whose first member is this node go first, so three nodes
    // configured alike create different batches at once.
    assert!(first.iter().all(|creation| creation.members[0] == NodeId(2)), "node 2's own groups first");
    let mut creations = 1;
    while let Some(request) = submitted(agent.between_scans(now, &log.metadata, false)) {
        let command = MetadataCommand::decode(&request.operation).expect("a command");
        assert!(matches!(command, MetadataCommand::CreateGroups { .. }), "{command:?}");
        let result = log.apply(command);
        agent.on_reply(now, &reply(&request, &result));
        creations += 1;
    }
    assert_eq!(log.metadata.groups.len(), 900, "every group created after one scan");
    assert_eq!(creations, 900_usize.div_ceil(METADATA_BATCH_ENTRIES_MAX));

    // Node 2 leads 600 of them: the first scan reports a batch, the rest go
    // on between scans; one led elsewhere in a later view meanwhile is
    // refused as stale (S4), the rest recorded.
    let led: Vec<HostedReplica> = (0..900).filter(|group| group % 3 != 0).map(|group| hosted(group, true, 1)).collect();
    now += 1;
    let request = loop {
        if let Some(request) = submitted(tick(&mut agent, now, &log.metadata, false, &led)) {
            break request;
        }
        now += 1;
    };
    let command = MetadataCommand::decode(&request.operation).expect("a command");
    assert!(
        matches!(&command, MetadataCommand::ReportOwnerships { reports, .. } if reports.len() == METADATA_BATCH_ENTRIES_MAX)
    );
    let result = log.apply(command);
    agent.on_reply(now, &reply(&request, &result));
    assert!(matches!(log.report(899, 1, 3), MetadataResult::Done { .. }), "node 1 leads 899 in a later view");
    let mut reported = METADATA_BATCH_ENTRIES_MAX;
    while let Some(request) = submitted(agent.between_scans(now, &log.metadata, false)) {
        let command = MetadataCommand::decode(&request.operation).expect("a command");
        let MetadataCommand::ReportOwnerships { reports, .. } = &command else { panic!("{command:?}") };
        reported += reports.len();
        let result = log.apply(command);
        agent.on_reply(now, &reply(&request, &result));
    }
    assert_eq!(reported, 600, "every led group reported after one scan");
    let owned =
        (0..900).filter(|group| log.metadata.groups[&GroupId(*group)].owner.is_some_and(|o| o.node == NodeId(2)));
    assert_eq!(owned.count(), 599);
}

/// What `agent` outputs on a tick, with its registration answered (H5): in
/// its place, the command the registration held back.
fn tick(
    agent: &mut MetadataAgent,
    now: u64,
    metadata: &Metadata,
    metadata_primary: bool,
    hosted: &[HostedReplica],
) -> Vec<AgentOutput> {
    let mut outputs = Vec::new();
    for output in agent.on_tick(now, metadata, metadata_primary, hosted) {
        match &output {
            AgentOutput::Submit(request) if request.request == REGISTRATION => {
                let answer = cohort_messages::Reply {
                    client: request.client,
                    request: request.request,
                    group: request.group,
                    view: View(0),
                    op: cohort_messages::Op(1),
                    outcome: cohort_messages::Outcome::Ok(bytes::Bytes::new()),
                };
                outputs.extend(agent.on_reply(now, &answer));
            }
            _ => outputs.push(output),
        }
    }
    outputs
}

/// The request an agent's outputs submit, if any.
fn submitted(outputs: Vec<AgentOutput>) -> Option<cohort_messages::Request> {
    outputs.into_iter().find_map(|output| match output {
        AgentOutput::Submit(request) => Some(request),
        _ => None,
    })
}

#[test]
fn z2_between_scans_the_balancer_goes_on_only_after_a_scan_found_nothing_more_urgent() {
    let mut log = Log::with_nodes(3);
    for group in 0..9 {
        log.create(group, &[1, 2, 3]);
        log.report(group, 1, 1);
    }
    let mut config = agent(1).config().clone();
    config.balance_transfers_per_tick = Some(1);
    let mut primary = MetadataAgent::new(config);
    let hosted: Vec<HostedReplica> = (0..9).map(|group| hosted(group, true, 1)).collect();
    let count = |command: &MetadataCommand| match command {
        MetadataCommand::TransferPrimaries { transfers } => transfers.len(),
        other => panic!("the balancer asks with TransferPrimaries: {other:?}"),
    };
    // Scan by scan, the agent registers, opens its session and reports its
    // groups before the balancer asks; between scans none of that goes on.
    let mut now = 0;
    let first = loop {
        now += 1;
        assert!(now < 100, "the balancer asks within 100 ticks");
        let Some(request) = submitted(tick(&mut primary, now, &log.metadata, true, &hosted)) else { continue };
        let command = MetadataCommand::decode(&request.operation).expect("a command");
        let result = log.apply(command.clone());
        primary.on_reply(now, &reply(&request, &result));
        if matches!(command, MetadataCommand::TransferPrimaries { .. }) {
            break command;
        }
        assert_eq!(submitted(primary.between_scans(now, &log.metadata, true)), None, "after {command:?}");
    };
    // Its first command takes the ticks it saved up (one a tick, ten at
    // most), and six transfers make 3, 3 and 3.
    let mut asked = count(&first);
    assert_eq!(asked, (now as usize).min(10).min(6), "the saved budget at tick {now}");
    assert_eq!(submitted(primary.between_scans(now, &log.metadata, true)), None, "this tick's budget is spent");
    while asked < 6 {
        now += 1;
        assert_eq!(submitted(primary.between_scans(now, &log.metadata, false)), None, "not the metadata primary");
        let request = submitted(primary.between_scans(now, &log.metadata, true)).expect("the next tick's budget");
        let command = MetadataCommand::decode(&request.operation).expect("a command");
        assert_eq!(count(&command), 1, "one tick's budget: {command:?}");
        let result = log.apply(command);
        primary.on_reply(now, &reply(&request, &result));
        asked += 1;
    }
    assert_eq!(submitted(primary.between_scans(now + 1, &log.metadata, true)), None, "balanced: nothing more");
}

/// Ticks `from..to` of `agent` over `hosted`, every request applied to `log`
/// and answered at once; returns every output.
fn run(
    agent: &mut MetadataAgent,
    log: &mut Log,
    hosted: &[HostedReplica],
    ticks: std::ops::Range<u64>,
) -> Vec<AgentOutput> {
    let mut outputs = Vec::new();
    for now in ticks {
        for output in tick(agent, now, &log.metadata, true, hosted) {
            if let AgentOutput::Submit(request) = &output {
                let command = MetadataCommand::decode(&request.operation).expect("a command");
                let result = log.apply(command);
                outputs.extend(agent.on_reply(now, &reply(request, &result)));
            }
            outputs.push(output);
        }
    }
    outputs
}

/// Z3: the agent tells its shell when a later tick may act on time alone
/// (so the shell must keep scanning although nothing it looks at changed),
/// such as a misplaced group waiting out its grace; once that is done, it
/// has none, and the shell may scan rarely.
#[test]
fn z3_the_agent_says_when_a_later_tick_may_act_on_time_alone() {
    let mut log = Log::with_nodes(2);
    log.create(0, &[1]);
    log.create(7, &[2]);
    let mut agent = agent(1);
    run(&mut agent, &mut log, &[hosted(0, true, 1)], 0..40);
    assert!(!agent.timed_work(40), "registered, owning its group, epochs acked: nothing timed");
    // Group 7 is placed on node 2 only: hosted here, it waits out the grace.
    let misplaced = [hosted(0, true, 1), hosted(7, false, 1)];
    run(&mut agent, &mut log, &misplaced, 40..41);
    assert!(agent.timed_work(41), "a misplaced group waits out its grace");
    let outputs = run(&mut agent, &mut log, &misplaced, 41..60);
    assert!(outputs.iter().any(|output| matches!(output, AgentOutput::Unload(GroupId(7)))), "{outputs:?}");
    run(&mut agent, &mut log, &[hosted(0, true, 1)], 60..61);
    assert!(!agent.timed_work(61), "unloaded: nothing timed again");
}
