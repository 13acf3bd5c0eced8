//! The demo's state machine: per group, the ids of every applied write.
//!
//! A write's operation is its id (u64, little-endian); a read returns every
//! id applied so far, so the demo can check that each acknowledged write is
//! still there after failover and restart.

use bytes::{BufMut, Bytes, BytesMut};
use cohort_core::StateMachine;
use cohort_messages::Op;

/// The ledger of one group.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    ids: Vec<u64>,
}

fn encode(ids: &[u64]) -> Bytes {
    let mut out = BytesMut::with_capacity(ids.len() * 8);
    for id in ids {
        out.put_u64_le(*id);
    }
    out.freeze()
}

/// Decode a list of ids (a read result or a snapshot).
pub(crate) fn decode(bytes: &[u8]) -> Result<Vec<u64>, String> {
    if !bytes.len().is_multiple_of(8) {
        return Err(format!("ledger of {} bytes is not whole ids", bytes.len()));
    }
    Ok(bytes.chunks_exact(8).map(|chunk| u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]))).collect())
}

impl StateMachine for Ledger {
    fn apply(&mut self, _op: Op, operation: &[u8]) -> Bytes {
        if let Ok(id) = <[u8; 8]>::try_from(operation) {
            self.ids.push(u64::from_le_bytes(id));
        }
        Bytes::new()
    }

    fn read(&self, _query: &[u8]) -> Bytes {
        encode(&self.ids)
    }

    fn snapshot(&self) -> Bytes {
        encode(&self.ids)
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.ids = decode(snapshot)?;
        Ok(())
    }
}
