//! What `GET /status` and `cohort status` show: this node's session and the
//! cluster as the node's copy of the metadata has it (nodes with their
//! sessions and acked epochs, groups with members, candidates, incarnation
//! and owner), the in-flight multi-step operations (M2–M5: spec, plan with
//! done and remaining steps, cancelled flag, what the next step waits for)
//! and how many operations completed or were reverted.
//!
//! The agent writes [`AgentStatus`] on every tick; the admin port renders
//! the JSON on demand, so an idle node does no work for it.

use std::sync::{Mutex, PoisonError};

use cohort_actors::core::metadata::AgentCounters;
use cohort_messages::{NodeId, SessionId};
use serde_json::{Value, json};

use super::SharedMetadata;

/// The agent's side of the status.
#[derive(Clone, Debug, Default)]
pub struct AgentStatus {
    /// The session this node holds.
    pub session: Option<SessionId>,
    /// True if the local metadata replica is the metadata group's primary.
    pub metadata_primary: bool,
    /// The agent's counters.
    pub counters: AgentCounters,
    /// Why the node stopped (S3), once it did.
    pub stopped: Option<String>,
}

/// Everything `/status` renders. Shared by the agent and the admin port.
#[derive(Debug)]
pub struct StatusBoard {
    node: NodeId,
    members: Vec<NodeId>,
    metadata: SharedMetadata,
    agent: Mutex<AgentStatus>,
}

impl StatusBoard {
    /// The board of `node`, whose metadata group has `members`.
    pub fn new(node: NodeId, members: Vec<NodeId>, metadata: SharedMetadata) -> StatusBoard {
        StatusBoard { node, members, metadata, agent: Mutex::new(AgentStatus::default()) }
    }

    /// The agent's latest status.
    pub fn agent(&self) -> AgentStatus {
        self.agent.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Record the agent's status.
    pub(crate) fn set_agent(&self, status: AgentStatus) {
        *self.agent.lock().unwrap_or_else(PoisonError::into_inner) = status;
    }

    /// The node's copy of the metadata.
    pub fn metadata(&self) -> &SharedMetadata {
        &self.metadata
    }

    /// The status as a JSON document (see `docs/embedding.md`).
    pub fn json(&self) -> Value {
        let agent = self.agent();
        let session = |session: Option<SessionId>| session.map_or(Value::Null, |s| json!(s.0));
        let cluster = self.metadata.with(|metadata| {
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
            let groups: Vec<Value> = metadata
                .groups
                .iter()
                .map(|(id, record)| {
                    let owner = record.owner.map_or(
                        Value::Null,
                        |owner| json!({ "node": owner.node.0, "view": owner.view.0, "session": owner.session.0 }),
                    );
                    json!({
                        "id": id.0,
                        "kind": record.kind,
                        "members": record.members.iter().map(|m| m.0).collect::<Vec<_>>(),
                        "candidates": record.candidates.iter().map(|m| m.0).collect::<Vec<_>>(),
                        "incarnation": record.incarnation.0,
                        "live": record.live,
                        "owner": owner,
                    })
                })
                .collect();
            let operations: Vec<Value> = metadata
                .operations
                .iter()
                .map(|(id, record)| super::operator::operation_json(metadata, *id, record))
                .collect();
            let totals = metadata.operation_totals;
            let cluster = json!({
                "epoch": metadata.epoch.0,
                "config_epoch": metadata.config_epoch.0,
                "nodes": nodes,
                "groups": groups,
            });
            (cluster, operations, json!({ "completed": totals.completed, "reverted": totals.reverted }))
        });
        let (cluster, operations, totals) = cluster;
        let counters = agent.counters;
        json!({
            "node": self.node.0,
            "session": session(agent.session),
            "metadata_members": self.members.iter().map(|m| m.0).collect::<Vec<_>>(),
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
        })
    }
}

/// `cohort status --admin HOST:PORT`: fetch `/status` from a node's admin
/// port and render it as text (or return the JSON as served). The error
/// says which address could not be reached or what came back instead.
pub fn status_command(admin: &str, json: bool) -> Result<String, String> {
    let answer = super::http::exchange(admin, "GET", "/status", None, std::time::Duration::from_secs(3))?;
    if answer.code != 200 {
        let line = answer.line;
        return Err(format!("{admin} answered {line:?} to GET /status (an older cohort, or not a cohort node?)"));
    }
    let status: Value =
        serde_json::from_str(&answer.body).map_err(|error| format!("{admin}: /status is not JSON: {error}"))?;
    if json {
        return Ok(status.to_string());
    }
    Ok(render(&status))
}

/// The text tables of `cohort status`.
fn render(status: &Value) -> String {
    use std::fmt::Write as _;
    let text = |value: &Value| match value {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "node {}  session {}  metadata members {}  metadata primary here: {}  epoch {}",
        text(&status["node"]),
        text(&status["session"]),
        text(&status["metadata_members"]),
        text(&status["metadata_primary"]),
        text(&status["metadata"]["epoch"]),
    );
    if !status["stopped"].is_null() {
        let _ = writeln!(out, "STOPPED: {}", text(&status["stopped"]));
    }
    let _ = writeln!(out, "\nnodes\n{:<6} {:<24} {:<8} acked epoch", "id", "address", "session");
    for node in status["metadata"]["nodes"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "{:<6} {:<24} {:<8} {}",
            text(&node["id"]),
            text(&node["address"]),
            text(&node["session"]),
            text(&node["acked_epoch"])
        );
    }
    let _ = writeln!(
        out,
        "\ngroups\n{:<22} {:<16} {:<12} {:<12} {:<5} owner (node, view)",
        "id", "members", "candidates", "incarnation", "live"
    );
    for group in status["metadata"]["groups"].as_array().into_iter().flatten() {
        let owner = &group["owner"];
        let owner = if owner.is_null() {
            "-".to_string()
        } else {
            format!("node {} view {}", text(&owner["node"]), text(&owner["view"]))
        };
        let _ = writeln!(
            out,
            "{:<22} {:<16} {:<12} {:<12} {:<5} {}",
            text(&group["id"]),
            text(&group["members"]),
            text(&group["candidates"]),
            text(&group["incarnation"]),
            text(&group["live"]),
            owner
        );
    }
    let operations = status["operations"].as_array().map_or(0, Vec::len);
    let totals = &status["operation_totals"];
    let _ = writeln!(
        out,
        "\noperations: {operations} in flight, {} completed, {} reverted",
        text(&totals["completed"]),
        text(&totals["reverted"])
    );
    for operation in status["operations"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "{}", operation_text(operation));
    }
    out
}

/// An in-flight operation of `/status` in words: its id and spec, then each
/// step marked done (`[x]`) or not (`[ ]`), and what the next one waits for.
pub(crate) fn operation_text(operation: &Value) -> String {
    use std::fmt::Write as _;
    let state = if operation["cancelled"] == true { "cancelled, reverting" } else { "in flight" };
    let mut out = format!(
        "operation:{}: {} ({state}; {} done, {} remaining)",
        operation["id"],
        operation["text"].as_str().unwrap_or("?"),
        operation["done"],
        operation["remaining"]
    );
    let steps = operation["plan"].as_array().cloned().unwrap_or_default();
    let groups: std::collections::BTreeSet<String> = steps.iter().map(|step| step["group"].to_string()).collect();
    for step in &steps {
        let mark = if step["done"] == true { "[x]" } else { "[ ]" };
        let group = if groups.len() > 1 { format!("group:{}: ", step["group"]) } else { String::new() };
        let _ = write!(out, "\n  {mark} {group}{}", step["step"].as_str().unwrap_or("?"));
    }
    if let Some(waiting) = operation["waiting_for"].as_str() {
        let _ = write!(out, "\n  next step waits: {waiting}");
    }
    out
}
