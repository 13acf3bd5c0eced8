//! `cohort groups list` and `cohort groups describe`: the groups of a
//! node's `/status`, filtered and paged, or one group in full.
//!
//! Why from `/status` and not a new endpoint: the document already holds
//! every group record the metadata has (the one type the node serializes
//! and the CLI reads back), so a listing needs no second copy of the
//! metadata's rules on the node. At 10,000 groups it is about 1.5 MB, well
//! inside the CLI's bound on an answer; the filters and paging run here.
//!
//! Paging is by group id: `--limit N` rows after `--after ID`, and the last
//! line (or `next_after` in JSON) says where the next page starts, so a
//! script walks every group with `--after` until `next_after` is null.

use std::fmt::Write as _;

use cohort_messages::{GroupId, NodeId};
use serde::Serialize;
use serde_json::json;

use super::exit::{CliError, Exit};
use super::status::{fetch_status, group_header, group_row, node_up, operation_text, up_text};
use crate::admin::answers::{GroupEntry, NodeStatus, OperationStatus};

/// The default `--limit`.
pub(crate) const PAGE_GROUPS_DEFAULT: usize = 100;

/// The largest `--limit`: one page holds at most this many rows.
pub(crate) const PAGE_GROUPS_MAX: usize = 10_000;

/// A node's part in a group, for `--role`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Role {
    /// It leads the group (the metadata's owner record names it).
    Primary,
    /// A voter that does not lead it.
    Backup,
    /// A voter, leading it or not.
    Voter,
    /// A learner: it catches up and never votes.
    Learner,
}

/// What `cohort groups list` keeps.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub(crate) struct ListArgs {
    /// Groups with a replica (voter or learner) on this node.
    #[arg(long, value_name = "ID")]
    pub node: Option<u64>,
    /// With --node: only where the node has this role.
    #[arg(long, value_enum, requires = "node")]
    pub role: Option<Role>,
    /// Groups of this kind.
    #[arg(long)]
    pub kind: Option<String>,
    /// Live groups whose owner record names no primary.
    #[arg(long)]
    pub without_primary: bool,
    /// Groups led by a node the answering node does not reach now.
    #[arg(long)]
    pub primary_down: bool,
    /// At most this many groups.
    #[arg(long, default_value_t = PAGE_GROUPS_DEFAULT, value_parser = limit_arg)]
    pub limit: usize,
    /// Only groups whose id is above this one (the `next_after` of the page before).
    #[arg(long, value_name = "ID")]
    pub after: Option<u64>,
}

impl Default for ListArgs {
    fn default() -> Self {
        ListArgs {
            node: None,
            role: None,
            kind: None,
            without_primary: false,
            primary_down: false,
            limit: PAGE_GROUPS_DEFAULT,
            after: None,
        }
    }
}

/// `--limit`: 1 to [`PAGE_GROUPS_MAX`].
fn limit_arg(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(limit) if (1..=PAGE_GROUPS_MAX).contains(&limit) => Ok(limit),
        _ => Err(format!("{text:?}: give a number of groups from 1 to {PAGE_GROUPS_MAX}")),
    }
}

impl ListArgs {
    /// Whether `group` passes every filter (paging aside).
    fn keeps(&self, status: &NodeStatus, group: &GroupEntry) -> bool {
        let leader = group.owner.map(|owner| owner.node);
        if let Some(node) = self.node.map(NodeId) {
            let voter = group.members.contains(&node);
            let learner = group.learners.contains(&node);
            let kept = match self.role {
                None => voter || learner,
                Some(Role::Primary) => leader == Some(node),
                Some(Role::Backup) => voter && leader != Some(node),
                Some(Role::Voter) => voter,
                Some(Role::Learner) => learner,
            };
            if !kept {
                return false;
            }
        }
        if self.kind.as_ref().is_some_and(|kind| *kind != group.kind) {
            return false;
        }
        if self.without_primary && !(group.live && leader.is_none()) {
            return false;
        }
        !self.primary_down || leader.is_some_and(|node| node_up(status, node) == Some(false))
    }
}

/// One page of a listing.
#[derive(Debug, Serialize)]
struct Page<'a> {
    /// The node that answered.
    node: NodeId,
    /// The metadata epoch its copy had applied.
    epoch: u64,
    /// Groups that pass the filters, on every page.
    matched: usize,
    /// This page's groups, by id.
    groups: Vec<&'a GroupEntry>,
    /// The `--after` of the next page; `None` on the last.
    next_after: Option<u64>,
}

/// The page `args` asks for, of `status`'s groups.
fn page<'a>(status: &'a NodeStatus, args: &ListArgs) -> Page<'a> {
    assert!((1..=PAGE_GROUPS_MAX).contains(&args.limit), "clap bounds --limit");
    let mut kept: Vec<&GroupEntry> = status.metadata.groups.iter().filter(|group| args.keeps(status, group)).collect();
    kept.sort_by_key(|group| group.id);
    let matched = kept.len();
    let after = kept.partition_point(|group| args.after.is_some_and(|after| group.id.0 <= after));
    let groups: Vec<&GroupEntry> = kept[after..].iter().copied().take(args.limit).collect();
    let more = after + groups.len() < matched;
    let next_after = if more { groups.last().map(|group| group.id.0) } else { None };
    Page { node: status.node, epoch: status.metadata.epoch.0, matched, groups, next_after }
}

/// `cohort groups list`: the page as text or JSON.
pub(crate) fn list_command(
    admins: &[String],
    token: Option<&str>,
    args: &ListArgs,
    json: bool,
) -> Result<String, CliError> {
    let (_, status) = fetch_status(admins, token)?;
    let page = page(&status, args);
    if json {
        return serde_json::to_string(&page)
            .map_err(|error| CliError::new(Exit::Failed, format!("cannot print the page: {error}")));
    }
    let mut out = format!("{}\n", group_header());
    for group in &page.groups {
        let _ = writeln!(out, "{}", group_row(&status, group));
    }
    let _ = write!(
        out,
        "{} of {} matching groups (node {} at epoch {})",
        page.groups.len(),
        page.matched,
        page.node.0,
        page.epoch
    );
    if let Some(next) = page.next_after {
        let _ = write!(out, "; next page: --after {next}");
    }
    Ok(out)
}

/// `cohort groups describe --group ID`: one group with each replica's role
/// and whether the answering node reaches it, and the operations that
/// touch it. A group the metadata does not have is a failure (exit 1).
pub(crate) fn describe_command(
    admins: &[String],
    token: Option<&str>,
    group: u64,
    json: bool,
) -> Result<String, CliError> {
    let (_, status) = fetch_status(admins, token)?;
    let Some(entry) = status.metadata.groups.iter().find(|entry| entry.id == GroupId(group)) else {
        return Err(CliError::new(
            Exit::Failed,
            format!(
                "no group:{group} in the metadata (node {} at epoch {}); `cohort groups list` shows the groups",
                status.node.0, status.metadata.epoch.0
            ),
        ));
    };
    let operations: Vec<&OperationStatus> =
        status.operations.iter().filter(|operation| operation.plan.iter().any(|step| step.group == entry.id)).collect();
    let replicas = replicas(&status, entry);
    if json {
        let replicas: Vec<_> =
            replicas.iter().map(|(node, role, up)| json!({ "node": node.0, "role": role, "up": up })).collect();
        let document = json!({
            "node": status.node.0,
            "epoch": status.metadata.epoch.0,
            "group": entry,
            "replicas": replicas,
            "operations": operations,
        });
        return Ok(document.to_string());
    }
    let mut out = format!("{} (node {} at epoch {})\n", entry.id, status.node.0, status.metadata.epoch.0);
    let _ = writeln!(out, "  kind         {}", entry.kind);
    let _ = writeln!(out, "  live         {}", entry.live);
    let _ = writeln!(out, "  incarnation  {}", entry.incarnation);
    let primary = entry.owner.map_or_else(
        || "none".to_string(),
        |owner| format!("{} view {} (session {})", owner.node, owner.view.0, owner.session),
    );
    let _ = writeln!(out, "  primary      {primary}");
    if let Some(to) = entry.transfer_to {
        let _ = writeln!(out, "  transfer to  {to} (asked)");
    }
    let _ = writeln!(out, "  replicas");
    for (node, role, up) in &replicas {
        let _ = writeln!(out, "    {:<10} {:<8} {}", node.to_string(), role, up_text(*up));
    }
    if operations.is_empty() {
        let _ = write!(out, "  operations   none in flight");
    } else {
        let _ = write!(out, "  operations");
        for operation in operations {
            for line in operation_text(operation).lines() {
                let _ = write!(out, "\n    {line}");
            }
        }
    }
    Ok(out)
}

/// Each replica of `group`: its node, its role and whether the answering
/// node reaches it; voters in member-index order, then learners.
fn replicas(status: &NodeStatus, group: &GroupEntry) -> Vec<(NodeId, &'static str, Option<bool>)> {
    let leader = group.owner.map(|owner| owner.node);
    let voters = group.members.iter().map(|node| (*node, if leader == Some(*node) { "primary" } else { "backup" }));
    let learners = group.learners.iter().map(|node| (*node, "learner"));
    voters.chain(learners).map(|(node, role)| (node, role, node_up(status, node))).collect()
}

#[cfg(test)]
mod tests {
    use cohort_messages::{Epoch, View};

    use super::*;
    use crate::admin::answers::{ClusterStatus, NodeEntry, OperationTotals, OwnerStatus, Secret, SessionCounters};

    /// 30 groups on nodes 1–3: group g led by node g % 3 + 1, kind `a` for
    /// even ids, `b` for odd; every fifth has no primary; node 4 learns
    /// group 7; node 3 is down.
    fn status() -> NodeStatus {
        let groups = (0..30)
            .map(|id| GroupEntry {
                id: GroupId(id),
                kind: if id % 2 == 0 { "a".into() } else { "b".into() },
                members: vec![NodeId(1), NodeId(2), NodeId(3)],
                learners: if id == 7 { vec![NodeId(4)] } else { Vec::new() },
                incarnation: Secret::Shown(1),
                live: true,
                owner: (id % 5 != 0).then(|| OwnerStatus {
                    node: NodeId(id % 3 + 1),
                    view: View(1),
                    session: Secret::Shown(1),
                }),
                transfer_to: None,
            })
            .collect();
        let nodes = (1..=4)
            .map(|id| NodeEntry {
                id: NodeId(id),
                address: format!("n{id}"),
                session: Some(Secret::Shown(id)),
                acked_epoch: Epoch(9),
                up: Some(id != 3),
            })
            .collect();
        NodeStatus {
            node: NodeId(1),
            session: Some(Secret::Shown(1)),
            metadata_members: vec![NodeId(1), NodeId(2), NodeId(3)],
            metadata_learners: Vec::new(),
            metadata_incarnation: Secret::Shown(1),
            metadata_recorded: true,
            metadata_primary: true,
            stopped: None,
            sessions: SessionCounters::default(),
            metadata: ClusterStatus { epoch: Epoch(9), nodes, groups, ..ClusterStatus::default() },
            operations: Vec::new(),
            operation_totals: OperationTotals::default(),
            redacted: false,
        }
    }

    fn ids(page: &Page<'_>) -> Vec<u64> {
        page.groups.iter().map(|group| group.id.0).collect()
    }

    #[test]
    fn o4_filters_keep_the_groups_asked_for() {
        let status = status();
        let primary_on_2 = page(&status, &ListArgs { node: Some(2), role: Some(Role::Primary), ..ListArgs::default() });
        assert!(ids(&primary_on_2).iter().all(|id| id % 3 == 1 && id % 5 != 0), "{:?}", ids(&primary_on_2));
        assert_eq!(ids(&primary_on_2)[..3], [1, 4, 7]);
        let learner = page(&status, &ListArgs { node: Some(4), role: Some(Role::Learner), ..ListArgs::default() });
        assert_eq!(ids(&learner), [7]);
        assert_eq!(ids(&page(&status, &ListArgs { node: Some(4), ..ListArgs::default() })), [7]);
        let backup = page(&status, &ListArgs { node: Some(1), role: Some(Role::Backup), ..ListArgs::default() });
        assert_eq!(backup.matched, 30 - 8, "node 1 leads 8 of the 30 (ids 3k with k not a multiple of 5)");
        let without = page(&status, &ListArgs { without_primary: true, ..ListArgs::default() });
        assert_eq!(ids(&without), [0, 5, 10, 15, 20, 25]);
        let kind_b_down =
            page(&status, &ListArgs { kind: Some("b".into()), primary_down: true, ..ListArgs::default() });
        assert!(ids(&kind_b_down).iter().all(|id| id % 2 == 1 && id % 3 == 2), "{:?}", ids(&kind_b_down));
    }

    #[test]
    fn o4_pages_follow_each_other_by_id_until_next_after_is_none() {
        let status = status();
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let page = page(&status, &ListArgs { limit: 7, after, ..ListArgs::default() });
            assert_eq!(page.matched, 30);
            seen.extend(ids(&page));
            match page.next_after {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        assert_eq!(seen, (0..30).collect::<Vec<_>>(), "every group once, in order");
        let last = page(&status, &ListArgs { limit: 100, after: Some(29), ..ListArgs::default() });
        assert_eq!((last.groups.len(), last.next_after), (0, None));
    }

    #[test]
    fn o4_replicas_carry_their_role_and_whether_they_are_up() {
        let status = status();
        let group = &status.metadata.groups[7];
        assert_eq!(
            replicas(&status, group),
            [
                (NodeId(1), "backup", Some(true)),
                (NodeId(2), "primary", Some(true)),
                (NodeId(3), "backup", Some(false)),
                (NodeId(4), "learner", Some(true)),
            ]
        );
    }
}
