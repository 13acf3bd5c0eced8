//! Every rule of every `validate` function refuses at least one value, both
//! when called directly and when the value arrives in a frame; and hostile
//! length prefixes in variable bodies are errors, not allocations.

mod common;

use bytes::Bytes;
use cohort_messages::*;
use common::*;

/// `message` breaks exactly the rule `reason`: its `validate` says so, and a
/// receiver refuses the frame that carries it with the same reason.
fn assert_invalid(message: Message, reason: &'static str) {
    let command = message.command();
    let expected = Invalid { command, reason };
    assert_eq!(message.validate(), Err(expected.clone()), "validate of {message:?}");
    let frame = frame_with_body(command, message.encode_body());
    assert_eq!(decode_one(&frame), Err(DecodeError::Body(BodyError::Invalid(expected))), "decode of {command}");
}

/// `message` is valid and survives the trip through a frame.
fn assert_valid(message: Message) {
    assert_eq!(message.validate(), Ok(()), "{message:?}");
    assert_eq!(decode_one(&frame_bytes(&message)), Ok(message));
}

fn oversized(size_bytes: usize) -> Bytes {
    Bytes::from(vec![0x5a; size_bytes])
}

const OUT_OF_RANGE: MemberIndex = MemberIndex(REPLICAS_MAX as u8);
const REPLICA: &str = "replica index out of range";

fn log_entry(op: u64, view: u32) -> LogEntry {
    LogEntry {
        op: Op(op),
        view: View(view),
        client: ClientId(1),
        request: RequestNumber(op),
        operation: Bytes::from_static(b"op"),
    }
}

// --- Handshake, Request, Reply ------------------------------------------------

#[test]
fn handshake_shard_count_must_be_within_1_to_shard_count_max() {
    let handshake = |shard_count| {
        Message::Handshake(Handshake { revision: WIRE_REVISION, cluster: CLUSTER, node: SENDER, shard_count })
    };
    assert_valid(handshake(1));
    assert_valid(handshake(SHARD_COUNT_MAX));
    assert_invalid(handshake(0), "shard_count must be in 1..=1024");
    assert_invalid(handshake(SHARD_COUNT_MAX + 1), "shard_count must be in 1..=1024");
}

#[test]
fn request_operation_is_bounded() {
    let request = |operation| {
        Message::Request(Request {
            client: ClientId(1),
            request: RequestNumber(1),
            group: GroupId(1),
            kind: RequestKind::Write,
            operation,
        })
    };
    assert_valid(request(oversized(OPERATION_SIZE_MAX_BYTES)));
    assert_invalid(request(oversized(OPERATION_SIZE_MAX_BYTES + 1)), "operation exceeds OPERATION_SIZE_MAX_BYTES");
}

#[test]
fn reply_result_and_error_detail_are_bounded() {
    let reply = |outcome| {
        Message::Reply(Reply {
            client: ClientId(1),
            request: RequestNumber(1),
            group: GroupId(1),
            view: View(1),
            op: Op(1),
            outcome,
        })
    };
    assert_valid(reply(Outcome::Ok(oversized(OPERATION_SIZE_MAX_BYTES))));
    assert_invalid(
        reply(Outcome::Ok(oversized(OPERATION_SIZE_MAX_BYTES + 1))),
        "result exceeds OPERATION_SIZE_MAX_BYTES",
    );
    let error =
        |detail_size_bytes| Outcome::Error { code: ReplyError::Rejected, detail: "e".repeat(detail_size_bytes) };
    assert_valid(reply(error(4096)));
    assert_invalid(reply(error(4097)), "error detail exceeds 4096 bytes");
}

// --- Prepare, PrepareOk, StartViewChange ----------------------------------------

fn prepare() -> Prepare {
    Prepare {
        group: GroupId(1),
        incarnation: Incarnation(1),
        view: View(4),
        commit: Op(9),
        replica: MemberIndex(0),
        entry: log_entry(10, 4),
    }
}

#[test]
fn prepare_rules() {
    assert_valid(Message::Prepare(prepare()));
    assert_invalid(Message::Prepare(Prepare { replica: OUT_OF_RANGE, ..prepare() }), REPLICA);
    assert_invalid(
        Message::Prepare(Prepare { entry: log_entry(0, 4), ..prepare() }),
        "log entry op 0 (op 0 is the empty log)",
    );
    let mut large = prepare();
    large.entry.operation = oversized(OPERATION_SIZE_MAX_BYTES + 1);
    assert_invalid(Message::Prepare(large), "log entry operation exceeds OPERATION_SIZE_MAX_BYTES");
    assert_invalid(
        Message::Prepare(Prepare { entry: log_entry(10, 5), ..prepare() }),
        "entry view after the message view",
    );
}

#[test]
fn prepare_ok_rules() {
    let ok =
        PrepareOk { group: GroupId(1), incarnation: Incarnation(1), view: View(1), op: Op(1), replica: MemberIndex(2) };
    assert_valid(Message::PrepareOk(ok));
    assert_invalid(Message::PrepareOk(PrepareOk { replica: OUT_OF_RANGE, ..ok }), REPLICA);
    assert_invalid(Message::PrepareOk(PrepareOk { op: Op(0), ..ok }), "op 0 cannot be acknowledged");
}

#[test]
fn start_view_change_rules() {
    let svc =
        StartViewChange { group: GroupId(1), incarnation: Incarnation(1), view: View(1), replica: MemberIndex(63) };
    assert_valid(Message::StartViewChange(svc));
    assert_invalid(Message::StartViewChange(StartViewChange { replica: OUT_OF_RANGE, ..svc }), REPLICA);
    assert_invalid(
        Message::StartViewChange(StartViewChange { view: View(0), ..svc }),
        "view 0 cannot be started by a view change",
    );
}

// --- DoViewChange, StartView and their logs ---------------------------------------

fn do_view_change() -> DoViewChange {
    DoViewChange {
        group: GroupId(1),
        incarnation: Incarnation(1),
        view: View(5),
        log_view: View(4),
        op: Op(12),
        commit: Op(10),
        replica: MemberIndex(1),
        log: vec![log_entry(10, 3), log_entry(11, 4), log_entry(12, 4)],
    }
}

fn start_view() -> StartView {
    StartView {
        group: GroupId(1),
        incarnation: Incarnation(1),
        view: View(5),
        op: Op(12),
        commit: Op(10),
        replica: MemberIndex(1),
        log: vec![log_entry(10, 3), log_entry(11, 4), log_entry(12, 5)],
    }
}

#[test]
fn do_view_change_rules() {
    assert_valid(Message::DoViewChange(do_view_change()));
    assert_valid(Message::DoViewChange(DoViewChange { log: vec![], ..do_view_change() }));
    let dvc = |change: fn(&mut DoViewChange)| {
        let mut value = do_view_change();
        change(&mut value);
        Message::DoViewChange(value)
    };
    assert_invalid(dvc(|m| m.replica = OUT_OF_RANGE), REPLICA);
    assert_invalid(dvc(|m| m.log_view = m.view), "log_view must be before view");
    assert_invalid(dvc(|m| m.commit = Op(13)), "commit after op");
    assert_invalid(dvc(|m| m.log[1].op = Op(13)), "log ops are not contiguous");
    assert_invalid(dvc(|m| m.log[2].view = View(2)), "log views go backwards");
    assert_invalid(dvc(|m| m.log[2].view = View(5)), "log entry from a later view");
    assert_invalid(dvc(|m| m.op = Op(14)), "log does not end at op");
    assert_invalid(
        dvc(|m| {
            m.op = Op(1);
            m.commit = Op(0);
            m.log = vec![log_entry(0, 1), log_entry(1, 1)];
        }),
        "log entry op 0 (op 0 is the empty log)",
    );
    assert_invalid(
        dvc(|m| m.log[0].operation = oversized(OPERATION_SIZE_MAX_BYTES + 1)),
        "log entry operation exceeds OPERATION_SIZE_MAX_BYTES",
    );
}

#[test]
fn view_change_logs_are_bounded() {
    let long_log = |length: u64| (1..=length).map(|op| log_entry(op, 1)).collect::<Vec<_>>();
    let full = VIEW_CHANGE_LOG_ENTRIES_MAX as u64;
    let start_view =
        |length| Message::StartView(StartView { op: Op(length), commit: Op(0), log: long_log(length), ..start_view() });
    assert_valid(start_view(full));
    assert_invalid(start_view(full + 1), "log exceeds VIEW_CHANGE_LOG_ENTRIES_MAX entries");
    let do_view_change = Message::DoViewChange(DoViewChange {
        op: Op(full + 1),
        commit: Op(0),
        log: long_log(full + 1),
        ..do_view_change()
    });
    assert_invalid(do_view_change, "log exceeds VIEW_CHANGE_LOG_ENTRIES_MAX entries");
}

#[test]
fn start_view_rules() {
    assert_valid(Message::StartView(start_view()));
    let sv = |change: fn(&mut StartView)| {
        let mut value = start_view();
        change(&mut value);
        Message::StartView(value)
    };
    assert_invalid(sv(|m| m.replica = OUT_OF_RANGE), REPLICA);
    assert_invalid(sv(|m| m.commit = Op(13)), "commit after op");
    assert_invalid(sv(|m| m.log[2].op = Op(11)), "log ops are not contiguous");
    assert_invalid(sv(|m| m.log[0].view = View(5)), "log views go backwards");
    assert_invalid(sv(|m| m.log[2].view = View(6)), "log entry from a later view");
    assert_invalid(sv(|m| m.op = Op(11)), "log does not end at op");
}

// --- Catch-up -----------------------------------------------------------------------

#[test]
fn request_prepares_rules() {
    let rp = RequestPrepares {
        group: GroupId(1),
        incarnation: Incarnation(1),
        view: View(1),
        replica: MemberIndex(0),
        op_min: Op(1),
        op_max: Op(REPAIR_OPS_MAX),
    };
    assert_valid(Message::RequestPrepares(rp));
    assert_valid(Message::RequestPrepares(RequestPrepares { op_min: Op(7), op_max: Op(7), ..rp }));
    assert_invalid(Message::RequestPrepares(RequestPrepares { replica: OUT_OF_RANGE, ..rp }), REPLICA);
    assert_invalid(
        Message::RequestPrepares(RequestPrepares { op_min: Op(0), op_max: Op(3), ..rp }),
        "op range is empty or starts at 0",
    );
    assert_invalid(
        Message::RequestPrepares(RequestPrepares { op_min: Op(5), op_max: Op(4), ..rp }),
        "op range is empty or starts at 0",
    );
    assert_invalid(
        Message::RequestPrepares(RequestPrepares { op_max: Op(REPAIR_OPS_MAX + 1), ..rp }),
        "op range exceeds REPAIR_OPS_MAX",
    );
    assert_invalid(
        Message::RequestPrepares(RequestPrepares { op_min: Op(1), op_max: Op(u64::MAX), ..rp }),
        "op range exceeds REPAIR_OPS_MAX",
    );
}

#[test]
fn request_state_transfer_rules() {
    let rst = RequestStateTransfer {
        group: GroupId(1),
        incarnation: Incarnation(1),
        view: View(1),
        replica: MemberIndex(0),
        snapshot_op: Op(0),
        offset_bytes: 0,
    };
    assert_valid(Message::RequestStateTransfer(rst));
    assert_invalid(Message::RequestStateTransfer(RequestStateTransfer { replica: OUT_OF_RANGE, ..rst }), REPLICA);
}

fn state_chunk() -> StateChunk {
    StateChunk {
        group: GroupId(1),
        incarnation: Incarnation(1),
        view: View(1),
        replica: MemberIndex(0),
        snapshot_op: Op(50),
        snapshot_view: View(1),
        offset_bytes: 10,
        total_size_bytes: 20,
        chunk: oversized(10),
    }
}

#[test]
fn state_chunk_rules() {
    assert_valid(Message::StateChunk(state_chunk()));
    assert!(state_chunk().is_last());
    assert!(!StateChunk { total_size_bytes: 21, ..state_chunk() }.is_last());
    assert_invalid(Message::StateChunk(StateChunk { replica: OUT_OF_RANGE, ..state_chunk() }), REPLICA);
    let large = STATE_CHUNK_SIZE_MAX_BYTES + 1;
    assert_invalid(
        Message::StateChunk(StateChunk {
            chunk: oversized(large),
            total_size_bytes: large as u64,
            offset_bytes: 0,
            ..state_chunk()
        }),
        "chunk exceeds STATE_CHUNK_SIZE_MAX_BYTES",
    );
    assert_invalid(
        Message::StateChunk(StateChunk { total_size_bytes: 19, ..state_chunk() }),
        "chunk ends past total_size_bytes",
    );
    let overflowing = StateChunk { offset_bytes: u64::MAX - 4, total_size_bytes: u64::MAX, ..state_chunk() };
    assert!(!overflowing.is_last(), "is_last of an overflowing chunk is false, not a panic");
    assert_invalid(Message::StateChunk(overflowing), "chunk ends past total_size_bytes");
}

// --- Links ------------------------------------------------------------------------------

#[test]
fn k2_a_link_names_a_shard_below_the_limit() {
    assert_valid(Message::LinkShard(LinkShard { shard: SHARD_COUNT_MAX - 1 }));
    assert_invalid(Message::LinkShard(LinkShard { shard: SHARD_COUNT_MAX }), "shard index must be below 1024");
}

// --- Sessions -------------------------------------------------------------------------

#[test]
fn session_zero_is_reserved() {
    let opened = SessionOpened { node: SENDER, session: SessionId(1), epoch: Epoch(1) };
    assert_valid(Message::SessionOpened(opened));
    assert_invalid(Message::SessionOpened(SessionOpened { session: SessionId(0), ..opened }), "session 0 is reserved");
    let keepalive = SessionKeepalive { node: SENDER, session: SessionId(1) };
    assert_valid(Message::SessionKeepalive(keepalive));
    assert_invalid(
        Message::SessionKeepalive(SessionKeepalive { session: SessionId(0), ..keepalive }),
        "session 0 is reserved",
    );
}

// --- Hostile length prefixes -------------------------------------------------------------

/// A body whose u64 length prefix at `at` is replaced by `length`. Checks first
/// that `at` really holds the field's length, so a layout change fails here
/// rather than making the test vacuous.
fn with_length(message: &Message, at: usize, actual: usize, length: u64) -> Vec<u8> {
    let mut body = message.encode_body().to_vec();
    let prefix = u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
    assert_eq!(prefix, actual as u64, "{}: no length prefix at {at}", message.command());
    body[at..at + 8].copy_from_slice(&length.to_le_bytes());
    body
}

/// Messages with a length-prefixed field, the prefix's offset, and the
/// field's actual length.
fn length_prefixed_fields() -> Vec<(Message, usize, usize)> {
    let request = Message::Request(Request {
        client: ClientId(1),
        request: RequestNumber(1),
        group: GroupId(1),
        kind: RequestKind::Write,
        operation: Bytes::from_static(b"abc"),
    });
    let reply = |outcome| {
        Message::Reply(Reply {
            client: ClientId(1),
            request: RequestNumber(1),
            group: GroupId(1),
            view: View(1),
            op: Op(1),
            outcome,
        })
    };
    vec![
        (request, 36, 3),
        (reply(Outcome::Ok(Bytes::from_static(b"result"))), 48, 6),
        (reply(Outcome::Error { code: ReplyError::Busy, detail: "busy".to_owned() }), 52, 4),
        (Message::Prepare(prepare()), 65, 2),
        (Message::DoViewChange(do_view_change()), 41, 3),
        (Message::StartView(start_view()), 37, 3),
        (Message::StateChunk(state_chunk()), 49, 10),
    ]
}

#[test]
fn hostile_length_prefixes_are_codec_errors() {
    for (message, at, actual) in length_prefixed_fields() {
        let command = message.command();
        for length in [1 << 60, u64::MAX, BODY_SIZE_MAX_BYTES as u64 - 1, BODY_SIZE_MAX_BYTES as u64 + 1, 1 << 32] {
            let body = with_length(&message, at, actual, length);
            let result = decode_one(&frame_with_body(command, body));
            assert!(
                matches!(result, Err(DecodeError::Body(BodyError::Codec { command: c, .. })) if c == command),
                "{command} with length {length}: {result:?}"
            );
        }
        // One more or one less than the real length also fails to decode cleanly.
        for length in [actual as u64 + 1, actual as u64 - 1] {
            let body = with_length(&message, at, actual, length);
            assert!(decode_one(&frame_with_body(command, body)).is_err(), "{command} with length {length}");
        }
    }
}

#[test]
fn invalid_utf8_in_text_is_a_codec_error() {
    let reply = Message::Reply(Reply {
        client: ClientId(1),
        request: RequestNumber(1),
        group: GroupId(1),
        view: View(1),
        op: Op(1),
        outcome: Outcome::Error { code: ReplyError::Busy, detail: "ok".to_owned() },
    });
    let mut body = reply.encode_body().to_vec();
    let last = body.len() - 1;
    body[last] = 0xff;
    let result = decode_one(&frame_with_body(Command::Reply, body));
    assert!(matches!(result, Err(DecodeError::Body(BodyError::Codec { command: Command::Reply, .. }))), "{result:?}");
}

#[test]
fn unknown_enum_variants_and_option_tags_are_codec_errors() {
    let request = Message::Request(Request {
        client: ClientId(1),
        request: RequestNumber(1),
        group: GroupId(1),
        kind: RequestKind::Read,
        operation: Bytes::new(),
    });
    let mut body = request.encode_body().to_vec();
    body[32..36].copy_from_slice(&3u32.to_le_bytes()); // RequestKind has variants 0 to 2
    assert!(matches!(
        decode_one(&frame_with_body(Command::Request, body)),
        Err(DecodeError::Body(BodyError::Codec { .. }))
    ));

    let redirect = Message::Redirect(Redirect {
        group: GroupId(1),
        client: ClientId(1),
        request: RequestNumber(1),
        view: View(1),
        primary: None,
    });
    let mut body = redirect.encode_body().to_vec();
    let tag = body.len() - 1;
    assert_eq!(body[tag], 0, "None is one zero byte");
    body[tag] = 2;
    assert!(matches!(
        decode_one(&frame_with_body(Command::Redirect, body)),
        Err(DecodeError::Body(BodyError::Codec { .. }))
    ));
}

#[test]
fn truncated_variable_bodies_are_codec_errors() {
    for message in
        [Message::Prepare(prepare()), Message::DoViewChange(do_view_change()), Message::StateChunk(state_chunk())]
    {
        let body = message.encode_body();
        for cut in 0..body.len() {
            let result = decode_one(&frame_with_body(message.command(), body.slice(..cut)));
            assert!(
                matches!(result, Err(DecodeError::Body(BodyError::Codec { .. }))),
                "{} cut at {cut}: {result:?}",
                message.command()
            );
        }
    }
}

#[test]
fn t5_every_bad_preamble_is_refused_with_its_reason() {
    let good = Preamble::new(1, LinkMode::Plaintext).encode();
    let mut magic = good;
    magic[0] = b'X';
    assert_eq!(Preamble::decode(&magic), Err(PreambleError::Magic));
    let mut revision = good;
    revision[4] = 9;
    assert_eq!(Preamble::decode(&revision), Err(PreambleError::Revision { got: 9 }));
    let mut mode = good;
    mode[8] = 7;
    assert_eq!(Preamble::decode(&mode), Err(PreambleError::Mode(7)));
    // Any nine bytes decode to a value or an error, never a panic.
    for seed in 0u32..4096 {
        let bytes: [u8; PREAMBLE_SIZE_BYTES] =
            std::array::from_fn(|i| (seed.wrapping_mul(2654435761) >> (i % 24)) as u8);
        let _ = Preamble::decode(&bytes);
    }
}

/// A frame of `command` with a body of `size_bytes` zeros and good checksums.
fn frame_of_size(command: Command, size_bytes: usize) -> Bytes {
    let cluster = ClusterId(5);
    let header = Header::new(cluster, NodeId(1), command, TraceContext::NONE);
    EncodedFrame::new(header, Bytes::from(vec![0u8; size_bytes])).to_bytes()
}

#[test]
fn t5_a_body_above_its_commands_limit_is_refused_from_the_header_alone() {
    for command in Command::ALL {
        let limit = command.body_size_max_bytes();
        if limit >= BODY_SIZE_MAX_BYTES {
            continue;
        }
        let frame = frame_of_size(command, limit + 1);
        let mut decoder = FrameDecoder::new(ClusterId(5));
        // Only the header has arrived: refused before any body is buffered.
        let mut buffer = bytes::BytesMut::from(&frame[..HEADER_SIZE_BYTES]);
        let error = decoder.decode(&mut buffer).expect_err("refused");
        assert!(matches!(error, FrameError::BodyTooLarge { .. }), "{command}: {error}");
        assert!(error.closes_connection());
    }
    // A port's own, lower limit applies on top.
    let mut small = FrameDecoder::with_body_max(ClusterId(5), 100);
    let mut buffer = bytes::BytesMut::from(&frame_of_size(Command::Request, 101)[..]);
    assert!(matches!(small.decode(&mut buffer), Err(FrameError::BodyTooLarge { max_bytes: 100, .. })));
}

#[test]
fn t5_a_header_that_declares_a_large_body_reserves_a_bounded_buffer() {
    let frame = frame_of_size(Command::Commit, 32 * 1024 * 1024);
    let mut decoder = FrameDecoder::new(ClusterId(5));
    let mut buffer = bytes::BytesMut::with_capacity(HEADER_SIZE_BYTES);
    buffer.extend_from_slice(&frame[..HEADER_SIZE_BYTES]);
    assert!(matches!(decoder.decode(&mut buffer), Ok(None)), "waits for the body");
    assert!(
        buffer.capacity() <= HEADER_SIZE_BYTES + DECODER_RESERVE_MAX_BYTES,
        "a stalled header holds at most the reserve ({} bytes)",
        buffer.capacity()
    );
}

#[test]
fn t5_every_valid_message_fits_its_commands_limit() {
    let big = Bytes::from(vec![7u8; OPERATION_SIZE_MAX_BYTES]);
    let request = Message::Request(Request {
        client: ClientId(1),
        request: RequestNumber(1),
        group: GroupId(1),
        kind: RequestKind::Write,
        operation: big.clone(),
    });
    let reply = Message::Reply(Reply {
        client: ClientId(1),
        request: RequestNumber(1),
        group: GroupId(1),
        view: View(1),
        op: Op(1),
        outcome: Outcome::Ok(big),
    });
    for message in [request, reply] {
        let frame = message.encode(ClusterId(5), NodeId(1), TraceContext::NONE).to_bytes();
        let body = frame.len() - HEADER_SIZE_BYTES;
        assert!(body <= message.command().body_size_max_bytes(), "{}: {body}", message.command());
        let mut decoder = FrameDecoder::new(ClusterId(5));
        let mut buffer = bytes::BytesMut::from(&frame[..]);
        assert!(matches!(decoder.decode(&mut buffer), Ok(Some(_))), "{} decodes", message.command());
    }
}

#[test]
fn c1_route_queries_and_answers_are_bounded() {
    assert_invalid(Message::RouteQuery(RouteQuery { groups: Vec::new() }), "1 to 1024 groups per route query");
    let many = (0..=ROUTE_QUERY_GROUPS_MAX as u64).map(GroupId).collect();
    assert_invalid(Message::RouteQuery(RouteQuery { groups: many }), "1 to 1024 groups per route query");
    let zero = Route { group: GroupId(1), view: View(1), primary: Some(NodeId(0)) };
    assert_invalid(Message::Routes(Routes { routes: vec![zero] }), "node 0 is not a primary");
    let most = (0..ROUTE_QUERY_GROUPS_MAX as u64).map(GroupId).collect();
    assert_valid(Message::RouteQuery(RouteQuery { groups: most }));
    let full: Vec<Route> = (0..ROUTE_QUERY_GROUPS_MAX as u64)
        .map(|group| Route { group: GroupId(group), view: View(u32::MAX), primary: Some(NodeId(u64::MAX)) })
        .collect();
    let answer = Message::Routes(Routes { routes: full });
    let frame = answer.encode(ClusterId(5), NodeId(1), TraceContext::NONE).to_bytes();
    assert!(frame.len() - HEADER_SIZE_BYTES <= Command::Routes.body_size_max_bytes(), "a full answer fits its limit");
}
