//! The simulator's workload state machine: a key-value map of u64s with
//! read, write and compare-and-set.
//!
//! Every apply is reported to the harness (op and a digest of the operation)
//! through a shared sink, so the checkers see each member's applied sequence
//! even when snapshots drop the log.

use crate::shared::Shared;
use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};
use cohort_core::StateMachine;
use cohort_messages::Op;
use cohort_messages::op_batch::{self, OpBatch, OpResults};

/// A KV operation.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum KvOp {
    /// Read a key (a `Read` request).
    Get {
        /// Key.
        key: u64,
    },
    /// Write a key.
    Put {
        /// Key.
        key: u64,
        /// Value.
        value: u64,
    },
    /// Write `new` if the key holds `expected`.
    Cas {
        /// Key.
        key: u64,
        /// Expected value (0: absent).
        expected: u64,
        /// New value.
        new: u64,
    },
    /// K5: `count` puts of one key in one op batch, of the values `first`,
    /// `first + 1`, ...: each put's result is the value before it, so the
    /// batch answers the old value, then `first`, `first + 1`, ... if its
    /// ops applied together, one after another.
    Puts {
        /// Key.
        key: u64,
        /// The first put's value.
        first: u64,
        /// Puts (2 or more).
        count: u64,
    },
}

impl KvOp {
    /// The operation a client sends: the encoding, or (K5, `op_batches`)
    /// a write as an op batch (a put or compare-and-set alone).
    pub fn operation(&self, op_batches: bool) -> Bytes {
        match self {
            KvOp::Put { .. } | KvOp::Cas { .. } if op_batches => {
                op_batch::encode(&[self.encode()]).expect("one small op is a batch")
            }
            _ => self.encode(),
        }
    }

    /// The value a write leaves the key with (None for a read; a
    /// compare-and-set's is its new value if it matched).
    pub fn written(&self) -> Option<u64> {
        match *self {
            KvOp::Get { .. } => None,
            KvOp::Put { value, .. } => Some(value),
            KvOp::Cas { new, .. } => Some(new),
            KvOp::Puts { first, count, .. } => Some(first + count - 1),
        }
    }

    /// Encode (a `Puts` as the op batch of its puts).
    pub fn encode(&self) -> Bytes {
        if let KvOp::Puts { key, first, count } = *self {
            let puts: Vec<Bytes> = (first..first + count).map(|value| KvOp::Put { key, value }.encode()).collect();
            return op_batch::encode(&puts).expect("a few small puts are a batch");
        }
        let mut out = BytesMut::with_capacity(25);
        match *self {
            KvOp::Get { key } => {
                out.put_u8(0);
                out.put_u64_le(key);
            }
            KvOp::Put { key, value } => {
                out.put_u8(1);
                out.put_u64_le(key);
                out.put_u64_le(value);
            }
            KvOp::Cas { key, expected, new } => {
                out.put_u8(2);
                out.put_u64_le(key);
                out.put_u64_le(expected);
                out.put_u64_le(new);
            }
            KvOp::Puts { .. } => unreachable!("encoded above"),
        }
        out.freeze()
    }

    /// Decode (None for garbage).
    pub fn decode(bytes: &[u8]) -> Option<KvOp> {
        let word = |at: usize| bytes.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
        match bytes.first()? {
            0 => Some(KvOp::Get { key: word(1)? }),
            1 => Some(KvOp::Put { key: word(1)?, value: word(9)? }),
            2 => Some(KvOp::Cas { key: word(1)?, expected: word(9)?, new: word(17)? }),
            _ => None,
        }
    }

    /// The key.
    pub fn key(&self) -> u64 {
        match *self {
            KvOp::Get { key } | KvOp::Put { key, .. } | KvOp::Cas { key, .. } | KvOp::Puts { key, .. } => key,
        }
    }
}

/// Where applies are reported: (op, digest of the operation).
pub type ApplySink = Shared<Vec<(Op, u64)>>;

/// FNV-1a over bytes: a stable digest for the checkers.
pub fn digest(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(0x100_0000_01b3))
}

/// The KV state machine.
pub struct Kv {
    map: BTreeMap<u64, u64>,
    sink: ApplySink,
    /// K5: every write is an op batch.
    op_batches: bool,
}

impl Kv {
    /// An empty map reporting to `sink`.
    pub fn new(sink: ApplySink) -> Kv {
        Kv { map: BTreeMap::new(), sink, op_batches: false }
    }

    /// The same, taking op batches (K5) if `on`.
    pub fn op_batches(self, on: bool) -> Kv {
        Kv { op_batches: on, ..self }
    }

    /// An empty map of the same kind, reporting to the same sink.
    pub fn emptied(&self) -> Kv {
        Kv::new(self.sink()).op_batches(self.op_batches)
    }

    /// The value of a key (0: absent).
    pub fn get(&self, key: u64) -> u64 {
        self.map.get(&key).copied().unwrap_or(0)
    }

    /// Where it reports its applies.
    pub fn sink(&self) -> ApplySink {
        Shared::clone(&self.sink)
    }
}

fn value_bytes(value: u64) -> Bytes {
    Bytes::copy_from_slice(&value.to_le_bytes())
}

/// Decode a result value.
pub fn result_value(bytes: &[u8]) -> Option<u64> {
    bytes.try_into().ok().map(u64::from_le_bytes)
}

impl Kv {
    fn apply_kv(&mut self, operation: &[u8]) -> Bytes {
        match KvOp::decode(operation) {
            Some(KvOp::Put { key, value }) => {
                let old = self.get(key);
                self.map.insert(key, value);
                value_bytes(old)
            }
            Some(KvOp::Cas { key, expected, new }) => {
                let old = self.get(key);
                if old == expected {
                    self.map.insert(key, new);
                }
                value_bytes(old)
            }
            Some(KvOp::Get { key }) => value_bytes(self.get(key)),
            Some(KvOp::Puts { .. }) | None => Bytes::new(),
        }
    }
}

impl StateMachine for Kv {
    fn apply(&mut self, op: Op, operation: &[u8]) -> Bytes {
        self.sink.borrow_mut().push((op, digest(operation)));
        self.apply_kv(operation)
    }

    fn takes_op_batches(&self) -> bool {
        self.op_batches
    }

    /// K5: the batch is one apply at `op` (the checkers see the entry's
    /// whole operation), its ops applied one after another.
    fn apply_op_batch(&mut self, op: Op, batch: OpBatch<'_>, results: &mut OpResults) {
        self.sink.borrow_mut().push((op, digest(batch.as_bytes())));
        for operation in batch.iter() {
            results.push(&self.apply_kv(operation));
        }
    }

    fn read(&self, query: &[u8]) -> Bytes {
        match KvOp::decode(query) {
            Some(op) => value_bytes(self.get(op.key())),
            None => Bytes::new(),
        }
    }

    fn snapshot(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(self.map.len() * 16);
        for (key, value) in &self.map {
            out.put_u64_le(*key);
            out.put_u64_le(*value);
        }
        out.freeze()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        if !snapshot.len().is_multiple_of(16) {
            return Err(format!("kv snapshot of {} bytes is not whole pairs", snapshot.len()));
        }
        self.map = snapshot
            .chunks_exact(16)
            .map(|pair| {
                let (key, value) = pair.split_at(8);
                (
                    u64::from_le_bytes(key.try_into().unwrap_or([0; 8])),
                    u64::from_le_bytes(value.try_into().unwrap_or([0; 8])),
                )
            })
            .collect();
        Ok(())
    }
}
