//! `--state log`: a state machine that appends each write's bytes to its
//! state in memory, as a host's naive log would (as the `log` example did
//! before its messages went to segment files). Its
//! snapshot encodes every entry and its restore decodes them all, so the
//! cost of a snapshot grows with the state: that is what the setting
//! measures.
//!
//! Encoding: each entry as a 4-byte little-endian length and its bytes.
//! The state's size is the snapshot's length, the figure the storage's
//! snapshot cap (`snapshot_size_max_bytes`) is compared with.

use bytes::Bytes;
use cohort_core::StateMachine;
use cohort_messages::{OPERATION_SIZE_MAX_BYTES, Op};

use super::StateBytes;

/// Bytes of an entry's length prefix.
const LENGTH_PREFIX_BYTES: usize = 4;

const _: () = assert!(OPERATION_SIZE_MAX_BYTES <= u32::MAX as usize, "an entry's length fits its prefix");

/// Every write applied, in op order.
#[derive(Debug)]
pub(super) struct AppendLog {
    entries: Vec<Bytes>,
    /// The snapshot's length: every entry's bytes and its prefix.
    encoded_bytes: u64,
    size: StateBytes,
    /// K5: every write is an op batch (`--batch-ops` above 1).
    op_batches: bool,
}

impl AppendLog {
    pub(super) fn new(size: StateBytes, op_batches: bool) -> AppendLog {
        AppendLog { entries: Vec::new(), encoded_bytes: 0, size, op_batches }
    }
}

impl StateMachine for AppendLog {
    fn takes_op_batches(&self) -> bool {
        self.op_batches
    }

    /// Append; the result is the entry's offset (u64, little-endian).
    fn apply(&mut self, _op: Op, operation: &[u8]) -> Bytes {
        debug_assert!(operation.len() <= OPERATION_SIZE_MAX_BYTES);
        self.entries.push(Bytes::copy_from_slice(operation));
        self.encoded_bytes += (LENGTH_PREFIX_BYTES + operation.len()) as u64;
        self.size.set(self.encoded_bytes);
        Bytes::copy_from_slice(&(self.entries.len() as u64 - 1).to_le_bytes())
    }

    /// Whatever the query: the state's size in bytes (u64, little-endian).
    fn read(&self, _query: &[u8]) -> Bytes {
        Bytes::copy_from_slice(&self.encoded_bytes.to_le_bytes())
    }

    fn snapshot(&self) -> Bytes {
        let mut out = Vec::with_capacity(self.encoded_bytes as usize);
        for entry in &self.entries {
            out.extend_from_slice(&(entry.len() as u32).to_le_bytes());
            out.extend_from_slice(entry);
        }
        debug_assert_eq!(out.len() as u64, self.encoded_bytes);
        out.into()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.entries = decode(snapshot)?;
        self.encoded_bytes = snapshot.len() as u64;
        self.size.set(self.encoded_bytes);
        Ok(())
    }
}

/// The entries of a snapshot, or why it is not one.
fn decode(snapshot: &[u8]) -> Result<Vec<Bytes>, String> {
    let mut entries = Vec::new();
    let mut rest = snapshot;
    while !rest.is_empty() {
        let at = snapshot.len() - rest.len();
        let Some((prefix, after)) = rest.split_first_chunk::<LENGTH_PREFIX_BYTES>() else {
            return Err(format!("log snapshot: a length prefix cut short at byte {at}"));
        };
        let length = u32::from_le_bytes(*prefix) as usize;
        let Some(entry) = after.get(..length) else {
            return Err(format!("log snapshot: an entry of {length} bytes cut short at byte {at}"));
        };
        entries.push(Bytes::copy_from_slice(entry));
        rest = &after[length..];
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::state::StateSizes;

    fn log_of(sizes: &StateSizes, writes: &[&[u8]]) -> AppendLog {
        let mut log = AppendLog::new(sizes.handle(), false);
        for (index, write) in writes.iter().enumerate() {
            let offset = log.apply(Op(index as u64 + 1), write);
            assert_eq!(offset.as_ref(), (index as u64).to_le_bytes(), "the result is the offset");
        }
        log
    }

    #[test]
    fn d5_the_log_counts_every_write_and_its_prefix() {
        let sizes = StateSizes::default();
        let log = log_of(&sizes, &[b"abc", b"", &[7; 4096]]);
        assert_eq!(log.encoded_bytes, 3 * 4 + 3 + 4096);
        assert_eq!(sizes.largest_bytes(), log.encoded_bytes);
        assert_eq!(log.read(b"").as_ref(), log.encoded_bytes.to_le_bytes());
        assert_eq!(log.snapshot().len() as u64, log.encoded_bytes);
    }

    #[test]
    fn d5_a_snapshot_restores_the_same_entries_and_size() {
        let sizes = StateSizes::default();
        let log = log_of(&sizes, &[b"one", b"", b"three", &[0xFF; 300]]);
        let snapshot = log.snapshot();
        let mut restored = AppendLog::new(sizes.handle(), false);
        restored.restore(&snapshot).expect("its own snapshot");
        assert_eq!(restored.entries, log.entries);
        assert_eq!(restored.encoded_bytes, log.encoded_bytes);
        assert_eq!(restored.snapshot(), snapshot);
        drop(log);
        assert_eq!(sizes.largest_bytes(), restored.encoded_bytes, "the restored replica publishes its size");
        restored.restore(b"").expect("the empty state");
        assert_eq!((restored.entries.len(), sizes.largest_bytes()), (0, 0));
    }

    #[test]
    fn d5_a_truncated_snapshot_is_refused_and_says_where() {
        let sizes = StateSizes::default();
        let snapshot = log_of(&sizes, &[b"one", b"two"]).snapshot();
        let mut log = AppendLog::new(sizes.handle(), false);
        for cut in [1, 5, snapshot.len() - 1] {
            let error = log.restore(&snapshot[..cut]).expect_err("truncated");
            assert!(error.contains("cut short at byte"), "{error}");
        }
        assert!(log.restore(&[0xFF, 0xFF, 0xFF, 0xFF]).is_err(), "a length beyond the input");
    }
}
