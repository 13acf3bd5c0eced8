//! Shared helpers of the wire tests: a fixed cluster and sender, frame
//! surgery (change a header byte and re-seal its checksum), stream decoding,
//! and proptest strategies that build valid values of every message.

#![allow(dead_code, missing_docs)]

use bytes::{Bytes, BytesMut};
use cohort_messages::*;
use proptest::collection::vec;
use proptest::prelude::*;

/// The cluster every test frame belongs to.
pub const CLUSTER: ClusterId = ClusterId(0x00c0_4a27_0000_0000_0000_0000_0000_0001);
/// Another cluster, for R18.
pub const FOREIGN_CLUSTER: ClusterId = ClusterId(0x0bad_0000_0000_0000_0000_0000_0000_0002);
/// The sending node of every test frame.
pub const SENDER: NodeId = NodeId(7);

/// Byte offsets of the header fields that tests change (see header.rs).
pub mod at {
    pub const BODY_SIZE: usize = 56;
    pub const REVISION: usize = 60;
    pub const COMMAND: usize = 62;
    pub const RESERVED: std::ops::Range<usize> = 64..80;
}

/// A sampled trace context, so frames carry non-zero trace bytes.
pub fn trace() -> TraceContext {
    TraceContext { trace_id: [0x11; 16], span_id: [0x22; 8], flags: 1 }
}

/// One whole frame of `message`, header and body in one buffer.
pub fn frame_bytes(message: &Message) -> Bytes {
    message.encode(CLUSTER, SENDER, trace()).to_bytes()
}

/// A frame of `command` around an arbitrary body, with correct checksums.
/// Unlike [`Message::encode`], nothing is validated: this is how a faulty or
/// hostile peer's frame looks.
pub fn frame_with_body(command: Command, body: impl Into<Bytes>) -> Bytes {
    EncodedFrame::new(Header::new(CLUSTER, SENDER, command, trace()), body.into()).to_bytes()
}

/// Recompute the header checksum after a test changed header bytes, so the
/// change reaches the checks behind the checksum.
pub fn reseal_header(frame: &mut [u8]) {
    let checksum = crc32c::crc32c(&frame[4..HEADER_SIZE_BYTES]);
    frame[0..4].copy_from_slice(&checksum.to_le_bytes());
}

/// A copy of `frame` with one header byte replaced and the header re-sealed.
pub fn with_header_byte(frame: &[u8], offset: usize, value: u8) -> Vec<u8> {
    let mut bytes = frame.to_vec();
    bytes[offset] = value;
    reseal_header(&mut bytes);
    bytes
}

/// Feed `chunks` one after another into a [`FrameDecoder`], draining it after
/// each, and return every result in order. Stops at the first error that
/// closes the connection, as a real connection would.
pub fn decode_stream<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Vec<Result<Frame, FrameError>> {
    let mut decoder = FrameDecoder::new(CLUSTER);
    let mut buffer = BytesMut::new();
    let mut results = Vec::new();
    for chunk in chunks {
        buffer.extend_from_slice(chunk);
        loop {
            let buffered_bytes = buffer.len();
            match decoder.decode(&mut buffer) {
                Ok(None) => break,
                Ok(Some(frame)) => results.push(Ok(frame)),
                Err(error) => {
                    if error.closes_connection() {
                        results.push(Err(error));
                        return results;
                    }
                    // The caller is told to keep decoding: the bad frame
                    // must be gone, or it would be reported forever.
                    assert!(buffer.len() < buffered_bytes, "{error} kept the connection but consumed nothing");
                    results.push(Err(error));
                }
            }
        }
    }
    results
}

/// Decode one whole frame through the stream decoder and the message decoder.
pub fn decode_one(frame: &[u8]) -> Result<Message, DecodeError> {
    let mut results = decode_stream([frame]);
    assert_eq!(results.len(), 1, "expected exactly one frame, got {results:?}");
    let frame = results.remove(0)?;
    Ok(Message::decode(&frame)?)
}

/// Split `bytes` at the given cut points (any order, clamped, duplicates ok).
pub fn split_at_points(bytes: &[u8], mut cuts: Vec<usize>) -> Vec<&[u8]> {
    cuts.iter_mut().for_each(|cut| *cut = (*cut).min(bytes.len()));
    cuts.sort_unstable();
    let mut chunks = Vec::with_capacity(cuts.len() + 1);
    let mut start = 0;
    for cut in cuts {
        chunks.push(&bytes[start..cut]);
        start = cut;
    }
    chunks.push(&bytes[start..]);
    chunks
}

/// A Commit entry with every field set to a recognisable value.
pub fn commit_entry(group: u64) -> CommitEntry {
    CommitEntry {
        group: GroupId(group),
        partition_incarnation: Incarnation(group + 100),
        view: View(3),
        commit: Op(group * 10),
        timestamp_monotonic: Timestamp(1_000 + group),
        heartbeat_state: HeartbeatState::Busy,
        replica: MemberIndex(1),
    }
}

/// A CommitReply entry with every field set to a recognisable value.
pub fn commit_reply_entry(group: u64) -> CommitReplyEntry {
    CommitReplyEntry {
        group: GroupId(group),
        partition_incarnation: Incarnation(group + 100),
        view: View(3),
        timestamp_monotonic: Timestamp(1_000 + group),
        replica: MemberIndex(2),
    }
}

// ---------------------------------------------------------------------------
// Strategies. Each builds only values that pass their message's `validate`,
// because `Message::encode` debug-asserts validity; the rejecting cases are
// built by hand in validation.rs.
// ---------------------------------------------------------------------------

pub fn payload() -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 0..48).prop_map(Bytes::from)
}

pub fn member() -> impl Strategy<Value = MemberIndex> {
    (0..REPLICAS_MAX as u8).prop_map(MemberIndex)
}

pub fn heartbeat_state() -> impl Strategy<Value = HeartbeatState> {
    prop_oneof![Just(HeartbeatState::Busy), Just(HeartbeatState::Idle), Just(HeartbeatState::Eager)]
}

pub fn commit_entry_strategy() -> impl Strategy<Value = CommitEntry> {
    (any::<u64>(), any::<u64>(), any::<u32>(), any::<u64>(), any::<u64>(), heartbeat_state(), member()).prop_map(
        |(group, incarnation, view, commit, timestamp, heartbeat_state, replica)| CommitEntry {
            group: GroupId(group),
            partition_incarnation: Incarnation(incarnation),
            view: View(view),
            commit: Op(commit),
            timestamp_monotonic: Timestamp(timestamp),
            heartbeat_state,
            replica,
        },
    )
}

pub fn commit_reply_entry_strategy() -> impl Strategy<Value = CommitReplyEntry> {
    (any::<u64>(), any::<u64>(), any::<u32>(), any::<u64>(), member()).prop_map(
        |(group, incarnation, view, timestamp, replica)| CommitReplyEntry {
            group: GroupId(group),
            partition_incarnation: Incarnation(incarnation),
            view: View(view),
            timestamp_monotonic: Timestamp(timestamp),
            replica,
        },
    )
}

pub fn handshake() -> impl Strategy<Value = Handshake> {
    (any::<u16>(), any::<u128>(), any::<u64>(), 1..=SHARD_COUNT_MAX).prop_map(|(revision, cluster, node, shards)| {
        Handshake { revision, cluster: ClusterId(cluster), node: NodeId(node), shard_count: shards }
    })
}

pub fn request() -> impl Strategy<Value = Request> {
    let kind = prop_oneof![Just(RequestKind::Write), Just(RequestKind::Read), Just(RequestKind::WriteBatch)];
    (any::<u128>(), any::<u64>(), any::<u64>(), kind, payload()).prop_map(
        |(client, request, group, kind, operation)| Request {
            client: ClientId(client),
            request: RequestNumber(request),
            group: GroupId(group),
            kind,
            operation,
        },
    )
}

pub fn reply() -> impl Strategy<Value = Reply> {
    let code = prop_oneof![
        Just(ReplyError::QuorumWindowExpired),
        Just(ReplyError::Busy),
        Just(ReplyError::ViewChange),
        Just(ReplyError::UnknownGroup),
        Just(ReplyError::Superseded),
        Just(ReplyError::Rejected),
    ];
    let outcome = prop_oneof![
        payload().prop_map(Outcome::Ok),
        (code, "\\PC{0,24}").prop_map(|(code, detail)| Outcome::Error { code, detail }),
    ];
    (any::<u128>(), any::<u64>(), any::<u64>(), any::<u32>(), any::<u64>(), outcome).prop_map(
        |(client, request, group, view, op, outcome)| Reply {
            client: ClientId(client),
            request: RequestNumber(request),
            group: GroupId(group),
            view: View(view),
            op: Op(op),
            outcome,
        },
    )
}

/// A valid log suffix that ends at `op` (at most `op` entries, since op 0 is
/// the empty log) with views that never go backwards and never pass `view_max`.
pub fn log(op: Op, view_max: View) -> impl Strategy<Value = Vec<LogEntry>> {
    let length_max = op.0.min(6) as usize;
    (0..=length_max)
        .prop_flat_map(move |length| vec((0..=view_max.0, any::<u128>(), any::<u64>(), payload()), length))
        .prop_map(move |mut entries| {
            entries.sort_by_key(|(view, ..)| *view);
            let count = entries.len();
            entries
                .into_iter()
                .enumerate()
                .map(|(index, (view, client, request, operation))| LogEntry {
                    op: Op(op.0 - (count - 1 - index) as u64),
                    view: View(view),
                    client: ClientId(client),
                    request: RequestNumber(request),
                    operation,
                })
                .collect()
        })
}

pub fn prepare() -> impl Strategy<Value = Prepare> {
    (any::<u64>(), any::<u64>(), any::<u32>(), any::<u64>(), member()).prop_flat_map(
        |(group, incarnation, view, commit, replica)| {
            let entry = (1..=u64::MAX, 0..=view, any::<u128>(), any::<u64>(), payload()).prop_map(
                |(op, entry_view, client, request, operation)| LogEntry {
                    op: Op(op),
                    view: View(entry_view),
                    client: ClientId(client),
                    request: RequestNumber(request),
                    operation,
                },
            );
            entry.prop_map(move |entry| Prepare {
                group: GroupId(group),
                incarnation: Incarnation(incarnation),
                view: View(view),
                commit: Op(commit),
                replica,
                entry,
            })
        },
    )
}

pub fn prepare_ok() -> impl Strategy<Value = PrepareOk> {
    (any::<u64>(), any::<u64>(), any::<u32>(), 1..=u64::MAX, member()).prop_map(
        |(group, incarnation, view, op, replica)| PrepareOk {
            group: GroupId(group),
            incarnation: Incarnation(incarnation),
            view: View(view),
            op: Op(op),
            replica,
        },
    )
}

pub fn start_view_change() -> impl Strategy<Value = StartViewChange> {
    (any::<u64>(), any::<u64>(), 1..=u32::MAX, member()).prop_map(|(group, incarnation, view, replica)| {
        StartViewChange { group: GroupId(group), incarnation: Incarnation(incarnation), view: View(view), replica }
    })
}

pub fn do_view_change() -> impl Strategy<Value = DoViewChange> {
    (any::<u64>(), any::<u64>(), 1..=u32::MAX, any::<u64>(), member()).prop_flat_map(
        |(group, incarnation, view, op, replica)| {
            (0..view, 0..=op).prop_flat_map(move |(log_view, commit)| {
                log(Op(op), View(log_view)).prop_map(move |log| DoViewChange {
                    group: GroupId(group),
                    incarnation: Incarnation(incarnation),
                    view: View(view),
                    log_view: View(log_view),
                    op: Op(op),
                    commit: Op(commit),
                    replica,
                    log,
                })
            })
        },
    )
}

pub fn start_view() -> impl Strategy<Value = StartView> {
    (any::<u64>(), any::<u64>(), any::<u32>(), any::<u64>(), member()).prop_flat_map(
        |(group, incarnation, view, op, replica)| {
            (0..=op, log(Op(op), View(view))).prop_map(move |(commit, log)| StartView {
                group: GroupId(group),
                incarnation: Incarnation(incarnation),
                view: View(view),
                op: Op(op),
                commit: Op(commit),
                replica,
                log,
            })
        },
    )
}

pub fn request_prepares() -> impl Strategy<Value = RequestPrepares> {
    (any::<u64>(), any::<u64>(), any::<u32>(), member(), 1..=u64::MAX - REPAIR_OPS_MAX, 0..REPAIR_OPS_MAX).prop_map(
        |(group, incarnation, view, replica, op_min, extra)| RequestPrepares {
            group: GroupId(group),
            incarnation: Incarnation(incarnation),
            view: View(view),
            replica,
            op_min: Op(op_min),
            op_max: Op(op_min + extra),
        },
    )
}

pub fn request_state_transfer() -> impl Strategy<Value = RequestStateTransfer> {
    (any::<u64>(), any::<u64>(), any::<u32>(), member(), any::<u64>(), any::<u64>()).prop_map(
        |(group, incarnation, view, replica, snapshot_op, offset_bytes)| RequestStateTransfer {
            group: GroupId(group),
            incarnation: Incarnation(incarnation),
            view: View(view),
            replica,
            snapshot_op: Op(snapshot_op),
            offset_bytes,
        },
    )
}

pub fn state_chunk() -> impl Strategy<Value = StateChunk> {
    let ids = (any::<u64>(), any::<u64>(), any::<u32>(), member(), any::<u64>(), any::<u32>());
    let extent = (0..u64::MAX / 2, 0..u64::MAX / 4, payload());
    (ids, extent).prop_map(
        |((group, incarnation, view, replica, snapshot_op, snapshot_view), (offset_bytes, rest_bytes, chunk))| {
            StateChunk {
                group: GroupId(group),
                incarnation: Incarnation(incarnation),
                view: View(view),
                replica,
                snapshot_op: Op(snapshot_op),
                snapshot_view: View(snapshot_view),
                offset_bytes,
                total_size_bytes: offset_bytes + chunk.len() as u64 + rest_bytes,
                chunk,
            }
        },
    )
}

pub fn redirect() -> impl Strategy<Value = Redirect> {
    (any::<u64>(), any::<u128>(), any::<u64>(), any::<u32>(), proptest::option::of(any::<u64>())).prop_map(
        |(group, client, request, view, primary)| Redirect {
            group: GroupId(group),
            client: ClientId(client),
            request: RequestNumber(request),
            view: View(view),
            primary: primary.map(NodeId),
        },
    )
}

pub fn session_open() -> impl Strategy<Value = SessionOpen> {
    (any::<u64>(), any::<u32>()).prop_map(|(node, attempt)| SessionOpen { node: NodeId(node), attempt })
}

pub fn session_opened() -> impl Strategy<Value = SessionOpened> {
    (any::<u64>(), 1..=u64::MAX, any::<u64>()).prop_map(|(node, session, epoch)| SessionOpened {
        node: NodeId(node),
        session: SessionId(session),
        epoch: Epoch(epoch),
    })
}

pub fn link_shard() -> impl Strategy<Value = LinkShard> {
    (0..SHARD_COUNT_MAX).prop_map(|shard| LinkShard { shard })
}

pub fn route_query() -> impl Strategy<Value = RouteQuery> {
    vec(any::<u64>(), 1..=64).prop_map(|groups| RouteQuery { groups: groups.into_iter().map(GroupId).collect() })
}

pub fn routes() -> impl Strategy<Value = Routes> {
    let route = (any::<u64>(), any::<u32>(), proptest::option::of(1..=u64::MAX)).prop_map(|(group, view, primary)| {
        Route { group: GroupId(group), view: View(view), primary: primary.map(NodeId) }
    });
    vec(route, 0..=64).prop_map(|routes| Routes { routes })
}

pub fn session_keepalive() -> impl Strategy<Value = SessionKeepalive> {
    (any::<u64>(), 1..=u64::MAX)
        .prop_map(|(node, session)| SessionKeepalive { node: NodeId(node), session: SessionId(session) })
}

pub fn session_expired() -> impl Strategy<Value = SessionExpired> {
    (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(node, session, epoch)| SessionExpired {
        node: NodeId(node),
        session: SessionId(session),
        epoch: Epoch(epoch),
    })
}

pub fn commit_entries() -> impl Strategy<Value = Vec<CommitEntry>> {
    vec(commit_entry_strategy(), 0..40)
}

pub fn commit_reply_entries() -> impl Strategy<Value = Vec<CommitReplyEntry>> {
    vec(commit_reply_entry_strategy(), 0..40)
}

/// Any valid message of any command.
pub fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        handshake().prop_map(Message::Handshake),
        request().prop_map(Message::Request),
        reply().prop_map(Message::Reply),
        prepare().prop_map(Message::Prepare),
        prepare_ok().prop_map(Message::PrepareOk),
        start_view_change().prop_map(Message::StartViewChange),
        do_view_change().prop_map(Message::DoViewChange),
        start_view().prop_map(Message::StartView),
        commit_entries().prop_map(|entries| Message::Commit(CommitBatch::encode(&entries))),
        commit_reply_entries().prop_map(|entries| Message::CommitReply(CommitReplyBatch::encode(&entries))),
        request_prepares().prop_map(Message::RequestPrepares),
        request_state_transfer().prop_map(Message::RequestStateTransfer),
        state_chunk().prop_map(Message::StateChunk),
        redirect().prop_map(Message::Redirect),
        session_open().prop_map(Message::SessionOpen),
        session_keepalive().prop_map(Message::SessionKeepalive),
        session_expired().prop_map(Message::SessionExpired),
        session_opened().prop_map(Message::SessionOpened),
        link_shard().prop_map(Message::LinkShard),
        route_query().prop_map(Message::RouteQuery),
        routes().prop_map(Message::Routes),
    ]
}
