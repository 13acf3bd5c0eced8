//! H5: a client's request 1 is its registration, on one shard driven by
//! hand. The registration goes through the log, records the client in the
//! group's client table and applies nothing to the state machine, so a
//! second one is harmless; writes are numbered after the op the
//! registration committed at, and a client the table no longer knows is
//! refused past its registration, so a retry of any write after an
//! eviction is never applied again, even once a late copy of the
//! registration registered the client again. A request 1 that carries an
//! operation comes from a client that skipped its registration and is
//! refused.

mod common;
use common::{Counter, plain_spec};

use bytes::Bytes;
use cohort_core::{CoreConfig, Effect, Shard};
use cohort_messages::{ClientId, GroupId, NodeId, Op, Outcome, Reply, ReplyError, Request, RequestKind, RequestNumber};

const ME: NodeId = NodeId(1);
const G: GroupId = GroupId(3);

/// One shard leading `G` alone (every write commits on its own flush),
/// with a client table of `clients_max`.
struct Harness {
    shard: Shard,
    now: u64,
}

impl Harness {
    fn new(clients_max: usize) -> Harness {
        let config = CoreConfig { clients_max, ..CoreConfig::default() };
        let mut harness = Harness { shard: Shard::new(ME, config), now: 0 };
        harness.shard.create_group(plain_spec(G, &[ME], 0), Box::new(Counter(0))).expect("created");
        for _ in 0..20 {
            harness.now += 1;
            harness.shard.on_tick(harness.now);
            harness.drain();
        }
        harness
    }

    /// Run the shard until it is quiet (every flush done at once); the
    /// replies it sent.
    fn drain(&mut self) -> Vec<Reply> {
        let mut replies = Vec::new();
        loop {
            let effects = self.shard.drain_effects();
            if effects.is_empty() {
                return replies;
            }
            for effect in effects {
                match effect {
                    Effect::Flush { id } => self.shard.on_flushed(id),
                    Effect::Reply(reply) => replies.push(reply),
                    _ => {}
                }
            }
        }
    }

    /// Send `client`'s request `number` carrying `operation`; the one reply.
    fn send(&mut self, client: u128, number: u64, operation: &'static [u8]) -> Reply {
        let request = Request {
            client: ClientId(client),
            request: RequestNumber(number),
            group: G,
            kind: RequestKind::Write,
            operation: Bytes::from_static(operation),
        };
        self.shard.on_request(request);
        match self.drain().as_slice() {
            [reply] => reply.clone(),
            other => panic!("one reply expected to {client}/{number}: {other:?}"),
        }
    }

    /// How many ops the state machine applied (its answer to any read).
    fn applied(&mut self) -> u64 {
        let read = cohort_core::client::read(ClientId(999), RequestNumber(1), G, Bytes::new());
        self.shard.on_request(read);
        match self.drain().as_slice() {
            [Reply { outcome: Outcome::Ok(count), .. }] => {
                u64::from_le_bytes(count.as_ref().try_into().expect("a count"))
            }
            other => panic!("a read's answer expected: {other:?}"),
        }
    }
}

fn ok(reply: &Reply) -> (Op, Bytes) {
    match &reply.outcome {
        Outcome::Ok(result) => (reply.op, result.clone()),
        other => panic!("Ok expected: {other:?}"),
    }
}

fn refused(reply: &Reply) -> (ReplyError, String) {
    match &reply.outcome {
        Outcome::Error { code, detail } => (*code, detail.clone()),
        other => panic!("a refusal expected: {other:?}"),
    }
}

#[test]
fn h5_a_registration_applies_nothing_and_twice_is_harmless() {
    let mut harness = Harness::new(1);
    assert_eq!(ok(&harness.send(7, 1, b"")), (Op(1), Bytes::new()), "through the log, an empty result");
    assert_eq!(harness.applied(), 0, "nothing applied");
    assert_eq!(ok(&harness.send(7, 1, b"")), (Op(1), Bytes::new()), "a retry is answered from the table");
    // Client 8 takes the table's one place: 7 is evicted, and registers again.
    ok(&harness.send(8, 1, b""));
    assert_eq!(ok(&harness.send(7, 1, b"")), (Op(3), Bytes::new()), "registered again, at a new op");
    assert_eq!(harness.applied(), 0, "three registrations, nothing applied");
    assert_eq!(refused(&harness.send(7, 3, b"w")).0, ReplyError::Superseded, "at or below the registration's op");
    let (op, result) = ok(&harness.send(7, 4, b"w"));
    assert_eq!((op, result.as_ref()), (Op(4), &1u64.to_le_bytes()[..]), "the first write, op + 1, applies");
}

#[test]
fn h5_a_first_request_that_carries_an_operation_is_rejected() {
    let mut harness = Harness::new(4);
    let (code, detail) = refused(&harness.send(7, 1, b"w"));
    assert_eq!(code, ReplyError::Rejected);
    assert!(detail.contains("registration"), "{detail}");
    assert_eq!(harness.applied(), 0);
    // Nor is the client known: its next write is refused as unknown too.
    assert_eq!(refused(&harness.send(7, 2, b"w")).0, ReplyError::Superseded);
}

#[test]
fn h5_an_unknown_client_past_its_registration_is_refused() {
    let mut harness = Harness::new(2);
    ok(&harness.send(7, 1, b""));
    assert_eq!(ok(&harness.send(7, 2, b"w")).0, Op(2), "7's first write, after its registration at op 1");
    // 8 and 9 register: 7, least recently active, is evicted.
    ok(&harness.send(8, 1, b""));
    ok(&harness.send(9, 1, b""));
    // A retry of 7's first write (its answer lost) is refused, not applied again.
    let (code, detail) = refused(&harness.send(7, 2, b"w"));
    assert_eq!(code, ReplyError::Superseded);
    assert!(detail.contains("is not known"), "{detail}");
    assert_eq!(harness.applied(), 1, "applied once");
}

/// A copy of a registration that arrives after the client was evicted
/// (held by the network, or a resend that overtook its answer) registers the
/// client again, at a later op. Writes are numbered after the op of their
/// registration, and the table refuses a write at or below the op of the
/// client's latest registration: every write applied before the eviction
/// is, so a retry of one is refused, not applied again (see
/// docs/protocol.md, "Requests and the client table").
#[test]
fn h5_a_late_copy_of_a_registration_after_an_eviction_does_not_reopen_old_writes() {
    let mut harness = Harness::new(2);
    assert_eq!(ok(&harness.send(7, 1, b"")).0, Op(1), "registered at op 1: writes from 2");
    ok(&harness.send(7, 2, b"w"));
    ok(&harness.send(8, 1, b""));
    ok(&harness.send(9, 1, b""));
    assert_eq!(ok(&harness.send(7, 1, b"")).0, Op(5), "the late copy of 7's registration registers it again");
    let (code, detail) = refused(&harness.send(7, 2, b"w"));
    assert_eq!(code, ReplyError::Superseded);
    assert!(detail.contains("registered again"), "{detail}");
    assert_eq!(harness.applied(), 1, "7's first write applied once");
}
