//! The state machine `cohort node` runs when no host supplies one: one
//! register per group. A write stores its operation and returns the value it
//! replaced; a read returns the current value. Enough to operate and test a
//! cluster from the command line; applications embed their own.

use bytes::Bytes;
use cohort_core::StateMachine;
use cohort_messages::Op;

/// A register.
#[derive(Debug, Default)]
pub struct Register(Bytes);

impl StateMachine for Register {
    fn apply(&mut self, _op: Op, operation: &[u8]) -> Bytes {
        std::mem::replace(&mut self.0, Bytes::copy_from_slice(operation))
    }

    fn read(&self, _query: &[u8]) -> Bytes {
        self.0.clone()
    }

    fn snapshot(&self) -> Bytes {
        self.0.clone()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.0 = Bytes::copy_from_slice(snapshot);
        Ok(())
    }
}
