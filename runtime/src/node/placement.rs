//! Where a group lives, and what the node makes of it at start.
//!
//! A [`GroupPlacement`] is the host's description of one group: members,
//! quorum, write mode (Q4) and kind. Every member node is built with the same
//! placement; each turns it into the core's [`GroupSpec`] for its own member
//! index. The placement's fields are public so that existing code can build
//! one literally; [`GroupPlacement::new`] fills in the defaults.

use cohort_core::metadata::METADATA_KIND;
use cohort_core::replica::Placement;
use cohort_core::{GroupSpec, WriteMode};
use cohort_messages::replication::Replication;
use cohort_messages::{GroupId, Incarnation, NodeId};

use super::NodeError;
use cohort_actors::{GroupKind, HostedGroup};
use cohort_actors::{Kinds, unknown_kind};

/// Where a group lives.
///
/// ```
/// use cohort_runtime::prelude::*;
/// let placement = GroupPlacement::new(GroupId(7), vec![NodeId(1), NodeId(2), NodeId(3)])
///     .kind("log")
///     .write_mode(WriteMode::Async);
/// assert_eq!(placement.kind.as_str(), "log");
/// assert_eq!(placement.incarnation, Incarnation(1));
/// assert_eq!(placement.replication_quorum, None, "a majority");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupPlacement {
    /// The group.
    pub group: GroupId,
    /// Its incarnation.
    pub incarnation: Incarnation,
    /// Members in member-index order; member 0 is the primary of view 0.
    pub members: Vec<NodeId>,
    /// Qr (None: majority).
    pub replication_quorum: Option<usize>,
    /// Q4: acknowledge writes after commit (`Sync`) or once the primary's
    /// copy is durable (`Async`, may be lost if the primary fails).
    pub write_mode: WriteMode,
    /// Its kind: which state machine (and custom actor) it runs.
    pub kind: GroupKind,
}

impl GroupPlacement {
    /// `group` on `members`: incarnation 1, majority quorum, synchronous
    /// writes, the default kind.
    pub fn new(group: GroupId, members: Vec<NodeId>) -> GroupPlacement {
        GroupPlacement {
            group,
            incarnation: Incarnation(1),
            members,
            replication_quorum: None,
            write_mode: WriteMode::Sync,
            kind: GroupKind::default(),
        }
    }

    /// Run the state machine (and actor) of `kind`.
    pub fn kind(mut self, kind: impl Into<GroupKind>) -> GroupPlacement {
        self.kind = kind.into();
        self
    }

    /// Q4: synchronous or asynchronous writes.
    pub fn write_mode(mut self, write_mode: WriteMode) -> GroupPlacement {
        self.write_mode = write_mode;
        self
    }

    /// Qr: members that must hold an op durably before it commits.
    pub fn replication_quorum(mut self, quorum: usize) -> GroupPlacement {
        self.replication_quorum = Some(quorum);
        self
    }

    /// The group's incarnation.
    pub fn incarnation(mut self, incarnation: Incarnation) -> GroupPlacement {
        self.incarnation = incarnation;
        self
    }
}

impl GroupPlacement {
    /// The core's view of this placement (no learners: a configured group
    /// starts with voters only).
    pub(crate) fn to_core(&self) -> Placement {
        Placement {
            group: self.group,
            incarnation: self.incarnation,
            members: self.members.clone(),
            learners: Vec::new(),
            replication_quorum: self.replication_quorum,
            write_mode: self.write_mode,
        }
    }

    /// Its replication settings, as the metadata records them.
    pub(crate) fn replication(&self) -> Replication {
        Replication { quorum: self.replication_quorum.map(|quorum| quorum as u8), write_mode: self.write_mode }
    }
}

/// This node's member of each placed group, checked against the kinds.
pub(crate) fn to_hosted(
    node: NodeId,
    placements: &[GroupPlacement],
    kinds: &Kinds,
) -> Result<Vec<HostedGroup>, NodeError> {
    placements
        .iter()
        .map(|placement| {
            if !kinds.contains_key(&placement.kind) {
                return Err(unknown_kind(kinds, placement.group, &placement.kind).into());
            }
            if !placement.members.contains(&node) {
                let group = placement.group;
                return Err(NodeError::Config(format!("{group}: this node {node} is not among its members")));
            }
            let spec =
                GroupSpec::of_node(&placement.to_core(), node).map_err(|error| NodeError::Config(error.to_string()))?;
            Ok(HostedGroup { spec, kind: placement.kind.clone() })
        })
        .collect()
}

/// This node's replica of the metadata group: a voter if it is among
/// `members`, else one of its `learners`, which follow its log and apply it
/// into the node's copy of the metadata (Z5).
pub(crate) fn metadata_replica(
    node: NodeId,
    members: &[NodeId],
    learners: &[NodeId],
) -> Result<HostedGroup, NodeError> {
    let placement = Placement {
        group: GroupId::METADATA,
        incarnation: Incarnation(1),
        members: members.to_vec(),
        learners: learners.to_vec(),
        replication_quorum: None,
        write_mode: WriteMode::Sync,
    };
    let spec = GroupSpec::of_node(&placement, node)
        .map_err(|error| NodeError::Config(format!("the metadata group: {error}")))?;
    Ok(HostedGroup { spec, kind: GroupKind::new(METADATA_KIND) })
}
