//! The application's state machine, one per group.
//!
//! cohort calls [`StateMachine::apply`] once per committed op, in op order, on
//! every member; a retried client request is answered from the client table
//! and never applied twice. The state machine must be deterministic: the same
//! ops in the same order give the same state and results on every member.

use bytes::Bytes;
use cohort_messages::Op;

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
}
