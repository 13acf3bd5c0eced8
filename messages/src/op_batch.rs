//! K5: many client operations in one request, and their results in one reply.
//!
//! A group whose state machine takes op batches
//! (`StateMachine::takes_op_batches` in cohort-core) reads every write's
//! operation as an op batch: the client sends its ops in one Request, the
//! primary puts them in the log as one entry at one op (so they enter the log
//! all or none, are prepared, acknowledged, written to the WAL and applied
//! together), the state machine applies them in order, and the Reply carries
//! one result per op, in the same encoding. Exactly-once is the request's:
//! a retried batch is answered from the client table with every result.
//! This is the way TigerBeetle numbers a request of many events: one op for
//! the request, each event by its index in it. An op of a batch is named by
//! `(op, index)`, which orders every op of the group.
//!
//! The wire is unchanged: an op batch is the bytes of an ordinary operation
//! and result (no command or layout of seed 000 changes). The encoding puts
//! the lengths first, so a decoder checks every one against the input's
//! size before it slices anything:
//!
//! | bytes | field |
//! | --- | --- |
//! | 1 | version, [`OP_BATCH_VERSION`] |
//! | 4 | count, little endian, 1 to [`OP_BATCH_OPS_MAX`] |
//! | 4 × count | each op's length, little endian |
//! | the lengths' sum | the ops, back to back |
//!
//! The whole is at most [`OPERATION_SIZE_MAX_BYTES`], like any operation.

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};

use crate::limits::OPERATION_SIZE_MAX_BYTES;

/// The encoding's version byte.
pub const OP_BATCH_VERSION: u8 = 1;

/// The most ops one batch may carry (TigerBeetle's request holds up to
/// 8,190 events; a batch's lengths take 4 bytes each of the operation's
/// 1 MiB).
pub const OP_BATCH_OPS_MAX: usize = 8192;

/// Bytes before the lengths: version and count.
const HEAD_SIZE_BYTES: usize = 5;

/// Why bytes are not an op batch, or ops do not make one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpBatchError {
    /// Shorter than the version, count and lengths it declares.
    Truncated {
        /// The input's size.
        size_bytes: usize,
    },
    /// Not this encoding's version (an operation that is not an op batch).
    Version {
        /// The first byte.
        got: u8,
    },
    /// No ops, or more than [`OP_BATCH_OPS_MAX`].
    Count {
        /// The count.
        count: usize,
    },
    /// The lengths do not add up to the bytes that follow them.
    Lengths {
        /// The lengths' sum.
        declared_bytes: u64,
        /// The bytes after the lengths.
        present_bytes: usize,
    },
    /// The encoding would exceed [`OPERATION_SIZE_MAX_BYTES`].
    TooLarge {
        /// Its size.
        size_bytes: usize,
    },
    /// A batch's answer with another number of results than it had ops.
    ResultCount {
        /// The batch's ops.
        ops: usize,
        /// The answer's results.
        results: usize,
    },
}

impl fmt::Display for OpBatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpBatchError::Truncated { size_bytes } => {
                write!(f, "op batch of {size_bytes} bytes is shorter than its head and lengths")
            }
            OpBatchError::Version { got } => {
                write!(f, "not an op batch: version byte {got}, expected {OP_BATCH_VERSION}")
            }
            OpBatchError::Count { count } => write!(f, "op batch of {count} ops (1 to {OP_BATCH_OPS_MAX})"),
            OpBatchError::Lengths { declared_bytes, present_bytes } => {
                write!(f, "op batch lengths add up to {declared_bytes} bytes but {present_bytes} bytes follow them")
            }
            OpBatchError::TooLarge { size_bytes } => {
                write!(
                    f,
                    "op batch of {size_bytes} bytes exceeds OPERATION_SIZE_MAX_BYTES ({OPERATION_SIZE_MAX_BYTES})"
                )
            }
            OpBatchError::ResultCount { ops, results } => {
                write!(f, "the answer to a batch of {ops} ops holds {results} results")
            }
        }
    }
}

impl std::error::Error for OpBatchError {}

/// The size of the encoding of ops of these sizes.
pub fn encoded_size_bytes(op_sizes_bytes: impl IntoIterator<Item = usize>) -> usize {
    op_sizes_bytes.into_iter().fold(HEAD_SIZE_BYTES, |total, size| total.saturating_add(4).saturating_add(size))
}

/// Encode ops (or results) as one op batch.
pub fn encode<T: AsRef<[u8]>>(ops: &[T]) -> Result<Bytes, OpBatchError> {
    if ops.is_empty() || ops.len() > OP_BATCH_OPS_MAX {
        return Err(OpBatchError::Count { count: ops.len() });
    }
    let size_bytes = encoded_size_bytes(ops.iter().map(|op| op.as_ref().len()));
    if size_bytes > OPERATION_SIZE_MAX_BYTES {
        return Err(OpBatchError::TooLarge { size_bytes });
    }
    let mut buf = BytesMut::with_capacity(size_bytes);
    buf.put_u8(OP_BATCH_VERSION);
    buf.put_u32_le(ops.len() as u32); // At most OP_BATCH_OPS_MAX.
    for op in ops {
        buf.put_u32_le(op.as_ref().len() as u32); // At most OPERATION_SIZE_MAX_BYTES.
    }
    for op in ops {
        buf.put_slice(op.as_ref());
    }
    debug_assert_eq!(buf.len(), size_bytes, "the size computed is the size written");
    Ok(buf.freeze())
}

/// Decode an op batch into its ops, as slices of `bytes` (no copy).
pub fn decode(bytes: &Bytes) -> Result<Vec<Bytes>, OpBatchError> {
    Ok(OpBatch::parse(bytes)?.iter_bytes().collect())
}

/// The results of a batch of `ops` ops, read from its write's result: one
/// per op, in order; none from an `Async` group, which answers on the
/// primary's durable copy before anything is applied (Q4: an empty
/// result).
pub fn results(result: &Bytes, ops: usize) -> Result<Vec<Bytes>, OpBatchError> {
    if result.is_empty() {
        return Ok(Vec::new());
    }
    let results = decode(result)?;
    if results.len() != ops {
        return Err(OpBatchError::ResultCount { ops, results: results.len() });
    }
    Ok(results)
}

/// A valid op batch, read in place: checked once by [`OpBatch::parse`]
/// (every length against the bytes present), then its ops are slices of
/// it, found without an allocation.
#[derive(Copy, Clone, Debug)]
pub struct OpBatch<'a> {
    bytes: &'a Bytes,
    count: usize,
}

impl<'a> OpBatch<'a> {
    /// Check `bytes` is an op batch.
    pub fn parse(bytes: &'a Bytes) -> Result<OpBatch<'a>, OpBatchError> {
        let count = check(bytes)?;
        Ok(OpBatch { bytes, count })
    }

    /// The whole batch, as encoded (the log entry's operation).
    pub fn as_bytes(&self) -> &'a Bytes {
        self.bytes
    }

    /// Its ops (at least one).
    pub fn len(&self) -> usize {
        self.count
    }

    /// Never: a batch has at least one op.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Its ops, in order, borrowed.
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let bytes: &'a [u8] = self.bytes;
        ranges(bytes, self.count).map(move |(start, end)| &bytes[start..end])
    }

    /// Its ops, in order, as slices of the batch's [`Bytes`] (no copy: for
    /// a state machine that keeps them).
    pub fn iter_bytes(&self) -> impl Iterator<Item = Bytes> + 'a {
        let bytes = self.bytes;
        ranges(bytes, self.count).map(move |(start, end)| bytes.slice(start..end))
    }
}

/// Check the encoding; its count. Every length is checked against what is
/// present before anything is sliced.
fn check(bytes: &[u8]) -> Result<usize, OpBatchError> {
    let truncated = OpBatchError::Truncated { size_bytes: bytes.len() };
    if bytes.len() > OPERATION_SIZE_MAX_BYTES {
        return Err(OpBatchError::TooLarge { size_bytes: bytes.len() });
    }
    let Some((&version, rest)) = bytes.split_first() else { return Err(truncated) };
    if version != OP_BATCH_VERSION {
        return Err(OpBatchError::Version { got: version });
    }
    let Some(count) = rest.get(..4) else { return Err(truncated) };
    let count = u32::from_le_bytes([count[0], count[1], count[2], count[3]]) as usize;
    if count == 0 || count > OP_BATCH_OPS_MAX {
        return Err(OpBatchError::Count { count });
    }
    let payload_start = HEAD_SIZE_BYTES + 4 * count;
    let Some(lengths) = bytes.get(HEAD_SIZE_BYTES..payload_start) else { return Err(truncated) };
    let present_bytes = bytes.len() - payload_start;
    let declared_bytes: u64 = lengths.chunks_exact(4).map(|length| u64::from(length_at(length))).sum();
    if declared_bytes != present_bytes as u64 {
        return Err(OpBatchError::Lengths { declared_bytes, present_bytes });
    }
    Ok(count)
}

/// The byte range of each op of a checked batch of `count` ops.
fn ranges(bytes: &[u8], count: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
    let payload_start = HEAD_SIZE_BYTES + 4 * count;
    let lengths = &bytes[HEAD_SIZE_BYTES..payload_start];
    lengths.chunks_exact(4).scan(payload_start, |start, length| {
        // `check` found the lengths' sum equal to the bytes present.
        let end = *start + length_at(length) as usize;
        let range = (*start, end);
        *start = end;
        Some(range)
    })
}

fn length_at(length: &[u8]) -> u32 {
    u32::from_le_bytes([length[0], length[1], length[2], length[3]])
}

/// K5: the results of one batch, encoded as an op batch as they are made:
/// the lengths' room is reserved for the batch's count, and each result's
/// bytes go after the ones before (one buffer, no result kept apart).
#[derive(Debug)]
pub struct OpResults {
    buf: BytesMut,
    count: usize,
    pushed: usize,
}

impl OpResults {
    /// Room for the results of a batch of `count` ops (1 to
    /// [`OP_BATCH_OPS_MAX`]).
    pub fn with_count(count: usize) -> OpResults {
        assert!((1..=OP_BATCH_OPS_MAX).contains(&count), "a batch has 1 to OP_BATCH_OPS_MAX ops, not {count}");
        let mut buf = BytesMut::with_capacity(HEAD_SIZE_BYTES + 8 * count);
        buf.put_u8(OP_BATCH_VERSION);
        buf.put_u32_le(count as u32);
        buf.put_bytes(0, 4 * count);
        OpResults { buf, count, pushed: 0 }
    }

    /// The next op's result.
    ///
    /// # Panics
    /// If every op has its result already (a state machine's bug).
    pub fn push(&mut self, result: &[u8]) {
        assert!(self.pushed < self.count, "more results than the batch's {} ops", self.count);
        let at = HEAD_SIZE_BYTES + 4 * self.pushed;
        let length = u32::try_from(result.len()).unwrap_or(u32::MAX);
        self.buf[at..at + 4].copy_from_slice(&length.to_le_bytes());
        self.buf.put_slice(result);
        self.pushed += 1;
    }

    /// Results pushed so far.
    pub fn len(&self) -> usize {
        self.pushed
    }

    /// True before the first result.
    pub fn is_empty(&self) -> bool {
        self.pushed == 0
    }

    /// The encoded results: one per op, at most [`OPERATION_SIZE_MAX_BYTES`]
    /// together (what one Reply carries).
    pub fn finish(self) -> Result<Bytes, OpBatchError> {
        if self.pushed != self.count {
            return Err(OpBatchError::ResultCount { ops: self.count, results: self.pushed });
        }
        if self.buf.len() > OPERATION_SIZE_MAX_BYTES {
            return Err(OpBatchError::TooLarge { size_bytes: self.buf.len() });
        }
        Ok(self.buf.freeze())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k5_an_op_batch_round_trips_and_its_ops_are_slices_of_it() {
        let ops = [Bytes::from_static(b"first"), Bytes::new(), Bytes::from(vec![7u8; 300])];
        let encoded = encode(&ops).expect("encodes");
        assert_eq!(encoded.len(), encoded_size_bytes(ops.iter().map(Bytes::len)));
        let decoded = decode(&encoded).expect("decodes");
        assert_eq!(decoded, ops);
        let batch = OpBatch::parse(&encoded).expect("parses");
        assert_eq!(batch.len(), 3);
        assert_eq!(batch.iter().collect::<Vec<_>>(), ops.iter().map(|op| op.as_ref()).collect::<Vec<_>>());
        let payload = encoded.as_ptr() as usize..encoded.as_ptr() as usize + encoded.len();
        assert!(payload.contains(&(decoded[2].as_ptr() as usize)), "an op is a slice of the batch");
    }

    #[test]
    fn k5_a_batchs_answer_holds_one_result_per_op_or_none() {
        let answer = encode(&[b"1".as_slice(), b"2".as_slice()]).expect("encodes");
        assert_eq!(results(&answer, 2).expect("two results").len(), 2);
        assert_eq!(results(&answer, 3), Err(OpBatchError::ResultCount { ops: 3, results: 2 }));
        assert_eq!(results(&Bytes::new(), 3), Ok(Vec::new()), "Q4: an async group answers with none");
        assert!(matches!(results(&Bytes::from_static(b"plain"), 1), Err(OpBatchError::Version { .. })));
    }

    #[test]
    fn k5_results_are_encoded_as_they_are_made_one_per_op() {
        let mut results = OpResults::with_count(3);
        for result in [b"x".as_slice(), b"", b"yz"] {
            results.push(result);
        }
        assert_eq!(results.len(), 3);
        let encoded = results.finish().expect("one result per op");
        assert_eq!(encoded, encode(&[b"x".as_slice(), b"", b"yz"]).expect("encodes"), "the same encoding as a batch");
        let mut short = OpResults::with_count(2);
        short.push(b"only one");
        assert_eq!(short.finish(), Err(OpBatchError::ResultCount { ops: 2, results: 1 }));
        let mut large = OpResults::with_count(2);
        large.push(&vec![0u8; OPERATION_SIZE_MAX_BYTES]);
        large.push(b"");
        assert!(matches!(large.finish(), Err(OpBatchError::TooLarge { .. })), "what no Reply carries");
    }

    #[test]
    #[should_panic(expected = "more results than")]
    fn k5_a_result_past_the_batchs_ops_is_a_bug() {
        let mut results = OpResults::with_count(1);
        results.push(b"a");
        results.push(b"b");
    }

    #[test]
    fn k5_ops_that_make_no_batch_are_refused_when_encoded() {
        assert_eq!(encode::<&[u8]>(&[]), Err(OpBatchError::Count { count: 0 }));
        let many = vec![Bytes::new(); OP_BATCH_OPS_MAX + 1];
        assert_eq!(encode(&many), Err(OpBatchError::Count { count: OP_BATCH_OPS_MAX + 1 }));
        assert!(encode(&vec![Bytes::new(); OP_BATCH_OPS_MAX]).is_ok(), "the limit itself is allowed");
        let large = [vec![0u8; OPERATION_SIZE_MAX_BYTES]];
        assert!(matches!(encode(&large), Err(OpBatchError::TooLarge { .. })));
    }

    #[test]
    fn k5_bytes_that_are_not_an_op_batch_are_refused_without_a_panic() {
        let good = encode(&[b"ab".as_slice(), b"cde".as_slice()]).expect("encodes");
        assert!(matches!(decode(&Bytes::new()), Err(OpBatchError::Truncated { .. })));
        assert_eq!(decode(&Bytes::from_static(&[0x5A; 8])), Err(OpBatchError::Version { got: 0x5A }));
        assert!(matches!(decode(&Bytes::from_static(&[1, 0, 0, 0, 0])), Err(OpBatchError::Count { count: 0 })));
        assert!(matches!(decode(&Bytes::from_static(&[1, 0xFF, 0xFF, 0xFF, 0xFF])), Err(OpBatchError::Count { .. })));
        // Every truncation and every extension is refused.
        for cut in 0..good.len() {
            assert!(decode(&good.slice(..cut)).is_err(), "cut at {cut}");
        }
        let mut longer = good.to_vec();
        longer.push(0);
        assert!(matches!(decode(&Bytes::from(longer)), Err(OpBatchError::Lengths { .. })));
        // A length that would run past the end is refused before any slice.
        let mut lying = good.to_vec();
        lying[5..9].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode(&Bytes::from(lying)), Err(OpBatchError::Lengths { .. })));
    }

    proptest::proptest! {
        #[test]
        fn k5_arbitrary_bytes_decode_or_are_refused(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let bytes = Bytes::from(bytes);
            if let Ok(ops) = decode(&bytes) {
                proptest::prop_assert_eq!(encode(&ops).expect("what decodes encodes"), bytes);
            }
        }
    }
}
