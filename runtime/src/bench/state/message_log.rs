//! `--state message-log` (K7): each group is a partition of the message
//! log, the [`LogStore`] the `log` example runs (messages in segment files,
//! reads by offset, retention by size), with its kept bytes published to
//! the bench. Every write to it is an op batch of messages (a producer's
//! batch), and `--consumers` read it by offset while the producers write
//! (`bench::consumers`).
//!
//! The bench keeps each partition to [`RETENTION_BYTES`] in segments of
//! [`SEGMENT_SIZE_MAX_BYTES`], so a run of minutes does not fill the disk:
//! three nodes of 16 partitions hold at most 12 GiB. A consumer that falls
//! further behind than retention is answered "trimmed" and skips ahead
//! (counted in the report).

use std::path::Path;

use bytes::Bytes;
use cohort_core::{Durability, StateMachine};
use cohort_messages::op_batch::{OpBatch, OpResults};
use cohort_messages::{GroupId, Op};

use super::StateBytes;
use crate::log_store::{LogStore, LogStoreConfig};

/// A partition keeps at most this many bytes of segments.
pub(crate) const RETENTION_BYTES: u64 = 256 * 1024 * 1024;
/// A partition's segments are cut at this size.
pub(crate) const SEGMENT_SIZE_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// A [`LogStore`] that tells the bench how many bytes it keeps. Every
/// method is the store's; the ones that change what it keeps publish its
/// size after.
pub(super) struct SizedLogStore {
    store: LogStore,
    size: StateBytes,
}

impl SizedLogStore {
    /// Partition `group` of the node whose state machines keep their files
    /// in `dir`, at its newest checkpoint (a damaged one is moved aside and
    /// the partition starts empty, as the `log` example's node does).
    pub(super) fn open(dir: &Path, group: GroupId, size: StateBytes) -> SizedLogStore {
        let config =
            LogStoreConfig { segment_size_max_bytes: SEGMENT_SIZE_MAX_BYTES, retention_bytes: RETENTION_BYTES };
        let store = LogStore::open_or_empty(dir, group, config);
        size.set(store.kept_bytes());
        SizedLogStore { store, size }
    }

    fn publish(&self) {
        self.size.set(self.store.kept_bytes());
    }
}

impl StateMachine for SizedLogStore {
    fn apply(&mut self, op: Op, operation: &[u8]) -> Bytes {
        let result = self.store.apply(op, operation);
        self.publish();
        result
    }

    fn takes_op_batches(&self) -> bool {
        self.store.takes_op_batches()
    }

    fn apply_op_batch(&mut self, op: Op, batch: OpBatch<'_>, results: &mut OpResults) {
        self.store.apply_op_batch(op, batch, results);
        self.publish();
    }

    fn read(&self, query: &[u8]) -> Bytes {
        self.store.read(query)
    }

    fn snapshot(&self) -> Bytes {
        self.store.snapshot()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        let restored = self.store.restore(snapshot);
        self.publish();
        restored
    }

    fn durability(&self) -> Durability {
        self.store.durability()
    }

    fn apply_off_shard(&self) -> bool {
        self.store.apply_off_shard()
    }

    fn checkpoint(&mut self, record: &[u8]) -> Result<(), String> {
        self.store.checkpoint(record)
    }

    fn checkpointed(&self) -> Option<Bytes> {
        self.store.checkpointed()
    }

    fn clear(&mut self) -> Result<(), String> {
        let cleared = self.store.clear();
        self.publish();
        cleared
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::state::StateSizes;
    use crate::log_store::{Answer, appended_offset, decode_answer, fetch};

    #[test]
    fn k7_the_partition_publishes_what_it_keeps_and_answers_by_offset() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let sizes = StateSizes::default();
        let mut partition = SizedLogStore::open(dir.path(), GroupId(3), sizes.handle());
        assert!(partition.takes_op_batches(), "producers write batches");
        assert_eq!(partition.durability(), Durability::Persistent);
        let batch = cohort_messages::op_batch::encode(&[Bytes::from_static(b"one"), Bytes::from_static(b"two")])
            .expect("a batch");
        let mut results = OpResults::with_count(2);
        partition.apply_op_batch(Op(1), OpBatch::parse(&batch).expect("parses"), &mut results);
        let results = results.finish().expect("two results");
        let offsets: Vec<u64> = OpBatch::parse(&results)
            .expect("results are a batch")
            .iter()
            .map(|result| appended_offset(result).expect("an offset"))
            .collect();
        assert_eq!(offsets, [0, 1]);
        assert!(sizes.largest_bytes() >= 6, "the kept bytes are published: {}", sizes.largest_bytes());
        match decode_answer(&partition.read(&fetch(1, 10))).expect("an answer") {
            Answer::Messages(messages) => assert_eq!(messages, [Bytes::from_static(b"two")]),
            other => panic!("expected messages, got {other:?}"),
        }
        partition.checkpoint(b"record").expect("a checkpoint");
        drop(partition);
        let reopened = SizedLogStore::open(dir.path(), GroupId(3), sizes.handle());
        assert_eq!(reopened.checkpointed().as_deref(), Some(&b"record"[..]));
        assert!(sizes.largest_bytes() >= 6, "a reopened partition publishes its size");
    }
}
