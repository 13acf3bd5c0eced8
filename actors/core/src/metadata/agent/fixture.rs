//! Shared set-up for the agent's unit tests: one node's settings, hosted
//! records, and a metadata that applies what the agent submits.

use cohort_messages::metadata::{MetadataCommand, MetadataResult};
use cohort_messages::seal::Seal;
use cohort_messages::{ClientId, Epoch, GroupId, Incarnation, NodeId, Op, View};

use super::super::{ExpiredPolicy, Metadata};
use super::{AgentConfig, BootstrapGroup, HostedReplica};

/// The node under test.
pub(super) const NODE: NodeId = NodeId(1);

/// Node 1's settings: keepalive 5, backoff 20, timeout 30, retry 4, grace 10;
/// bootstrap groups 0 and 1 on node 1 alone; no balancer.
pub(super) fn config() -> AgentConfig {
    AgentConfig {
        node: NODE,
        address: "n1".into(),
        client: ClientId(77),
        metadata_group: GroupId::METADATA,
        policy: ExpiredPolicy::Reconnect { attempts: 3 },
        keepalive_interval_ticks: 5,
        reconnect_backoff_ticks: 20,
        session_timeout_ticks: 30,
        request_retry_ticks: 4,
        unload_grace_ticks: 10,
        bootstrap_groups: [0, 1]
            .into_iter()
            .map(|group| BootstrapGroup {
                group: GroupId(group),
                kind: "kv".into(),
                members: vec![NODE],
                replication: Default::default(),
            })
            .collect(),
        balance_transfers_per_tick: None,
    }
}

/// A replica of `group` at incarnation 1 and `view`, led here or not.
pub(super) fn hosted(group: u64, primary: bool, view: u32) -> HostedReplica {
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

/// A seal into `incarnation` with `members` and a majority quorum.
pub(super) fn seal(incarnation: u64, members: &[u64]) -> Seal {
    Seal {
        incarnation: Incarnation(incarnation),
        members: members.iter().copied().map(NodeId).collect(),
        replication_quorum: (members.len() / 2 + 1) as u8,
    }
}

/// Apply `command` at the next epoch.
pub(super) fn apply(metadata: &mut Metadata, command: MetadataCommand) -> MetadataResult {
    let epoch = Epoch(metadata.epoch.0 + 1);
    metadata.apply(epoch, command)
}

/// A metadata in which `nodes` registered and opened a session each (in
/// that order, so node `nodes[i]` holds session `i + 1`), and `groups`
/// (group, members) were created at incarnation 1.
pub(super) fn metadata(nodes: &[u64], groups: &[(u64, &[u64])]) -> Metadata {
    let mut metadata = Metadata::default();
    for node in nodes {
        apply(&mut metadata, MetadataCommand::RegisterNode { node: NodeId(*node), address: format!("n{node}") });
        apply(&mut metadata, MetadataCommand::OpenSession { node: NodeId(*node) });
    }
    for (group, members) in groups {
        let command = MetadataCommand::CreateGroup {
            group: GroupId(*group),
            kind: "kv".into(),
            members: members.iter().copied().map(NodeId).collect(),
            replication: Default::default(),
        };
        assert!(matches!(apply(&mut metadata, command), MetadataResult::GroupCreated { .. }));
    }
    metadata
}

/// H3: delete `group` and create it again under the same id on `members`
/// (its next incarnation).
pub(super) fn recreate(metadata: &mut Metadata, group: u64, members: &[u64]) {
    apply(metadata, MetadataCommand::DeleteGroup { group: GroupId(group) });
    let command = MetadataCommand::CreateGroup {
        group: GroupId(group),
        kind: "kv".into(),
        members: members.iter().copied().map(NodeId).collect(),
        replication: Default::default(),
    };
    assert!(matches!(apply(metadata, command), MetadataResult::GroupCreated { .. }));
}

/// The live session of `node`.
pub(super) fn session(metadata: &Metadata, node: u64) -> cohort_messages::SessionId {
    metadata.nodes[&NodeId(node)].session.expect("a live session")
}

/// Node 1's replica of the metadata group: incarnation 1, view 0, with
/// these voters and learners.
pub(super) fn metadata_replica(primary: bool, members: &[u64], learners: &[u64]) -> HostedReplica {
    HostedReplica {
        members: members.iter().copied().map(NodeId).collect(),
        learners: learners.iter().copied().map(NodeId).collect(),
        ..hosted(GroupId::METADATA.0, primary, 0)
    }
}

/// The agent's registration (client 77's request 1, H5).
pub(super) fn registration() -> super::AgentOutput {
    super::AgentOutput::Submit(cohort_messages::Request {
        client: ClientId(77),
        request: crate::client_table::REGISTRATION,
        group: GroupId::METADATA,
        kind: cohort_messages::RequestKind::Write,
        operation: bytes::Bytes::new(),
    })
}

/// `out` with the agent's registration, if it holds it, answered: in its
/// place, what the agent sends then (the command it held back).
pub(super) fn past_registration(
    agent: &mut super::MetadataAgent,
    now: u64,
    out: Vec<super::AgentOutput>,
) -> Vec<super::AgentOutput> {
    let mut past = Vec::new();
    for output in out {
        match &output {
            super::AgentOutput::Submit(request) if output == registration() => {
                let answer = cohort_messages::Reply {
                    client: request.client,
                    request: request.request,
                    group: request.group,
                    view: View(0),
                    op: cohort_messages::Op(1),
                    outcome: cohort_messages::Outcome::Ok(bytes::Bytes::new()),
                };
                past.extend(agent.on_reply(now, &answer));
            }
            _ => past.push(output),
        }
    }
    past
}

/// The `number`th write of the agent (client 77), carrying `command`: its
/// request `number + 1`, after the registration.
pub(super) fn write(number: u64, command: &MetadataCommand) -> super::AgentOutput {
    super::AgentOutput::Submit(cohort_messages::Request {
        client: ClientId(77),
        request: cohort_messages::RequestNumber(number + 1),
        group: GroupId::METADATA,
        kind: cohort_messages::RequestKind::Write,
        operation: command.encode(),
    })
}

/// The metadata group's answer `result` to `request`.
pub(super) fn reply(request: &cohort_messages::Request, result: &MetadataResult) -> cohort_messages::Reply {
    cohort_messages::Reply {
        client: request.client,
        request: request.request,
        group: request.group,
        view: View(0),
        op: cohort_messages::Op(0),
        outcome: cohort_messages::Outcome::Ok(result.encode()),
    }
}
