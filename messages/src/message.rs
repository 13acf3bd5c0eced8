//! Every message as one enum, with frame encoding and decoding.
//!
//! Sending: build a [`Message`] and call [`Message::encode`]; the result is a
//! header and a body ready to write. Receiving: split the byte stream with
//! [`crate::FrameDecoder`], then [`Message::decode`] the frame. Batch bodies
//! are not decoded here beyond their size check; their entries are decoded
//! one by one as the receiver iterates them.

use bytes::{BufMut, Bytes, BytesMut};

use crate::batch::{CommitBatch, CommitReplyBatch};
use crate::body::*;
use crate::codec;
use crate::command::Command;
use crate::error::BodyError;
use crate::frame::{EncodedFrame, Frame};
use crate::header::{HEADER_SIZE_BYTES, Header, TraceContext};
use crate::ids::{ClusterId, GroupId, NodeId};
use crate::pair_heartbeat::{PairHeartbeat, PairHeartbeatReply};
use crate::view_change_batch::ViewChangeBatch;

/// A state chunk's payload of at least this many bytes is left out of the
/// buffer [`Message::encode_into_parts`] appends to (a smaller one is
/// cheaper to copy than to write on its own).
pub const PAYLOAD_APART_SIZE_MIN_BYTES: usize = 64 * 1024;

/// A decoded message of any command.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Message {
    Handshake(Handshake),
    Request(Request),
    Reply(Reply),
    Prepare(Prepare),
    PrepareOk(PrepareOk),
    StartViewChange(StartViewChange),
    DoViewChange(DoViewChange),
    StartView(StartView),
    Commit(CommitBatch),
    CommitReply(CommitReplyBatch),
    RequestPrepares(RequestPrepares),
    RequestStateTransfer(RequestStateTransfer),
    StateChunk(StateChunk),
    Redirect(Redirect),
    SessionOpen(SessionOpen),
    SessionKeepalive(SessionKeepalive),
    SessionExpired(SessionExpired),
    SessionOpened(SessionOpened),
    LinkShard(LinkShard),
    RouteQuery(RouteQuery),
    Routes(Routes),
    ViewChangeBatch(ViewChangeBatch),
    PairHeartbeat(PairHeartbeat),
    PairHeartbeatReply(PairHeartbeatReply),
    RecoveryQuery(RecoveryQuery),
    RecoveryAnswer(RecoveryAnswer),
}

macro_rules! per_variable_body {
    ($self:ident, $body:ident => $expr:expr, batch $batch:ident => $batch_expr:expr) => {
        match $self {
            Message::Handshake($body) => $expr,
            Message::Request($body) => $expr,
            Message::Reply($body) => $expr,
            Message::Prepare($body) => $expr,
            Message::PrepareOk($body) => $expr,
            Message::StartViewChange($body) => $expr,
            Message::DoViewChange($body) => $expr,
            Message::StartView($body) => $expr,
            Message::RequestPrepares($body) => $expr,
            Message::RequestStateTransfer($body) => $expr,
            Message::StateChunk($body) => $expr,
            Message::Redirect($body) => $expr,
            Message::SessionOpen($body) => $expr,
            Message::SessionKeepalive($body) => $expr,
            Message::SessionExpired($body) => $expr,
            Message::SessionOpened($body) => $expr,
            Message::LinkShard($body) => $expr,
            Message::RouteQuery($body) => $expr,
            Message::Routes($body) => $expr,
            Message::PairHeartbeat($body) => $expr,
            Message::PairHeartbeatReply($body) => $expr,
            Message::RecoveryQuery($body) => $expr,
            Message::RecoveryAnswer($body) => $expr,
            Message::Commit($batch) => $batch_expr,
            Message::CommitReply($batch) => $batch_expr,
            Message::ViewChangeBatch($batch) => $batch_expr,
        }
    };
}

impl Message {
    /// The command byte for this message.
    pub fn command(&self) -> Command {
        match self {
            Message::Handshake(_) => Command::Handshake,
            Message::Request(_) => Command::Request,
            Message::Reply(_) => Command::Reply,
            Message::Prepare(_) => Command::Prepare,
            Message::PrepareOk(_) => Command::PrepareOk,
            Message::StartViewChange(_) => Command::StartViewChange,
            Message::DoViewChange(_) => Command::DoViewChange,
            Message::StartView(_) => Command::StartView,
            Message::Commit(_) => Command::Commit,
            Message::CommitReply(_) => Command::CommitReply,
            Message::RequestPrepares(_) => Command::RequestPrepares,
            Message::RequestStateTransfer(_) => Command::RequestStateTransfer,
            Message::StateChunk(_) => Command::StateChunk,
            Message::Redirect(_) => Command::Redirect,
            Message::SessionOpen(_) => Command::SessionOpen,
            Message::SessionKeepalive(_) => Command::SessionKeepalive,
            Message::SessionExpired(_) => Command::SessionExpired,
            Message::SessionOpened(_) => Command::SessionOpened,
            Message::LinkShard(_) => Command::LinkShard,
            Message::RouteQuery(_) => Command::RouteQuery,
            Message::Routes(_) => Command::Routes,
            Message::ViewChangeBatch(_) => Command::ViewChangeBatch,
            Message::PairHeartbeat(_) => Command::PairHeartbeat,
            Message::PairHeartbeatReply(_) => Command::PairHeartbeatReply,
            Message::RecoveryQuery(_) => Command::RecoveryQuery,
            Message::RecoveryAnswer(_) => Command::RecoveryAnswer,
        }
    }

    /// The group a single-group message is about (`None` for batches,
    /// handshakes and session messages).
    pub fn group(&self) -> Option<GroupId> {
        match self {
            Message::Request(m) => Some(m.group),
            Message::Reply(m) => Some(m.group),
            Message::Prepare(m) => Some(m.group),
            Message::PrepareOk(m) => Some(m.group),
            Message::StartViewChange(m) => Some(m.group),
            Message::DoViewChange(m) => Some(m.group),
            Message::StartView(m) => Some(m.group),
            Message::RequestPrepares(m) => Some(m.group),
            Message::RequestStateTransfer(m) => Some(m.group),
            Message::StateChunk(m) => Some(m.group),
            Message::Redirect(m) => Some(m.group),
            Message::RecoveryQuery(m) => Some(m.group),
            Message::RecoveryAnswer(m) => Some(m.group),
            _ => None,
        }
    }

    /// Validate the message (batches validate per entry, on iteration).
    pub fn validate(&self) -> Result<(), crate::error::Invalid> {
        per_variable_body!(self, body => body.validate(), batch _batch => Ok(()))
    }

    /// Encode the body alone.
    pub fn encode_body(&self) -> Bytes {
        per_variable_body!(self, body => {
            let mut out = BytesMut::new();
            codec::encode_into(body, &mut out);
            out.freeze()
        }, batch batch => batch.body().clone())
    }

    /// The size of this message's whole frame, header and body, exactly as
    /// [`Message::encode`] and [`Message::encode_into`] write it, counted
    /// without encoding (no allocation, no copy of a payload): what a sender
    /// that bounds the bytes it queues charges before it allocates them.
    pub fn frame_size_bytes(&self) -> usize {
        let body = per_variable_body!(self, body => codec::encoded_size_bytes(body), batch batch => batch.body().len());
        HEADER_SIZE_BYTES + body
    }

    /// Append the body alone to `out`.
    pub fn encode_body_into(&self, out: &mut BytesMut) {
        per_variable_body!(self, body => codec::encode_into(body, out), batch batch => out.put_slice(batch.body()));
    }

    /// Encode a frame: header (with both checksums) and body.
    pub fn encode(&self, cluster: ClusterId, sender: NodeId, trace: TraceContext) -> EncodedFrame {
        debug_assert_eq!(self.validate(), Ok(()), "sending an invalid {}", self.command());
        EncodedFrame::new(Header::new(cluster, sender, self.command(), trace), self.encode_body())
    }

    /// Append this message's whole frame (header, then body) to `out`, with
    /// no allocation of its own: the bytes are those of
    /// [`Message::encode`]'s frame. A turn's frames for one peer are encoded
    /// one after another into one buffer, which leaves in one socket write.
    pub fn encode_into(&self, cluster: ClusterId, sender: NodeId, trace: TraceContext, out: &mut BytesMut) {
        debug_assert_eq!(self.validate(), Ok(()), "sending an invalid {}", self.command());
        let start = out.len();
        out.put_bytes(0, HEADER_SIZE_BYTES);
        per_variable_body!(self, body => codec::encode_into(body, out), batch batch => out.put_slice(batch.body()));
        let body_size = out.len() - start - HEADER_SIZE_BYTES;
        assert!(
            body_size <= crate::limits::BODY_SIZE_MAX_BYTES,
            "R13: frame body of {body_size} bytes exceeds the limit"
        );
        let mut header = Header::new(cluster, sender, self.command(), trace);
        header.body_size = body_size as u32;
        header.checksum_body = crc32c::crc32c(&out[start + HEADER_SIZE_BYTES..]);
        let mut bytes = [0u8; HEADER_SIZE_BYTES];
        header.encode(&mut bytes);
        out[start..start + HEADER_SIZE_BYTES].copy_from_slice(&bytes);
    }

    /// [`Message::encode_into`], except that a state chunk's payload of at
    /// least [`PAYLOAD_APART_SIZE_MIN_BYTES`] is not copied into `out`: it
    /// is returned, to be written right after `out`'s new bytes. The two
    /// together are exactly the bytes `encode_into` appends, so the frame
    /// on the wire is the same; a sender of a multi-MiB chunk saves one copy
    /// of it. Any other message is appended whole and `None` returned.
    pub fn encode_into_parts(
        &self,
        cluster: ClusterId,
        sender: NodeId,
        trace: TraceContext,
        out: &mut BytesMut,
    ) -> Option<Bytes> {
        let Message::StateChunk(chunk) = self else {
            self.encode_into(cluster, sender, trace, out);
            return None;
        };
        if chunk.chunk.len() < PAYLOAD_APART_SIZE_MIN_BYTES {
            self.encode_into(cluster, sender, trace, out);
            return None;
        }
        debug_assert_eq!(self.validate(), Ok(()), "sending an invalid {}", self.command());
        let start = out.len();
        out.put_bytes(0, HEADER_SIZE_BYTES);
        // The payload is the body's last field, after its length as a
        // fixed-width little-endian u64 (docs/protocol.md, StateChunk): the
        // body without it ends in a length of 0, which is set here.
        codec::encode_into(&StateChunk { chunk: Bytes::new(), ..chunk.clone() }, out);
        let length_at = out.len() - std::mem::size_of::<u64>();
        debug_assert_eq!(out[length_at..], 0u64.to_le_bytes(), "the payload's length ends the body");
        out[length_at..].copy_from_slice(&(chunk.chunk.len() as u64).to_le_bytes());
        let body_size = out.len() - start - HEADER_SIZE_BYTES + chunk.chunk.len();
        assert!(
            body_size <= crate::limits::BODY_SIZE_MAX_BYTES,
            "R13: frame body of {body_size} bytes exceeds the limit"
        );
        let mut header = Header::new(cluster, sender, self.command(), trace);
        header.body_size = body_size as u32;
        let head_checksum = crc32c::crc32c(&out[start + HEADER_SIZE_BYTES..]);
        header.checksum_body = crc32c::crc32c_append(head_checksum, &chunk.chunk);
        let mut bytes = [0u8; HEADER_SIZE_BYTES];
        header.encode(&mut bytes);
        out[start..start + HEADER_SIZE_BYTES].copy_from_slice(&bytes);
        Some(chunk.chunk.clone())
    }

    /// Decode and validate the body of a frame whose header and body checksum
    /// were already checked (as [`crate::FrameDecoder`] does).
    pub fn decode(frame: &Frame) -> Result<Message, BodyError> {
        let message = Message::decode_body(frame.header.command, &frame.body)?;
        message.validate()?;
        Ok(message)
    }

    /// Decode a body of `command`, without validating it.
    pub(crate) fn decode_body(command: Command, body: &Bytes) -> Result<Message, BodyError> {
        Ok(match command {
            Command::ViewChangeBatch => Message::ViewChangeBatch(ViewChangeBatch::from_body(body.clone())?),
            Command::Commit => Message::Commit(CommitBatch::from_body(body.clone())?),
            Command::CommitReply => Message::CommitReply(CommitReplyBatch::from_body(body.clone())?),
            Command::Handshake => Message::Handshake(codec::decode(command, body)?),
            Command::Request => Message::Request(codec::decode(command, body)?),
            Command::Reply => Message::Reply(codec::decode(command, body)?),
            Command::Prepare => Message::Prepare(codec::decode(command, body)?),
            Command::PrepareOk => Message::PrepareOk(codec::decode(command, body)?),
            Command::StartViewChange => Message::StartViewChange(codec::decode(command, body)?),
            Command::DoViewChange => Message::DoViewChange(codec::decode(command, body)?),
            Command::StartView => Message::StartView(codec::decode(command, body)?),
            Command::RequestPrepares => Message::RequestPrepares(codec::decode(command, body)?),
            Command::RequestStateTransfer => Message::RequestStateTransfer(codec::decode(command, body)?),
            Command::StateChunk => Message::StateChunk(decode_state_chunk(body)?),
            Command::Redirect => Message::Redirect(codec::decode(command, body)?),
            Command::SessionOpen => Message::SessionOpen(codec::decode(command, body)?),
            Command::SessionKeepalive => Message::SessionKeepalive(codec::decode(command, body)?),
            Command::SessionExpired => Message::SessionExpired(codec::decode(command, body)?),
            Command::SessionOpened => Message::SessionOpened(codec::decode(command, body)?),
            Command::LinkShard => Message::LinkShard(codec::decode(command, body)?),
            Command::RouteQuery => Message::RouteQuery(codec::decode(command, body)?),
            Command::Routes => Message::Routes(codec::decode(command, body)?),
            Command::PairHeartbeat => Message::PairHeartbeat(codec::decode(command, body)?),
            Command::PairHeartbeatReply => Message::PairHeartbeatReply(codec::decode(command, body)?),
            Command::RecoveryQuery => Message::RecoveryQuery(codec::decode(command, body)?),
            Command::RecoveryAnswer => Message::RecoveryAnswer(codec::decode(command, body)?),
        })
    }
}

/// Write a frame (header then body) into one contiguous buffer.
pub fn write_frame(frame: &EncodedFrame, out: &mut BytesMut) {
    out.reserve(HEADER_SIZE_BYTES + frame.body.len());
    out.put_slice(&frame.header);
    out.put_slice(&frame.body);
}

/// A state chunk's body, its payload a slice of `body` rather than a copy
/// (a receiver of 4 MiB chunks spent a tenth of its time copying them).
/// The head before the payload has a fixed size (fixed-width fields, the
/// payload's length last); it is decoded by the same codec with that length
/// set to 0. A body of any other shape goes to the codec as it is, so a
/// malformed one is refused exactly as before.
fn decode_state_chunk(body: &Bytes) -> Result<StateChunk, BodyError> {
    let head_size = state_chunk_head_size_bytes();
    let length_at = head_size - std::mem::size_of::<u64>();
    let payload_size =
        body.get(length_at..head_size).and_then(|length| <[u8; 8]>::try_from(length).ok()).map(u64::from_le_bytes);
    let shaped = body.len().checked_sub(head_size).is_some_and(|rest| payload_size == Some(rest as u64));
    if !shaped {
        return codec::decode(Command::StateChunk, body);
    }
    let mut head = body[..head_size].to_vec();
    head[length_at..].fill(0);
    let mut chunk: StateChunk = codec::decode(Command::StateChunk, &head)?;
    chunk.chunk = body.slice(head_size..);
    Ok(chunk)
}

/// The encoded size of a state chunk with an empty payload.
fn state_chunk_head_size_bytes() -> usize {
    static SIZE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SIZE.get_or_init(|| {
        codec::encoded_size_bytes(&StateChunk {
            group: GroupId(0),
            incarnation: crate::ids::Incarnation(0),
            view: crate::ids::View(0),
            replica: crate::ids::MemberIndex(0),
            snapshot_op: crate::ids::Op(0),
            snapshot_view: crate::ids::View(0),
            offset_bytes: 0,
            total_size_bytes: 0,
            chunk: Bytes::new(),
        })
    })
}
