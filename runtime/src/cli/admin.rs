//! `cohort admin --admin HOST:PORT join|decommission|move|replace|shrink|cancel|
//! create-group|delete-group|transfer-primary|freeze|unfreeze`: the
//! operator's side of the node's `/admin/` endpoints (see
//! [`crate::admin::operator`] and [`crate::admin::changes`]).
//!
//! Why a thin client: the node checks the input again and the metadata
//! group decides, so the command only builds the JSON body, checks it with
//! the same rules first (a typo is a usage error before anything is sent),
//! and prints one line per outcome. Exit codes (the CLI's table, in
//! [`super::exit`]): 0 done, also a `freeze` of a frozen metadata or an
//! `unfreeze` of a thawed one (the line says it already was); 1 refused by
//! the metadata or by a node without an admin token; 2 a usage error (no
//! token, a wrong token, or a `400` from the node); 3 sent, and no result
//! in time (it may still apply); 4 no admin port took the connection.
//!
//! Every command needs the node's admin token (T4): `--token`, the
//! environment variable `COHORT_ADMIN_TOKEN` (which keeps it out of the
//! process list), or a profile's `token` or `token_file`.

use std::time::Duration;

use cohort_messages::metadata::OperationSpec;
use cohort_messages::{GroupId, NodeId};
use serde_json::json;

use super::exit::{CliError, Exit};
use super::http::Call;
use crate::admin::answers::{AdminReply, OperationAnswer, SpecBody};
use crate::admin::operator::{OPERATOR_TIMEOUT, PLAN_WAIT_MAX, TRANSFER_WAIT_MAX, parse_cancel, parse_start};

/// One operator command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AdminAction {
    /// Move `group`'s replica from node `from` to node `to`.
    Move {
        /// The group.
        group: u64,
        /// The node giving it up.
        from: u64,
        /// The node taking it.
        to: u64,
    },
    /// Replace `group`'s replica on the dead node `dead` with one on `with`.
    Replace {
        /// The group.
        group: u64,
        /// The dead node.
        dead: u64,
        /// Its replacement.
        with: u64,
    },
    /// Add node `node` to each of `groups`.
    Join {
        /// The node.
        node: u64,
        /// The groups.
        groups: Vec<u64>,
    },
    /// Move every replica off node `node`.
    Decommission {
        /// The node.
        node: u64,
    },
    /// Take voter `node` out of `group` (Z6).
    Shrink {
        /// The group.
        group: u64,
        /// The voter leaving.
        node: u64,
    },
    /// Cancel operation `operation` (its applied steps are reverted).
    Cancel {
        /// The operation id.
        operation: u64,
    },
    /// Create `group` of `kind` with `members` (C3).
    CreateGroup {
        /// The group.
        group: u64,
        /// Its kind (registered on every member).
        kind: String,
        /// Its members in member-index order.
        members: Vec<u64>,
        /// Its replication quorum (`None`: a majority).
        replication_quorum: Option<u8>,
    },
    /// Delete `group` and every replica's data (C3).
    DeleteGroup {
        /// The group.
        group: u64,
    },
    /// Hand `group`'s primary to its member `to` (C4).
    TransferPrimary {
        /// The group.
        group: u64,
        /// The member.
        to: u64,
    },
    /// Freeze the cluster metadata for an upgrade.
    Freeze,
    /// End the freeze.
    Unfreeze,
}

impl AdminAction {
    /// The request: path and body.
    fn request(&self) -> (String, Option<String>) {
        let body = match self {
            AdminAction::Move { group, from, to } => {
                SpecBody::Move { group: GroupId(*group), from: NodeId(*from), to: NodeId(*to) }
            }
            AdminAction::Replace { group, dead, with } => {
                SpecBody::Replace { group: GroupId(*group), dead: NodeId(*dead), with: NodeId(*with) }
            }
            AdminAction::Join { node, groups } => {
                SpecBody::Join { node: NodeId(*node), groups: groups.iter().copied().map(GroupId).collect() }
            }
            AdminAction::Decommission { node } => SpecBody::Decommission { node: NodeId(*node) },
            AdminAction::Shrink { group, node } => SpecBody::Shrink { group: GroupId(*group), node: NodeId(*node) },
            AdminAction::Cancel { operation } => return (format!("/admin/operations/{operation}/cancel"), None),
            AdminAction::CreateGroup { group, kind, members, replication_quorum } => {
                let mut body = json!({ "group": group, "kind": kind, "members": members });
                if let Some(quorum) = replication_quorum {
                    body["replication_quorum"] = json!(quorum);
                }
                return ("/admin/groups".into(), Some(body.to_string()));
            }
            AdminAction::DeleteGroup { group } => return (format!("/admin/groups/{group}/delete"), None),
            AdminAction::TransferPrimary { group, to } => {
                return (format!("/admin/groups/{group}/transfer-primary"), Some(json!({ "to": to }).to_string()));
            }
            AdminAction::Freeze => return ("/admin/freeze".into(), None),
            AdminAction::Unfreeze => return ("/admin/unfreeze".into(), None),
        };
        ("/admin/operations".into(), serde_json::to_string(&body).ok())
    }
}

/// Run `action` against the first of the nodes whose admin ports are
/// `admins` that takes the connection, presenting `token`; the line (or
/// the JSON answer with `json`) to print, or the error with its exit kind
/// and, when the node answered, its JSON answer.
pub(crate) fn admin_command(
    admins: &[String],
    token: Option<&str>,
    action: &AdminAction,
    json: bool,
) -> Result<String, CliError> {
    let (path, body) = action.request();
    // The node's own checks, before anything is sent.
    let checked = match crate::admin::changes::parse(&path, body.as_deref().unwrap_or("{}").as_bytes(), NODE_ANY) {
        Some(parsed) => parsed.map(|_| ()),
        None => match (&body, action) {
            (Some(body), _) => parse_start(body.as_bytes()).map(|_| ()),
            (None, AdminAction::Cancel { operation }) => parse_cancel(&operation.to_string()).map(|_| ()),
            (None, _) => Ok(()),
        },
    };
    if let Err(bad) = checked {
        return Err(CliError::usage(format!("--{}: {}", bad.field, bad.error)));
    }
    let Some(token) = token else {
        return Err(CliError::usage(
            "--token: missing: operator commands need the node's admin token ([admin] token); pass --token, set \
             COHORT_ADMIN_TOKEN, or give a profile a token or token_file",
        ));
    };
    let timeout = OPERATOR_TIMEOUT + PLAN_WAIT_MAX + TRANSFER_WAIT_MAX + Duration::from_secs(2);
    let body = body.unwrap_or_else(|| "{}".into());
    let call = Call::Post(&body);
    let (admin, answer) = super::http::exchange_first(admins, call, &path, Some(token), timeout)
        .map_err(|error| error.into_cli(&call))?;
    let Ok(reply) = serde_json::from_str::<AdminReply>(&answer.body) else {
        let line = answer.line;
        return Err(CliError::new(
            Exit::Failed,
            format!("{admin} answered {line:?} to POST {path} (an older cohort, or not a cohort node?)"),
        ));
    };
    let exit = match answer.code {
        200 => return Ok(if json { answer.body.trim_end().to_string() } else { render(&reply) }),
        400 | 401 | 404 | 405 | 413 | 415 => Exit::Usage,
        503 => Exit::Unknown,
        _ => Exit::Failed,
    };
    Err(CliError { exit, message: render(&reply), answer: serde_json::from_str(&answer.body).ok() })
}

/// One line for an answer of `/admin/`.
fn render(reply: &AdminReply) -> String {
    match reply {
        AdminReply::Started(answer) => operation_line(answer, true),
        AdminReply::Cancelled(answer) => operation_line(answer, false),
        AdminReply::Created { group, kind, members, incarnation, epoch, .. } => {
            let members: Vec<String> = members.iter().map(ToString::to_string).collect();
            format!(
                "created {group} (kind {kind}, incarnation {}, members {}) at epoch {}",
                incarnation.0,
                members.join(", "),
                epoch.0
            )
        }
        AdminReply::Deleted { group, epoch, applied_here } => {
            // H3: a replica stops answering when its node applies the delete.
            let here = if *applied_here { "this node has" } else { "this node has not yet" };
            format!(
                "deleted {group} at epoch {0}; each member stops serving it and removes its replica and data as soon as \
                 it applies epoch {0} ({here}; a member cut off from the metadata group serves it until it hears of it)",
                epoch.0
            )
        }
        AdminReply::Transferred(answer) => format!("{} leads {} now", answer.to, answer.group),
        AdminReply::Asked(answer) => format!(
            "asked {} to take over {} at epoch {}; not done within {} s (the primary waits until it is caught up), see `cohort status`",
            answer.to,
            answer.group,
            answer.epoch.0,
            TRANSFER_WAIT_MAX.as_secs()
        ),
        AdminReply::Frozen { since_epoch, already: false, .. } => format!(
            "the cluster metadata is frozen since epoch {}: operator changes are refused until `cohort admin unfreeze`",
            since_epoch.0
        ),
        AdminReply::Frozen { since_epoch, already: true, .. } => format!(
            "the cluster metadata was already frozen since epoch {}; nothing changed (operator changes are refused \
             until `cohort admin unfreeze`)",
            since_epoch.0
        ),
        AdminReply::Unfrozen { epoch, already: false, .. } => {
            format!("the cluster metadata is no longer frozen (epoch {})", epoch.0)
        }
        AdminReply::Unfrozen { epoch, already: true, .. } => {
            format!("the cluster metadata was not frozen; nothing changed (epoch {})", epoch.0)
        }
        AdminReply::Refused { reason } => format!("refused: {reason}"),
        AdminReply::BadRequest { field, error } => {
            format!("bad request: {}: {error}", field.as_deref().unwrap_or("body"))
        }
        AdminReply::Unavailable { error, .. } => format!("no result: {error}"),
        refusal => match refusal.refusal() {
            Some((reason, error)) => format!("refused by the admin port ({reason}): {error}"),
            None => format!("unexpected answer: {refusal:?}"),
        },
    }
}

/// One line for a started or cancelled operation.
fn operation_line(answer: &OperationAnswer, started: bool) -> String {
    let id = answer.operation;
    let text = match (&answer.record, &answer.spec) {
        (Some(record), _) => record.text.clone(),
        (None, Some(spec)) => crate::admin::status::spec_text(&OperationSpec::from(spec.clone())),
        (None, None) => "?".into(),
    };
    let Some(record) = &answer.record else {
        let state = if !answer.applied_here {
            "committed; this node has not applied it yet, see `cohort status`"
        } else if started {
            "already completed"
        } else {
            "fully reverted"
        };
        let verb = if started { "started" } else { "cancelled" };
        return format!("{verb} {id}: {text} ({state})");
    };
    let groups: std::collections::BTreeSet<GroupId> = record.plan.iter().map(|step| step.group).collect();
    let words: Vec<String> = record
        .plan
        .iter()
        .map(|step| {
            let group = if groups.len() > 1 { format!("{} ", step.group) } else { String::new() };
            format!("{group}{}", step.step)
        })
        .collect();
    let count = |n: usize| if n == 1 { "1 step".to_string() } else { format!("{n} steps") };
    if started {
        format!("started {id}: {text} ({}: {})", count(words.len()), words.join(", "))
    } else {
        format!("cancelling {id}: {text} (reverting {}: {})", count(record.remaining), words.join(", "))
    }
}

/// Freezes name the node that asked; any node id does for checking a path here.
const NODE_ANY: NodeId = NodeId(1);

#[cfg(test)]
mod tests {
    use cohort_messages::Epoch;

    use super::*;

    #[test]
    fn a_started_move_reads_as_one_line() {
        let answer = json!({
            "result": "started", "operation": 7, "epoch": 40,
            "spec": { "op": "move", "group": 3, "from": 1, "to": 4 },
            "record": {
                "id": 7, "spec": { "op": "move", "group": 3, "from": 1, "to": 4 }, "cancelled": false,
                "text": "move group:3 node:1 → node:4", "done": 1, "remaining": 2, "last_step_epoch": 40,
                "waiting_for": null,
                "plan": [
                    { "group": 3, "step": "add learner node:4", "done": true },
                    { "group": 3, "step": "promote node:4", "done": false },
                    { "group": 3, "step": "remove node:1", "done": false },
                ],
            },
            "applied_here": true,
        });
        let reply = |json: serde_json::Value| {
            serde_json::from_value::<AdminReply>(json.clone()).unwrap_or_else(|e| panic!("{e}: {json}"))
        };
        assert_eq!(
            render(&reply(answer)),
            "started operation:7: move group:3 node:1 → node:4 (3 steps: add learner node:4, promote node:4, remove node:1)"
        );
        let refused = json!({ "result": "refused", "reason": "group:3 is already in operation:1 (Move { .. })" });
        assert_eq!(render(&reply(refused)), "refused: group:3 is already in operation:1 (Move { .. })");
        let port = json!({ "result": "token_mismatch", "error": "the bearer token is not this node's [admin] token" });
        assert_eq!(
            render(&reply(port)),
            "refused by the admin port (token_mismatch): the bearer token is not this node's [admin] token"
        );
    }

    #[test]
    fn h3_the_delete_message_says_when_the_replicas_stop_serving() {
        let deleted = AdminReply::Deleted { group: GroupId(100), epoch: Epoch(52), applied_here: true };
        assert_eq!(
            render(&deleted),
            "deleted group:100 at epoch 52; each member stops serving it and removes its replica and data as soon as \
             it applies epoch 52 (this node has; a member cut off from the metadata group serves it until it hears of \
             it)"
        );
        let not_yet = AdminReply::Deleted { group: GroupId(100), epoch: Epoch(52), applied_here: false };
        assert!(render(&not_yet).contains("(this node has not yet;"), "{}", render(&not_yet));
    }

    #[test]
    fn o4_a_repeated_freeze_or_unfreeze_reads_as_done_already() {
        let frozen = AdminReply::Frozen { since_epoch: Epoch(47), epoch: Epoch(50), applied_here: true, already: true };
        assert_eq!(
            render(&frozen),
            "the cluster metadata was already frozen since epoch 47; nothing changed (operator changes are refused \
             until `cohort admin unfreeze`)"
        );
        let thawed = AdminReply::Unfrozen { epoch: Epoch(50), applied_here: true, already: true };
        assert_eq!(render(&thawed), "the cluster metadata was not frozen; nothing changed (epoch 50)");
        // An older node's answer has no `already`: a change.
        let old = json!({ "result": "frozen", "since_epoch": 3, "epoch": 3, "applied_here": true });
        let parsed = serde_json::from_value::<AdminReply>(old).expect("parses");
        assert!(matches!(parsed, AdminReply::Frozen { already: false, .. }), "{parsed:?}");
    }

    #[test]
    fn bad_input_is_a_usage_error_before_anything_is_sent() {
        // Port 9 on a documentation address: never contacted, the check comes first.
        let token = Some("0123456789abcdef-token");
        let admins = ["192.0.2.1:9".to_string()];
        let error = admin_command(&admins, token, &AdminAction::Move { group: 3, from: 1, to: 1 }, false);
        assert_eq!(error.map_err(|e| (e.exit, e.message.starts_with("--to: "))), Err((Exit::Usage, true)));
        let error = admin_command(&admins, token, &AdminAction::Cancel { operation: 0 }, false);
        assert_eq!(error.map_err(|e| e.exit), Err(Exit::Usage));
    }

    #[test]
    fn t4_no_token_is_a_usage_error_before_anything_is_sent() {
        let admins = ["192.0.2.1:9".to_string()];
        let error = admin_command(&admins, None, &AdminAction::Decommission { node: 2 }, false);
        assert_eq!(error.map_err(|e| (e.exit, e.message.starts_with("--token: missing"))), Err((Exit::Usage, true)));
    }
}
