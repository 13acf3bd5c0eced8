//! `cohort status`: a node's `/status` as text tables, or as served.
//!
//! Without the node's admin token the node redacts session ids and
//! incarnations (T4); the tables then show `redacted` and say how to see
//! them.

use std::fmt::Write as _;

use super::http::{Call, exchange};
use crate::admin::answers::{AdminReply, NodeStatus, OperationStatus};

/// `cohort status --admin HOST:PORT [--token T]`: fetch `/status` from a
/// node's admin port and render it as text (or return the JSON as served).
/// The error says which address could not be reached or what came back
/// instead.
pub(crate) fn status_command(admin: &str, token: Option<&str>, json: bool) -> Result<String, String> {
    let answer = exchange(admin, Call::Get, "/status", token, std::time::Duration::from_secs(3))
        .map_err(|error| error.to_string())?;
    if answer.code != 200 {
        let line = answer.line;
        let detail = serde_json::from_str::<AdminReply>(&answer.body)
            .ok()
            .and_then(|reply| reply.error().map(|error| format!(": {error}")))
            .unwrap_or_else(|| " (an older cohort, or not a cohort node?)".into());
        return Err(format!("{admin} answered {line:?} to GET /status{detail}"));
    }
    let status: NodeStatus = serde_json::from_str(&answer.body)
        .map_err(|error| format!("{admin}: /status is not a cohort node's status document: {error}"))?;
    if json {
        return Ok(answer.body.trim_end().to_string());
    }
    Ok(render(&status))
}

/// A list of nodes as `/status` has it, e.g. `[1,2,3]`.
fn nodes(list: &[cohort_messages::NodeId]) -> String {
    let ids: Vec<String> = list.iter().map(|node| node.0.to_string()).collect();
    format!("[{}]", ids.join(","))
}

/// A value that may be absent, `-` when it is.
fn or_dash(value: Option<impl ToString>) -> String {
    value.map_or_else(|| "-".into(), |value| value.to_string())
}

/// The text tables of `cohort status`.
pub(crate) fn render(status: &NodeStatus) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "node {}  session {}  metadata members {}  learners {}  metadata primary here: {}  epoch {}",
        status.node.0,
        or_dash(status.session),
        nodes(&status.metadata_members),
        nodes(&status.metadata_learners),
        status.metadata_primary,
        status.metadata.epoch.0,
    );
    if let Some(stopped) = &status.stopped {
        let _ = writeln!(out, "STOPPED: {stopped}");
    }
    if let Some(frozen) = status.metadata.frozen {
        let _ = writeln!(
            out,
            "FROZEN since epoch {} (asked by {}): operator changes are refused until `cohort admin unfreeze`",
            frozen.since_epoch.0, frozen.by
        );
    }
    if !status.metadata.primaries_per_node.is_empty() {
        let counts: Vec<String> =
            status.metadata.primaries_per_node.iter().map(|(node, count)| format!("{node} {count}")).collect();
        let _ = writeln!(out, "primaries per node: {}", counts.join(", "));
    }
    let _ = writeln!(out, "\nnodes\n{:<6} {:<24} {:<8} acked epoch", "id", "address", "session");
    for node in &status.metadata.nodes {
        let _ =
            writeln!(out, "{:<6} {:<24} {:<8} {}", node.id.0, node.address, or_dash(node.session), node.acked_epoch.0);
    }
    let _ = writeln!(
        out,
        "\ngroups\n{:<22} {:<16} {:<12} {:<12} {:<5} owner (node, view)",
        "id", "members", "learners", "incarnation", "live"
    );
    for group in &status.metadata.groups {
        let owner =
            group.owner.map_or_else(|| "-".into(), |owner| format!("node {} view {}", owner.node.0, owner.view.0));
        let _ = writeln!(
            out,
            "{:<22} {:<16} {:<12} {:<12} {:<5} {}",
            group.id.0,
            nodes(&group.members),
            nodes(&group.learners),
            group.incarnation,
            group.live,
            owner
        );
    }
    let totals = status.operation_totals;
    let _ = writeln!(
        out,
        "\noperations: {} in flight, {} completed, {} reverted",
        status.operations.len(),
        totals.completed,
        totals.reverted
    );
    for operation in &status.operations {
        let _ = writeln!(out, "{}", operation_text(operation));
    }
    if status.redacted {
        let _ = writeln!(
            out,
            "\nsession ids and incarnations are redacted: pass the node's admin token (--token or COHORT_ADMIN_TOKEN)"
        );
    }
    out
}

/// An in-flight operation of `/status` in words: its id and spec, then each
/// step marked done (`[x]`) or not (`[ ]`), and what the next one waits for.
pub(crate) fn operation_text(operation: &OperationStatus) -> String {
    let state = if operation.cancelled { "cancelled, reverting" } else { "in flight" };
    let mut out = format!(
        "{}: {} ({state}; {} done, {} remaining)",
        operation.id, operation.text, operation.done, operation.remaining
    );
    let groups: std::collections::BTreeSet<_> = operation.plan.iter().map(|step| step.group).collect();
    for step in &operation.plan {
        let mark = if step.done { "[x]" } else { "[ ]" };
        let group = if groups.len() > 1 { format!("{}: ", step.group) } else { String::new() };
        let _ = write!(out, "\n  {mark} {group}{}", step.step);
    }
    if let Some(waiting) = &operation.waiting_for {
        let _ = write!(out, "\n  next step waits: {waiting}");
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use cohort_messages::{Epoch, GroupId, NodeId, View};

    use super::render;
    use crate::admin::answers::{
        ClusterStatus, FrozenStatus, GroupEntry, NodeStatus, OperationTotals, OwnerStatus, Secret, SessionCounters,
    };

    fn status() -> NodeStatus {
        NodeStatus {
            node: NodeId(1),
            session: Some(Secret::Shown(3)),
            metadata_members: vec![NodeId(1), NodeId(2), NodeId(3), NodeId(4), NodeId(5)],
            metadata_learners: vec![NodeId(6), NodeId(7)],
            metadata_incarnation: Secret::Shown(1),
            metadata_recorded: true,
            metadata_primary: true,
            stopped: None,
            sessions: SessionCounters::default(),
            metadata: ClusterStatus {
                epoch: Epoch(52),
                frozen: Some(FrozenStatus { since_epoch: Epoch(47), by: NodeId(2) }),
                primaries_per_node: BTreeMap::from([(NodeId(1), 334), (NodeId(2), 333), (NodeId(3), 333)]),
                groups: vec![GroupEntry {
                    id: GroupId(3),
                    kind: "register".into(),
                    members: vec![NodeId(1), NodeId(2)],
                    learners: vec![NodeId(4)],
                    incarnation: Secret::Shown(2),
                    live: true,
                    owner: Some(OwnerStatus { node: NodeId(1), view: View(5), session: Secret::Shown(3) }),
                    transfer_to: None,
                }],
                ..ClusterStatus::default()
            },
            operations: Vec::new(),
            operation_totals: OperationTotals::default(),
            redacted: false,
        }
    }

    #[test]
    fn a_frozen_metadata_and_the_primaries_per_node_are_shown() {
        let status = status();
        let text = render(&status);
        assert!(text.contains("FROZEN since epoch 47 (asked by node:2)"), "{text}");
        assert!(text.contains("primaries per node: node:1 334, node:2 333, node:3 333"), "{text}");
        let mut thawed = status.clone();
        thawed.metadata.frozen = None;
        assert!(!render(&thawed).contains("FROZEN"));
    }

    #[test]
    fn p4_z5_the_learners_of_groups_and_of_the_metadata_are_shown() {
        let text = render(&status());
        assert!(text.contains("metadata members [1,2,3,4,5]  learners [6,7]"), "{text}");
        let groups = text.split_once("\ngroups\n").map(|(_, groups)| groups).unwrap_or_default();
        let mut lines = groups.lines();
        let header: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
        assert_eq!(header[..5], ["id", "members", "learners", "incarnation", "live"], "{text}");
        let row: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
        assert_eq!(row[..5], ["3", "[1,2]", "[4]", "2", "true"], "{text}");
    }
}
