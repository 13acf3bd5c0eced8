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
}

impl KvOp {
    /// Encode.
    pub fn encode(&self) -> Bytes {
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
            KvOp::Get { key } | KvOp::Put { key, .. } | KvOp::Cas { key, .. } => key,
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
}

impl Kv {
    /// An empty map reporting to `sink`.
    pub fn new(sink: ApplySink) -> Kv {
        Kv { map: BTreeMap::new(), sink }
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

impl StateMachine for Kv {
    fn apply(&mut self, op: Op, operation: &[u8]) -> Bytes {
        self.sink.borrow_mut().push((op, digest(operation)));
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
            None => Bytes::new(),
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
