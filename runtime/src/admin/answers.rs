//! Every JSON document the admin port serves, as types: the node
//! serializes them and `cohort status` and `cohort admin` deserialize the
//! same types, so a field the server renames breaks the build or a test,
//! not the operator's table (a `candidates` column once stayed empty for
//! months because `/status` said `learners`).
//!
//! - [`NodeStatus`]: `GET /status`, and [`crate::node::NodeHandle::status`].
//! - [`AdminReply`]: every other JSON answer, tagged by `result`: what an
//!   operator command did, what the metadata refused, and every refusal of
//!   the port itself.
//!
//! The JSON shapes are documented in docs/metrics.md ("The admin port") and
//! docs/metadata.md (operator commands).

use std::collections::BTreeMap;
use std::fmt;

use cohort_messages::metadata::OperationSpec;
use cohort_messages::{Epoch, GroupId, Incarnation, NodeId, OperationId, View};
use serde::{Deserialize, Serialize};

/// What a redacted value reads as.
pub(crate) const REDACTED: &str = "redacted";

/// A session id or an incarnation: what a forged frame would need, so the
/// port shows it only to a caller with the node's token (T4). In JSON, a
/// number, or the string `"redacted"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "SecretJson", try_from = "SecretJson")]
pub enum Secret {
    /// The value.
    Shown(u64),
    /// Hidden from this caller.
    Redacted,
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum SecretJson {
    Number(u64),
    Word(String),
}

impl From<Secret> for SecretJson {
    fn from(secret: Secret) -> SecretJson {
        match secret {
            Secret::Shown(value) => SecretJson::Number(value),
            Secret::Redacted => SecretJson::Word(REDACTED.into()),
        }
    }
}

impl TryFrom<SecretJson> for Secret {
    type Error = String;

    fn try_from(json: SecretJson) -> Result<Secret, String> {
        match json {
            SecretJson::Number(value) => Ok(Secret::Shown(value)),
            SecretJson::Word(word) if word == REDACTED => Ok(Secret::Redacted),
            SecretJson::Word(word) => Err(format!("{word:?} is neither a number nor {REDACTED:?}")),
        }
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`, so that a table's width and alignment apply.
        match self {
            Secret::Shown(value) => f.pad(&value.to_string()),
            Secret::Redacted => f.pad(REDACTED),
        }
    }
}

/// `GET /status`: this node's session, the cluster as the node's copy of
/// the metadata has it, the operations in flight and their totals.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    /// This node.
    pub node: NodeId,
    /// The session this node holds, if any.
    pub session: Option<Secret>,
    /// The metadata group's voters: as the metadata records them once it
    /// does (Z6), the ones the node started with until then.
    pub metadata_members: Vec<NodeId>,
    /// The metadata group's learners (Z5), recorded or started with.
    pub metadata_learners: Vec<NodeId>,
    /// The metadata group's incarnation (1 until recorded).
    pub metadata_incarnation: Secret,
    /// Whether the metadata records its own group yet (Z6).
    pub metadata_recorded: bool,
    /// Whether this node's metadata replica is the metadata group's primary.
    pub metadata_primary: bool,
    /// Why the node stopped (S3), once it did.
    pub stopped: Option<String>,
    /// The node's agent's counters.
    pub sessions: SessionCounters,
    /// The cluster as this node's copy of the metadata has it.
    pub metadata: ClusterStatus,
    /// The multi-step operations in flight (M2–M5).
    pub operations: Vec<OperationStatus>,
    /// How many operations completed or were reverted.
    pub operation_totals: OperationTotals,
    /// Whether session ids and incarnations are redacted (T4).
    pub redacted: bool,
}

impl fmt::Display for NodeStatus {
    /// The document as `/status` serves it (one line of JSON).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let json = serde_json::to_string(self).map_err(|_| fmt::Error)?;
        f.write_str(&json)
    }
}

/// The node's agent's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionCounters {
    /// Sessions opened.
    pub opened: u64,
    /// Session expiries this node learned of.
    pub expired: u64,
    /// Ownership reports accepted.
    pub reports_accepted: u64,
    /// Ownership reports refused.
    pub reports_refused: u64,
    /// Expiries this node proposed as metadata primary.
    pub expiries_proposed: u64,
    /// Groups unloaded.
    pub groups_unloaded: u64,
}

/// The cluster as one node's copy of the metadata has it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// The metadata epoch this copy applied.
    pub epoch: Epoch,
    /// The epoch of the last change of the cluster's configuration.
    pub config_epoch: Epoch,
    /// The freeze for an upgrade, if any.
    pub frozen: Option<FrozenStatus>,
    /// How many primaries each live node leads (C5).
    pub primaries_per_node: BTreeMap<NodeId, u64>,
    /// The registered nodes.
    pub nodes: Vec<NodeEntry>,
    /// The groups, the metadata group's own record left out.
    pub groups: Vec<GroupEntry>,
}

/// A freeze of the metadata for an upgrade.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrozenStatus {
    /// The epoch it started at.
    pub since_epoch: Epoch,
    /// The node that asked for it.
    pub by: NodeId,
}

/// A registered node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeEntry {
    /// The node.
    pub id: NodeId,
    /// Its peer address.
    pub address: String,
    /// Its session, if it holds one.
    pub session: Option<Secret>,
    /// The last epoch it acked (M1).
    pub acked_epoch: Epoch,
    /// Whether the node serving the document reaches it now: `true` for
    /// itself and for a peer all of whose links are connected, `false` for
    /// a peer whose links are not (down, or cut off from this node),
    /// `null` for a node it has no link to (not among its peers). Unlike
    /// `session`, which the metadata keeps until the session expires, this
    /// changes as soon as a connection drops.
    #[serde(default)]
    pub up: Option<bool>,
}

/// A group of the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupEntry {
    /// The group.
    pub id: GroupId,
    /// Its kind.
    pub kind: String,
    /// Its voters, in member-index order.
    pub members: Vec<NodeId>,
    /// Its learners (P4): replicas that catch up and never vote.
    pub learners: Vec<NodeId>,
    /// Its incarnation.
    pub incarnation: Secret,
    /// Whether it is live (not being deleted).
    pub live: bool,
    /// Who leads it, as last reported.
    pub owner: Option<OwnerStatus>,
    /// The member a primary transfer (C4) hands it to, while one is asked.
    pub transfer_to: Option<NodeId>,
}

/// The primary a group's owner record names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerStatus {
    /// The node.
    pub node: NodeId,
    /// The view it leads.
    pub view: View,
    /// The session it reported under.
    pub session: Secret,
}

/// A multi-step operation in flight (M2–M5).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationStatus {
    /// The operation.
    pub id: OperationId,
    /// What it was asked to do.
    pub spec: SpecBody,
    /// The spec in words, e.g. `move group:3 node:1 → node:4`.
    pub text: String,
    /// Whether it was cancelled (its done steps are being reverted, M5).
    pub cancelled: bool,
    /// Steps done.
    pub done: usize,
    /// Steps left.
    pub remaining: usize,
    /// The stored plan (M4).
    pub plan: Vec<StepStatus>,
    /// The epoch of its last step.
    pub last_step_epoch: Epoch,
    /// What the next step waits for, if it waits.
    pub waiting_for: Option<String>,
}

/// One step of a plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepStatus {
    /// The group it changes.
    pub group: GroupId,
    /// The step in words, e.g. `add learner node:4`.
    pub step: String,
    /// Whether it is done.
    pub done: bool,
}

/// How many operations completed or were reverted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationTotals {
    /// Completed.
    pub completed: u64,
    /// Reverted after a cancel.
    pub reverted: u64,
}

/// An operation's spec as `POST /admin/operations` takes it and the
/// answers show it, e.g. `{"op":"move","group":3,"from":1,"to":4}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum SpecBody {
    /// Move `group`'s replica from `from` to `to`.
    Move {
        /// The group.
        group: GroupId,
        /// The node giving it up.
        from: NodeId,
        /// The node taking it.
        to: NodeId,
    },
    /// Replace `group`'s replica on the dead node `dead` with one on `with`.
    Replace {
        /// The group.
        group: GroupId,
        /// The dead node.
        dead: NodeId,
        /// Its replacement.
        with: NodeId,
    },
    /// Add `node` to each of `groups`.
    Join {
        /// The node.
        node: NodeId,
        /// The groups.
        groups: Vec<GroupId>,
    },
    /// Move every replica off `node`.
    Decommission {
        /// The node.
        node: NodeId,
    },
    /// Take voter `node` out of `group` (Z6).
    Shrink {
        /// The group.
        group: GroupId,
        /// The voter leaving.
        node: NodeId,
    },
}

impl From<&OperationSpec> for SpecBody {
    fn from(spec: &OperationSpec) -> SpecBody {
        match spec.clone() {
            OperationSpec::Move { group, from, to } => SpecBody::Move { group, from, to },
            OperationSpec::Replace { group, dead, with } => SpecBody::Replace { group, dead, with },
            OperationSpec::Join { node, groups } => SpecBody::Join { node, groups },
            OperationSpec::Decommission { node } => SpecBody::Decommission { node },
            OperationSpec::Shrink { group, node } => SpecBody::Shrink { group, node },
        }
    }
}

impl From<SpecBody> for OperationSpec {
    fn from(body: SpecBody) -> OperationSpec {
        match body {
            SpecBody::Move { group, from, to } => OperationSpec::Move { group, from, to },
            SpecBody::Replace { group, dead, with } => OperationSpec::Replace { group, dead, with },
            SpecBody::Join { node, groups } => OperationSpec::Join { node, groups },
            SpecBody::Decommission { node } => OperationSpec::Decommission { node },
            SpecBody::Shrink { group, node } => OperationSpec::Shrink { group, node },
        }
    }
}

/// Every JSON answer of the admin port but `/status`'s, tagged by `result`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub(crate) enum AdminReply {
    /// An operation started (`POST /admin/operations`).
    Started(OperationAnswer),
    /// An operation was cancelled (`POST /admin/operations/{id}/cancel`).
    Cancelled(OperationAnswer),
    /// A group was created (C3).
    Created {
        /// The group.
        group: GroupId,
        /// Its kind.
        kind: String,
        /// Its members.
        members: Vec<NodeId>,
        /// Its first incarnation.
        incarnation: Incarnation,
        /// The epoch the command committed at.
        epoch: Epoch,
        /// Whether this node's copy applied it before the answer.
        applied_here: bool,
    },
    /// A group was deleted (C3).
    Deleted {
        /// The group.
        group: GroupId,
        /// The epoch the command committed at.
        epoch: Epoch,
        /// Whether this node's copy applied it before the answer.
        applied_here: bool,
    },
    /// `to` leads `group` now (C4).
    Transferred(TransferAnswer),
    /// The transfer was committed; `to` did not lead yet when the node stopped waiting.
    Asked(TransferAnswer),
    /// The metadata is frozen.
    Frozen {
        /// The epoch the freeze started at.
        since_epoch: Epoch,
        /// The epoch the command committed at (with `already`: the epoch
        /// this node's copy had applied when it saw the freeze).
        epoch: Epoch,
        /// Whether this node's copy applied it before the answer.
        applied_here: bool,
        /// The metadata was frozen before this command; nothing changed.
        #[serde(default)]
        already: bool,
    },
    /// The freeze ended.
    Unfrozen {
        /// The epoch the command committed at (with `already`: the epoch
        /// this node's copy had applied when it saw no freeze).
        epoch: Epoch,
        /// Whether this node's copy applied it before the answer.
        applied_here: bool,
        /// The metadata was not frozen; nothing changed.
        #[serde(default)]
        already: bool,
    },
    /// The metadata refused the command (`409`), with its reason.
    Refused {
        /// The metadata's reason, verbatim.
        reason: String,
    },
    /// No result in time (`503`); the command may still apply.
    Unavailable {
        /// What happened.
        error: String,
        /// What was tried.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<FailureDetail>,
    },
    /// A field of the request is missing or wrong (`400`; the port's own
    /// refusal of an unreadable body names no field).
    BadRequest {
        /// The field.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        field: Option<String>,
        /// What is wrong.
        error: String,
    },
    /// No such path (`404`).
    NotFound(Advice),
    /// The path takes another method (`405`).
    MethodNotAllowed(Advice),
    /// A mutating call without a bearer token (`401`).
    Unauthenticated(Advice),
    /// A bearer token that is not the node's (`401`).
    TokenMismatch(Advice),
    /// The node has no admin token and takes no operator command (`403`).
    TokenUnset(Advice),
    /// A body that is not JSON by its content type (`415`).
    ContentType(Advice),
    /// A body beyond the port's bound (`413`).
    BodyTooLarge(Advice),
    /// A body not received in time (`408`).
    BodyTimeout(Advice),
}

/// What the caller should do about a refusal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Advice {
    /// The advice.
    pub(crate) error: String,
}

impl Advice {
    pub(crate) fn new(error: impl Into<String>) -> Advice {
        Advice { error: error.into() }
    }
}

/// A started or cancelled operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OperationAnswer {
    /// The operation.
    pub(crate) operation: OperationId,
    /// The epoch the command committed at.
    pub(crate) epoch: Epoch,
    /// Its spec.
    pub(crate) spec: Option<SpecBody>,
    /// Its stored record: `None` once it finished (completed or reverted),
    /// or if this node's copy did not apply the epoch in time.
    pub(crate) record: Option<OperationStatus>,
    /// Whether this node's copy applied the epoch before the answer.
    pub(crate) applied_here: bool,
}

/// A primary transfer (C4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TransferAnswer {
    /// The group.
    pub(crate) group: GroupId,
    /// The member asked to lead it.
    pub(crate) to: NodeId,
    /// The epoch the command committed at.
    pub(crate) epoch: Epoch,
    /// Whether this node's copy applied it before the answer.
    pub(crate) applied_here: bool,
}

/// Why an operator command got no result from the node's agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub(crate) enum FailureDetail {
    /// The metadata group did not answer in time.
    Unreachable {
        /// How long the node tried, in milliseconds.
        waited_ms: u64,
        /// Sends made.
        attempts: u32,
        /// The nodes tried.
        tried: String,
        /// What the last attempt got.
        last: String,
    },
    /// The agent's queue was full.
    Busy,
    /// The metadata group refused the request itself (not the command).
    Rejected {
        /// The reply's code.
        code: String,
        /// Why.
        detail: String,
    },
    /// The agent is gone (the node is stopping).
    Stopped,
}

impl AdminReply {
    /// A refusal of the port itself or of the metadata, as the CLI prints
    /// it: the `result` word and what to do.
    pub(crate) fn refusal(&self) -> Option<(&'static str, &str)> {
        let (word, advice) = match self {
            AdminReply::NotFound(advice) => ("not_found", advice),
            AdminReply::MethodNotAllowed(advice) => ("method_not_allowed", advice),
            AdminReply::Unauthenticated(advice) => ("unauthenticated", advice),
            AdminReply::TokenMismatch(advice) => ("token_mismatch", advice),
            AdminReply::TokenUnset(advice) => ("token_unset", advice),
            AdminReply::ContentType(advice) => ("content_type", advice),
            AdminReply::BodyTooLarge(advice) => ("body_too_large", advice),
            AdminReply::BodyTimeout(advice) => ("body_timeout", advice),
            _ => return None,
        };
        Some((word, &advice.error))
    }

    /// The error line of a refusal or failure, if this is one.
    pub(crate) fn error(&self) -> Option<&str> {
        match self {
            AdminReply::Unavailable { error, .. } | AdminReply::BadRequest { error, .. } => Some(error),
            AdminReply::Refused { reason } => Some(reason),
            other => other.refusal().map(|(_, error)| error),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn t4_a_secret_is_a_number_or_redacted_and_nothing_else() {
        assert_eq!(serde_json::to_value(Secret::Shown(7)).ok(), Some(json!(7)));
        assert_eq!(serde_json::to_value(Secret::Redacted).ok(), Some(json!("redacted")));
        assert_eq!(serde_json::from_value::<Secret>(json!(7)).ok(), Some(Secret::Shown(7)));
        assert_eq!(serde_json::from_value::<Secret>(json!("redacted")).ok(), Some(Secret::Redacted));
        assert!(serde_json::from_value::<Secret>(json!("hidden")).is_err());
        assert!(serde_json::from_value::<Secret>(json!(-1)).is_err());
    }

    #[test]
    fn m2_answers_keep_the_documented_json_shapes() {
        let spec = SpecBody::Move { group: GroupId(3), from: NodeId(1), to: NodeId(4) };
        assert_eq!(serde_json::to_value(&spec).ok(), Some(json!({ "op": "move", "group": 3, "from": 1, "to": 4 })));
        let refused = AdminReply::Refused { reason: "frozen".into() };
        assert_eq!(serde_json::to_value(&refused).ok(), Some(json!({ "result": "refused", "reason": "frozen" })));
        let bad = AdminReply::BadRequest { field: None, error: "unreadable".into() };
        assert_eq!(serde_json::to_value(&bad).ok(), Some(json!({ "result": "bad_request", "error": "unreadable" })));
        let port = AdminReply::TokenUnset(Advice::new("set a token"));
        assert_eq!(serde_json::to_value(&port).ok(), Some(json!({ "result": "token_unset", "error": "set a token" })));
        let busy = AdminReply::Unavailable { error: "busy".into(), detail: Some(FailureDetail::Busy) };
        assert_eq!(
            serde_json::to_value(&busy).ok(),
            Some(json!({ "result": "unavailable", "error": "busy", "detail": { "reason": "busy" } }))
        );
        let transfer = TransferAnswer { group: GroupId(4), to: NodeId(3), epoch: Epoch(9), applied_here: true };
        let text = serde_json::to_string(&AdminReply::Asked(transfer)).unwrap_or_default();
        assert_eq!(serde_json::from_str::<AdminReply>(&text).ok(), Some(AdminReply::Asked(transfer)), "{text}");
    }

    #[test]
    fn c5_primaries_per_node_is_an_object_keyed_by_node_id() {
        let cluster = ClusterStatus { primaries_per_node: BTreeMap::from([(NodeId(1), 334)]), ..Default::default() };
        let value = serde_json::to_value(&cluster).unwrap_or_default();
        assert_eq!(value["primaries_per_node"], json!({ "1": 334 }));
        assert_eq!(serde_json::from_value::<ClusterStatus>(value).ok(), Some(cluster));
    }
}
