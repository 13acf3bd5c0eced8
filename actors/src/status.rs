//! What the node's agent tells the admin port: its session and counters,
//! beside the node's copy of the metadata.
//!
//! The agent writes [`AgentStatus`] on every tick; the admin port renders
//! `/status` from the board on demand, so an idle node does no work for it.

use std::sync::{Mutex, PoisonError};

use cohort_core::metadata::AgentCounters;
use cohort_messages::{NodeId, SessionId};

use crate::shared_metadata::SharedMetadata;

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
    learners: Vec<NodeId>,
    metadata: SharedMetadata,
    agent: Mutex<AgentStatus>,
}

impl StatusBoard {
    /// The board of `node`, whose metadata group has `members` (its voters)
    /// and `learners` (Z5).
    pub fn new(node: NodeId, members: Vec<NodeId>, learners: Vec<NodeId>, metadata: SharedMetadata) -> StatusBoard {
        StatusBoard { node, members, learners, metadata, agent: Mutex::new(AgentStatus::default()) }
    }

    /// The agent's latest status.
    pub fn agent(&self) -> AgentStatus {
        self.agent.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Record the agent's status.
    pub fn set_agent(&self, status: AgentStatus) {
        *self.agent.lock().unwrap_or_else(PoisonError::into_inner) = status;
    }

    /// The node's copy of the metadata.
    pub fn metadata(&self) -> &SharedMetadata {
        &self.metadata
    }

    /// This node.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The metadata group's members (its voters).
    pub fn members(&self) -> &[NodeId] {
        &self.members
    }

    /// The metadata group's learners (Z5).
    pub fn learners(&self) -> &[NodeId] {
        &self.learners
    }
}
