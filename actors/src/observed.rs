//! A state machine wrapper that the shard puts around each group's state
//! machine, so the runtime sees every apply although the core makes the call.
//!
//! The core applies committed ops itself, in the middle of handling a
//! message, and stays free of clocks and tracing (it is sans-IO). Wrapping
//! the state machine it is given is the one place the shell can time an
//! apply (`cohort_apply_latency_seconds`, `cohort_ops_applied_total`) and
//! open the op's `commit` and `apply` spans with the right parent, without a
//! hook in the core. It forwards every call unchanged. D2: a state machine
//! applied off the shard's thread goes to the apply worker inside its
//! wrapper, so its applies are timed and traced there alike.

use std::time::Instant;

use bytes::Bytes;
use cohort_core::{Durability, StateMachine};
use cohort_messages::op_batch::{OpBatch, OpResults};
use cohort_messages::{GroupId, Op};

use crate::metrics::GroupKindMetrics;
use crate::traces::ShardTraces;

/// `inner`, timed and traced.
pub(crate) struct ObservedStateMachine {
    inner: Box<dyn StateMachine>,
    group: GroupId,
    metrics: GroupKindMetrics,
    traces: std::sync::Arc<ShardTraces>,
}

impl ObservedStateMachine {
    /// Wrap `group`'s state machine; applies count in `metrics` and open
    /// spans through `traces`.
    pub(crate) fn new(
        inner: Box<dyn StateMachine>,
        group: GroupId,
        metrics: GroupKindMetrics,
        traces: std::sync::Arc<ShardTraces>,
    ) -> ObservedStateMachine {
        ObservedStateMachine { inner, group, metrics, traces }
    }
}

impl StateMachine for ObservedStateMachine {
    fn apply(&mut self, op: Op, operation: &[u8]) -> Bytes {
        let span = self.traces.on_apply(self.group, op);
        let _entered = span.enter();
        let started = Instant::now();
        let result = self.inner.apply(op, operation);
        self.metrics.observe_apply(started.elapsed());
        result
    }

    /// A run's ops each get their `apply` span, open over the whole run,
    /// and the run's time, split evenly, in the latency histogram.
    fn apply_batch(&mut self, ops: &[(Op, Bytes)]) -> Vec<Bytes> {
        let spans: Vec<tracing::Span> = ops.iter().map(|(op, _)| self.traces.on_apply(self.group, *op)).collect();
        let started = Instant::now();
        let results = self.inner.apply_batch(ops);
        let elapsed = started.elapsed();
        drop(spans);
        let each = elapsed / u32::try_from(ops.len().max(1)).unwrap_or(u32::MAX);
        for _ in ops {
            self.metrics.observe_apply(each);
        }
        results
    }

    fn takes_op_batches(&self) -> bool {
        self.inner.takes_op_batches()
    }

    /// K5: one `apply` span for the batch's op, and one observation of the
    /// latency histogram: a batch is one apply (one entry of the log).
    fn apply_op_batch(&mut self, op: Op, batch: OpBatch<'_>, results: &mut OpResults) {
        let span = self.traces.on_apply(self.group, op);
        let _entered = span.enter();
        let started = Instant::now();
        self.inner.apply_op_batch(op, batch, results);
        self.metrics.observe_apply(started.elapsed());
    }

    fn read(&self, query: &[u8]) -> Bytes {
        self.inner.read(query)
    }

    fn snapshot(&self) -> Bytes {
        self.inner.snapshot()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.inner.restore(snapshot)
    }

    fn admit(
        &self,
        sender: cohort_messages::NodeId,
        members: &[cohort_messages::NodeId],
        operation: &[u8],
    ) -> Result<(), String> {
        self.inner.admit(sender, members, operation)
    }

    fn apply_off_shard(&self) -> bool {
        self.inner.apply_off_shard()
    }

    fn durability(&self) -> Durability {
        self.inner.durability()
    }

    fn checkpoint(&mut self, record: &[u8]) -> Result<(), String> {
        self.inner.checkpoint(record)
    }

    fn checkpointed(&self) -> Option<Bytes> {
        self.inner.checkpointed()
    }

    fn clear(&mut self) -> Result<(), String> {
        self.inner.clear()
    }

    fn export(&mut self) -> Result<Option<Box<dyn cohort_core::StateExport>>, String> {
        self.inner.export()
    }

    fn import_begin(&mut self, key: &[u8]) -> Result<(), String> {
        self.inner.import_begin(key)
    }

    fn import_write(&mut self, offset_bytes: u64, chunk: &[u8]) -> Result<(), String> {
        self.inner.import_write(offset_bytes, chunk)
    }

    fn import_staged(&self) -> Option<(Bytes, u64)> {
        self.inner.import_staged()
    }

    fn import_finish(&mut self, record: &[u8]) -> Result<(), String> {
        self.inner.import_finish(record)
    }
}
