//! The bench's default state machine: `cohort node`'s [`Register`], which
//! it has always run, with its size published (the last value's bytes).

use bytes::Bytes;
use cohort_core::StateMachine;
use cohort_messages::op_batch::{OpBatch, OpResults};
use cohort_messages::{NodeId, Op};

use super::StateBytes;
use crate::node::Register;

/// A [`Register`] that tells the bench how big its value is.
#[derive(Debug)]
pub(super) struct SizedRegister {
    register: Register,
    size: StateBytes,
    /// K5: every write is an op batch (`--batch-ops` above 1).
    op_batches: bool,
}

impl SizedRegister {
    pub(super) fn new(size: StateBytes, op_batches: bool) -> SizedRegister {
        SizedRegister { register: Register::default(), size, op_batches }
    }
}

impl StateMachine for SizedRegister {
    fn takes_op_batches(&self) -> bool {
        self.op_batches
    }

    /// K5: as `apply` op by op (each result is the value the op replaced),
    /// with only the last op stored.
    fn apply_op_batch(&mut self, op: Op, batch: OpBatch<'_>, results: &mut OpResults) {
        results.push(&self.register.read(&[]));
        let mut last = None;
        for operation in batch.iter() {
            if let Some(previous) = last.replace(operation) {
                results.push(previous);
            }
        }
        if let Some(last) = last {
            self.apply(op, last);
        }
    }

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

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use cohort_core::StateMachine;
    use cohort_messages::Op;
    use cohort_messages::op_batch::{self, OpBatch, OpResults};

    use super::super::StateSizes;
    use super::SizedRegister;

    #[test]
    fn k5_a_batch_answers_as_its_ops_one_by_one() {
        let sizes = StateSizes::default();
        let (mut batched, mut single) =
            (SizedRegister::new(sizes.handle(), true), SizedRegister::new(sizes.handle(), false));
        batched.apply(Op(1), b"a");
        single.apply(Op(1), b"a");
        let ops = [b"b".as_slice(), b"cc", b"d"];
        let encoded = op_batch::encode(&ops).expect("a batch");
        let mut results = OpResults::with_count(ops.len());
        batched.apply_op_batch(Op(2), OpBatch::parse(&encoded).expect("parses"), &mut results);
        let one_by_one: Vec<Bytes> = ops.iter().map(|operation| single.apply(Op(2), operation)).collect();
        let results = op_batch::decode(&results.finish().expect("one result per op")).expect("decodes");
        assert_eq!(results, one_by_one, "each op's result is the value it replaced");
        assert_eq!(batched.read(b""), single.read(b""), "the last op is the value");
    }
}
