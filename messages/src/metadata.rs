//! The metadata group's commands and results.
//!
//! Cluster metadata is a log of committed commands in the metadata group
//! (M1): every change (a node registered, a session opened
//! or expired, a group created or deleted, an owner recorded) is one command,
//! applied in log order on every member; its op number is its epoch (M1).
//! Commands travel as the operation bytes of Requests and sit in the log, so
//! they are decoded like any other input from the network or a disk: through
//! the one codec module, validated, never panicking.

use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};

use crate::command::Command;
use crate::error::{BodyError, Invalid, invalid};
use crate::ids::{Epoch, GroupId, Incarnation, NodeId, Op, OperationId, SessionId, View};
use crate::limits::GROUP_MEMBERS_MAX;
use crate::replication::Replication;

/// The longest node address or group kind name, in bytes.
pub const METADATA_TEXT_SIZE_MAX_BYTES: usize = 256;

/// The most groups one join may name.
pub const OPERATION_GROUPS_MAX: usize = 4096;

/// The most entries one [`MetadataCommand::CreateGroups`],
/// [`MetadataCommand::ReportOwnerships`] or
/// [`MetadataCommand::TransferPrimaries`] carries. Even with the longest kind
/// and the most members a batch stays far below the largest operation.
pub const METADATA_BATCH_ENTRIES_MAX: usize = 256;

const _: () = assert!(
    METADATA_BATCH_ENTRIES_MAX * (8 + 8 + METADATA_TEXT_SIZE_MAX_BYTES + 8 + GROUP_MEMBERS_MAX * 8 + 8)
        <= crate::limits::OPERATION_SIZE_MAX_BYTES / 2
);

/// One group of a [`MetadataCommand::CreateGroups`]: what a `CreateGroup` names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupCreation {
    /// The group.
    pub group: GroupId,
    /// Its kind.
    #[serde(with = "crate::serde_fields::text")]
    pub kind: String,
    /// Members in member-index order.
    pub members: Vec<NodeId>,
    /// Its replication quorum and write mode.
    pub replication: Replication,
}

/// One transfer of a [`MetadataCommand::TransferPrimaries`]: what a
/// `TransferPrimary` names.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupTransfer {
    /// The group.
    pub group: GroupId,
    /// The member that is to lead it.
    pub to: NodeId,
}

/// One report of a [`MetadataCommand::ReportOwnerships`]: what a
/// `ReportOwnership` names besides the node and its session.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnedGroup {
    /// The group.
    pub group: GroupId,
    /// Its incarnation as the node knows it.
    pub incarnation: Incarnation,
    /// The view the node is primary of.
    pub view: View,
}

/// What a multi-step operation does (M2). Each adds replicas as learners
/// that catch up before they vote (P4), and removes a replica only after its
/// replacement votes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OperationSpec {
    /// Move `group`'s replica on `from` to `to`.
    Move {
        /// The group.
        group: GroupId,
        /// The node giving up its replica.
        from: NodeId,
        /// The node taking it.
        to: NodeId,
    },
    /// Replace `group`'s replica on a dead node: a move whose source need not ack.
    Replace {
        /// The group.
        group: GroupId,
        /// The dead node.
        dead: NodeId,
        /// Its replacement.
        with: NodeId,
    },
    /// Add `node` as a replica of each of `groups`.
    Join {
        /// The joining node (registered first).
        node: NodeId,
        /// The groups it joins.
        groups: Vec<GroupId>,
    },
    /// Move every replica off `node`.
    Decommission {
        /// The node to empty.
        node: NodeId,
    },
    /// Z6: voting member `node` leaves `group`, which runs on one voter
    /// fewer (the one operation allowed to shrink a voter set; a metadata
    /// voter stays a learner of the metadata group).
    Shrink {
        /// The group.
        group: GroupId,
        /// The voter leaving.
        node: NodeId,
    },
}

/// One change to the cluster metadata.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetadataCommand {
    /// A node joins the cluster's node list (or updates its address).
    RegisterNode {
        /// The node.
        node: NodeId,
        /// Where peers reach it.
        #[serde(with = "crate::serde_fields::text")]
        address: String,
    },
    /// A node opens a session (S1); the result names the new session.
    OpenSession {
        /// The node.
        node: NodeId,
    },
    /// The metadata primary saw no keepalive for `session_timeout` (S1):
    /// the session ends, and with it the node's ownership records (S2).
    ExpireSession {
        /// The node.
        node: NodeId,
        /// The session that expired (a stale expiry of an older session is refused).
        session: SessionId,
    },
    /// Create a group; its incarnation is one more than any before it.
    CreateGroup {
        /// The group.
        group: GroupId,
        /// Its kind (which state machine it runs).
        #[serde(with = "crate::serde_fields::text")]
        kind: String,
        /// Members in member-index order.
        members: Vec<NodeId>,
        /// Its replication quorum and write mode.
        replication: Replication,
    },
    /// Delete a group; a later re-creation gets a higher incarnation.
    DeleteGroup {
        /// The group.
        group: GroupId,
    },
    /// A node reports it is the primary of a group in a view (S4). Refused for
    /// a stale incarnation or view, or without a live session.
    ReportOwnership {
        /// The group.
        group: GroupId,
        /// Its incarnation as the node knows it.
        incarnation: Incarnation,
        /// The reporting node.
        node: NodeId,
        /// The node's session.
        session: SessionId,
        /// The view it is primary of.
        view: View,
    },
    /// A node applied every command up to `epoch` (M1).
    AckEpoch {
        /// The node.
        node: NodeId,
        /// The highest epoch it applied.
        epoch: Epoch,
    },
    /// Start a multi-step operation: its whole plan is stored and its first
    /// step applied in this one epoch (M4). Refused if it touches a group of
    /// an in-flight operation (M3).
    StartOperation {
        /// What to do.
        spec: OperationSpec,
    },
    /// Apply step `step` (counted from 0) of an operation (M2). Refused
    /// unless it is the next step and its preconditions hold.
    AdvanceOperation {
        /// The operation.
        operation: OperationId,
        /// The step.
        step: u32,
    },
    /// Cancel an operation: its committed steps are reverted, step by step,
    /// back to the placement before it (M5).
    CancelOperation {
        /// The operation.
        operation: OperationId,
    },
    /// `node` holds the seal of `group`'s incarnation `incarnation` durably
    /// (a member change in progress): once every next member did, the group
    /// switches to the next incarnation in the metadata too.
    ReportSealed {
        /// The group.
        group: GroupId,
        /// The sealed incarnation.
        incarnation: Incarnation,
        /// The reporting node.
        node: NodeId,
    },
    /// A group's primary reports that learner `node` holds every op up to
    /// `op` (P4): it may be promoted to a voting member.
    ReportCaughtUp {
        /// The group.
        group: GroupId,
        /// Its incarnation.
        incarnation: Incarnation,
        /// The learner.
        node: NodeId,
        /// The op it holds through.
        op: Op,
    },
    /// Hand `group`'s primary to its voting member `to` (C4): the node
    /// that leads the group starts a directed view change once `to` holds
    /// the log through the commit point. Replaces an unfinished transfer of
    /// the same group; done (or overtaken) once any later view is reported.
    TransferPrimary {
        /// The group.
        group: GroupId,
        /// The member that is to lead it.
        to: NodeId,
    },
    /// Freeze the cluster metadata for an upgrade: until [`MetadataCommand::Unfreeze`],
    /// every operator change (groups created or deleted, multi-step
    /// operations started, advanced or cancelled, primary transfers and
    /// balancing) is refused, while sessions, ownership reports, failover
    /// and data traffic go on.
    Freeze {
        /// The node that asked (on its own or for an operator), shown in
        /// the status: a label, since any node may submit operator commands.
        by: NodeId,
    },
    /// End a freeze.
    Unfreeze {
        /// The node that asked (a label, like [`MetadataCommand::Freeze`]'s).
        by: NodeId,
    },
    /// Create many groups in one epoch (Z2: a node's configured groups at
    /// start-up, up to [`METADATA_BATCH_ENTRIES_MAX`] a command): each is
    /// created as by `CreateGroup`; one that exists or names a member that
    /// did not register is skipped, the others are created all the same.
    CreateGroups {
        /// The groups.
        groups: Vec<GroupCreation>,
    },
    /// Z6: the metadata primary records the metadata group's own running
    /// incarnation, voters and learners, so that operations can change
    /// them like any group's. Refused once recorded.
    RecordMetadataGroup {
        /// The incarnation the metadata group runs.
        incarnation: Incarnation,
        /// Its voters in member-index order.
        members: Vec<NodeId>,
        /// Its learners.
        learners: Vec<NodeId>,
    },
    /// C5: many primary transfers in one epoch (the balancer's, up to
    /// [`METADATA_BATCH_ENTRIES_MAX`] a command), each applied as a
    /// `TransferPrimary`: one that would be refused alone is skipped, the
    /// others are recorded all the same. A freeze refuses the whole command.
    TransferPrimaries {
        /// The transfers, at most one per group.
        transfers: Vec<GroupTransfer>,
    },
    /// Many ownership reports of one node under one session in one epoch
    /// (Z2, S4), each checked as a `ReportOwnership`; the result lists the
    /// refused ones.
    ReportOwnerships {
        /// The reporting node.
        node: NodeId,
        /// The node's session.
        session: SessionId,
        /// The groups it leads.
        reports: Vec<OwnedGroup>,
    },
}

impl OperationSpec {
    /// Node 0 is never a node, a move needs two nodes, a join names 1 to
    /// [`OPERATION_GROUPS_MAX`] distinct groups.
    pub fn validate(&self) -> Result<(), Invalid> {
        let bad = |why: &'static str| Err(invalid(Command::Request, why));
        match self {
            OperationSpec::Move { from, to, .. } | OperationSpec::Replace { dead: from, with: to, .. } => {
                if from.0 == 0 || to.0 == 0 || from == to {
                    return bad("move: node 0, or the same node on both sides");
                }
            }
            OperationSpec::Join { node, groups } => {
                let mut seen = std::collections::BTreeSet::new();
                if node.0 == 0 || groups.is_empty() || groups.len() > OPERATION_GROUPS_MAX {
                    return bad("join: node 0, or not 1 to 4096 groups");
                }
                if !groups.iter().all(|group| seen.insert(*group)) {
                    return bad("join: a group listed twice");
                }
            }
            OperationSpec::Decommission { node } | OperationSpec::Shrink { node, .. } => {
                if node.0 == 0 {
                    return bad("decommission or shrink: node 0");
                }
            }
        }
        Ok(())
    }
}

impl MetadataCommand {
    /// One rule check per command; the reason says what is wrong.
    pub fn validate(&self) -> Result<(), Invalid> {
        match self {
            MetadataCommand::RegisterNode { node, address } => {
                if node.0 == 0 || address.is_empty() || !text_fits(address) {
                    return Err(invalid(Command::Request, "register node: node 0 or an empty or too long address"));
                }
            }
            MetadataCommand::OpenSession { node }
            | MetadataCommand::AckEpoch { node, .. }
            | MetadataCommand::Freeze { by: node }
            | MetadataCommand::Unfreeze { by: node }
            | MetadataCommand::TransferPrimary { to: node, .. } => {
                if node.0 == 0 {
                    return Err(invalid(Command::Request, "metadata command for node 0"));
                }
            }
            MetadataCommand::ExpireSession { node, session } => {
                if node.0 == 0 || session.0 == 0 {
                    return Err(invalid(Command::Request, "expire session: node 0 or session 0"));
                }
            }
            MetadataCommand::CreateGroup { kind, members, replication, .. } => {
                validate_creation(kind, members, replication)?;
            }
            MetadataCommand::TransferPrimaries { transfers } => {
                if transfers.is_empty() || transfers.len() > METADATA_BATCH_ENTRIES_MAX {
                    return Err(invalid(Command::Request, "transfer primaries: 1 to 256 transfers"));
                }
                let mut seen = std::collections::BTreeSet::new();
                for GroupTransfer { group, to } in transfers {
                    if to.0 == 0 || !seen.insert(*group) {
                        return Err(invalid(Command::Request, "transfer primaries: node 0, or a group listed twice"));
                    }
                }
            }
            MetadataCommand::CreateGroups { groups } => {
                if groups.is_empty() || groups.len() > METADATA_BATCH_ENTRIES_MAX {
                    return Err(invalid(Command::Request, "create groups: 1 to 256 groups"));
                }
                let mut seen = std::collections::BTreeSet::new();
                for GroupCreation { group, kind, members, replication } in groups {
                    if !seen.insert(*group) {
                        return Err(invalid(Command::Request, "create groups: a group listed twice"));
                    }
                    validate_creation(kind, members, replication)?;
                }
            }
            MetadataCommand::RecordMetadataGroup { incarnation, members, learners } => {
                let mut seen = std::collections::BTreeSet::new();
                let all_distinct = members.iter().chain(learners).all(|node| node.0 != 0 && seen.insert(*node));
                if incarnation.0 == 0 || members.is_empty() || members.len() > GROUP_MEMBERS_MAX {
                    return Err(invalid(
                        Command::Request,
                        "record metadata group: incarnation 0, or not 1 to 64 voters",
                    ));
                }
                if !all_distinct || members.len() + learners.len() > crate::REPLICAS_MAX {
                    return Err(invalid(
                        Command::Request,
                        "record metadata group: node 0, a node twice, or over 255 replicas",
                    ));
                }
            }
            MetadataCommand::ReportOwnerships { node, session, reports } => {
                if node.0 == 0 || session.0 == 0 {
                    return Err(invalid(Command::Request, "report ownerships: node 0 or session 0"));
                }
                if reports.is_empty() || reports.len() > METADATA_BATCH_ENTRIES_MAX {
                    return Err(invalid(Command::Request, "report ownerships: 1 to 256 reports"));
                }
                let mut seen = std::collections::BTreeSet::new();
                if !reports.iter().all(|report| seen.insert(report.group)) {
                    return Err(invalid(Command::Request, "report ownerships: a group listed twice"));
                }
            }
            MetadataCommand::DeleteGroup { .. } => {}
            MetadataCommand::ReportOwnership { node, session, .. } => {
                if node.0 == 0 || session.0 == 0 {
                    return Err(invalid(Command::Request, "report ownership: node 0 or session 0"));
                }
            }
            MetadataCommand::StartOperation { spec } => spec.validate()?,
            MetadataCommand::AdvanceOperation { operation, .. } | MetadataCommand::CancelOperation { operation } => {
                if operation.0 == 0 {
                    return Err(invalid(Command::Request, "operation 0 is reserved"));
                }
            }
            MetadataCommand::ReportCaughtUp { node, .. } | MetadataCommand::ReportSealed { node, .. } => {
                if node.0 == 0 {
                    return Err(invalid(Command::Request, "report caught up or sealed: node 0"));
                }
            }
        }
        Ok(())
    }

    /// Encode as a Request operation.
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        crate::codec::encode_into(self, &mut out);
        out.freeze()
    }

    /// Decode and validate an operation.
    pub fn decode(bytes: &[u8]) -> Result<MetadataCommand, BodyError> {
        let command: MetadataCommand = crate::codec::decode(Command::Request, bytes)?;
        command.validate()?;
        Ok(command)
    }
}

/// Whether a text field (an address, a kind) is within its size limit.
fn text_fits(text: &str) -> bool {
    text.len() <= METADATA_TEXT_SIZE_MAX_BYTES
}

/// The rules of one group's creation, for `CreateGroup` and each group of
/// `CreateGroups`.
fn validate_creation(kind: &str, members: &[NodeId], replication: &Replication) -> Result<(), Invalid> {
    replication.validate(members.len())?;
    if kind.is_empty() || !text_fits(kind) {
        return Err(invalid(Command::Request, "create group: empty or too long kind"));
    }
    if members.is_empty() || members.len() > GROUP_MEMBERS_MAX {
        return Err(invalid(Command::Request, "create group: 1 to 64 members"));
    }
    let mut seen = std::collections::BTreeSet::new();
    if members.iter().any(|member| member.0 == 0 || !seen.insert(*member)) {
        return Err(invalid(Command::Request, "create group: node 0 or a member listed twice"));
    }
    Ok(())
}

/// What applying a command returned (the Reply's result bytes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetadataResult {
    /// Applied.
    Done {
        /// The epoch it was applied at.
        epoch: Epoch,
    },
    /// An operation started (its first step applied).
    OperationStarted {
        /// Its id.
        operation: OperationId,
        /// The epoch.
        epoch: Epoch,
    },
    /// A session was opened.
    SessionOpened {
        /// The session.
        session: SessionId,
        /// The epoch.
        epoch: Epoch,
    },
    /// A group was created.
    GroupCreated {
        /// Its incarnation.
        incarnation: Incarnation,
        /// The epoch.
        epoch: Epoch,
    },
    /// Not applied, with the reason (the log still holds the command; every
    /// member refuses it the same way).
    Refused {
        /// Why.
        #[serde(with = "crate::serde_fields::text")]
        reason: String,
    },
    /// A `ReportOwnerships` applied: every report but the refused ones.
    OwnershipsReported {
        /// The groups whose report was refused (stale view, incarnation or
        /// session, not a member, deleted).
        refused: Vec<GroupId>,
        /// The epoch.
        epoch: Epoch,
    },
}

impl MetadataResult {
    /// Encode as Reply result bytes.
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        crate::codec::encode_into(self, &mut out);
        out.freeze()
    }

    /// Decode Reply result bytes.
    pub fn decode(bytes: &[u8]) -> Result<MetadataResult, BodyError> {
        crate::codec::decode(Command::Reply, bytes)
    }
}

/// Encode any metadata value with the crate's codec (snapshots of the
/// metadata state use it).
pub fn encode_value<T: Serialize>(value: &T) -> Bytes {
    let mut out = BytesMut::new();
    crate::codec::encode_into(value, &mut out);
    out.freeze()
}

/// Decode a metadata value encoded with [`encode_value`].
pub fn decode_value<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, BodyError> {
    crate::codec::decode(Command::Reply, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn metadata_commands_round_trip() {
        let commands = [
            MetadataCommand::RegisterNode { node: NodeId(1), address: "127.0.0.1:7001".into() },
            MetadataCommand::OpenSession { node: NodeId(1) },
            MetadataCommand::ExpireSession { node: NodeId(1), session: SessionId(3) },
            MetadataCommand::CreateGroup {
                group: GroupId(4),
                kind: "kv".into(),
                members: vec![NodeId(1), NodeId(2)],
                replication: Replication::default(),
            },
            MetadataCommand::DeleteGroup { group: GroupId(4) },
            MetadataCommand::ReportOwnership {
                group: GroupId(4),
                incarnation: Incarnation(2),
                node: NodeId(1),
                session: SessionId(3),
                view: View(9),
            },
            MetadataCommand::AckEpoch { node: NodeId(2), epoch: Epoch(12) },
            MetadataCommand::StartOperation {
                spec: OperationSpec::Move { group: GroupId(4), from: NodeId(1), to: NodeId(3) },
            },
            MetadataCommand::StartOperation {
                spec: OperationSpec::Join { node: NodeId(5), groups: vec![GroupId(1), GroupId(2)] },
            },
            MetadataCommand::StartOperation { spec: OperationSpec::Decommission { node: NodeId(2) } },
            MetadataCommand::StartOperation {
                spec: OperationSpec::Replace { group: GroupId(4), dead: NodeId(2), with: NodeId(5) },
            },
            MetadataCommand::AdvanceOperation { operation: OperationId(3), step: 2 },
            MetadataCommand::CancelOperation { operation: OperationId(3) },
            MetadataCommand::ReportSealed { group: GroupId(4), incarnation: Incarnation(2), node: NodeId(1) },
            MetadataCommand::ReportCaughtUp {
                group: GroupId(4),
                incarnation: Incarnation(1),
                node: NodeId(3),
                op: Op(40),
            },
            MetadataCommand::TransferPrimary { group: GroupId(4), to: NodeId(2) },
            MetadataCommand::TransferPrimaries {
                transfers: vec![
                    GroupTransfer { group: GroupId(4), to: NodeId(2) },
                    GroupTransfer { group: GroupId(5), to: NodeId(3) },
                ],
            },
            MetadataCommand::Freeze { by: NodeId(1) },
            MetadataCommand::Unfreeze { by: NodeId(3) },
            MetadataCommand::CreateGroups {
                groups: vec![GroupCreation {
                    group: GroupId(5),
                    kind: "kv".into(),
                    members: vec![NodeId(1), NodeId(2), NodeId(3)],
                    replication: Replication::default(),
                }],
            },
            MetadataCommand::ReportOwnerships {
                node: NodeId(2),
                session: SessionId(4),
                reports: vec![OwnedGroup { group: GroupId(5), incarnation: Incarnation(1), view: View(3) }],
            },
        ];
        for command in commands {
            assert_eq!(MetadataCommand::decode(&command.encode()), Ok(command));
        }
    }

    #[test]
    fn invalid_metadata_commands_are_refused_with_a_reason() {
        let twice = MetadataCommand::CreateGroup {
            group: GroupId(1),
            kind: "kv".into(),
            members: vec![NodeId(1), NodeId(1)],
            replication: Replication::default(),
        };
        assert!(MetadataCommand::decode(&twice.encode()).is_err());
        let node_zero = MetadataCommand::OpenSession { node: NodeId(0) };
        assert!(MetadataCommand::decode(&node_zero.encode()).is_err());
        let to_itself = OperationSpec::Move { group: GroupId(1), from: NodeId(2), to: NodeId(2) };
        assert!(MetadataCommand::decode(&MetadataCommand::StartOperation { spec: to_itself }.encode()).is_err());
        let no_groups = OperationSpec::Join { node: NodeId(2), groups: Vec::new() };
        assert!(MetadataCommand::decode(&MetadataCommand::StartOperation { spec: no_groups }.encode()).is_err());
        let operation_zero = MetadataCommand::CancelOperation { operation: OperationId(0) };
        assert!(MetadataCommand::decode(&operation_zero.encode()).is_err());
        let transfer = |group: u64, to: u64| GroupTransfer { group: GroupId(group), to: NodeId(to) };
        for transfers in [
            Vec::new(),
            vec![transfer(1, 2), transfer(1, 3)],
            vec![transfer(1, 0)],
            (0..=METADATA_BATCH_ENTRIES_MAX as u64).map(|group| transfer(group, 2)).collect(),
        ] {
            let command = MetadataCommand::TransferPrimaries { transfers };
            assert!(MetadataCommand::decode(&command.encode()).is_err(), "{command:?}");
        }
    }

    proptest! {
        #[test]
        fn metadata_decoding_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = MetadataCommand::decode(&bytes);
            let _ = MetadataResult::decode(&bytes);
        }
    }
}
