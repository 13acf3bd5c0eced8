//! The bench's default state machine: `cohort node`'s [`Register`], which
//! it has always run, with its size published (the last value's bytes).

use bytes::Bytes;
use cohort_core::StateMachine;
use cohort_messages::{NodeId, Op};

use super::StateBytes;
use crate::node::Register;

/// A [`Register`] that tells the bench how big its value is.
#[derive(Debug)]
pub(super) struct SizedRegister {
    register: Register,
    size: StateBytes,
}

impl SizedRegister {
    pub(super) fn new(size: StateBytes) -> SizedRegister {
        SizedRegister { register: Register::default(), size }
    }
}

impl StateMachine for SizedRegister {
    fn apply(&mut self, op: Op, operation: &[u8]) -> Bytes {
        self.size.set(operation.len() as u64);
        self.register.apply(op, operation)
    }

    fn read(&self, query: &[u8]) -> Bytes {
        self.register.read(query)
    }

    fn snapshot(&self) -> Bytes {
        self.register.snapshot()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.register.restore(snapshot)?;
        self.size.set(snapshot.len() as u64);
        Ok(())
    }

    fn admit(&self, sender: NodeId, members: &[NodeId], operation: &[u8]) -> Result<(), String> {
        self.register.admit(sender, members, operation)
    }
}
