//! What `GET /status` and `cohort status` show: this node's session and the
//! cluster as the node's copy of the metadata has it (nodes with their
//! sessions and acked epochs, groups with members, incarnation and owner),
//! and the in-flight multi-step operations (M2; none exist yet, so the list
//! is honestly empty).
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
                        "incarnation": record.incarnation.0,
                        "live": record.live,
                        "owner": owner,
                    })
                })
                .collect();
            json!({
                "epoch": metadata.epoch.0,
                "config_epoch": metadata.config_epoch.0,
                "nodes": nodes,
                "groups": groups,
            })
        });
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
            // M2's multi-step operations are not built yet: nothing is in flight.
            "operations": [],
        })
    }
}

/// `cohort status --admin HOST:PORT`: fetch `/status` from a node's admin
/// port and render it as text (or return the JSON as served). The error
/// says which address could not be reached or what came back instead.
pub fn status_command(admin: &str, json: bool) -> Result<String, String> {
    use std::io::{Read, Write};
    use std::net::ToSocketAddrs;
    let timeout = std::time::Duration::from_secs(3);
    let address = admin
        .to_socket_addrs()
        .map_err(|error| format!("{admin}: not a HOST:PORT address ({error})"))?
        .next()
        .ok_or_else(|| format!("{admin}: the name resolves to no address"))?;
    let unreachable = |error: std::io::Error| {
        format!("cannot reach the node's admin port at {admin}: {error} (is the node running, with [node] admin set?)")
    };
    let mut stream = std::net::TcpStream::connect_timeout(&address, timeout).map_err(unreachable)?;
    stream.set_read_timeout(Some(timeout)).map_err(unreachable)?;
    stream
        .write_all(format!("GET /status HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n").as_bytes())
        .map_err(unreachable)?;
    let mut answer = Vec::new();
    stream.take(16 * 1024 * 1024).read_to_end(&mut answer).map_err(unreachable)?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n").ok_or_else(|| format!("{admin}: not an HTTP answer"))?;
    if !head.starts_with("HTTP/1.1 200") {
        let line = head.lines().next().unwrap_or_default();
        return Err(format!("{admin} answered {line:?} to GET /status (an older cohort, or not a cohort node?)"));
    }
    let status: Value = serde_json::from_str(body).map_err(|error| format!("{admin}: /status is not JSON: {error}"))?;
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
        "\ngroups\n{:<22} {:<16} {:<12} {:<5} owner (node, view)",
        "id", "members", "incarnation", "live"
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
            "{:<22} {:<16} {:<12} {:<5} {}",
            text(&group["id"]),
            text(&group["members"]),
            text(&group["incarnation"]),
            text(&group["live"]),
            owner
        );
    }
    let operations = status["operations"].as_array().map_or(0, Vec::len);
    let _ = writeln!(out, "\nin-flight operations");
    if operations == 0 {
        let _ = writeln!(out, "(none: multi-step operations (M2) are not built yet)");
    }
    for operation in status["operations"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "{operation}");
    }
    out
}
