//! Golden bytes: whole frames of a few messages, byte for byte.
//!
//! These pin the wire format independently of the code that produces it. If
//! the bincode codec is ever replaced (docs/protocol.md, "The codec"), the
//! replacement must reproduce these bytes exactly; a failure here means the
//! wire changed, which needs a revision bump, not a new golden value.

use bytes::Bytes;
use cohort_messages::*;

const CLUSTER: ClusterId = ClusterId(0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10);
const SENDER: NodeId = NodeId(0x2a);
const TRACE: TraceContext = TraceContext { trace_id: [0xaa; 16], span_id: [0xbb; 8], flags: 1 };

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Compare a frame with its golden header and body (hex, one field or one
/// header row per string), and check the golden bytes decode back to the
/// message.
fn assert_golden(message: Message, header: [&str; 5], body: &[&str]) {
    let frame = message.encode(CLUSTER, SENDER, TRACE).to_bytes();
    assert_eq!(hex(&frame[..HEADER_SIZE_BYTES]), header.concat(), "{} header bytes changed", message.command());
    assert_eq!(hex(&frame[HEADER_SIZE_BYTES..]), body.concat(), "{} body bytes changed", message.command());
    let (decoded_header, decoded) = decode_message(frame, CLUSTER).expect("golden frame decodes");
    assert_eq!((decoded_header.sender, decoded_header.trace), (SENDER, TRACE));
    assert_eq!(decoded, message);
}

fn handshake() -> Message {
    Message::Handshake(Handshake { revision: WIRE_REVISION, cluster: CLUSTER, node: SENDER, shard_count: 4 })
}

fn request() -> Message {
    Message::Request(Request {
        client: ClientId(0x77),
        request: RequestNumber(3),
        group: GroupId(9),
        kind: RequestKind::Read,
        operation: Bytes::from_static(b"get k"),
    })
}

fn reply_error() -> Message {
    Message::Reply(Reply {
        client: ClientId(0x77),
        request: RequestNumber(3),
        group: GroupId(9),
        view: View(2),
        op: Op(0),
        outcome: Outcome::Error { code: ReplyError::ViewChange, detail: "view 3".to_owned() },
    })
}

fn commit_batch() -> Message {
    Message::Commit(CommitBatch::encode(&[CommitEntry {
        group: GroupId(9),
        partition_incarnation: Incarnation(1),
        view: View(2),
        commit: Op(17),
        timestamp_monotonic: Timestamp(1000),
        heartbeat_state: HeartbeatState::Idle,
        replica: MemberIndex(0),
    }]))
}

fn commit_reply_batch() -> Message {
    Message::CommitReply(CommitReplyBatch::encode(&[CommitReplyEntry {
        group: GroupId(9),
        partition_incarnation: Incarnation(1),
        view: View(2),
        timestamp_monotonic: Timestamp(1000),
        replica: MemberIndex(2),
    }]))
}

#[test]
fn golden_handshake_frame() {
    #[rustfmt::skip]
    let header = [
        "e56715587415ee91100f0e0d0c0b0a09", // checksum_header, checksum_body, cluster (first 8 bytes)
        "08070605040302012a00000000000000", // cluster (last 8 bytes), sender
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", // trace_id
        "bbbbbbbbbbbbbbbb1c00000002000101", // span_id, body_size 28, revision 2, command 1, trace_flags 1
        "00000000000000000000000000000000", // reserved
    ];
    #[rustfmt::skip]
    let body = [
        "0200",                             // revision: u16
        "100f0e0d0c0b0a090807060504030201", // cluster: u128
        "2a00000000000000",                 // node: u64
        "0400",                             // shard_count: u16
    ];
    assert_golden(handshake(), header, &body);
}

#[test]
fn golden_link_shard_frame() {
    #[rustfmt::skip]
    let header = [
        "1908fd1a4bdf86c5100f0e0d0c0b0a09", // checksum_header, checksum_body, cluster (first 8 bytes)
        "08070605040302012a00000000000000", // cluster (last 8 bytes), sender
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", // trace_id
        "bbbbbbbbbbbbbbbb0200000002001301", // span_id, body_size 2, revision 2, command 19, trace_flags 1
        "00000000000000000000000000000000", // reserved
    ];
    #[rustfmt::skip]
    let body = [
        "0300", // shard: u16
    ];
    assert_golden(Message::LinkShard(LinkShard { shard: 3 }), header, &body);
}

#[test]
fn golden_route_query_and_routes_bodies() {
    let query = Message::RouteQuery(RouteQuery { groups: vec![GroupId(9), GroupId(10)] });
    // groups: length 2, then two u64 ids, little-endian.
    assert_eq!(hex(&query.encode_body()), "020000000000000009000000000000000a00000000000000");
    let routes = Message::Routes(Routes {
        routes: vec![
            Route { group: GroupId(9), view: View(3), primary: Some(NodeId(2)) },
            Route { group: GroupId(10), view: View(0), primary: None },
        ],
    });
    // length 2; group u64, view u32, option tag 1 + node u64; group, view, tag 0.
    assert_eq!(
        hex(&routes.encode_body()),
        concat!(
            "0200000000000000",
            "0900000000000000",
            "03000000",
            "01",
            "0200000000000000",
            "0a00000000000000",
            "00000000",
            "00",
        )
    );
    for message in [query, routes] {
        let frame = message.encode(CLUSTER, SENDER, TRACE).to_bytes();
        assert_eq!(decode_message(frame, CLUSTER).expect("decodes").1, message);
    }
}

#[test]
fn golden_connection_preamble() {
    // magic "COHL", revision 2, shard 3, mode 1 (TLS).
    let bytes = Preamble::new(3, LinkMode::Tls).encode();
    assert_eq!(hex(&bytes), "434f484c0200030001");
    assert_eq!(Preamble::decode(&bytes), Ok(Preamble { revision: WIRE_REVISION, shard: 3, mode: LinkMode::Tls }));
    assert_eq!(hex(&Preamble::new(0, LinkMode::Plaintext).encode()), "434f484c0200000000");
}

#[test]
fn golden_request_frame() {
    #[rustfmt::skip]
    let header = [
        "045e963cb093c20a100f0e0d0c0b0a09",
        "08070605040302012a00000000000000",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "bbbbbbbbbbbbbbbb3100000002000201", // body_size 49, command 2
        "00000000000000000000000000000000",
    ];
    #[rustfmt::skip]
    let body = [
        "77000000000000000000000000000000", // client: u128
        "0300000000000000",                 // request: u64
        "0900000000000000",                 // group: u64
        "01000000",                         // kind: enum index as u32 (1 = Read)
        "0500000000000000",                 // operation: u64 length ...
        "676574206b",                       // ... then the bytes ("get k")
    ];
    assert_golden(request(), header, &body);
}

/// Every request kind is the index docs/protocol.md gives it (K5 added 2,
/// WriteBatch, at the end), and a batch's operation is an op batch whose
/// bytes are pinned here too (docs/protocol.md, "Op batches").
#[test]
fn golden_request_kinds_and_an_op_batch() {
    const KIND_AT_BYTES: std::ops::Range<usize> = 32..36;
    let documented = ["Write", "Read", "WriteBatch"];
    assert_eq!(RequestKind::ALL.len(), documented.len(), "a new kind is documented here and in protocol.md");
    for (index, (kind, name)) in RequestKind::ALL.into_iter().zip(documented).enumerate() {
        assert_eq!(format!("{kind:?}"), name);
        let Message::Request(mut request) = request() else { unreachable!("a request") };
        request.kind = kind;
        let message = Message::Request(request);
        let frame = message.encode(CLUSTER, SENDER, TRACE).to_bytes();
        assert_eq!(frame[HEADER_SIZE_BYTES..][KIND_AT_BYTES], (index as u32).to_le_bytes(), "{name} is kind {index}");
        assert_eq!(decode_message(frame, CLUSTER).expect("decodes").1, message);
    }
    let operation = op_batch::encode(&[b"a".as_slice(), b"bc".as_slice()]).expect("a batch");
    let Message::Request(request) = request() else { unreachable!("a request") };
    let message = Message::Request(Request { kind: RequestKind::WriteBatch, operation, ..request });
    let frame = message.encode(CLUSTER, SENDER, TRACE).to_bytes();
    #[rustfmt::skip]
    let body = [
        "77000000000000000000000000000000", // client: u128
        "0300000000000000",                 // request: u64
        "0900000000000000",                 // group: u64
        "02000000",                         // kind: 2 = WriteBatch
        "1000000000000000",                 // operation: u64 length 16 ...
        "01",                               // ... an op batch: version 1
        "02000000",                         // count: u32
        "0100000002000000",                 // lengths: u32 each
        "616263",                           // the ops, back to back ("a", "bc")
    ];
    assert_eq!(hex(&frame[HEADER_SIZE_BYTES..]), body.concat(), "WriteBatch body bytes changed");
    assert_eq!(decode_message(frame, CLUSTER).expect("decodes").1, message);
}

#[test]
fn golden_reply_error_frame() {
    #[rustfmt::skip]
    let header = [
        "f7c9c0cf039ec656100f0e0d0c0b0a09",
        "08070605040302012a00000000000000",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "bbbbbbbbbbbbbbbb4200000002000301", // body_size 66, command 3
        "00000000000000000000000000000000",
    ];
    #[rustfmt::skip]
    let body = [
        "77000000000000000000000000000000", // client: u128
        "0300000000000000",                 // request: u64
        "0900000000000000",                 // group: u64
        "02000000",                         // view: u32
        "0000000000000000",                 // op: u64
        "01000000",                         // outcome: enum index as u32 (1 = Error)
        "02000000",                         // code: enum index as u32 (2 = ViewChange)
        "0600000000000000",                 // detail: u64 length ...
        "766965772033",                     // ... then UTF-8 ("view 3")
    ];
    assert_golden(reply_error(), header, &body);
}

/// Every Reply error code is the index docs/protocol.md gives it (O5 added
/// 7, NoSuchGroup, at the end: the codes before it keep their numbers).
#[test]
fn golden_reply_error_codes() {
    const CODE_AT_BYTES: std::ops::Range<usize> = 48..52;
    let documented = [
        "QuorumWindowExpired",
        "Busy",
        "ViewChange",
        "UnknownGroup",
        "Superseded",
        "Rejected",
        "Forbidden",
        "NoSuchGroup",
    ];
    assert_eq!(ReplyError::ALL.len(), documented.len(), "a new code is documented here and in protocol.md");
    for (index, (code, name)) in ReplyError::ALL.into_iter().zip(documented).enumerate() {
        assert_eq!(format!("{code:?}"), name);
        let Message::Reply(mut reply) = reply_error() else { unreachable!("a reply") };
        reply.outcome = Outcome::Error { code, detail: "view 3".to_owned() };
        let message = Message::Reply(reply);
        let frame = message.encode(CLUSTER, SENDER, TRACE).to_bytes();
        let body = &frame[HEADER_SIZE_BYTES..];
        assert_eq!(body[CODE_AT_BYTES], (index as u32).to_le_bytes(), "{name} is code {index}");
        assert_eq!(decode_message(frame, CLUSTER).expect("decodes").1, message);
    }
}

#[test]
fn golden_commit_batch_frame() {
    #[rustfmt::skip]
    let header = [
        "b4d3d2fa6083aa65100f0e0d0c0b0a09",
        "08070605040302012a00000000000000",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "bbbbbbbbbbbbbbbb2800000002000901", // body_size 40, command 9
        "00000000000000000000000000000000",
    ];
    #[rustfmt::skip]
    let body = [
        "0900000000000000", // group: u64 @0
        "0100000000000000", // partition_incarnation: u64 @8
        "02000000",         // view: u32 @16
        "1100000000000000", // commit: u64 @20
        "e803000000000000", // timestamp_monotonic: u64 @28
        "02",               // heartbeat_state @36 (2 = Idle)
        "00",               // replica @37
        "0000",             // reserved @38
    ];
    assert_golden(commit_batch(), header, &body);
}

#[test]
fn golden_commit_reply_batch_frame() {
    #[rustfmt::skip]
    let header = [
        "54961305fb339716100f0e0d0c0b0a09",
        "08070605040302012a00000000000000",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "bbbbbbbbbbbbbbbb2000000002000a01", // body_size 32, command 10
        "00000000000000000000000000000000",
    ];
    #[rustfmt::skip]
    let body = [
        "0900000000000000", // group: u64 @0
        "0100000000000000", // partition_incarnation: u64 @8
        "02000000",         // view: u32 @16
        "e803000000000000", // timestamp_monotonic: u64 @20
        "02",               // replica @28
        "000000",           // reserved @29
    ];
    assert_golden(commit_reply_batch(), header, &body);
}

fn view_change_batch() -> Message {
    let svc = |group: u64| {
        Message::StartViewChange(StartViewChange {
            group: GroupId(group),
            incarnation: Incarnation(1),
            view: View(3),
            replica: MemberIndex(1),
        })
    };
    let packed = ViewChangeBatch::pack(vec![svc(9), svc(10)]);
    match packed.into_iter().next() {
        Some(Ok(batch)) => Message::ViewChangeBatch(batch),
        other => panic!("two StartViewChanges pack into one batch, not {other:?}"),
    }
}

/// Z4: a ViewChangeBatch frame is its entries, each an 8-byte entry header
/// and the ordinary body of its message.
#[test]
fn golden_view_change_batch_frame() {
    #[rustfmt::skip]
    let header = [
        "a733bcbcd6080a78100f0e0d0c0b0a09",
        "08070605040302012a00000000000000",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "bbbbbbbbbbbbbbbb3a00000002001601", // body_size 58, command 22
        "00000000000000000000000000000000",
    ];
    #[rustfmt::skip]
    let body = [
        "06",               // entry 0: command 6 (StartViewChange)
        "000000",           // reserved
        "15000000",         // body size 21
        "0900000000000000", // group 9
        "0100000000000000", // incarnation 1
        "03000000",         // view 3
        "01",               // replica 1
        "06", "000000", "15000000", // entry 1: the same header
        "0a00000000000000", // group 10
        "0100000000000000",
        "03000000",
        "01",
    ];
    assert_golden(view_change_batch(), header, &body);
}

fn quiet_group() -> QuietGroup {
    QuietGroup { group: GroupId(9), incarnation: Incarnation(1), view: View(3), commit: Op(12) }
}

/// Z3: a shard-pair heartbeat: both shards' index, the sender's epoch and
/// tick, the digest of the quiesced set, then the proposals and leaves.
#[test]
fn golden_pair_heartbeat_frame() {
    let message = Message::PairHeartbeat(PairHeartbeat {
        shard: 1,
        epoch: 7,
        tick: 40,
        digest: QuietDigest { count: 2, sum: 0x1122_3344_5566_7788 },
        proposals: vec![quiet_group()],
        leaves: Vec::new(),
    });
    #[rustfmt::skip]
    let header = [
        "c454059cc805129f100f0e0d0c0b0a09",
        "08070605040302012a00000000000000",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "bbbbbbbbbbbbbbbb4a00000002001701", // body_size 74, command 23
        "00000000000000000000000000000000",
    ];
    #[rustfmt::skip]
    let body = [
        "0100",             // shard 1
        "0700000000000000", // epoch 7
        "2800000000000000", // tick 40
        "02000000",         // digest: count 2
        "8877665544332211", // digest: sum
        "0100000000000000", // one proposal
        "0900000000000000", // group 9
        "0100000000000000", // incarnation 1
        "03000000",         // view 3
        "0c00000000000000", // commit 12
        "0000000000000000", // no leaves
    ];
    assert_golden(message, header, &body);
}

/// Z3: its reply: the heartbeat's shard, epoch and tick, whether the
/// digests matched, and the proposals taken.
#[test]
fn golden_pair_heartbeat_reply_frame() {
    let message = Message::PairHeartbeatReply(PairHeartbeatReply {
        shard: 1,
        epoch: 7,
        tick: 40,
        matched: true,
        accepted: vec![quiet_group()],
    });
    #[rustfmt::skip]
    let header = [
        "0d0a8b32ad79d20d100f0e0d0c0b0a09",
        "08070605040302012a00000000000000",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "bbbbbbbbbbbbbbbb3700000002001801", // body_size 55, command 24
        "00000000000000000000000000000000",
    ];
    #[rustfmt::skip]
    let body = [
        "0100",             // shard 1
        "0700000000000000", // epoch 7
        "2800000000000000", // tick 40
        "01",               // matched
        "0100000000000000", // one accepted
        "0900000000000000", // group 9
        "0100000000000000", // incarnation 1
        "03000000",         // view 3
        "0c00000000000000", // commit 12
    ];
    assert_golden(message, header, &body);
}

#[test]
fn golden_recovery_query_and_answer_bodies() {
    let query = Message::RecoveryQuery(RecoveryQuery {
        group: GroupId(9),
        incarnation: Incarnation(2),
        replica: MemberIndex(1),
        nonce: 0x0102_0304_0506_0708,
    });
    // group u64, incarnation u64, replica u8, nonce u64.
    assert_eq!(hex(&query.encode_body()), concat!("0900000000000000", "0200000000000000", "01", "0807060504030201"));
    let answer = Message::RecoveryAnswer(RecoveryAnswer {
        group: GroupId(9),
        incarnation: Incarnation(2),
        replica: MemberIndex(2),
        nonce: 0x0102_0304_0506_0708,
        view: View(5),
        log_view: View(4),
        op: Op(17),
        commit: Op(16),
        recovering: false,
        primary: true,
    });
    // group, incarnation, replica, nonce, view u32, log_view u32, op u64,
    // commit u64, recovering and primary one byte each (0 or 1).
    assert_eq!(
        hex(&answer.encode_body()),
        concat!(
            "0900000000000000",
            "0200000000000000",
            "02",
            "0807060504030201",
            "05000000",
            "04000000",
            "1100000000000000",
            "1000000000000000",
            "00",
            "01",
        )
    );
    assert_eq!(Command::RecoveryQuery as u8, 25);
    assert_eq!(Command::RecoveryAnswer as u8, 26);
    for message in [query, answer] {
        let frame = message.encode(CLUSTER, SENDER, TRACE).to_bytes();
        assert_eq!(decode_message(frame, CLUSTER).expect("decodes").1, message);
    }
}
