//! The metadata group's state machine (M1, S1, S2, S4).
//!
//! The metadata group is a group like any other, on the same replica core;
//! this is the state machine it runs. Its state is the cluster's
//! configuration: nodes, their sessions, groups with their members and
//! incarnations, the owner (primary and view) each group last reported, and
//! how far each node has applied the metadata log. Every change is a
//! committed [`MetadataCommand`]; the op it commits at is its epoch (M1).
//!
//! Rules it enforces, the same way on every member:
//! - a session id is handed out once, and an expiry names the session it
//!   ends, so a late expiry never ends a newer session;
//! - an expiry removes the node's ownership records (S2), so clients are no
//!   longer sent to it;
//! - an ownership report needs the node's live session and may not go back
//!   in view or incarnation (S4, fencing: a stale primary is refused), not
//!   even after an expiry or a new session emptied the owner record;
//! - creating or deleting a group bumps its incarnation, so frames of an
//!   older incarnation of a recreated group are refused by its replicas.
//!
//! A session is not a lock (the lesson of Pulsar's PIP-57 debate): safety comes from the view that
//! backups check, not from ownership records, which only route clients.

mod agent;
mod balance;
mod driver;
mod freeze;
mod operations;
mod route;
mod session_client;
mod sessions;

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use cohort_messages::metadata::{
    GroupCreation, MetadataCommand, MetadataResult, OwnedGroup, decode_value, encode_value,
};
use cohort_messages::replication::Replication;
use cohort_messages::{Epoch, GroupId, Incarnation, NodeId, Op, OperationId, REPLICAS_MAX, SessionId, View};
use serde::{Deserialize, Serialize};

pub use agent::{
    AgentConfig, AgentCounters, AgentOutput, BootstrapGroup, FETCH_INTERVAL_TICKS, FINGERPRINT_SPACING_MAX,
    FINGERPRINT_SPACING_MAX_QUIET, FULL_SCAN_INTERVAL, FULL_SCAN_INTERVAL_QUIET, HostedChanges, HostedReplica,
    MetadataAgent, PlacedReplica, Poll, SCAN_SPACING_FACTOR, SCAN_SPACING_MAX, STALL_TICKS_MAX, ScanInputs,
    ScanSchedule, placed_replaces,
};
pub use balance::{next_transfer, next_transfers, primaries_per_node};
pub use driver::{KeepaliveOutcome, MetadataDriver};
pub use freeze::Frozen;
pub use operations::{OperationRecord, OperationTotals, PendingSwitch, Step};
pub use route::{Destination, MetadataRoute, REDIRECTS_FOLLOWED_MAX, RequestRoute};
pub use session_client::{ExpiredPolicy, SessionAction, SessionClient, SessionState};
pub use sessions::SessionTracker;

use crate::state_machine::StateMachine;

/// The group kind of the metadata group. Reserved: a host may not register it.
pub const METADATA_KIND: &str = "cohort.metadata";

/// The most members the metadata group has (the first ones by node id).
pub const METADATA_MEMBERS_MAX: usize = 5;

/// The metadata group's members for a cluster of `nodes`: all of them up to
/// [`METADATA_MEMBERS_MAX`], else the first [`METADATA_MEMBERS_MAX`] by node
/// id. Every node computes the same list from the same node set.
///
/// ```
/// use cohort_core::metadata::metadata_members;
/// use cohort_messages::NodeId;
/// let seven = (1..=7).rev().map(NodeId);
/// assert_eq!(metadata_members(seven), (1..=5).map(NodeId).collect::<Vec<_>>());
/// ```
pub fn metadata_members(nodes: impl IntoIterator<Item = NodeId>) -> Vec<NodeId> {
    let mut nodes: Vec<NodeId> = nodes.into_iter().collect();
    nodes.sort();
    nodes.dedup();
    nodes.truncate(METADATA_MEMBERS_MAX);
    nodes
}

/// The metadata group's learners for a cluster of `nodes` (Z5): the nodes
/// past [`metadata_members`], in node id order, as many as fit beside the
/// voters in [`REPLICAS_MAX`] replicas. They follow the metadata log and
/// apply it, as voters do, without voting. Nodes past those (a cluster of
/// more than [`REPLICAS_MAX`] nodes) host no metadata replica.
///
/// ```
/// use cohort_core::metadata::metadata_learners;
/// use cohort_messages::{NodeId, REPLICAS_MAX};
/// assert_eq!(metadata_learners((1..=7).rev().map(NodeId)), vec![NodeId(6), NodeId(7)]);
/// assert!(metadata_learners((1..=3).map(NodeId)).is_empty());
/// assert_eq!(metadata_learners((1..=100).map(NodeId)).len(), 95);
/// let many = metadata_learners((1..=300).map(NodeId));
/// assert_eq!(many.len(), REPLICAS_MAX - 5);
/// assert_eq!(many.last(), Some(&NodeId(REPLICAS_MAX as u64)));
/// ```
pub fn metadata_learners(nodes: impl IntoIterator<Item = NodeId>) -> Vec<NodeId> {
    let mut nodes: Vec<NodeId> = nodes.into_iter().collect();
    nodes.sort();
    nodes.dedup();
    nodes.truncate(REPLICAS_MAX);
    nodes.split_off(nodes.len().min(METADATA_MEMBERS_MAX))
}

/// Z6: the read query for one group's record (an empty query reads the
/// whole state): what a learner left behind by a switch of the metadata
/// group asks its primary, at the cost of one record, not of the state.
pub fn record_query(group: GroupId) -> Bytes {
    Bytes::copy_from_slice(&group.0.to_le_bytes())
}

/// The answer to a [`record_query`].
pub fn decode_record_read(bytes: &[u8]) -> Result<Option<GroupRecord>, String> {
    decode_value(bytes).map_err(|error| error.to_string())
}

/// A node as the metadata knows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Where peers reach it.
    pub address: String,
    /// Its live session, if any.
    pub session: Option<SessionId>,
    /// The highest epoch it reported applying (M1).
    pub acked: Epoch,
}

/// Who last reported being a group's primary.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ownership {
    /// The node.
    pub node: NodeId,
    /// The view it is primary of.
    pub view: View,
    /// The session it reported under.
    pub session: SessionId,
}

/// A group as the metadata knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRecord {
    /// Its kind.
    pub kind: String,
    /// Its incarnation.
    pub incarnation: Incarnation,
    /// Voting members in member-index order (empty once deleted).
    pub members: Vec<NodeId>,
    /// Learners: replicas catching up that do not vote yet (P4).
    pub learners: Vec<NodeId>,
    /// Its replication quorum (for `members`) and write mode: what every
    /// replica added later is built with.
    pub replication: Replication,
    /// Learners their primary reported caught up: promotable.
    pub caught_up: BTreeSet<NodeId>,
    /// A member change decided and not yet carried out by the group.
    pub pending: Option<PendingSwitch>,
    /// False once deleted (the record stays to remember the incarnation).
    pub live: bool,
    /// The last ownership report, if any.
    pub owner: Option<Ownership>,
    /// The highest view any accepted report named in this incarnation. It
    /// outlives the owner record: after an expiry or a new session empties
    /// the record, a stale primary's report of an older view is still
    /// refused (S4 fencing).
    pub owner_view_max: View,
    /// The incarnation `CreateGroup` gave the group (member changes move
    /// `incarnation` past it). While the two are equal, a member that hosts
    /// no replica of the group creates it empty: it was never anything else.
    pub created: Incarnation,
    /// A primary transfer asked for and not yet done (C4).
    pub transfer: Option<Transfer>,
}

/// A primary transfer the metadata asked for (C4).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transfer {
    /// The member that is to lead.
    pub to: NodeId,
    /// The group's `owner_view_max` when it was asked: a report of any
    /// later view ends it, done or overtaken by a failover.
    pub view: View,
    /// The epoch it was asked at.
    pub epoch: Epoch,
}

/// The whole metadata state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    /// The epoch of the last applied command.
    pub epoch: Epoch,
    /// Nodes.
    pub nodes: BTreeMap<NodeId, NodeRecord>,
    /// Groups.
    pub groups: BTreeMap<GroupId, GroupRecord>,
    /// The last session id handed out.
    pub last_session: SessionId,
    /// The epoch of the last change to nodes, sessions or groups: what
    /// nodes ack (M1). Acks and ownership reports do not move it, so acking
    /// never needs another ack.
    pub config_epoch: Epoch,
    /// Multi-step operations in flight, with their plans (M2–M5).
    pub operations: BTreeMap<OperationId, OperationRecord>,
    /// The last operation id handed out.
    pub last_operation: OperationId,
    /// Operations finished so far.
    pub operation_totals: OperationTotals,
    /// Set while the metadata is frozen for an upgrade.
    pub frozen: Option<Frozen>,
}

impl Metadata {
    /// Z6: the metadata group's voters as its record says, with the next
    /// voters of a switch in progress (both may lead it while it switches),
    /// once the record exists. Keepalives go to them, and only they may say
    /// a session expired (T3).
    pub fn metadata_voters(&self) -> Option<Vec<NodeId>> {
        let record = self.groups.get(&GroupId::METADATA)?;
        let mut voters = record.members.clone();
        for next in record.pending.iter().flat_map(|pending| &pending.seal.members) {
            if !voters.contains(next) {
                voters.push(*next);
            }
        }
        Some(voters)
    }

    /// Apply one command at `epoch`; the result says what happened.
    pub fn apply(&mut self, epoch: Epoch, command: MetadataCommand) -> MetadataResult {
        assert!(epoch > self.epoch, "metadata epochs go forward: {epoch} after {}", self.epoch);
        self.epoch = epoch;
        let changes_config = !matches!(
            command,
            MetadataCommand::AckEpoch { .. }
                | MetadataCommand::ReportOwnership { .. }
                | MetadataCommand::ReportCaughtUp { .. }
                | MetadataCommand::ReportSealed { .. }
                | MetadataCommand::TransferPrimary { .. }
                | MetadataCommand::TransferPrimaries { .. }
                | MetadataCommand::ReportOwnerships { .. }
        );
        let result = self.apply_command(epoch, command);
        if changes_config && !matches!(result, MetadataResult::Refused { .. }) {
            self.config_epoch = epoch;
        }
        result
    }

    fn apply_command(&mut self, epoch: Epoch, command: MetadataCommand) -> MetadataResult {
        let refused = |reason: String| MetadataResult::Refused { reason };
        if let Some(frozen) = self.frozen
            && freeze::is_operator_change(&command)
        {
            return refused(frozen.refusal());
        }
        match command {
            MetadataCommand::RegisterNode { node, address } => {
                self.nodes.entry(node).or_default().address = address;
                MetadataResult::Done { epoch }
            }
            MetadataCommand::OpenSession { node } => {
                let Some(record) = self.nodes.get_mut(&node) else {
                    return refused(format!("{node} is not registered; register it first"));
                };
                self.last_session = SessionId(self.last_session.0 + 1);
                let replaced = record.session.replace(self.last_session);
                if replaced.is_some() {
                    // A new session ends the old one: its ownership records
                    // go, and the node re-owns under the new session (S4).
                    self.drop_ownership(node);
                }
                MetadataResult::SessionOpened { session: self.last_session, epoch }
            }
            MetadataCommand::ExpireSession { node, session } => {
                let Some(record) = self.nodes.get_mut(&node) else {
                    return refused(format!("{node} is not registered"));
                };
                if record.session != Some(session) {
                    return refused(format!("{session} of {node} is not its live session"));
                }
                record.session = None;
                // S2: clients are no longer sent to the expired node, and
                // no primary is handed to it.
                self.drop_ownership(node);
                for group in self.groups.values_mut() {
                    if group.transfer.is_some_and(|transfer| transfer.to == node) {
                        group.transfer = None;
                    }
                }
                MetadataResult::Done { epoch }
            }
            MetadataCommand::CreateGroup { group, kind, members, replication } => {
                self.create_group(epoch, group, kind, members, replication)
            }
            MetadataCommand::CreateGroups { groups } => {
                for GroupCreation { group, kind, members, replication } in groups {
                    // One that exists or names an unknown member is skipped.
                    let _ = self.create_group(epoch, group, kind, members, replication);
                }
                MetadataResult::Done { epoch }
            }
            MetadataCommand::DeleteGroup { group } if group == GroupId::METADATA => {
                refused(format!("{group} is the metadata group: it cannot be deleted"))
            }
            MetadataCommand::DeleteGroup { group } if let Some(id) = self.operation_of(group) => {
                refused(format!("{group} is in {id}; cancel it or wait before deleting the group"))
            }
            MetadataCommand::DeleteGroup { group } => match self.groups.get_mut(&group) {
                Some(record) if record.live => {
                    record.live = false;
                    record.members.clear();
                    record.learners.clear();
                    record.caught_up.clear();
                    record.owner = None;
                    record.transfer = None;
                    MetadataResult::Done { epoch }
                }
                _ => refused(format!("{group} does not exist")),
            },
            MetadataCommand::ReportOwnership { group, incarnation, node, session, view } => {
                self.report_ownership(epoch, node, session, OwnedGroup { group, incarnation, view })
            }
            MetadataCommand::ReportOwnerships { node, session, reports } => {
                let refused = reports
                    .into_iter()
                    .filter(|report| {
                        matches!(self.report_ownership(epoch, node, session, *report), MetadataResult::Refused { .. })
                    })
                    .map(|report| report.group)
                    .collect();
                MetadataResult::OwnershipsReported { refused, epoch }
            }
            MetadataCommand::TransferPrimary { group, .. } if group == GroupId::METADATA => {
                refused(format!("{group} is the metadata group: its primary is not transferred"))
            }
            MetadataCommand::TransferPrimary { group, to } => self.transfer_primary(epoch, group, to),
            MetadataCommand::TransferPrimaries { transfers } => {
                // C5: each as a `TransferPrimary` alone; a refused one is skipped.
                for transfer in transfers.into_iter().filter(|transfer| transfer.group != GroupId::METADATA) {
                    let _ = self.transfer_primary(epoch, transfer.group, transfer.to);
                }
                MetadataResult::Done { epoch }
            }
            MetadataCommand::RecordMetadataGroup { incarnation, members, learners } => {
                self.record_metadata_group(epoch, incarnation, members, learners)
            }
            MetadataCommand::Freeze { by } => self.freeze(epoch, by),
            MetadataCommand::Unfreeze { by } => self.unfreeze(epoch, by),
            MetadataCommand::StartOperation { spec } => self.start_operation(epoch, spec),
            MetadataCommand::AdvanceOperation { operation, step } => self.advance_operation(epoch, operation, step),
            MetadataCommand::CancelOperation { operation } => self.cancel_operation(epoch, operation),
            MetadataCommand::ReportCaughtUp { group, incarnation, node, .. } => {
                self.report_caught_up(epoch, group, incarnation, node)
            }
            MetadataCommand::ReportSealed { group, incarnation, node } => {
                self.report_sealed(epoch, group, incarnation, node)
            }
            MetadataCommand::AckEpoch { node, epoch: applied } => {
                let Some(record) = self.nodes.get_mut(&node) else {
                    return refused(format!("{node} is not registered"));
                };
                record.acked = record.acked.max(applied.min(epoch));
                MetadataResult::Done { epoch }
            }
        }
    }

    /// Z6: `RecordMetadataGroup`: the metadata group's own record, so its
    /// members change through operations like any group's. Its `created`
    /// incarnation is 0: no node ever hosts it empty as a voter (C3).
    fn record_metadata_group(
        &mut self,
        epoch: Epoch,
        incarnation: Incarnation,
        members: Vec<NodeId>,
        learners: Vec<NodeId>,
    ) -> MetadataResult {
        if self.groups.contains_key(&GroupId::METADATA) {
            return MetadataResult::Refused { reason: format!("{} is recorded already", GroupId::METADATA) };
        }
        let record = GroupRecord {
            kind: METADATA_KIND.to_string(),
            incarnation,
            members,
            learners,
            replication: Replication::default(),
            caught_up: BTreeSet::new(),
            pending: None,
            live: true,
            owner: None,
            owner_view_max: View(0),
            created: Incarnation(0),
            transfer: None,
        };
        self.groups.insert(GroupId::METADATA, record);
        MetadataResult::Done { epoch }
    }

    /// `CreateGroup`, and each group of `CreateGroups`.
    fn create_group(
        &mut self,
        epoch: Epoch,
        group: GroupId,
        kind: String,
        members: Vec<NodeId>,
        replication: Replication,
    ) -> MetadataResult {
        let refused = |reason: String| MetadataResult::Refused { reason };
        if group == GroupId::METADATA {
            return refused(format!("{group} is reserved for the metadata group"));
        }
        if let Some(unknown) = members.iter().find(|member| !self.nodes.contains_key(member)) {
            return refused(format!("{unknown} is not registered; register every member first"));
        }
        let incarnation = match self.groups.get(&group) {
            Some(existing) if existing.live => {
                return refused(format!("{group} exists (incarnation {}); delete it first", existing.incarnation.0));
            }
            Some(existing) => Incarnation(existing.incarnation.0 + 1),
            None => Incarnation(1),
        };
        self.groups.insert(
            group,
            GroupRecord {
                kind,
                incarnation,
                members,
                learners: Vec::new(),
                replication,
                caught_up: BTreeSet::new(),
                pending: None,
                live: true,
                owner: None,
                owner_view_max: View(0),
                created: incarnation,
                transfer: None,
            },
        );
        MetadataResult::GroupCreated { incarnation, epoch }
    }

    /// `ReportOwnership`, and each report of `ReportOwnerships` (S4).
    fn report_ownership(
        &mut self,
        epoch: Epoch,
        node: NodeId,
        session: SessionId,
        report: OwnedGroup,
    ) -> MetadataResult {
        let refused = |reason: String| MetadataResult::Refused { reason };
        let OwnedGroup { group, incarnation, view } = report;
        let live_session = self.nodes.get(&node).and_then(|record| record.session);
        if live_session != Some(session) {
            return refused(format!("{node} has no live session {session}; open a new session first"));
        }
        let Some(record) = self.groups.get_mut(&group).filter(|record| record.live) else {
            return refused(format!("{group} does not exist"));
        };
        if record.incarnation != incarnation {
            return refused(format!("{group} is at incarnation {}, not {}", record.incarnation.0, incarnation.0));
        }
        if !record.members.contains(&node) {
            return refused(format!("{node} is not a member of {group}"));
        }
        if view < record.owner_view_max {
            return refused(format!("{group}: {view} is older than the recorded {}", record.owner_view_max));
        }
        if record.transfer.is_some_and(|transfer| view > transfer.view) {
            record.transfer = None;
        }
        record.owner = Some(Ownership { node, view, session });
        record.owner_view_max = view;
        MetadataResult::Done { epoch }
    }

    /// The in-flight operation touching `group`, if any (M3).
    pub fn operation_of(&self, group: GroupId) -> Option<OperationId> {
        self.operations.iter().find(|(_, record)| record.groups().contains(&group)).map(|(id, _)| *id)
    }

    fn drop_ownership(&mut self, node: NodeId) {
        for group in self.groups.values_mut() {
            if group.owner.is_some_and(|owner| owner.node == node) {
                group.owner = None;
            }
        }
    }

    /// Nodes that applied at least `epoch`.
    pub fn acked_by(&self, epoch: Epoch) -> usize {
        self.nodes.values().filter(|record| record.acked >= epoch).count()
    }
}

/// The metadata group's [`StateMachine`]: [`Metadata`] behind the codec.
#[derive(Debug, Default)]
pub struct MetadataStateMachine {
    state: Metadata,
}

impl MetadataStateMachine {
    /// The current state.
    pub fn state(&self) -> &Metadata {
        &self.state
    }
}

impl StateMachine for MetadataStateMachine {
    fn apply(&mut self, op: Op, operation: &[u8]) -> Bytes {
        let epoch = Epoch(op.0);
        let result = match MetadataCommand::decode(operation) {
            Ok(command) => self.state.apply(epoch, command),
            Err(error) => {
                // A command that does not decode is refused the same way on
                // every member, and still takes its epoch.
                self.state.epoch = self.state.epoch.max(epoch);
                MetadataResult::Refused { reason: format!("not a metadata command: {error}") }
            }
        };
        result.encode()
    }

    fn read(&self, query: &[u8]) -> Bytes {
        // An empty query reads the whole state; a group id (8 bytes, see
        // `record_query`) reads that group's record alone (Z6).
        match <[u8; 8]>::try_from(query) {
            Ok(id) => encode_value(&self.state.groups.get(&GroupId(u64::from_le_bytes(id)))),
            Err(_) => encode_value(&self.state),
        }
    }

    fn snapshot(&self) -> Bytes {
        encode_value(&self.state)
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.state = decode_value(snapshot).map_err(|error| error.to_string())?;
        Ok(())
    }

    fn admit(&self, sender: NodeId, members: &[NodeId], operation: &[u8]) -> Result<(), String> {
        // Undecodable commands are refused at apply, the same on every member.
        let Ok(command) = MetadataCommand::decode(operation) else { return Ok(()) };
        self.state.admit(sender, members, &command)
    }
}

impl Metadata {
    /// T3: whether node `sender` may ask for `command`. A field that speaks
    /// for a node must name the sender; an expiry, which acts on another
    /// node by design, comes only from a member of the metadata group
    /// (`members`: the metadata primary's driver proposes it); a learner's
    /// catch-up is reported by a member of that group; the operator's
    /// commands (groups, operations, transfers and the freeze, whose `by`
    /// is the asking node's word for whom it asks) come from any node's agent, never
    /// from a client (the client port and `NodeHandle` refuse the metadata
    /// group before a request gets here).
    pub fn admit(&self, sender: NodeId, members: &[NodeId], command: &MetadataCommand) -> Result<(), String> {
        let speaks_for = |node: NodeId, what: &str| {
            if node == sender {
                Ok(())
            } else {
                Err(format!("{what} for {node} sent by {sender}: a node speaks only for itself"))
            }
        };
        match command {
            MetadataCommand::RegisterNode { node, .. } => speaks_for(*node, "register"),
            MetadataCommand::OpenSession { node } => speaks_for(*node, "session open"),
            MetadataCommand::AckEpoch { node, .. } => speaks_for(*node, "epoch ack"),
            MetadataCommand::ReportOwnership { node, .. } | MetadataCommand::ReportOwnerships { node, .. } => {
                speaks_for(*node, "ownership report")
            }
            MetadataCommand::ReportSealed { node, .. } => speaks_for(*node, "seal report"),
            MetadataCommand::ExpireSession { node, .. } => {
                if members.contains(&sender) {
                    Ok(())
                } else {
                    Err(format!("expiry of {node}'s session sent by {sender}, not a member of the metadata group"))
                }
            }
            MetadataCommand::RecordMetadataGroup { members: recorded, .. } => {
                if members.contains(&sender) && recorded.as_slice() == members {
                    Ok(())
                } else {
                    Err(format!(
                        "metadata group record {recorded:?} sent by {sender}: only a voter records the voters {members:?}"
                    ))
                }
            }
            MetadataCommand::ReportCaughtUp { group, node, .. } => {
                let member = self.groups.get(group).is_some_and(|record| record.members.contains(&sender));
                if member {
                    Ok(())
                } else {
                    Err(format!("catch-up of {node} in {group} reported by {sender}, not a member of {group}"))
                }
            }
            MetadataCommand::CreateGroup { .. }
            | MetadataCommand::CreateGroups { .. }
            | MetadataCommand::DeleteGroup { .. }
            | MetadataCommand::TransferPrimary { .. }
            | MetadataCommand::TransferPrimaries { .. }
            | MetadataCommand::Freeze { .. }
            | MetadataCommand::Unfreeze { .. }
            | MetadataCommand::StartOperation { .. }
            | MetadataCommand::AdvanceOperation { .. }
            | MetadataCommand::CancelOperation { .. } => Ok(()),
        }
    }
}
