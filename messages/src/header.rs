//! The fixed-size frame header.
//!
//! Every frame is one 80-byte header followed by `body_size` bytes of body.
//! Layout (little-endian; offsets in bytes):
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0  | 4  | `checksum_header`: crc32c of bytes 4..80 |
//! | 4  | 4  | `checksum_body`: crc32c of the body |
//! | 8  | 16 | `cluster` |
//! | 24 | 8  | `sender` node id |
//! | 32 | 16 | `trace_id` (W3C) |
//! | 48 | 8  | `span_id` (W3C) |
//! | 56 | 4  | `body_size` in bytes |
//! | 60 | 2  | `revision`: replica wire revision, 2 |
//! | 62 | 1  | `command` |
//! | 63 | 1  | `trace_flags` (W3C) |
//! | 64 | 16 | reserved, zero |
//!
//! The header checksum covers the body checksum, so a frame whose body was
//! damaged and whose header was "repaired" to match is still caught.

use crate::command::Command;
use crate::error::FrameError;
use crate::ids::{ClusterId, NodeId};
use crate::le::{get_array, get_u8, get_u16, get_u32, get_u64, get_u128, is_zero, put};
use crate::limits::BODY_SIZE_MAX_BYTES;

/// Size of the fixed frame header.
pub const HEADER_SIZE_BYTES: usize = 80;

/// The replica wire revision this build speaks (R18). Revision 1 sent one
/// Commit frame per group; revision 2 batches Commits and CommitReplies.
pub const WIRE_REVISION: u16 = 2;

mod offset {
    pub(crate) const CHECKSUM_HEADER: usize = 0;
    pub(crate) const CHECKSUM_BODY: usize = 4;
    pub(crate) const CLUSTER: usize = 8;
    pub(crate) const SENDER: usize = 24;
    pub(crate) const TRACE_ID: usize = 32;
    pub(crate) const SPAN_ID: usize = 48;
    pub(crate) const BODY_SIZE: usize = 56;
    pub(crate) const REVISION: usize = 60;
    pub(crate) const COMMAND: usize = 62;
    pub(crate) const TRACE_FLAGS: usize = 63;
    pub(crate) const RESERVED: usize = 64;
    pub(crate) const RESERVED_SIZE: usize = 16;
}

const _: () = assert!(offset::RESERVED + offset::RESERVED_SIZE == HEADER_SIZE_BYTES);

/// W3C trace context carried in every frame, so one client write is one trace
/// across nodes. All zero means "not traced".
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TraceContext {
    /// 16-byte trace id.
    pub trace_id: [u8; 16],
    /// 8-byte parent span id.
    pub span_id: [u8; 8],
    /// Trace flags (bit 0: sampled).
    pub flags: u8,
}

impl TraceContext {
    /// No trace.
    pub const NONE: TraceContext = TraceContext { trace_id: [0; 16], span_id: [0; 8], flags: 0 };

    /// True if this context names a trace.
    pub fn is_some(&self) -> bool {
        self.trace_id != [0; 16]
    }
}

/// A decoded, validated frame header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The sender's cluster.
    pub cluster: ClusterId,
    /// The sending node.
    pub sender: NodeId,
    /// What the body is.
    pub command: Command,
    /// The sender's wire revision.
    pub revision: u16,
    /// Body size in bytes.
    pub body_size: u32,
    /// crc32c of the body.
    pub checksum_body: u32,
    /// The trace this frame belongs to.
    pub trace: TraceContext,
}

impl Header {
    /// A header for a body that is yet to be checksummed.
    pub fn new(cluster: ClusterId, sender: NodeId, command: Command, trace: TraceContext) -> Header {
        Header { cluster, sender, command, revision: WIRE_REVISION, body_size: 0, checksum_body: 0, trace }
    }

    /// Write the header, computing its own checksum. `body_size` and
    /// `checksum_body` must already be set.
    pub fn encode(&self, out: &mut [u8; HEADER_SIZE_BYTES]) {
        debug_assert!(self.body_size as usize <= BODY_SIZE_MAX_BYTES);
        out.fill(0);
        put(out, offset::CHECKSUM_BODY, &self.checksum_body.to_le_bytes());
        put(out, offset::CLUSTER, &self.cluster.0.to_le_bytes());
        put(out, offset::SENDER, &self.sender.0.to_le_bytes());
        put(out, offset::TRACE_ID, &self.trace.trace_id);
        put(out, offset::SPAN_ID, &self.trace.span_id);
        put(out, offset::BODY_SIZE, &self.body_size.to_le_bytes());
        put(out, offset::REVISION, &self.revision.to_le_bytes());
        out[offset::COMMAND] = self.command as u8;
        out[offset::TRACE_FLAGS] = self.trace.flags;
        let checksum = crc32c::crc32c(&out[offset::CHECKSUM_BODY..]);
        put(out, offset::CHECKSUM_HEADER, &checksum.to_le_bytes());
    }

    /// Decode and validate a header: checksum first (nothing else in a header
    /// with a bad checksum is trusted), then revision, reserved bytes, the body
    /// size limit and last the command. The cluster is checked by [`Header::check_cluster`]
    /// because only the receiver knows its own.
    pub fn decode(bytes: &[u8; HEADER_SIZE_BYTES]) -> Result<Header, FrameError> {
        let expected = get_u32(bytes, offset::CHECKSUM_HEADER);
        let computed = crc32c::crc32c(&bytes[offset::CHECKSUM_BODY..]);
        if expected != computed {
            return Err(FrameError::HeaderChecksum { expected, computed });
        }
        let revision = get_u16(bytes, offset::REVISION);
        if revision != WIRE_REVISION {
            return Err(FrameError::Revision { got: revision, expected: WIRE_REVISION });
        }
        if !is_zero(bytes, offset::RESERVED, offset::RESERVED_SIZE) {
            return Err(FrameError::ReservedNotZero);
        }
        let body_size = get_u32(bytes, offset::BODY_SIZE);
        if body_size as usize > BODY_SIZE_MAX_BYTES {
            return Err(FrameError::BodyTooLarge { size_bytes: u64::from(body_size), max_bytes: BODY_SIZE_MAX_BYTES });
        }
        // Last, so that an unknown command is only ever reported for a header
        // whose framing (checksum, body size) is sound: the stream decoder can
        // then skip that one frame and go on (see `framing_of`).
        let command_byte = get_u8(bytes, offset::COMMAND);
        let command = Command::from_u8(command_byte).ok_or(FrameError::UnknownCommand(command_byte))?;
        Ok(Header {
            cluster: ClusterId(get_u128(bytes, offset::CLUSTER)),
            sender: NodeId(get_u64(bytes, offset::SENDER)),
            command,
            revision,
            body_size,
            checksum_body: get_u32(bytes, offset::CHECKSUM_BODY),
            trace: TraceContext {
                trace_id: get_array(bytes, offset::TRACE_ID),
                span_id: get_array(bytes, offset::SPAN_ID),
                flags: get_u8(bytes, offset::TRACE_FLAGS),
            },
        })
    }

    /// The cluster and body size of a header that [`Header::decode`] rejected
    /// with [`FrameError::UnknownCommand`]. Only meaningful in that case: the
    /// checksum, revision, reserved bytes and body size were all good, so the
    /// frame's extent is known and the stream decoder can skip it.
    pub(crate) fn framing_of(bytes: &[u8; HEADER_SIZE_BYTES]) -> (ClusterId, u32) {
        (ClusterId(get_u128(bytes, offset::CLUSTER)), get_u32(bytes, offset::BODY_SIZE))
    }

    /// R18: refuse a frame of a foreign cluster.
    pub fn check_cluster(&self, expected: ClusterId) -> Result<(), FrameError> {
        if self.cluster == expected {
            Ok(())
        } else {
            Err(FrameError::ClusterMismatch { got: self.cluster.0, expected: expected.0 })
        }
    }

    /// R15: check the body against the header's body checksum.
    pub fn check_body(&self, body: &[u8]) -> Result<(), FrameError> {
        if body.len() != self.body_size as usize {
            return Err(FrameError::BodySizeMismatch { declared_bytes: self.body_size, actual_bytes: body.len() });
        }
        let computed = crc32c::crc32c(body);
        if computed != self.checksum_body {
            return Err(FrameError::BodyChecksum { command: self.command, expected: self.checksum_body, computed });
        }
        Ok(())
    }
}
