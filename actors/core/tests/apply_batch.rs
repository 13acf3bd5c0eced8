//! D1: committed writes reach the state machine in runs
//! (`StateMachine::apply_batch`): the writes of several clients that commit
//! together go in one call, each gets its own result, in op order, and a
//! retried request is still answered from the client table, never applied
//! again.

mod common;
use common::{drain_replies, plain_spec};

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use cohort_core::{CoreConfig, Shard, StateMachine};
use cohort_messages::{ClientId, GroupId, NodeId, Op, Outcome, Request, RequestKind, RequestNumber};

const ME: NodeId = NodeId(1);
const G: GroupId = GroupId(5);

/// Appends each operation; the result is the op it was applied at. Every
/// call records how many ops it took.
struct Runs {
    calls: Arc<Mutex<Vec<usize>>>,
    applied: Vec<(Op, Bytes)>,
}

impl StateMachine for Runs {
    fn apply(&mut self, op: Op, operation: &[u8]) -> Bytes {
        self.calls.lock().expect("one thread").push(1);
        self.applied.push((op, Bytes::copy_from_slice(operation)));
        Bytes::copy_from_slice(&op.0.to_le_bytes())
    }
    fn apply_batch(&mut self, ops: &[(Op, Bytes)]) -> Vec<Bytes> {
        self.calls.lock().expect("one thread").push(ops.len());
        self.applied.extend(ops.iter().cloned());
        ops.iter().map(|(op, _)| Bytes::copy_from_slice(&op.0.to_le_bytes())).collect()
    }
    fn read(&self, _query: &[u8]) -> Bytes {
        Bytes::copy_from_slice(&(self.applied.len() as u64).to_le_bytes())
    }
    fn snapshot(&self) -> Bytes {
        Bytes::new()
    }
    fn restore(&mut self, _snapshot: &[u8]) -> Result<(), String> {
        Ok(())
    }
}

fn write(client: u128, number: u64, operation: &'static [u8]) -> Request {
    Request {
        client: ClientId(client),
        request: RequestNumber(number),
        group: G,
        kind: RequestKind::Write,
        operation: Bytes::from_static(operation),
    }
}

#[test]
fn d1_writes_that_commit_together_are_applied_in_one_run_each_with_its_result() {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let mut shard = Shard::new(ME, CoreConfig::default());
    let state = Runs { calls: Arc::clone(&calls), applied: Vec::new() };
    shard.create_group(plain_spec(G, &[ME], 0), Box::new(state)).expect("created");
    for now in 1..=20 {
        shard.on_tick(now);
        drain_replies(&mut shard);
    }
    // Three clients register (request 1 applies nothing)...
    for client in 1..=3 {
        shard.on_request(write(client, 1, b""));
    }
    assert_eq!(drain_replies(&mut shard).len(), 3, "three registrations answered");
    assert!(calls.lock().expect("one thread").is_empty(), "a registration reaches no state machine");
    // ...then write in the same turn: one flush commits all three. (A
    // client registered at op R numbers its first write R + 1.)
    for (client, operation) in [(1, &b"a"[..]), (2, b"b"), (3, b"c")] {
        shard.on_request(Request { operation: Bytes::from_static(operation), ..write(client, client as u64 + 1, b"") });
    }
    let replies = drain_replies(&mut shard);
    assert_eq!(*calls.lock().expect("one thread"), vec![3], "the three writes went to the state machine in one run");
    let mut answered: Vec<(u128, Op, Bytes)> = replies
        .iter()
        .map(|reply| match &reply.outcome {
            Outcome::Ok(result) => (reply.client.0, reply.op, result.clone()),
            other => panic!("{reply:?}: {other:?}"),
        })
        .collect();
    answered.sort_by_key(|(_, op, _)| *op);
    assert_eq!(answered.len(), 3);
    for (_, op, result) in &answered {
        assert_eq!(&result[..], &op.0.to_le_bytes(), "each write's own result, by its op");
    }
    // A retry of one of them is answered from the table, not applied again.
    shard.on_request(write(2, 3, b"b"));
    let again = drain_replies(&mut shard);
    let first = answered.iter().find(|(client, ..)| *client == 2).expect("client 2 was answered");
    assert!(
        matches!(again.as_slice(), [reply] if reply.outcome == Outcome::Ok(first.2.clone())),
        "the retry gets the first answer: {again:?}"
    );
    assert_eq!(*calls.lock().expect("one thread"), vec![3], "the retry was not applied");
}
