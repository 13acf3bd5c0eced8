//! The node's copy of the applied cluster metadata.
//!
//! On a node that hosts a metadata replica, a voter or a learner (Z5), the
//! replica's state machine applies into this shared value itself, so the
//! agent and the admin port read the very state the replica holds, with
//! nothing copied per apply. A node that hosts none (past the group's
//! replica limit) keeps the last state it fetched here.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use cohort_core::StateMachine;
use cohort_core::metadata::{Metadata, MetadataStateMachine};
use cohort_messages::Op;

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
    pub fn replace_encoded(&self, encoded: &[u8]) -> Result<(), String> {
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
    pub fn state_machine(&self) -> Box<dyn StateMachine> {
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

    fn admit(
        &self,
        sender: cohort_messages::NodeId,
        members: &[cohort_messages::NodeId],
        operation: &[u8],
    ) -> Result<(), String> {
        self.0.lock().admit(sender, members, operation)
    }
}
