//! What `GET /status` and `cohort status` show: this node's session and the
//! cluster as the node's copy of the metadata has it (nodes with their
//! sessions and acked epochs, groups with members, learners, incarnation
//! and owner), the in-flight multi-step operations (M2–M5: spec, plan with
//! done and remaining steps, cancelled flag, what the next step waits for)
//! and how many operations completed or were reverted, whether the
//! metadata is frozen for an upgrade (since which epoch, asked by which
//! node), and how many primaries each live node leads (C5).
//!
//! Session ids and incarnations are what a forged session frame or a
//! forged frame of a group's current incarnation needs, so the admin port
//! shows them only to a caller with the node's token (T4): for anyone else
//! ([`Audience::Public`]) each one that is set reads `"redacted"` (one that
//! is not set stays `null`, so "has a session" stays visible), and the
//! document says `"redacted": true`.
//!
//! Each node's `up` is what this node's peer links say now (all of its
//! shards' links to that peer connected): an operator asking "is node 2
//! down?" must not wait for node 2's session to expire, which the metadata
//! only records after the session timeout.
//!
//! The document is a [`NodeStatus`]: the type `cohort status` reads back.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use cohort_actors::{LinkState, StatusBoard};
use cohort_core::metadata::{Metadata, OperationRecord, Step};
use cohort_messages::metadata::OperationSpec;
use cohort_messages::{GroupId, Incarnation, NodeId, OperationId, SessionId};

use super::answers::{
    ClusterStatus, FrozenStatus, GroupEntry, NodeEntry, NodeStatus, OperationStatus, OperationTotals, OwnerStatus,
    Secret, SessionCounters, SpecBody, StepStatus,
};

/// Who a status document is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Audience {
    /// The host's own code, or a caller with the node's admin token: everything.
    Operator,
    /// Anyone else: session ids and incarnations are redacted.
    Public,
}

impl Audience {
    /// `value` as this audience may see it.
    fn secret(self, value: u64) -> Secret {
        match self {
            Audience::Operator => Secret::Shown(value),
            Audience::Public => Secret::Redacted,
        }
    }
}

/// A node's links to its peers, one per shard (as `NodeHandle` holds them).
pub(crate) type PeerLinks = Arc<HashMap<NodeId, Vec<Arc<LinkState>>>>;

/// Whether `this` node reaches `node` now (see [`NodeEntry::up`]).
fn reaches(links: &HashMap<NodeId, Vec<Arc<LinkState>>>, this: NodeId, node: NodeId) -> Option<bool> {
    if node == this {
        return Some(true);
    }
    let shards = links.get(&node)?;
    debug_assert!(!shards.is_empty(), "{node}: a peer has one link per shard");
    Some(shards.iter().all(|link| link.connected.load(Ordering::Relaxed)))
}

/// The status as `audience` may see it; `links` says which peers are up.
pub(crate) fn node_status(
    board: &StatusBoard,
    links: &HashMap<NodeId, Vec<Arc<LinkState>>>,
    audience: Audience,
) -> NodeStatus {
    let agent = board.agent();
    let session = |session: Option<SessionId>| session.map(|session| audience.secret(session.0));
    let (metadata, operations, operation_totals, recorded) = board.metadata().with(|metadata| {
        let nodes = metadata
            .nodes
            .iter()
            .map(|(id, record)| NodeEntry {
                id: *id,
                address: record.address.clone(),
                session: session(record.session),
                acked_epoch: record.acked,
                up: reaches(links, board.node(), *id),
            })
            .collect();
        // The metadata group's own record (Z6) shows as metadata_members,
        // metadata_learners and metadata_incarnation below, not among the groups.
        let groups = metadata
            .groups
            .iter()
            .filter(|(id, _)| **id != GroupId::METADATA)
            .map(|(id, record)| GroupEntry {
                id: *id,
                kind: record.kind.clone(),
                members: record.members.clone(),
                learners: record.learners.clone(),
                incarnation: audience.secret(record.incarnation.0),
                live: record.live,
                owner: record.owner.map(|owner| OwnerStatus {
                    node: owner.node,
                    view: owner.view,
                    session: audience.secret(owner.session.0),
                }),
                transfer_to: record.transfer.map(|transfer| transfer.to),
            })
            .collect();
        let operations =
            metadata.operations.iter().map(|(id, record)| operation_status(metadata, *id, record)).collect();
        let totals = metadata.operation_totals;
        let cluster = ClusterStatus {
            epoch: metadata.epoch,
            config_epoch: metadata.config_epoch,
            frozen: metadata.frozen.map(|frozen| FrozenStatus { since_epoch: frozen.since, by: frozen.by }),
            primaries_per_node: cohort_core::metadata::primaries_per_node(metadata)
                .into_iter()
                .map(|(node, count)| (node, count as u64))
                .collect(),
            nodes,
            groups,
        };
        let recorded = metadata
            .groups
            .get(&GroupId::METADATA)
            .map(|record| (record.members.clone(), record.learners.clone(), record.incarnation));
        let totals = OperationTotals { completed: totals.completed, reverted: totals.reverted };
        (cluster, operations, totals, recorded)
    });
    // Z6: the voters the metadata records, once recorded; the ones the
    // node started with until then.
    let metadata_recorded = recorded.is_some();
    let (metadata_members, metadata_learners, metadata_incarnation) = recorded.unwrap_or_else(|| {
        let ids = |nodes: &[NodeId]| nodes.to_vec();
        (ids(board.members()), ids(board.learners()), Incarnation(1))
    });
    let counters = agent.counters;
    NodeStatus {
        node: board.node(),
        session: session(agent.session),
        metadata_members,
        metadata_learners,
        metadata_incarnation: audience.secret(metadata_incarnation.0),
        metadata_recorded,
        metadata_primary: agent.metadata_primary,
        stopped: agent.stopped,
        sessions: SessionCounters {
            opened: counters.sessions_opened,
            expired: counters.sessions_expired,
            reports_accepted: counters.reports_accepted,
            reports_refused: counters.reports_refused,
            expiries_proposed: counters.expiries_proposed,
            groups_unloaded: counters.groups_unloaded,
        },
        metadata,
        operations,
        operation_totals,
        redacted: audience == Audience::Public,
    }
}

/// One line for a spec, e.g. `move group:3 node:1 → node:4`.
pub(crate) fn spec_text(spec: &OperationSpec) -> String {
    match spec {
        OperationSpec::Move { group, from, to } => format!("move {group} {from} → {to}"),
        OperationSpec::Replace { group, dead, with } => format!("replace {group} {dead} (dead) → {with}"),
        OperationSpec::Join { node, groups } => {
            let groups: Vec<String> = groups.iter().map(ToString::to_string).collect();
            format!("join {node} to {}", groups.join(", "))
        }
        OperationSpec::Decommission { node } => format!("decommission {node}"),
        OperationSpec::Shrink { group, node } => format!("shrink {group}: {node} leaves its voters"),
    }
}

/// One step in words, e.g. `add learner node:4`.
pub(crate) fn step_text(step: &Step) -> String {
    match step {
        Step::AddLearner { node, .. } => format!("add learner {node}"),
        Step::KeepLearner { node, .. } => format!("keep learner {node} (it learns the log already)"),
        Step::RemoveLearner { node, .. } => format!("remove learner {node}"),
        Step::Promote { node, .. } => format!("promote {node}"),
        Step::Swap { out, into, .. } => format!("swap {out} for {into}"),
        Step::RemoveMember { node, .. } => format!("remove {node}"),
    }
}

/// An in-flight operation as `/status` and the admin answers show it: spec,
/// plan with each step done or not, cancelled flag, and what the next step
/// waits for (the state machine's own gate).
pub(crate) fn operation_status(metadata: &Metadata, id: OperationId, record: &OperationRecord) -> OperationStatus {
    debug_assert!(record.done <= record.plan.len(), "{id}: more steps done than planned");
    let plan = record
        .plan
        .iter()
        .enumerate()
        .map(|(index, step)| StepStatus { group: step.group(), step: step_text(step), done: index < record.done })
        .collect();
    OperationStatus {
        id,
        spec: SpecBody::from(&record.spec),
        text: spec_text(&record.spec),
        cancelled: record.cancelled,
        done: record.done,
        remaining: record.plan.len().saturating_sub(record.done),
        plan,
        last_step_epoch: record.last_step_epoch,
        waiting_for: metadata.step_gate(record).err(),
    }
}

#[cfg(test)]
mod tests {
    use cohort_messages::{GroupId, NodeId};

    use super::*;

    #[test]
    fn o4_a_node_is_up_when_every_shards_link_to_it_is_connected() {
        let link = |connected: bool| {
            let state = LinkState::default();
            state.connected.store(connected, Ordering::Relaxed);
            Arc::new(state)
        };
        let links =
            HashMap::from([(NodeId(2), vec![link(true), link(true)]), (NodeId(3), vec![link(true), link(false)])]);
        assert_eq!(reaches(&links, NodeId(1), NodeId(1)), Some(true), "itself");
        assert_eq!(reaches(&links, NodeId(1), NodeId(2)), Some(true));
        assert_eq!(reaches(&links, NodeId(1), NodeId(3)), Some(false), "one shard's link is down");
        assert_eq!(reaches(&links, NodeId(1), NodeId(4)), None, "no link: not a peer");
    }

    #[test]
    fn texts_read_like_the_docs() {
        let spec = OperationSpec::Move { group: GroupId(3), from: NodeId(1), to: NodeId(4) };
        assert_eq!(spec_text(&spec), "move group:3 node:1 → node:4");
        let step = Step::AddLearner { group: GroupId(3), node: NodeId(4) };
        assert_eq!(step_text(&step), "add learner node:4");
    }
}
