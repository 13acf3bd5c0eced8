//! A hostile length prefix costs no allocation near the length it claims.
//!
//! This test binary runs under an allocator with a ceiling. Decoding a small
//! body whose length prefix claims nearly the whole decode limit (64 MiB)
//! must fail on the missing bytes before it allocates: the length is checked
//! against the bytes present (see messages/src/serde_fields.rs). Were it to
//! allocate first, the ceiling would abort the test process.

mod common;

use std::alloc::System;

use bytes::Bytes;
use cap::Cap;
use cohort_messages::*;

#[global_allocator]
static ALLOCATOR: Cap<System> = Cap::new(System, usize::MAX);

/// Head room for the decoder's own small allocations.
const CEILING_BYTES: usize = 1024 * 1024;

fn hostile(command: Command, body: Vec<u8>) -> Frame {
    Frame { header: Header::new(common::CLUSTER, common::SENDER, command, TraceContext::NONE), body: Bytes::from(body) }
}

/// `body` with the u64 at `at` (which must hold `actual`) set to `length`.
fn with_length(mut body: Vec<u8>, at: usize, actual: u64, length: u64) -> Vec<u8> {
    assert_eq!(body[at..at + 8], actual.to_le_bytes(), "no length prefix at {at}");
    body[at..at + 8].copy_from_slice(&length.to_le_bytes());
    body
}

#[test]
fn hostile_length_prefix_is_refused_before_allocating() {
    let claim = BODY_SIZE_MAX_BYTES as u64 - 1024;
    let request = Message::Request(Request {
        client: ClientId(1),
        request: RequestNumber(1),
        group: GroupId(1),
        kind: RequestKind::Write,
        operation: Bytes::from_static(b"abc"),
    });
    let reply = Message::Reply(Reply {
        client: ClientId(1),
        request: RequestNumber(1),
        group: GroupId(1),
        view: View(1),
        op: Op(1),
        outcome: Outcome::Error { code: ReplyError::Busy, detail: "busy".to_owned() },
    });
    let frames = [
        hostile(Command::Request, with_length(request.encode_body().to_vec(), 36, 3, claim)),
        hostile(Command::Reply, with_length(reply.encode_body().to_vec(), 52, 4, claim)),
    ];

    let ceiling = ALLOCATOR.allocated() + CEILING_BYTES;
    ALLOCATOR.set_limit(ceiling).expect("set the ceiling");
    let results: Vec<_> = frames.iter().map(Message::decode).collect();
    ALLOCATOR.set_limit(usize::MAX).expect("lift the ceiling");

    for result in results {
        assert!(matches!(result, Err(BodyError::Codec { .. })), "{result:?}");
    }
}
