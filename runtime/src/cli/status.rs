//! `cohort status`: a node's `/status` as text, or as served.
//!
//! By default a summary that stays short at 10,000 groups: the node's own
//! line, the nodes with an up/down column (what the node's peer links say
//! now, not the session the metadata keeps until it expires), how many
//! primaries each leads, and the groups counted (live, without a primary,
//! led by a node that is down), then the operations. The group rows come
//! with `--group ID,...` (those groups) or `--all-groups`; `cohort groups
//! list` filters and pages them.
//!
//! Without the node's admin token the node redacts session ids and
//! incarnations (T4); the tables then show `redacted` and say how to see
//! them.

use std::fmt::Write as _;

use cohort_messages::{GroupId, NodeId};

use super::exit::{CliError, Exit};
use super::http::{Call, exchange_first};
use crate::admin::answers::{AdminReply, GroupEntry, NodeStatus, OperationStatus};

/// How long `/status` may take to arrive.
const STATUS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Which group rows `cohort status` prints.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum GroupRows {
    /// None: the groups counted.
    #[default]
    Summary,
    /// These groups.
    Only(Vec<u64>),
    /// Every group.
    All,
}

/// `/status` from the first of `admins` that answers, as served and parsed.
pub(crate) fn fetch_status(admins: &[String], token: Option<&str>) -> Result<(String, NodeStatus), CliError> {
    let call = Call::Get;
    let (admin, answer) =
        exchange_first(admins, call, "/status", token, STATUS_TIMEOUT).map_err(|error| error.into_cli(&call))?;
    if answer.code != 200 {
        let line = answer.line;
        let reply = serde_json::from_str::<AdminReply>(&answer.body).ok();
        let detail = reply
            .as_ref()
            .and_then(|reply| reply.error().map(|error| format!(": {error}")))
            .unwrap_or_else(|| " (an older cohort, or not a cohort node?)".into());
        // A token the node refuses is the caller's to fix.
        let exit = if matches!(answer.code, 401 | 403) { Exit::Usage } else { Exit::Failed };
        return Err(CliError {
            exit,
            message: format!("{admin} answered {line:?} to GET /status{detail}"),
            answer: serde_json::from_str(&answer.body).ok(),
        });
    }
    let status: NodeStatus = serde_json::from_str(&answer.body).map_err(|error| {
        CliError::new(Exit::Failed, format!("{admin}: /status is not a cohort node's status document: {error}"))
    })?;
    Ok((answer.body, status))
}

/// `cohort status`: fetch `/status` from the first of `admins` that
/// answers and render it (or, with `json`, return the document: as served,
/// or with only the groups of `--group`).
pub(crate) fn status_command(
    admins: &[String],
    token: Option<&str>,
    rows: &GroupRows,
    json: bool,
) -> Result<String, CliError> {
    let (body, mut status) = fetch_status(admins, token)?;
    if json {
        return Ok(match rows {
            GroupRows::Only(ids) => {
                status.metadata.groups.retain(|group| ids.contains(&group.id.0));
                status.to_string()
            }
            GroupRows::Summary | GroupRows::All => body.trim_end().to_string(),
        });
    }
    Ok(render(&status, rows))
}

/// A list of nodes as `/status` has it, e.g. `[1,2,3]`.
fn nodes(list: &[NodeId]) -> String {
    let ids: Vec<String> = list.iter().map(|node| node.0.to_string()).collect();
    format!("[{}]", ids.join(","))
}

/// A value that may be absent, `-` when it is.
fn or_dash(value: Option<impl ToString>) -> String {
    value.map_or_else(|| "-".into(), |value| value.to_string())
}

/// A node's `up` in a table: `up`, `DOWN`, or `-` (the node has no link to it).
pub(crate) fn up_text(up: Option<bool>) -> &'static str {
    match up {
        Some(true) => "up",
        Some(false) => "DOWN",
        None => "-",
    }
}

/// Whether the serving node reaches `node` (see `NodeEntry::up`).
pub(crate) fn node_up(status: &NodeStatus, node: NodeId) -> Option<bool> {
    status.metadata.nodes.iter().find(|entry| entry.id == node).and_then(|entry| entry.up)
}

/// The header of a table of groups.
pub(crate) fn group_header() -> String {
    format!(
        "{:<22} {:<16} {:<12} {:<12} {:<5} {:<12} owner (node, view)",
        "id", "members", "learners", "incarnation", "live", "kind"
    )
}

/// One row of a table of groups; the owner is marked `(DOWN)` when the
/// serving node does not reach it.
pub(crate) fn group_row(status: &NodeStatus, group: &GroupEntry) -> String {
    let owner = group.owner.map_or_else(
        || "-".into(),
        |owner| {
            let down = if node_up(status, owner.node) == Some(false) { " (DOWN)" } else { "" };
            format!("node {} view {}{down}", owner.node.0, owner.view.0)
        },
    );
    format!(
        "{:<22} {:<16} {:<12} {:<12} {:<5} {:<12} {}",
        group.id.0,
        nodes(&group.members),
        nodes(&group.learners),
        group.incarnation,
        group.live,
        group.kind,
        owner
    )
}

/// The text of `cohort status`.
pub(crate) fn render(status: &NodeStatus, rows: &GroupRows) -> String {
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
    let _ = writeln!(
        out,
        "\nnodes (up: as node {} reaches them now)\n{:<6} {:<5} {:<24} {:<9} {:<10} acked epoch",
        status.node.0, "id", "up", "address", "session", "primaries"
    );
    for node in &status.metadata.nodes {
        let primaries = status.metadata.primaries_per_node.get(&node.id).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "{:<6} {:<5} {:<24} {:<9} {:<10} {}",
            node.id.0,
            up_text(node.up),
            node.address,
            or_dash(node.session),
            primaries,
            node.acked_epoch.0
        );
    }
    out.push('\n');
    out.push_str(&groups_summary(status));
    match rows {
        GroupRows::Summary => {
            let _ = writeln!(out, "(the groups one by one: --group ID,... or --all-groups, or `cohort groups list`)");
        }
        GroupRows::Only(ids) => {
            let _ = writeln!(out, "\ngroups\n{}", group_header());
            for id in ids {
                match status.metadata.groups.iter().find(|group| group.id == GroupId(*id)) {
                    Some(group) => {
                        let _ = writeln!(out, "{}", group_row(status, group));
                    }
                    None => {
                        let _ = writeln!(out, "{id:<22} (not in the metadata)");
                    }
                }
            }
        }
        GroupRows::All => {
            let _ = writeln!(out, "\ngroups\n{}", group_header());
            for group in &status.metadata.groups {
                let _ = writeln!(out, "{}", group_row(status, group));
            }
        }
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

/// One line counting the groups: live, without a primary, led by a node
/// the serving node does not reach.
fn groups_summary(status: &NodeStatus) -> String {
    let groups = &status.metadata.groups;
    let live = groups.iter().filter(|group| group.live).count();
    let without = groups.iter().filter(|group| group.live && group.owner.is_none()).count();
    let led_by_down = groups
        .iter()
        .filter(|group| group.owner.is_some_and(|owner| node_up(status, owner.node) == Some(false)))
        .count();
    format!(
        "groups: {} ({live} live), {without} without a primary, {led_by_down} led by a node that is DOWN\n",
        groups.len()
    )
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

    use super::{GroupRows, render};
    use crate::admin::answers::{
        ClusterStatus, FrozenStatus, GroupEntry, NodeEntry, NodeStatus, OperationTotals, OwnerStatus, Secret,
        SessionCounters,
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

    /// Three nodes: node 1 (serving), node 2 reached, node 3 not.
    fn with_nodes(mut status: NodeStatus) -> NodeStatus {
        status.metadata.nodes = [(1, Some(true)), (2, Some(true)), (3, Some(false))]
            .into_iter()
            .map(|(id, up)| NodeEntry {
                id: NodeId(id),
                address: format!("127.0.0.1:710{id}"),
                session: Some(Secret::Shown(id + 10)),
                acked_epoch: Epoch(52),
                up,
            })
            .collect();
        status
    }

    #[test]
    fn a_frozen_metadata_and_the_primaries_per_node_are_shown() {
        let status = with_nodes(status());
        let text = render(&status, &GroupRows::Summary);
        assert!(text.contains("FROZEN since epoch 47 (asked by node:2)"), "{text}");
        let row = |id: &str| -> Vec<String> {
            let line = text.lines().find(|line| line.starts_with(&format!("{id} "))).unwrap_or_default();
            line.split_whitespace().map(str::to_string).collect()
        };
        assert_eq!(row("1")[..5], ["1", "up", "127.0.0.1:7101", "11", "334"], "{text}");
        assert_eq!(row("3")[..5], ["3", "DOWN", "127.0.0.1:7103", "13", "333"], "{text}");
        let mut thawed = status.clone();
        thawed.metadata.frozen = None;
        assert!(!render(&thawed, &GroupRows::Summary).contains("FROZEN"));
    }

    #[test]
    fn o4_the_summary_counts_the_groups_and_rows_come_on_request() {
        let mut status = with_nodes(status());
        let mut unowned = status.metadata.groups[0].clone();
        unowned.id = GroupId(4);
        unowned.owner = None;
        let mut led_by_down = status.metadata.groups[0].clone();
        led_by_down.id = GroupId(5);
        led_by_down.owner = Some(OwnerStatus { node: NodeId(3), view: View(2), session: Secret::Shown(13) });
        status.metadata.groups.extend([unowned, led_by_down]);
        let summary = render(&status, &GroupRows::Summary);
        assert!(summary.contains("groups: 3 (3 live), 1 without a primary, 1 led by a node that is DOWN"), "{summary}");
        assert!(!summary.contains("\ngroups\n"), "no rows by default: {summary}");
        let only = render(&status, &GroupRows::Only(vec![5, 9]));
        let rows: Vec<&str> = only.split_once("\ngroups\n").map(|(_, rows)| rows).unwrap_or_default().lines().collect();
        assert!(rows[1].starts_with("5 ") && rows[1].ends_with("node 3 view 2 (DOWN)"), "{only}");
        assert!(rows[2].starts_with("9 ") && rows[2].ends_with("(not in the metadata)"), "{only}");
        let all = render(&status, &GroupRows::All);
        assert_eq!(all.lines().filter(|line| line.contains(" register ")).count(), 3, "{all}");
    }

    #[test]
    fn p4_z5_the_learners_of_groups_and_of_the_metadata_are_shown() {
        let text = render(&status(), &GroupRows::All);
        assert!(text.contains("metadata members [1,2,3,4,5]  learners [6,7]"), "{text}");
        let groups = text.split_once("\ngroups\n").map(|(_, groups)| groups).unwrap_or_default();
        let mut lines = groups.lines();
        let header: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
        assert_eq!(header[..6], ["id", "members", "learners", "incarnation", "live", "kind"], "{text}");
        let row: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
        assert_eq!(row[..6], ["3", "[1,2]", "[4]", "2", "true", "register"], "{text}");
    }
}
