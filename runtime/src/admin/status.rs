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

use cohort_actors::status::StatusBoard;
use cohort_core::metadata::{Metadata, OperationRecord, Step};
use cohort_messages::metadata::OperationSpec;
use cohort_messages::{GroupId, NodeId, OperationId, SessionId};
use serde_json::{Value, json};

/// Who a status document is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Audience {
    /// The host's own code, or a caller with the node's admin token: everything.
    Operator,
    /// Anyone else: session ids and incarnations are redacted.
    Public,
}

/// What a redacted value reads as.
pub const REDACTED: &str = "redacted";

/// The status as a JSON document, in full (see `docs/embedding.md`).
pub fn status_json(board: &StatusBoard) -> Value {
    status_json_for(board, Audience::Operator)
}

/// The status as `audience` may see it.
pub fn status_json_for(board: &StatusBoard, audience: Audience) -> Value {
    let agent = board.agent();
    let secret = |value: u64| match audience {
        Audience::Operator => json!(value),
        Audience::Public => json!(REDACTED),
    };
    let session = |session: Option<SessionId>| session.map_or(Value::Null, |s| secret(s.0));
    let cluster = board.metadata().with(|metadata| {
        let nodes: Vec<Value> = metadata
            .nodes
            .iter()
            .map(|(id, record)| {
                json!({
                    "id": id.0,
                    "address": record.address,
                    "session": session(record.session),
                    "acked_epoch": record.acked.0,
                })
            })
            .collect();
        // The metadata group's own record (Z6) shows as metadata_members,
        // metadata_learners and metadata_incarnation below, not among the groups.
        let groups: Vec<Value> = metadata
            .groups
            .iter()
            .filter(|(id, _)| **id != GroupId::METADATA)
            .map(|(id, record)| {
                let owner = record.owner.map_or(
                    Value::Null,
                    |owner| json!({ "node": owner.node.0, "view": owner.view.0, "session": secret(owner.session.0) }),
                );
                json!({
                    "id": id.0,
                    "kind": record.kind,
                    "members": record.members.iter().map(|m| m.0).collect::<Vec<_>>(),
                    "learners": record.learners.iter().map(|m| m.0).collect::<Vec<_>>(),
                    "incarnation": secret(record.incarnation.0),
                    "live": record.live,
                    "owner": owner,
                    "transfer_to": record.transfer.map(|transfer| transfer.to.0),
                })
            })
            .collect();
        let operations: Vec<Value> =
            metadata.operations.iter().map(|(id, record)| operation_json(metadata, *id, record)).collect();
        let totals = metadata.operation_totals;
        let frozen =
            metadata.frozen.map_or(Value::Null, |frozen| json!({ "since_epoch": frozen.since.0, "by": frozen.by.0 }));
        let primaries: serde_json::Map<String, Value> = cohort_core::metadata::primaries_per_node(metadata)
            .into_iter()
            .map(|(node, count)| (node.0.to_string(), json!(count)))
            .collect();
        let cluster = json!({
            "epoch": metadata.epoch.0,
            "config_epoch": metadata.config_epoch.0,
            "frozen": frozen,
            "primaries_per_node": primaries,
            "nodes": nodes,
            "groups": groups,
        });
        let recorded = metadata.groups.get(&GroupId::METADATA).map(|record| {
            let ids = |nodes: &[NodeId]| nodes.iter().map(|m| m.0).collect::<Vec<_>>();
            (ids(&record.members), ids(&record.learners), record.incarnation.0)
        });
        (cluster, operations, json!({ "completed": totals.completed, "reverted": totals.reverted }), recorded)
    });
    let (cluster, operations, totals, recorded) = cluster;
    // Z6: the voters the metadata records, once recorded; the ones the
    // node started with until then.
    let metadata_recorded = recorded.is_some();
    let (metadata_members, metadata_learners, metadata_incarnation) = recorded.unwrap_or_else(|| {
        let ids = |nodes: &[NodeId]| nodes.iter().map(|m| m.0).collect::<Vec<_>>();
        (ids(board.members()), ids(board.learners()), 1)
    });
    let counters = agent.counters;
    json!({
        "node": board.node().0,
        "session": session(agent.session),
        "metadata_members": metadata_members,
        "metadata_learners": metadata_learners,
        "metadata_incarnation": secret(metadata_incarnation),
        "metadata_recorded": metadata_recorded,
        "metadata_primary": agent.metadata_primary,
        "stopped": agent.stopped,
        "sessions": {
            "opened": counters.sessions_opened,
            "expired": counters.sessions_expired,
            "reports_accepted": counters.reports_accepted,
            "reports_refused": counters.reports_refused,
            "expiries_proposed": counters.expiries_proposed,
            "groups_unloaded": counters.groups_unloaded,
        },
        "metadata": cluster,
        "operations": operations,
        "operation_totals": totals,
        "redacted": audience == Audience::Public,
    })
}

/// A spec as the request body names it, e.g. `{"op":"move","group":3,"from":1,"to":4}`.
pub fn spec_json(spec: &OperationSpec) -> Value {
    match spec {
        OperationSpec::Move { group, from, to } => {
            json!({ "op": "move", "group": group.0, "from": from.0, "to": to.0 })
        }
        OperationSpec::Replace { group, dead, with } => {
            json!({ "op": "replace", "group": group.0, "dead": dead.0, "with": with.0 })
        }
        OperationSpec::Join { node, groups } => {
            json!({ "op": "join", "node": node.0, "groups": groups.iter().map(|g| g.0).collect::<Vec<_>>() })
        }
        OperationSpec::Decommission { node } => json!({ "op": "decommission", "node": node.0 }),
        OperationSpec::Shrink { group, node } => json!({ "op": "shrink", "group": group.0, "node": node.0 }),
    }
}

/// One line for a spec, e.g. `move group:3 node:1 → node:4`.
pub fn spec_text(spec: &OperationSpec) -> String {
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
pub fn step_text(step: &Step) -> String {
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
pub fn operation_json(metadata: &Metadata, id: OperationId, record: &OperationRecord) -> Value {
    let steps: Vec<Value> = record
        .plan
        .iter()
        .enumerate()
        .map(|(index, step)| json!({ "group": step.group().0, "step": step_text(step), "done": index < record.done }))
        .collect();
    let waiting = match metadata.step_gate(record) {
        Ok(()) => Value::Null,
        Err(reason) => json!(reason),
    };
    json!({
        "id": id.0,
        "spec": spec_json(&record.spec),
        "text": spec_text(&record.spec),
        "cancelled": record.cancelled,
        "done": record.done,
        "remaining": record.plan.len().saturating_sub(record.done),
        "plan": steps,
        "last_step_epoch": record.last_step_epoch.0,
        "waiting_for": waiting,
    })
}

#[cfg(test)]
mod tests {
    use cohort_messages::{GroupId, NodeId};

    use super::*;

    #[test]
    fn texts_read_like_the_docs() {
        let spec = OperationSpec::Move { group: GroupId(3), from: NodeId(1), to: NodeId(4) };
        assert_eq!(spec_text(&spec), "move group:3 node:1 → node:4");
        let step = Step::AddLearner { group: GroupId(3), node: NodeId(4) };
        assert_eq!(step_text(&step), "add learner node:4");
    }
}
