//! Operator commands on the admin port: `POST /admin/operations` starts a
//! multi-step operation (move, replace, join, decommission; M2–M5) and
//! `POST /admin/operations/{id}/cancel` cancels one (M5).
//!
//! Why on the node: the metadata group decides every operation (the plan, the
//! M3 overlap check, the gates), and any node can submit a command to it; an
//! operator needs one address, not the metadata primary's. The node only
//! translates: it checks the JSON body field by field (a `400` names the
//! field), builds the [`MetadataCommand`] and runs its `validate()`, submits
//! it through its agent to the metadata group (exactly once, see
//! `actors/src/operator_client.rs`), and answers with what the metadata committed:
//!
//! | outcome | status | body |
//! | --- | --- | --- |
//! | started / cancelled | 200 | the operation id, its spec and its stored plan, read from this node's copy of the metadata once it applied the command's epoch |
//! | refused by the metadata (e.g. M3) | 409 | the metadata's reason, verbatim |
//! | bad input | 400 | the field and what is wrong with it |
//! | no answer in time, or busy | 503 | what was tried; the command may still apply |
//!
//! Only a caller with the node's admin token reaches these endpoints, with
//! a JSON body (see [`super::auth`]). The body is bounded by
//! [`BODY_MAX_BYTES`] (the admin port answers `413` beyond it) and parsing
//! never panics.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Recipient;
use cohort_messages::metadata::{MetadataCommand, MetadataResult, OPERATION_GROUPS_MAX, OperationSpec};
use cohort_messages::{Epoch, GroupId, NodeId, OperationId};
use serde_json::{Map, Value};
use tokio::sync::oneshot;

use cohort_actors::OperatorFailure;
use cohort_actors::OperatorSubmit;
use cohort_actors::StatusBoard;

use super::answers::{AdminReply, Advice, FailureDetail, NodeStatus, OperationAnswer, SpecBody, TransferAnswer};
use super::status::{self, operation_status};
use super::{AdminAnswer, AdminFuture, BODY_MAX_BYTES, NodeRoutes};

/// How long the node tries to get an operator command committed.
pub(crate) const OPERATOR_TIMEOUT: Duration = Duration::from_secs(10);

/// How long, after the commit, the node waits for its own copy of the
/// metadata to apply it (to answer with the stored plan).
pub(crate) const PLAN_WAIT_MAX: Duration = Duration::from_secs(3);

/// How long `transfer-primary` waits for the new primary's ownership report
/// before it answers that the transfer was asked for (it goes on after).
pub(crate) const TRANSFER_WAIT_MAX: Duration = Duration::from_secs(5);

// A join naming OPERATION_GROUPS_MAX groups of 20-digit ids fits in a body.
const _: () = assert!(OPERATION_GROUPS_MAX * 21 + 256 <= BODY_MAX_BYTES);

/// The answer to a field of the request that is missing or wrong.
fn bad_request(field: &str, error: impl Into<String>) -> AdminAnswer {
    AdminAnswer { status: 400, body: AdminReply::BadRequest { field: Some(field.into()), error: error.into() } }
}

/// The answer to a method other than POST.
fn method_not_allowed() -> AdminAnswer {
    AdminAnswer { status: 405, body: AdminReply::MethodNotAllowed(Advice::new("use POST")) }
}

/// The answer when the metadata refused the command.
fn refused(reason: String) -> AdminAnswer {
    AdminAnswer { status: 409, body: AdminReply::Refused { reason } }
}

/// The answer when no result came.
fn unavailable(error: String, detail: Option<FailureDetail>) -> AdminAnswer {
    AdminAnswer { status: 503, body: AdminReply::Unavailable { error, detail } }
}

/// A field of the request that is missing or wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BadInput {
    /// The field.
    pub field: String,
    /// What is wrong.
    pub error: String,
}

fn bad<T>(field: &str, error: impl Into<String>) -> Result<T, BadInput> {
    Err(BadInput { field: field.into(), error: error.into() })
}

/// The body of `POST /admin/operations`, e.g. `{"op":"move","group":3,"from":1,"to":4}`:
/// the spec, checked field by field and by [`OperationSpec::validate`].
pub(crate) fn parse_start(body: &[u8]) -> Result<OperationSpec, BadInput> {
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return bad("body", "not a JSON document; send e.g. {\"op\":\"move\",\"group\":3,\"from\":1,\"to\":4}");
    };
    let Some(object) = value.as_object() else { return bad("body", "not a JSON object") };
    let op = match object.get("op") {
        Some(Value::String(op)) => op.as_str(),
        Some(_) => return bad("op", "not a string"),
        None => return bad("op", "missing: one of move, replace, join, decommission, shrink"),
    };
    let fields: &[&str] = match op {
        "move" => &["op", "group", "from", "to"],
        "replace" => &["op", "group", "dead", "with"],
        "join" => &["op", "node", "groups"],
        "decommission" => &["op", "node"],
        "shrink" => &["op", "group", "node"],
        other => return bad("op", format!("{other:?} is not one of move, replace, join, decommission, shrink")),
    };
    if let Some(unknown) = object.keys().find(|key| !fields.contains(&key.as_str())) {
        return bad(unknown, format!("not a field of {op} (its fields: {})", fields[1..].join(", ")));
    }
    let spec = match op {
        "move" => {
            let (from, to) = (node(object, "from")?, node(object, "to")?);
            if from == to {
                return bad("to", format!("the same node as from ({from})"));
            }
            OperationSpec::Move { group: group(object, "group")?, from, to }
        }
        "replace" => {
            let (dead, with) = (node(object, "dead")?, node(object, "with")?);
            if dead == with {
                return bad("with", format!("the same node as dead ({dead})"));
            }
            OperationSpec::Replace { group: group(object, "group")?, dead, with }
        }
        "join" => OperationSpec::Join { node: node(object, "node")?, groups: groups(object)? },
        "shrink" => OperationSpec::Shrink { group: group(object, "group")?, node: node(object, "node")? },
        _ => OperationSpec::Decommission { node: node(object, "node")? },
    };
    match spec.validate() {
        Ok(()) => Ok(spec),
        Err(invalid) => bad("op", invalid.reason),
    }
}

fn number(object: &Map<String, Value>, field: &str) -> Result<u64, BadInput> {
    match object.get(field) {
        Some(value) => value.as_u64().map_or_else(|| bad(field, format!("{value} is not a whole number")), Ok),
        None => bad(field, "missing"),
    }
}

fn node(object: &Map<String, Value>, field: &str) -> Result<NodeId, BadInput> {
    match number(object, field)? {
        0 => bad(field, "node 0 is never a node"),
        id => Ok(NodeId(id)),
    }
}

fn group(object: &Map<String, Value>, field: &str) -> Result<GroupId, BadInput> {
    number(object, field).map(GroupId)
}

fn groups(object: &Map<String, Value>) -> Result<Vec<GroupId>, BadInput> {
    let Some(Value::Array(list)) = object.get("groups") else {
        return bad("groups", "missing or not a list of group ids");
    };
    if list.is_empty() || list.len() > OPERATION_GROUPS_MAX {
        return bad("groups", format!("{} groups; name 1 to {OPERATION_GROUPS_MAX}", list.len()));
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut groups = Vec::with_capacity(list.len());
    for value in list {
        let Some(id) = value.as_u64() else { return bad("groups", format!("{value} is not a group id")) };
        if !seen.insert(id) {
            return bad("groups", format!("group:{id} listed twice"));
        }
        groups.push(GroupId(id));
    }
    Ok(groups)
}

/// The operation id in `/admin/operations/{id}/cancel` (`7` or `operation:7`).
pub(crate) fn parse_cancel(id: &str) -> Result<OperationId, BadInput> {
    let digits = id.strip_prefix("operation:").unwrap_or(id);
    match digits.parse::<u64>() {
        Ok(0) => bad("operation", "operation 0 is reserved; ids start at 1"),
        Ok(id) => Ok(OperationId(id)),
        Err(_) => bad("operation", format!("{id:?} is not an operation id")),
    }
}

/// What the admin port needs to run operator commands on a node.
#[derive(Clone)]
pub(crate) struct OperatorPort {
    board: Arc<StatusBoard>,
    agent: Recipient<OperatorSubmit>,
    links: status::PeerLinks,
    timeout: Duration,
    /// The group kinds this node registered (O5: a group of another kind
    /// would be created, and then hosted nowhere).
    kinds: Arc<[String]>,
}

impl OperatorPort {
    /// Commands go through `agent`; plans are read from `board`'s metadata;
    /// `/status` says which peers are up from `links`; `kinds` are the
    /// group kinds this node registered.
    pub(crate) fn new(
        board: Arc<StatusBoard>,
        agent: Recipient<OperatorSubmit>,
        links: status::PeerLinks,
        kinds: Vec<String>,
    ) -> OperatorPort {
        OperatorPort { board, agent, links, timeout: OPERATOR_TIMEOUT, kinds: kinds.into() }
    }

    /// O5: a create of a kind this node does not register is refused here,
    /// at once, naming the kinds it does: the metadata would take it, and
    /// then no member would host the group. (Nodes do not tell the
    /// metadata their kinds; a host whose nodes register different kinds
    /// creates a group through a node that registers its kind.)
    fn unregistered_kind(&self, command: &MetadataCommand) -> Option<String> {
        let MetadataCommand::CreateGroup { kind, .. } = command else { return None };
        if self.kinds.iter().any(|known| known == kind) {
            return None;
        }
        let node = self.board.node();
        Some(format!(
            "kind {kind:?} is not registered on {node}, which registers {}: a group of it would be hosted nowhere; \
             give --kind one of those (`cohort node` registers \"default\"), or create the group through a node \
             that registers its kind",
            self.kinds.iter().map(|kind| format!("{kind:?}")).collect::<Vec<_>>().join(", ")
        ))
    }

    /// Answer `method path` with `body` (a path under `/admin/`).
    pub(crate) async fn handle(&self, method: &str, path: &str, body: &[u8]) -> AdminAnswer {
        if let Some(parsed) = super::changes::parse(path, body, self.board.node()) {
            if method != "POST" {
                return method_not_allowed();
            }
            return match parsed {
                Ok(command) => self.change(command).await,
                Err(BadInput { field, error }) => bad_request(&field, error),
            };
        }
        let cancel = path.strip_prefix("/admin/operations/").and_then(|rest| rest.strip_suffix("/cancel"));
        let known = path == "/admin/operations" || cancel.is_some();
        if !known {
            let error = "no such path; POST /admin/operations, /admin/operations/{id}/cancel, /admin/groups, \
                         /admin/groups/{id}/delete, /admin/groups/{id}/transfer-primary, /admin/freeze or /admin/unfreeze";
            return AdminAnswer { status: 404, body: AdminReply::NotFound(Advice::new(error)) };
        }
        if method != "POST" {
            return method_not_allowed();
        }
        let command = match cancel {
            Some(id) => parse_cancel(id).map(|operation| MetadataCommand::CancelOperation { operation }),
            None => parse_start(body).map(|spec| MetadataCommand::StartOperation { spec }),
        };
        let command = match command {
            Ok(command) => command,
            Err(BadInput { field, error }) => return bad_request(&field, error),
        };
        if let Err(invalid) = command.validate() {
            return bad_request("op", invalid.reason);
        }
        match self.submit(command.clone()).await {
            Ok(result) => self.committed(&command, result).await,
            Err(failure) => unavailable(failure.to_string(), Some(failure_detail(&failure))),
        }
    }

    /// Submit `command` to the metadata group through this node's agent,
    /// exactly once, and return what it committed (the embedding API's
    /// path to the same commands, see `NodeHandle::create_group`).
    pub(crate) async fn submit(&self, command: MetadataCommand) -> Result<MetadataResult, OperatorFailure> {
        if let Some(reason) = self.unregistered_kind(&command) {
            return Ok(MetadataResult::Refused { reason });
        }
        let deadline = Instant::now() + self.timeout;
        let (answer, answered) = oneshot::channel();
        self.agent.try_send(OperatorSubmit { command, deadline, answer }).map_err(|_| OperatorFailure::Busy)?;
        // The agent answers by the deadline on its ticks; the margin covers a
        // stopped agent, whose answer never comes.
        match tokio::time::timeout(self.timeout + Duration::from_secs(1), answered).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(OperatorFailure::Stopped),
            Err(_) => Err(OperatorFailure::Unreachable {
                waited: self.timeout,
                attempts: 0,
                tried: "the node's agent (it did not answer)".into(),
                last: "none".into(),
            }),
        }
    }

    /// The answer for a committed command.
    async fn committed(&self, command: &MetadataCommand, result: MetadataResult) -> AdminAnswer {
        let (operation, epoch, started) = match (command, result) {
            (_, MetadataResult::Refused { reason }) => return refused(reason),
            (_, MetadataResult::OperationStarted { operation, epoch }) => (operation, epoch, true),
            (MetadataCommand::CancelOperation { operation }, MetadataResult::Done { epoch }) => {
                (*operation, epoch, false)
            }
            (_, other) => return unavailable(format!("unexpected metadata result {other:?}"), None),
        };
        let applied_here = self.wait_applied(epoch).await;
        let record = self.board.metadata().with(|metadata| {
            let record = metadata.operations.get(&operation)?;
            Some(operation_status(metadata, operation, record))
        });
        let spec = match command {
            MetadataCommand::StartOperation { spec } => Some(SpecBody::from(spec)),
            _ => record.as_ref().map(|record| record.spec.clone()),
        };
        let answer = OperationAnswer { operation, epoch, spec, record, applied_here };
        let body = if started { AdminReply::Started(answer) } else { AdminReply::Cancelled(answer) };
        AdminAnswer { status: 200, body }
    }

    /// Submit a change of [`super::changes`] and answer with what the
    /// metadata made of it.
    async fn change(&self, command: MetadataCommand) -> AdminAnswer {
        let result = match self.submit(command.clone()).await {
            Ok(result) => result,
            Err(failure) => return unavailable(failure.to_string(), Some(failure_detail(&failure))),
        };
        let epoch = match result {
            MetadataResult::Refused { reason } => {
                return self.already(&command).await.unwrap_or_else(|| refused(reason));
            }
            MetadataResult::Done { epoch } | MetadataResult::GroupCreated { epoch, .. } => epoch,
            other => return unavailable(format!("unexpected metadata result {other:?}"), None),
        };
        let applied_here = self.wait_applied(epoch).await;
        let body = match (command, result) {
            (
                MetadataCommand::CreateGroup { group, kind, members, .. },
                MetadataResult::GroupCreated { incarnation, .. },
            ) => AdminReply::Created { group, kind, members, incarnation, epoch, applied_here },
            (MetadataCommand::DeleteGroup { group }, _) => AdminReply::Deleted { group, epoch, applied_here },
            (MetadataCommand::TransferPrimary { group, to }, _) => {
                let answer = TransferAnswer { group, to, epoch, applied_here };
                if self.wait_led_by(group, to).await {
                    AdminReply::Transferred(answer)
                } else {
                    AdminReply::Asked(answer)
                }
            }
            (MetadataCommand::Freeze { .. }, _) => {
                AdminReply::Frozen { since_epoch: epoch, epoch, applied_here, already: false }
            }
            (MetadataCommand::Unfreeze { .. }, _) => AdminReply::Unfrozen { epoch, applied_here, already: false },
            (other, result) => {
                return unavailable(format!("unexpected metadata result {result:?} to {other:?}"), None);
            }
        };
        AdminAnswer { status: 200, body }
    }

    /// O4, a repeated freeze or unfreeze: the metadata refuses a `Freeze`
    /// when frozen and an `Unfreeze` when not, which for the operator means
    /// the state asked for holds already. Once this node's copy shows that
    /// state (it may lag the refusal; waits up to [`PLAN_WAIT_MAX`]), the
    /// answer is a success that says so; `None` for any other refusal.
    async fn already(&self, command: &MetadataCommand) -> Option<AdminAnswer> {
        let freeze = match command {
            MetadataCommand::Freeze { .. } => true,
            MetadataCommand::Unfreeze { .. } => false,
            _ => return None,
        };
        let deadline = Instant::now() + PLAN_WAIT_MAX;
        loop {
            let (frozen, epoch) = self.board.metadata().with(|metadata| (metadata.frozen, metadata.epoch));
            let body = match frozen {
                Some(frozen) if freeze => {
                    Some(AdminReply::Frozen { since_epoch: frozen.since, epoch, applied_here: true, already: true })
                }
                None if !freeze => Some(AdminReply::Unfrozen { epoch, applied_here: true, already: true }),
                _ => None,
            };
            if let Some(body) = body {
                return Some(AdminAnswer { status: 200, body });
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Wait (up to [`TRANSFER_WAIT_MAX`]) until this node's copy of the
    /// metadata says `to` leads `group`.
    async fn wait_led_by(&self, group: GroupId, to: NodeId) -> bool {
        let deadline = Instant::now() + TRANSFER_WAIT_MAX;
        loop {
            let led = self.board.metadata().with(|metadata| {
                metadata.groups.get(&group).and_then(|record| record.owner).is_some_and(|owner| owner.node == to)
            });
            if led {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Wait until this node's copy of the metadata applied `epoch`.
    async fn wait_applied(&self, epoch: Epoch) -> bool {
        let deadline = Instant::now() + PLAN_WAIT_MAX;
        loop {
            if self.board.metadata().with(|metadata| metadata.epoch >= epoch) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl NodeRoutes for OperatorPort {
    fn status(&self, audience: super::Audience) -> NodeStatus {
        status::node_status(&self.board, &self.links, audience)
    }

    fn admin<'a>(&'a self, method: &'a str, path: &'a str, body: &'a [u8]) -> AdminFuture<'a> {
        Box::pin(self.handle(method, path, body))
    }
}

fn failure_detail(failure: &OperatorFailure) -> FailureDetail {
    match failure {
        OperatorFailure::Unreachable { waited, attempts, tried, last } => FailureDetail::Unreachable {
            waited_ms: u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
            attempts: *attempts,
            tried: tried.clone(),
            last: last.clone(),
        },
        OperatorFailure::Busy => FailureDetail::Busy,
        OperatorFailure::Rejected { code, detail } => {
            FailureDetail::Rejected { code: format!("{code:?}"), detail: detail.clone() }
        }
        OperatorFailure::Stopped => FailureDetail::Stopped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_parse_into_specs() {
        let cases = [
            (
                r#"{"op":"move","group":3,"from":1,"to":4}"#,
                OperationSpec::Move { group: GroupId(3), from: NodeId(1), to: NodeId(4) },
            ),
            (
                r#"{"op":"replace","group":3,"dead":2,"with":4}"#,
                OperationSpec::Replace { group: GroupId(3), dead: NodeId(2), with: NodeId(4) },
            ),
            (
                r#"{"op":"join","node":4,"groups":[1,2]}"#,
                OperationSpec::Join { node: NodeId(4), groups: vec![GroupId(1), GroupId(2)] },
            ),
            (r#"{"op":"decommission","node":2}"#, OperationSpec::Decommission { node: NodeId(2) }),
        ];
        for (body, spec) in cases {
            assert_eq!(parse_start(body.as_bytes()), Ok(spec.clone()), "{body}");
            let typed = serde_json::to_value(SpecBody::from(&spec)).unwrap_or_default();
            assert_eq!(typed, serde_json::from_str::<Value>(body).unwrap_or_default());
        }
    }

    #[test]
    fn bad_bodies_name_the_field() {
        let cases = [
            ("", "body"),
            ("[1]", "body"),
            (r#"{"group":3}"#, "op"),
            (r#"{"op":"teleport"}"#, "op"),
            (r#"{"op":"move","group":3,"from":1}"#, "to"),
            (r#"{"op":"move","group":-3,"from":1,"to":4}"#, "group"),
            (r#"{"op":"move","group":3,"from":1,"to":1}"#, "to"),
            (r#"{"op":"move","group":3,"from":0,"to":1}"#, "from"),
            (r#"{"op":"move","group":3,"from":1,"to":4,"force":true}"#, "force"),
            (r#"{"op":"join","node":4,"groups":[]}"#, "groups"),
            (r#"{"op":"join","node":4,"groups":[1,1]}"#, "groups"),
            (r#"{"op":"join","node":4,"groups":"1,2"}"#, "groups"),
            (r#"{"op":"decommission","node":"two"}"#, "node"),
        ];
        for (body, field) in cases {
            match parse_start(body.as_bytes()) {
                Err(bad) => assert_eq!(bad.field, field, "{body}: {}", bad.error),
                Ok(spec) => panic!("{body} parsed as {spec:?}"),
            }
        }
        assert_eq!(parse_cancel("7"), Ok(OperationId(7)));
        assert_eq!(parse_cancel("operation:7"), Ok(OperationId(7)));
        assert!(parse_cancel("0").is_err() && parse_cancel("x").is_err() && parse_cancel("").is_err());
    }

    proptest::proptest! {
        #[test]
        fn parsing_never_panics(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let _ = parse_start(&body);
            let _ = parse_cancel(&String::from_utf8_lossy(&body));
        }
    }
}
