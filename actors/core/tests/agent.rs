//! The node's metadata agent against a metadata group that applies what it
//! is sent (S1, S3, S4). The simulator runs the same agent under faults.

use cohort_core::client_table::REGISTRATION;
use cohort_core::metadata::{
    AgentConfig, AgentOutput, BootstrapGroup, ExpiredPolicy, HostedReplica, Metadata, MetadataAgent,
};
use cohort_messages::metadata::{MetadataCommand, MetadataResult};
use cohort_messages::{ClientId, Epoch, GroupId, Incarnation, NodeId, Op, Outcome, Reply, SessionId, View};

const NODE: NodeId = NodeId(1);

struct Harness {
    agent: MetadataAgent,
    metadata: Metadata,
    now: u64,
    /// False: the metadata group is unreachable (requests are lost).
    answering: bool,
    hosted: Vec<HostedReplica>,
    outputs: Vec<AgentOutput>,
}

impl Harness {
    fn new(policy: ExpiredPolicy) -> Harness {
        let config = AgentConfig {
            node: NODE,
            address: "127.0.0.1:7001".into(),
            client: ClientId(77),
            metadata_group: GroupId::METADATA,
            policy,
            keepalive_interval_ticks: 5,
            reconnect_backoff_ticks: 20,
            session_timeout_ticks: 30,
            request_retry_ticks: 4,
            unload_grace_ticks: 10,
            bootstrap_groups: [GroupId(0), GroupId(1)]
                .into_iter()
                .map(|group| BootstrapGroup {
                    group,
                    kind: "kv".into(),
                    members: vec![NODE],
                    replication: Default::default(),
                })
                .collect(),
            balance_transfers_per_tick: None,
        };
        config.validate().expect("valid");
        let hosted = vec![
            HostedReplica {
                group: GroupId(0),
                incarnation: Incarnation(1),
                primary: true,
                view: View(2),
                sealed: None,
                seal_durable: false,
                learners: Vec::new(),
                caught_up: Vec::new(),
                members: Vec::new(),
                outpaced: false,
                durable_commit: Op(0),
            },
            HostedReplica {
                group: GroupId(1),
                incarnation: Incarnation(1),
                primary: false,
                view: View(0),
                sealed: None,
                seal_durable: false,
                learners: Vec::new(),
                caught_up: Vec::new(),
                members: Vec::new(),
                outpaced: false,
                durable_commit: Op(0),
            },
        ];
        Harness {
            agent: MetadataAgent::new(config),
            metadata: Metadata::default(),
            now: 0,
            answering: true,
            hosted,
            outputs: Vec::new(),
        }
    }

    fn apply(&mut self, command: MetadataCommand) -> MetadataResult {
        let epoch = Epoch(self.metadata.epoch.0 + 1);
        self.metadata.apply(epoch, command)
    }

    fn run(&mut self, ticks: u64) {
        for _ in 0..ticks {
            self.now += 1;
            let mut outputs: std::collections::VecDeque<AgentOutput> =
                self.agent.on_tick(self.now, &self.metadata, true, &self.hosted).into();
            while let Some(output) = outputs.pop_front() {
                // H5: the agent's registration applies nothing; the command it
                // held back follows its answer.
                if let AgentOutput::Submit(request) = &output
                    && self.answering
                    && request.request == REGISTRATION
                {
                    let reply = Reply {
                        client: request.client,
                        request: request.request,
                        group: request.group,
                        view: View(0),
                        // The op the registration would take in the log.
                        op: Op(self.metadata.epoch.0 + 1),
                        outcome: Outcome::Ok(bytes::Bytes::new()),
                    };
                    outputs.extend(self.agent.on_reply(self.now, &reply));
                } else if let AgentOutput::Submit(request) = &output
                    && self.answering
                {
                    let command = MetadataCommand::decode(&request.operation).expect("the agent sends valid commands");
                    let result = self.apply(command);
                    let reply = Reply {
                        client: request.client,
                        request: request.request,
                        group: request.group,
                        view: View(0),
                        op: Op(self.metadata.epoch.0),
                        outcome: Outcome::Ok(result.encode()),
                    };
                    let more = self.agent.on_reply(self.now, &reply);
                    self.outputs.extend(more);
                }
                // The shell unloads a group, or hosts one, before the next tick.
                if let AgentOutput::Unload(group) = &output {
                    self.hosted.retain(|hosted| hosted.group != *group);
                }
                if let Some(placed) = output.placed_replica() {
                    let group = placed.placement.group;
                    let earlier = self.hosted.iter().find(|hosted| hosted.group == group).map(|h| h.incarnation);
                    if cohort_core::metadata::placed_replaces(placed.placement.incarnation, earlier) {
                        self.hosted.retain(|hosted| hosted.group != group);
                        let mut replica = self.hosted[0].clone();
                        replica.group = group;
                        replica.incarnation = placed.placement.incarnation;
                        replica.view = View(0);
                        replica.primary = true;
                        self.hosted.push(replica);
                    }
                }
                // This node is the metadata primary too: its keepalives reach its own driver.
                if let AgentOutput::Keepalive(keepalive) = &output {
                    let more = self.agent.on_keepalive(self.now, NODE, keepalive, &self.metadata);
                    self.outputs.extend(more);
                }
                self.outputs.push(output);
            }
        }
    }

    fn owner(&self, group: u64) -> Option<(NodeId, View, SessionId)> {
        let owner = self.metadata.groups.get(&GroupId(group))?.owner?;
        Some((owner.node, owner.view, owner.session))
    }

    fn session(&self) -> Option<SessionId> {
        self.metadata.nodes.get(&NODE)?.session
    }
}

#[test]
fn s1_agent_registers_opens_a_session_and_keeps_it_alive() {
    let mut h = Harness::new(ExpiredPolicy::Reconnect { attempts: 3 });
    h.run(40);
    let session = h.session().expect("a live session");
    assert_eq!(h.agent.session(), Some(session));
    let keepalives = h.outputs.iter().filter(|o| matches!(o, AgentOutput::Keepalive(k) if k.session == session));
    assert!(keepalives.count() >= 6, "a keepalive every 5 ticks: {:?}", h.outputs);
    assert_eq!(h.metadata.groups.len(), 2, "the bootstrap groups were created");
    assert_eq!(h.metadata.nodes[&NODE].acked, h.metadata.config_epoch, "the node acked the configuration (M1)");
}

#[test]
fn s4_reown_and_unload() {
    let mut h = Harness::new(ExpiredPolicy::Reconnect { attempts: 3 });
    h.run(40);
    let first = h.session().expect("a session");
    assert_eq!(h.owner(0), Some((NODE, View(2), first)), "the primary's group is owned");
    assert_eq!(h.owner(1), None, "a backup does not report");
    // The metadata group expires the session (the node was silent, say).
    assert!(matches!(
        h.apply(MetadataCommand::ExpireSession { node: NODE, session: first }),
        MetadataResult::Done { .. }
    ));
    assert_eq!(h.owner(0), None, "S2: expiry drops the records");
    h.run(40);
    let second = h.session().expect("reconnected");
    assert!(second > first);
    assert_eq!(h.owner(0), Some((NODE, View(2), second)), "re-owned under the new session, fenced by view 2");
    assert_eq!(h.agent.counters().sessions_expired, 1);
    // A newer primary elsewhere: this node's view-2 report is now stale.
    h.apply(MetadataCommand::RegisterNode { node: NodeId(2), address: "n2".into() });
    h.apply(MetadataCommand::ExpireSession { node: NODE, session: second });
    h.run(40);
    let third = h.session().expect("reconnected again");
    let other = match h.apply(MetadataCommand::OpenSession { node: NodeId(2) }) {
        MetadataResult::SessionOpened { session, .. } => session,
        other => panic!("{other:?}"),
    };
    h.metadata.groups.get_mut(&GroupId(0)).expect("group 0").members.push(NodeId(2));
    let newer = MetadataCommand::ReportOwnership {
        group: GroupId(0),
        incarnation: Incarnation(1),
        node: NodeId(2),
        session: other,
        view: View(3),
    };
    assert!(matches!(h.apply(newer), MetadataResult::Done { .. }));
    h.run(20);
    assert_eq!(h.owner(0), Some((NodeId(2), View(3), other)), "a stale view is refused, not recorded");
    assert!(h.agent.counters().reports_refused >= 1);
    assert_eq!(h.agent.session(), Some(third));
    // Group 1 is deleted in the metadata: unloaded at the next tick, once
    // (H3: a deleted group's replica does not wait out a grace period).
    h.apply(MetadataCommand::DeleteGroup { group: GroupId(1) });
    let unloads = |h: &Harness| h.outputs.iter().filter(|o| **o == AgentOutput::Unload(GroupId(1))).count();
    h.run(1);
    assert_eq!(unloads(&h), 1, "{:?}", h.outputs);
    h.run(12);
    assert_eq!(unloads(&h), 1);
}

/// H3: group 1 is deleted and created again on this node while its old
/// replica is still hosted: the agent unloads the old one and hosts the
/// new incarnation in the same tick, and its acks of the configuration
/// epochs go on past the delete (they stalled there when the new
/// incarnation was never hosted).
#[test]
fn h3_acks_go_on_after_a_group_is_deleted_and_created_again() {
    let mut h = Harness::new(ExpiredPolicy::Reconnect { attempts: 3 });
    h.run(40);
    assert_eq!(h.metadata.nodes[&NODE].acked, h.metadata.config_epoch, "acked before");
    // Both commands commit before the agent's next tick sees either.
    assert!(matches!(h.apply(MetadataCommand::DeleteGroup { group: GroupId(1) }), MetadataResult::Done { .. }));
    let create = MetadataCommand::CreateGroup {
        group: GroupId(1),
        kind: "kv".into(),
        members: vec![NODE],
        replication: Default::default(),
    };
    assert!(matches!(h.apply(create), MetadataResult::GroupCreated { incarnation: Incarnation(2), .. }));
    let before = h.outputs.len();
    h.run(1);
    let member = AgentOutput::HostMember {
        group: GroupId(1),
        kind: "kv".into(),
        incarnation: Incarnation(2),
        members: vec![NODE],
        replication: Default::default(),
    };
    let hosting: Vec<&AgentOutput> = h.outputs[before..]
        .iter()
        .filter(|o| matches!(o, AgentOutput::Unload(_) | AgentOutput::HostMember { .. }))
        .collect();
    assert_eq!(hosting, [&AgentOutput::Unload(GroupId(1)), &member]);
    h.run(20);
    assert!(h.hosted.iter().any(|hosted| hosted.group == GroupId(1) && hosted.incarnation == Incarnation(2)));
    assert_eq!(h.metadata.nodes[&NODE].acked, h.metadata.config_epoch, "acked past the delete and the re-creation");
    assert_eq!(h.owner(1).map(|(node, ..)| node), Some(NODE), "the new incarnation has an owner");
}

#[test]
fn s3_reconnect_then_shutdown_after_attempts() {
    let mut h = Harness::new(ExpiredPolicy::Reconnect { attempts: 2 });
    h.run(30);
    let session = h.session().expect("a session");
    h.answering = false;
    h.apply(MetadataCommand::ExpireSession { node: NODE, session });
    h.run(5);
    assert!(!h.agent.stopped(), "reconnecting");
    h.run(60);
    assert!(h.agent.stopped(), "stopped after 2 unanswered attempts");
    assert!(h.outputs.iter().any(|o| matches!(o, AgentOutput::Stop(reason) if reason.contains("reconnect"))));
}

#[test]
fn s3_shutdown_policy_stops_at_the_first_expiry() {
    let mut h = Harness::new(ExpiredPolicy::Shutdown);
    h.run(30);
    let session = h.session().expect("a session");
    let notice = cohort_messages::SessionExpired { node: NODE, session, epoch: Epoch(1) };
    let outputs = h.agent.on_session_expired(NODE, &[NODE], &notice);
    assert!(matches!(outputs.as_slice(), [AgentOutput::Stop(reason)] if reason.contains("shutdown")), "{outputs:?}");
    assert!(h.agent.stopped());
    assert!(h.agent.on_tick(100, &h.metadata, true, &h.hosted).is_empty(), "a stopped agent does nothing");
}

#[test]
fn agent_settings_are_validated() {
    let mut h = Harness::new(ExpiredPolicy::Shutdown);
    let mut config = h.agent.config().clone();
    config.session_timeout_ticks = 10;
    let error = config.validate().expect_err("a timeout of two keepalives is too short");
    assert!(error.contains("session_timeout_ticks"), "{error}");
    h.run(1);
}

#[test]
fn t3_a_session_frame_that_does_not_come_from_whom_it_speaks_for_is_refused_and_counted() {
    let mut h = Harness::new(ExpiredPolicy::Shutdown);
    h.run(30);
    let session = h.session().expect("a session");
    // An expiry notice for this node from a node outside the metadata group: ignored.
    let notice = cohort_messages::SessionExpired { node: NODE, session, epoch: Epoch(1) };
    let outputs = h.agent.on_session_expired(NodeId(9), &[NODE], &notice);
    assert!(outputs.is_empty(), "{outputs:?}");
    assert!(!h.agent.stopped(), "a forged expiry does not stop a node whose policy is shutdown");
    // A keepalive naming this node, sent by another: refused.
    let keepalive = cohort_messages::SessionKeepalive { node: NODE, session };
    assert!(h.agent.on_keepalive(h.now, NodeId(9), &keepalive, &h.metadata).is_empty());
    assert_eq!(h.agent.counters().frames_refused, 2, "both counted");
    // The genuine notice still works.
    let outputs = h.agent.on_session_expired(NODE, &[NODE], &notice);
    assert!(matches!(outputs.as_slice(), [AgentOutput::Stop(_)]), "{outputs:?}");
}
