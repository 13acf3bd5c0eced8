//! The metadata group in a running node (brief §3.3; S1–S5, M1).
//!
//! Every node of a cluster takes part in the metadata group
//! `GroupId::METADATA`, which runs the sans-IO
//! [`cohort_actors::core::metadata::MetadataStateMachine`] on the same
//! replica core as every partition group:
//!
//! - **Members**: every node of the cluster (this node and its peers) when
//!   the cluster has at most [`METADATA_MEMBERS_MAX`] nodes, else the first
//!   [`METADATA_MEMBERS_MAX`] by node id ([`metadata_members`]). A larger
//!   metadata group would only slow its commits; five members survive two
//!   failures. Members host a replica, on the shard `shard_of` picks.
//! - **Non-members** host no replica; their agent fetches the whole state
//!   with a linearizable read of the metadata group every few ticks.
//! - **The view**: [`SharedMetadata`] is the node's copy of the applied
//!   metadata: the local replica's state machine itself on a member (the
//!   shard applies into it, the agent reads it under a lock), the last
//!   fetched copy on a non-member.
//! - **The agent**: one [`agent_actor::MetadataAgentActor`] per node shells
//!   the sans-IO `MetadataAgent` (register, session, keepalives, expiry on the
//!   metadata primary, re-owning, unloading, epoch acks).
//! - **Status**: [`StatusBoard`] is what `/status` and `cohort status` show.
//! - **Operator commands**: [`operator`] serves `POST /admin/operations` on
//!   the admin port and submits through the agent
//!   ([`operator_client`]); [`admin_cli`] is `cohort admin`.
//!
//! Why the metadata group is a group like any other: failover, the WAL,
//! repair and fencing come for free, and the simulator checks the same code.

pub mod admin_cli;
pub(crate) mod agent_actor;
mod http;
pub mod operator;
pub mod operator_client;
mod status;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use cohort_actors::core::StateMachine;
use cohort_actors::core::metadata::{Metadata, MetadataStateMachine};
use cohort_messages::{NodeId, Op};

pub use agent_actor::{AgentInbound, OperatorSubmit, SessionStop};
pub use operator_client::OperatorFailure;
pub use status::{AgentStatus, StatusBoard, status_command};

/// The group kind of the metadata group. Reserved: a host may not register it.
pub const METADATA_KIND: &str = "cohort.metadata";

/// The most members the metadata group has (the first ones by node id).
pub const METADATA_MEMBERS_MAX: usize = 5;

/// The metadata group's members for a cluster of `nodes`: all of them up to
/// [`METADATA_MEMBERS_MAX`], else the first [`METADATA_MEMBERS_MAX`] by node
/// id. Every node computes the same list from the same node set.
///
/// ```
/// use cohort_runtime::node::metadata::metadata_members;
/// use cohort_runtime::prelude::NodeId;
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

/// The node's copy of the applied metadata, shared by the metadata
/// replica's state machine (which applies into it, on its shard's thread),
/// the agent and the admin port. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct SharedMetadata(Arc<Mutex<MetadataStateMachine>>);

impl SharedMetadata {
    fn lock(&self) -> MutexGuard<'_, MetadataStateMachine> {
        // Applying never leaves the state half-written in a way a reader
        // could misuse more than a stale copy, so a poisoned lock is used as is.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Run `f` on the applied metadata.
    pub fn with<R>(&self, f: impl FnOnce(&Metadata) -> R) -> R {
        f(self.lock().state())
    }

    /// A copy of the applied metadata.
    pub fn snapshot(&self) -> Metadata {
        self.with(Metadata::clone)
    }

    /// Replace the copy with a fetched, encoded state (non-members). A state
    /// that does not decode, or is older than the copy, is ignored.
    pub(crate) fn replace_encoded(&self, encoded: &[u8]) -> Result<(), String> {
        let mut fetched = MetadataStateMachine::default();
        fetched.restore(encoded)?;
        let mut current = self.lock();
        if fetched.state().epoch >= current.state().epoch {
            *current = fetched;
        }
        Ok(())
    }

    /// The state machine of the local metadata replica: it starts from an
    /// empty state (recovery replays the log or restores a snapshot into it)
    /// and applies into this shared copy.
    pub(crate) fn state_machine(&self) -> Box<dyn StateMachine> {
        *self.lock() = MetadataStateMachine::default();
        Box::new(Published(self.clone()))
    }
}

/// [`MetadataStateMachine`] behind the shared lock.
struct Published(SharedMetadata);

impl StateMachine for Published {
    fn apply(&mut self, op: Op, operation: &[u8]) -> Bytes {
        self.0.lock().apply(op, operation)
    }

    fn read(&self, query: &[u8]) -> Bytes {
        self.0.lock().read(query)
    }

    fn snapshot(&self) -> Bytes {
        self.0.lock().snapshot()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.0.lock().restore(snapshot)
    }
}
