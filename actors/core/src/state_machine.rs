//! The application's state machine, one per group.
//!
//! cohort calls [`StateMachine::apply`] once per committed op, in op order, on
//! every member; a retried client request is answered from the client table
//! and never applied twice. The state machine must be deterministic: the same
//! ops in the same order give the same state and results on every member.

use bytes::Bytes;
use cohort_messages::{NodeId, Op};

/// A group's replicated state.
pub trait StateMachine {
    /// Apply a committed operation and return its result.
    fn apply(&mut self, op: Op, operation: &[u8]) -> Bytes;

    /// Answer a read from the current state (V7); never changes state.
    fn read(&self, query: &[u8]) -> Bytes;

    /// Encode the whole state.
    fn snapshot(&self) -> Bytes;

    /// Replace the whole state with a decoded snapshot.
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String>;

    /// T3: whether the primary may propose the write `operation` that node
    /// `sender` sent (the authenticated peer it came from, or this node for
    /// a local submit). `members` are the group's voters. `Err` answers the
    /// request `Forbidden` with the reason, and nothing is proposed. The
    /// check runs on the primary before the op enters the log, so it may
    /// read the current state; it is not part of replication. Default:
    /// every write is admitted (a partition group's clients are checked at
    /// the client port).
    fn admit(&self, sender: NodeId, members: &[NodeId], operation: &[u8]) -> Result<(), String> {
        let _ = (sender, members, operation);
        Ok(())
    }
}
