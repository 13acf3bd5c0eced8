//! K5: a group whose state machine takes op batches takes many ops in one
//! request: they enter the log as one entry at one op (all or none), are
//! applied in one call, and each gets its own result in the one Reply; a
//! retry is answered from the client table with every result and applies
//! nothing again. A write that is no op batch is refused before it enters
//! the log, each op is admitted on its own (T3), and a backup refuses a
//! Prepare that is no op batch (counted, never panics).

mod common;
use common::{drain_replies, plain_spec};

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use cohort_core::{CoreConfig, Shard, StateMachine};
use cohort_messages::{
    ClientId, GroupId, Incarnation, LogEntry, MemberIndex, Message, NodeId, Op, Outcome, Prepare, Reply, ReplyError,
    Request, RequestKind, RequestNumber, View, op_batch,
};
use op_batch::{OpBatch, OpResults};

const ME: NodeId = NodeId(1);
const PEER: NodeId = NodeId(2);
const G: GroupId = GroupId(7);
/// An op the state machine does not admit.
const FORBIDDEN: u64 = u64::MAX;

/// The op and the size of every `apply_op_batch` call.
type Calls = Arc<Mutex<Vec<(Op, usize)>>>;

/// Sums amounts (u64 LE); each op's result is the total after it. Records
/// every `apply_op_batch` call.
struct Sums {
    total: u64,
    calls: Calls,
}

impl StateMachine for Sums {
    fn apply(&mut self, _op: Op, operation: &[u8]) -> Bytes {
        self.total += amount(operation);
        Bytes::copy_from_slice(&self.total.to_le_bytes())
    }
    fn takes_op_batches(&self) -> bool {
        true
    }
    fn apply_op_batch(&mut self, op: Op, batch: OpBatch<'_>, results: &mut OpResults) {
        self.calls.lock().expect("one thread").push((op, batch.len()));
        for operation in batch.iter() {
            results.push(&self.apply(op, operation));
        }
    }
    fn read(&self, _query: &[u8]) -> Bytes {
        Bytes::copy_from_slice(&self.total.to_le_bytes())
    }
    fn snapshot(&self) -> Bytes {
        Bytes::copy_from_slice(&self.total.to_le_bytes())
    }
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.total = amount(snapshot);
        Ok(())
    }
    fn admit(&self, _sender: NodeId, _members: &[NodeId], operation: &[u8]) -> Result<(), String> {
        if amount(operation) == FORBIDDEN { Err("that amount is not allowed".into()) } else { Ok(()) }
    }
}

fn amount(bytes: &[u8]) -> u64 {
    bytes.try_into().map(u64::from_le_bytes).unwrap_or(0)
}

fn batch(amounts: &[u64]) -> Bytes {
    let ops: Vec<[u8; 8]> = amounts.iter().map(|amount| amount.to_le_bytes()).collect();
    op_batch::encode(&ops).expect("a valid batch")
}

/// Registration (number 1) as a plain write, then batches.
fn write(number: u64, operation: Bytes) -> Request {
    let kind = if number == 1 { RequestKind::Write } else { RequestKind::WriteBatch };
    Request { client: ClientId(9), request: RequestNumber(number), group: G, kind, operation }
}

/// A one-member group of [`Sums`], primary, with client 9 registered; the
/// shard, the calls, and the op its registration committed at.
fn primary() -> (Shard, Calls, Op) {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let mut shard = Shard::new(ME, CoreConfig::default());
    let state = Sums { total: 0, calls: Arc::clone(&calls) };
    shard.create_group(plain_spec(G, &[ME], 0), Box::new(state)).expect("created");
    for now in 1..=20 {
        shard.on_tick(now);
        drain_replies(&mut shard);
    }
    shard.on_request(write(1, Bytes::new()));
    let registered = match drain_replies(&mut shard).as_slice() {
        [reply] => reply.op,
        other => panic!("one answer to the registration: {other:?}"),
    };
    (shard, calls, registered)
}

fn ok(reply: &Reply) -> Bytes {
    match &reply.outcome {
        Outcome::Ok(result) => result.clone(),
        other => panic!("{reply:?}: {other:?}"),
    }
}

#[test]
fn k5_a_batch_enters_the_log_as_one_entry_and_each_op_gets_its_own_result() {
    let (mut shard, calls, registered) = primary();
    let number = registered.0 + 1;
    shard.on_request(write(number, batch(&[5, 10, 20])));
    let replies = drain_replies(&mut shard);
    let [reply] = replies.as_slice() else { panic!("one reply for the batch: {replies:?}") };
    assert_eq!(reply.op, registered.next(), "the whole batch at one op");
    let results = op_batch::decode(&ok(reply)).expect("the result is an op batch");
    let totals: Vec<u64> = results.iter().map(|result| amount(result)).collect();
    assert_eq!(totals, vec![5, 15, 35], "each op's own result, in order");
    assert_eq!(*calls.lock().expect("one thread"), vec![(reply.op, 3)], "applied in one call");
    let replica = shard.replica(G).expect("hosted");
    assert_eq!(replica.op(), reply.op, "one log entry");

    // A retry is answered from the client table with every result.
    shard.on_request(write(number, batch(&[5, 10, 20])));
    let again = drain_replies(&mut shard);
    assert!(matches!(again.as_slice(), [retry] if retry == reply), "the first answer again: {again:?}");
    assert_eq!(calls.lock().expect("one thread").len(), 1, "the retry applied nothing");
    assert_eq!(shard.replica(G).expect("hosted").op(), reply.op, "and entered nothing");
}

#[test]
fn k5_a_write_that_is_no_op_batch_is_rejected_before_it_enters_the_log() {
    let (mut shard, calls, registered) = primary();
    for operation in [Bytes::from_static(&[0x5A; 8]), Bytes::new(), batch(&[1]).slice(..9)] {
        shard.on_request(write(registered.0 + 1, operation.clone()));
        let replies = drain_replies(&mut shard);
        let [reply] = replies.as_slice() else { panic!("one answer: {replies:?}") };
        let Outcome::Error { code, detail } = &reply.outcome else { panic!("refused: {reply:?}") };
        assert_eq!(*code, ReplyError::Rejected, "{operation:?}");
        assert!(detail.contains("op batch"), "the reason says what is wrong: {detail}");
    }
    assert_eq!(shard.replica(G).expect("hosted").op(), registered, "nothing entered the log");
    assert!(calls.lock().expect("one thread").is_empty(), "nothing applied");
}

#[test]
fn k5_a_batch_to_a_group_of_plain_writes_and_a_plain_write_to_a_group_of_batches_are_rejected() {
    let (mut shard, calls, registered) = primary();
    let plain = Request { kind: RequestKind::Write, ..write(registered.0 + 1, batch(&[1])) };
    shard.on_request(plain);
    let replies = drain_replies(&mut shard);
    assert!(
        matches!(replies.as_slice(), [Reply { outcome: Outcome::Error { code: ReplyError::Rejected, detail }, .. }] if detail.contains("write_batch")),
        "a plain write to a group of batches: {replies:?}"
    );
    assert!(calls.lock().expect("one thread").is_empty());

    let mut shard = Shard::new(ME, CoreConfig::default());
    shard.create_group(plain_spec(G, &[ME], 0), Box::new(common::Counter::default())).expect("created");
    for now in 1..=20 {
        shard.on_tick(now);
        drain_replies(&mut shard);
    }
    shard.on_request(write(1, Bytes::new()));
    let registered = drain_replies(&mut shard)[0].op;
    shard.on_request(write(registered.0 + 1, batch(&[1, 2])));
    let replies = drain_replies(&mut shard);
    assert!(
        matches!(replies.as_slice(), [Reply { outcome: Outcome::Error { code: ReplyError::Rejected, detail }, .. }] if detail.contains("one op per write")),
        "a batch to a group of plain writes: {replies:?}"
    );
    assert_eq!(shard.replica(G).expect("hosted").op(), registered, "nothing entered the log");
}

#[test]
fn k5_each_op_of_a_batch_is_admitted_and_one_refused_op_refuses_the_batch() {
    let (mut shard, calls, registered) = primary();
    shard.on_request(write(registered.0 + 1, batch(&[1, FORBIDDEN, 2])));
    let replies = drain_replies(&mut shard);
    let [reply] = replies.as_slice() else { panic!("one answer: {replies:?}") };
    let Outcome::Error { code, detail } = &reply.outcome else { panic!("refused: {reply:?}") };
    assert_eq!(*code, ReplyError::Forbidden);
    assert!(detail.contains("op 1 of the batch"), "names the op: {detail}");
    assert_eq!(shard.replica(G).expect("hosted").op(), registered, "none of the batch entered the log");
    assert!(calls.lock().expect("one thread").is_empty());
}

#[test]
fn k5_a_backup_refuses_a_prepare_that_is_no_op_batch_and_counts_it() {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let mut shard = Shard::new(ME, CoreConfig::default());
    let state = Sums { total: 0, calls: Arc::clone(&calls) };
    // View 0's primary is member 0, the peer: this replica is its backup.
    shard.create_group(plain_spec(G, &[PEER, ME], 1), Box::new(state)).expect("created");
    let prepare = |operation: Bytes| Prepare {
        group: G,
        incarnation: Incarnation(1),
        view: View(0),
        commit: Op(0),
        replica: MemberIndex(0),
        entry: LogEntry { op: Op(1), view: View(0), client: ClientId(9), request: RequestNumber(2), operation },
    };
    shard.on_message(PEER, Message::Prepare(prepare(Bytes::from_static(b"not a batch"))));
    drain_replies(&mut shard);
    assert_eq!(shard.refused().not_an_op_batch, 1, "refused and counted");
    assert_eq!(shard.replica(G).expect("hosted").op(), Op(0), "not in the log");
    shard.on_message(PEER, Message::Prepare(prepare(batch(&[3, 4]))));
    drain_replies(&mut shard);
    assert_eq!(shard.replica(G).expect("hosted").op(), Op(1), "an op batch joins the log");
    assert_eq!(shard.refused().not_an_op_batch, 1);
}
