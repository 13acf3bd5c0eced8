//! What the core's tests share: a state machine small enough to check by
//! hand (it counts the ops it applied, and every answer is that count), and
//! the spec of a plain group.

use bytes::Bytes;
use cohort_core::quorum::Quorums;
use cohort_core::{Effect, GroupSpec, Shard, StateMachine, WriteMode};
use cohort_messages::{GroupId, Incarnation, MemberIndex, NodeId, Op, Reply};

/// Incarnation 1 of `group` on `members` (majority quorums, synchronous
/// writes, no learners), as hosted by member `me`.
#[allow(dead_code)] // Each test file compiles this module; not all use it.
pub fn plain_spec(group: GroupId, members: &[NodeId], me: u8) -> GroupSpec {
    GroupSpec {
        group,
        incarnation: Incarnation(1),
        members: members.to_vec(),
        learners: Vec::new(),
        me: MemberIndex(me),
        quorums: Quorums::new(members.len(), None).expect("a majority"),
        write_mode: WriteMode::Sync,
        report_applied: false,
    }
}

/// Counts applied ops; reads, snapshots and results are the count (u64 LE).
#[allow(dead_code)] // Each test file compiles this module; not all use it.
#[derive(Default)]
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

/// Run a one-node shard until quiet, every flush done at once; the replies.
#[allow(dead_code)] // Each test file compiles this module; not all use it.
pub fn drain_replies(shard: &mut Shard) -> Vec<Reply> {
    let mut replies = Vec::new();
    loop {
        let effects = shard.drain_effects();
        if effects.is_empty() {
            return replies;
        }
        for effect in effects {
            match effect {
                Effect::Flush { id } => shard.on_flushed(id),
                Effect::Reply(reply) => replies.push(reply),
                _ => {}
            }
        }
    }
}
