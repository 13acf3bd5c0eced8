//! What the core's tests share: a state machine small enough to check by
//! hand (it counts the ops it applied, and every answer is that count).

use bytes::Bytes;
use cohort_core::StateMachine;
use cohort_messages::Op;

/// Counts applied ops; reads, snapshots and results are the count (u64 LE).
pub struct Counter(pub u64);

impl StateMachine for Counter {
    fn apply(&mut self, _op: Op, _operation: &[u8]) -> Bytes {
        self.0 += 1;
        Bytes::copy_from_slice(&self.0.to_le_bytes())
    }
    fn read(&self, _query: &[u8]) -> Bytes {
        Bytes::copy_from_slice(&self.0.to_le_bytes())
    }
    fn snapshot(&self) -> Bytes {
        Bytes::copy_from_slice(&self.0.to_le_bytes())
    }
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.0 = u64::from_le_bytes(snapshot.try_into().map_err(|_| "bad snapshot".to_string())?);
        Ok(())
    }
}
