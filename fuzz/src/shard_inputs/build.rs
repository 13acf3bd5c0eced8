//! Peer messages built field by field from the fuzz input.
//!
//! The values are structured (each field drawn on its own, views and ops
//! near the replica's) but not validated here: a message goes to the shard
//! only if the real codec decodes it (see `deliver` in the parent module),
//! so whatever the wire refuses never reaches the core, exactly as in
//! production, and whatever it accepts does, however odd.

use bytes::Bytes;
use cohort_core::Shard;
use cohort_messages::seal::Seal;
use cohort_messages::{
    ClientId, CommitEntry, CommitReplyEntry, DoViewChange, FixedEntry, GroupId, HeartbeatState, Incarnation, LogEntry,
    MemberIndex, Message, NodeId, Op, Prepare, PrepareOk, Request, RequestKind, RequestNumber, RequestPrepares,
    RequestStateTransfer, StartView, StartViewChange, StateChunk, Timestamp, View,
};

use super::input::Input;
use super::topology::GROUPS;

/// The most entries one built log (DoViewChange, StartView) holds: enough
/// to overlap, extend and rewrite a replica's short log.
const BUILT_LOG_ENTRIES_MAX: usize = 8;
/// The most bytes of one built operation.
const OPERATION_BUILT_MAX_BYTES: usize = 4;
/// The most entries one built Commit or CommitReply batch holds.
const BATCH_BUILT_ENTRIES_MAX: usize = 4;

/// What the builder reads off the addressed replica (zeros for a group the
/// shard does not host): the bases of relative views and ops.
#[derive(Copy, Clone, Debug, Default)]
pub struct Hint {
    pub group: GroupId,
    pub incarnation: Incarnation,
    pub view: View,
    pub log_view: View,
    pub op: Op,
    pub commit_min: Op,
    pub commit_max: Op,
    pub log_base: Op,
    pub now: u64,
}

impl Hint {
    /// The bases for a message to `group`.
    pub fn of(shard: &Shard, group: GroupId) -> Hint {
        let now = shard.now();
        match shard.replica(group) {
            Some(r) => Hint {
                group,
                incarnation: r.incarnation(),
                view: r.view(),
                log_view: r.log_view(),
                op: r.op(),
                commit_min: r.commit_min(),
                commit_max: r.commit_max(),
                log_base: r.log_base(),
                now,
            },
            None => Hint { group, incarnation: Incarnation(1), now, ..Hint::default() },
        }
    }
}

/// A group: one of the hosted ones, or one the shard does not host.
pub fn group(input: &mut Input) -> GroupId {
    match input.choose(GROUPS.len() + 2) {
        index if index < GROUPS.len() => GROUPS[index].group,
        index if index == GROUPS.len() => GroupId(99),
        _ => GroupId::METADATA,
    }
}

/// A sender node: the members of the groups, and two strangers (0 and 6).
pub fn node(input: &mut Input) -> NodeId {
    NodeId(input.choose(7) as u64)
}

fn member(input: &mut Input) -> MemberIndex {
    match input.u8() {
        byte @ 0xF0.. => MemberIndex(byte),
        byte => MemberIndex(byte % 6),
    }
}

fn incarnation(input: &mut Input, hint: &Hint) -> Incarnation {
    match input.u8() {
        byte if byte & 0x0F == 0x0F => Incarnation(u64::from(byte >> 4)),
        _ => hint.incarnation,
    }
}

fn seal_operation(input: &mut Input) -> Bytes {
    const MEMBER_SETS: [&[u64]; 4] = [&[1, 2, 3], &[1, 2], &[2, 3, 4], &[3, 1, 5]];
    let members: Vec<NodeId> = MEMBER_SETS[input.choose(MEMBER_SETS.len())].iter().map(|node| NodeId(*node)).collect();
    let replication_quorum = 1 + input.choose(members.len()) as u8;
    match input.u8() {
        // Not a seal at all: validation must refuse the entry.
        0xFF => Bytes::copy_from_slice(input.bytes(OPERATION_BUILT_MAX_BYTES)),
        byte => Seal { incarnation: Incarnation(2 + u64::from(byte & 1)), members, replication_quorum }.encode(),
    }
}

fn log_entry(input: &mut Input, op: Op, view: View) -> LogEntry {
    // The byte's low bits name the client; its top bit (K5) makes a
    // write's operation an op batch.
    let byte = input.u8();
    let client = byte % 8;
    let (client, operation) = if client == 0 {
        (ClientId::SEAL, seal_operation(input))
    } else if byte & 0x80 != 0 {
        (ClientId(u128::from(client)), op_batch_operation(input))
    } else {
        (ClientId(u128::from(client)), raw_operation(input))
    };
    LogEntry { op, view, client, request: RequestNumber(input.small_u64()), operation }
}

/// A log suffix and the op it ends at: contiguous from a chosen first op,
/// views that mostly only grow; the validation decides the rest.
fn log(input: &mut Input, hint: &Hint) -> (Vec<LogEntry>, Op) {
    let count = input.choose(BUILT_LOG_ENTRIES_MAX + 1);
    let mut op = input.op(hint.commit_min.next());
    let mut view = input.view(hint.log_view);
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        if input.u8() & 3 == 3 {
            view = input.view(view);
        }
        entries.push(log_entry(input, op, view));
        match op.0.checked_add(1) {
            Some(next) => op = Op(next),
            None => break,
        }
    }
    let end = match entries.last() {
        Some(last) if input.u8() != 0xFF => last.op,
        _ => input.op(hint.op),
    };
    (entries, end)
}

/// A Prepare: an entry near the replica's next op, of a view near its own.
pub fn prepare(input: &mut Input, hint: &Hint) -> Message {
    let incarnation = incarnation(input, hint);
    let view = input.view(hint.view);
    let commit = input.op(hint.commit_max);
    let replica = member(input);
    let entry_op = input.op(hint.op.next());
    let entry_view = input.view(view);
    let entry = log_entry(input, entry_op, entry_view);
    Message::Prepare(Prepare { group: hint.group, incarnation, view, commit, replica, entry })
}

/// A PrepareOk for an op near the replica's.
pub fn prepare_ok(input: &mut Input, hint: &Hint) -> Message {
    let incarnation = incarnation(input, hint);
    let view = input.view(hint.view);
    let op = input.op(hint.op);
    Message::PrepareOk(PrepareOk { group: hint.group, incarnation, view, op, replica: member(input) })
}

/// A StartViewChange for a view near the replica's next.
pub fn start_view_change(input: &mut Input, hint: &Hint) -> Message {
    let incarnation = incarnation(input, hint);
    let view = input.view(hint.view.next_saturating());
    Message::StartViewChange(StartViewChange { group: hint.group, incarnation, view, replica: member(input) })
}

/// A DoViewChange with a built log.
pub fn do_view_change(input: &mut Input, hint: &Hint) -> Message {
    let incarnation = incarnation(input, hint);
    let view = input.view(hint.view.next_saturating());
    let log_view = input.view(hint.log_view);
    let replica = member(input);
    let (log, op) = log(input, hint);
    let commit = input.op(hint.commit_min);
    Message::DoViewChange(DoViewChange { group: hint.group, incarnation, view, log_view, op, commit, replica, log })
}

/// A StartView with a built log.
pub fn start_view(input: &mut Input, hint: &Hint) -> Message {
    let incarnation = incarnation(input, hint);
    let view = input.view(hint.view.next_saturating());
    let replica = member(input);
    let (log, op) = log(input, hint);
    let commit = input.op(hint.commit_max);
    Message::StartView(StartView { group: hint.group, incarnation, view, op, commit, replica, log })
}

/// A repair request for a range from near the replica's commit point.
pub fn request_prepares(input: &mut Input, hint: &Hint) -> Message {
    let incarnation = incarnation(input, hint);
    let view = input.view(hint.view);
    let replica = member(input);
    let op_min = input.op(hint.commit_min.next());
    let op_max = Op(op_min.0.saturating_add(input.small_u64()));
    Message::RequestPrepares(RequestPrepares { group: hint.group, incarnation, view, replica, op_min, op_max })
}

/// A state-transfer request.
pub fn request_state_transfer(input: &mut Input, hint: &Hint) -> Message {
    let incarnation = incarnation(input, hint);
    let view = input.view(hint.view);
    let replica = member(input);
    let snapshot_op = input.op(hint.log_base);
    let offset_bytes = input.small_u64();
    Message::RequestStateTransfer(RequestStateTransfer {
        group: hint.group,
        incarnation,
        view,
        replica,
        snapshot_op,
        offset_bytes,
    })
}

/// A snapshot seen in the shard's own effects, offered to state transfer.
#[derive(Clone, Debug)]
pub struct KnownSnapshot {
    pub group: GroupId,
    pub op: Op,
    pub view: View,
    pub data: Bytes,
}

/// A chunk of a snapshot the shard wrote itself (so it decodes), or of bytes
/// from the input.
pub fn state_chunk(input: &mut Input, hint: &Hint, snapshots: &[KnownSnapshot]) -> Message {
    let incarnation = incarnation(input, hint);
    let view = input.view(hint.view);
    let replica = member(input);
    let known = match input.choose(snapshots.len() + 1) {
        0 => None,
        index => snapshots.get(index - 1),
    };
    let (snapshot_op, snapshot_view, data) = match known {
        Some(known) => (known.op, known.view, known.data.clone()),
        None => {
            let len = input.choose(64);
            (input.op(hint.commit_max), input.view(hint.log_view), Bytes::copy_from_slice(input.bytes(len)))
        }
    };
    let total = data.len() as u64;
    let (offset_bytes, total_size_bytes, chunk) = match input.u8() {
        // The whole snapshot in one chunk.
        0..=0x7F => (0, total, data),
        // A piece of it.
        byte if byte < 0xF0 => {
            let start = (total as usize).min(input.choose(64));
            let end = (total as usize).min(start + input.choose(64));
            (start as u64, total, data.slice(start..end))
        }
        // Sizes and offsets drawn freely.
        _ => (input.small_u64(), input.small_u64(), data),
    };
    Message::StateChunk(StateChunk {
        group: hint.group,
        incarnation,
        view,
        replica,
        snapshot_op,
        snapshot_view,
        offset_bytes,
        total_size_bytes,
        chunk,
    })
}

/// A client request (through a peer or the client port).
pub fn request(input: &mut Input, group: GroupId) -> Request {
    let client = ClientId(u128::from(input.u8() % 5));
    // Small numbers, so that retries, new requests and superseded ones
    // (a new client starts at 1) are all near.
    let request = match input.u8() {
        0xFF => RequestNumber(u64::MAX),
        byte => RequestNumber(u64::from(byte & 7)),
    };
    let kind = RequestKind::ALL[input.choose(RequestKind::ALL.len())];
    // K5: a batch's operation is an op batch (the layout of the other
    // kinds' requests is as before).
    let operation = if kind == RequestKind::WriteBatch { op_batch_operation(input) } else { raw_operation(input) };
    Request { client, request, group, kind, operation }
}

/// An operation of any bytes.
fn raw_operation(input: &mut Input) -> Bytes {
    let len = input.choose(OPERATION_BUILT_MAX_BYTES + 1);
    Bytes::copy_from_slice(input.bytes(len))
}

/// K5: an op batch of one to three such operations, as a group whose state
/// machine takes op batches reads them.
fn op_batch_operation(input: &mut Input) -> Bytes {
    let ops: Vec<Bytes> = (0..=input.choose(3)).map(|_| raw_operation(input)).collect();
    cohort_messages::op_batch::encode(&ops).unwrap_or_default()
}

/// The body of a Commit batch: entries for any groups, each encoded by the
/// real entry codec, then (rarely) a byte overwritten so the entry decoder
/// must reject that entry alone.
pub fn commit_batch_body(input: &mut Input, shard: &Shard) -> Vec<u8> {
    let count = 1 + input.choose(BATCH_BUILT_ENTRIES_MAX);
    let mut body = vec![0u8; count * CommitEntry::SIZE_BYTES];
    for chunk in body.chunks_exact_mut(CommitEntry::SIZE_BYTES) {
        let hint = Hint::of(shard, group(input));
        let heartbeat_state = [HeartbeatState::Busy, HeartbeatState::Idle, HeartbeatState::Eager][input.choose(3)];
        let entry = CommitEntry {
            group: hint.group,
            partition_incarnation: incarnation(input, &hint),
            view: input.view(hint.view),
            commit: input.op(hint.commit_max),
            timestamp_monotonic: timestamp(input, &hint),
            heartbeat_state,
            replica: member(input),
        };
        entry.encode(chunk);
        corrupt(input, chunk);
    }
    body
}

/// The body of a CommitReply batch, as [`commit_batch_body`].
pub fn commit_reply_batch_body(input: &mut Input, shard: &Shard) -> Vec<u8> {
    let count = 1 + input.choose(BATCH_BUILT_ENTRIES_MAX);
    let mut body = vec![0u8; count * CommitReplyEntry::SIZE_BYTES];
    for chunk in body.chunks_exact_mut(CommitReplyEntry::SIZE_BYTES) {
        let hint = Hint::of(shard, group(input));
        let entry = CommitReplyEntry {
            group: hint.group,
            partition_incarnation: incarnation(input, &hint),
            view: input.view(hint.view),
            timestamp_monotonic: timestamp(input, &hint),
            replica: member(input),
        };
        entry.encode(chunk);
        corrupt(input, chunk);
    }
    body
}

/// A Commit timestamp: around the present tick (in timestamp units), or raw.
fn timestamp(input: &mut Input, hint: &Hint) -> Timestamp {
    const PER_TICK: u64 = 16;
    match input.u8() {
        0xFF => Timestamp(u64::MAX),
        0xFD => Timestamp(input.u64()),
        byte => {
            Timestamp((hint.now.saturating_sub(u64::from(byte >> 4))).saturating_mul(PER_TICK) + u64::from(byte & 15))
        }
    }
}

/// Overwrite one byte of an encoded entry, one time in sixteen.
fn corrupt(input: &mut Input, entry: &mut [u8]) {
    let byte = input.u8();
    if byte & 0x0F == 0x0F {
        let at = usize::from(byte >> 4) % entry.len();
        entry[entry.len() - 1 - at] = input.u8();
    }
}

/// `View::next` without its overflow panic, for choosing bases.
trait NextSaturating {
    fn next_saturating(self) -> Self;
}

impl NextSaturating for View {
    fn next_saturating(self) -> View {
        View(self.0.saturating_add(1))
    }
}
