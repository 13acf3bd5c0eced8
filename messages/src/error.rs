//! Typed decode errors.
//!
//! Three levels, matching what the receiver must drop:
//! - [`FrameError`]: the frame as a whole is bad and is dropped (R15). When
//!   the header itself cannot be trusted the stream has lost its framing and
//!   the connection must be closed ([`FrameError::closes_connection`]).
//! - [`BodyError`]: the header was good but the body does not decode or
//!   validate; the frame is dropped.
//! - [`EntryError`]: one entry of a Commit or CommitReply batch is bad; it is
//!   rejected alone and the other entries are handled (R17, R29).
//!
//! Each error has a stable `kind()` label so that the runtime can count it in
//! a metric without parsing messages.

use crate::command::Command;
use crate::ids::GroupId;

/// Why a frame was rejected as a whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Fewer bytes than a header.
    #[error("frame truncated: {got_bytes} bytes, a header needs {needed_bytes}")]
    Truncated {
        /// Bytes available.
        got_bytes: usize,
        /// Bytes needed.
        needed_bytes: usize,
    },
    /// The header checksum does not match: the header cannot be trusted.
    #[error("bad header checksum: header says {expected:#010x}, bytes give {computed:#010x}")]
    HeaderChecksum {
        /// The checksum written in the header.
        expected: u32,
        /// The checksum of the bytes received.
        computed: u32,
    },
    /// The body checksum does not match (R15).
    #[error("bad body checksum for {command}: header says {expected:#010x}, body gives {computed:#010x}")]
    BodyChecksum {
        /// The frame's command.
        command: Command,
        /// The checksum written in the header.
        expected: u32,
        /// The checksum of the body received.
        computed: u32,
    },
    /// The body is larger than the frame limit.
    #[error("body of {size_bytes} bytes exceeds the limit of {max_bytes} bytes")]
    BodyTooLarge {
        /// Declared body size.
        size_bytes: u64,
        /// The limit.
        max_bytes: usize,
    },
    /// The declared body size does not match the bytes that follow the header.
    #[error("header declares a body of {declared_bytes} bytes, frame carries {actual_bytes}")]
    BodySizeMismatch {
        /// Declared in the header.
        declared_bytes: u32,
        /// Actually present.
        actual_bytes: usize,
    },
    /// The peer speaks another replica wire revision (R18).
    #[error(
        "peer speaks replica wire revision {got}, this node speaks revision {expected}; upgrade all nodes of a cluster together"
    )]
    Revision {
        /// The peer's revision.
        got: u16,
        /// Ours.
        expected: u16,
    },
    /// The frame belongs to another cluster (R18).
    #[error("frame from cluster {got:#x}, this node is in cluster {expected:#x}")]
    ClusterMismatch {
        /// The cluster in the frame.
        got: u128,
        /// Ours.
        expected: u128,
    },
    /// The command byte names no known command.
    #[error("unknown command byte {0}")]
    UnknownCommand(u8),
    /// Reserved header bytes are not zero.
    #[error("reserved header bytes are not zero")]
    ReservedNotZero,
}

impl FrameError {
    /// A stable label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            FrameError::Truncated { .. } => "truncated",
            FrameError::HeaderChecksum { .. } => "header_checksum",
            FrameError::BodyChecksum { .. } => "body_checksum",
            FrameError::BodyTooLarge { .. } => "body_too_large",
            FrameError::BodySizeMismatch { .. } => "body_size_mismatch",
            FrameError::Revision { .. } => "revision",
            FrameError::ClusterMismatch { .. } => "cluster_mismatch",
            FrameError::UnknownCommand(_) => "unknown_command",
            FrameError::ReservedNotZero => "reserved_not_zero",
        }
    }

    /// True when the byte stream can no longer be split into frames (the
    /// header is untrustworthy) or the peer must not be talked to at all, so
    /// the connection must be closed. False when only this frame is dropped.
    pub fn closes_connection(&self) -> bool {
        !matches!(self, FrameError::BodyChecksum { .. } | FrameError::UnknownCommand(_))
    }
}

/// Why a frame's body was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// The variable body does not decode.
    #[error("{command} body does not decode: {reason}")]
    Codec {
        /// The frame's command.
        command: Command,
        /// The codec's message.
        reason: String,
    },
    /// The body decoded but bytes were left over.
    #[error("{command} body has {trailing_bytes} trailing bytes")]
    TrailingBytes {
        /// The frame's command.
        command: Command,
        /// How many bytes were left.
        trailing_bytes: usize,
    },
    /// A batch body is not a whole number of entries.
    #[error("{command} batch body of {size_bytes} bytes is not a multiple of the {entry_size_bytes}-byte entry")]
    BatchSize {
        /// The frame's command.
        command: Command,
        /// Body size.
        size_bytes: usize,
        /// Entry size.
        entry_size_bytes: usize,
    },
    /// The body decoded into a value that breaks a rule of its message.
    #[error(transparent)]
    Invalid(#[from] Invalid),
}

impl BodyError {
    /// A stable label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            BodyError::Codec { .. } => "codec",
            BodyError::TrailingBytes { .. } => "trailing_bytes",
            BodyError::BatchSize { .. } => "batch_size",
            BodyError::Invalid(_) => "invalid",
        }
    }
}

/// A message value that breaks a rule of its command. Every message type has
/// one `validate` function that returns this with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {command}: {reason}")]
pub struct Invalid {
    /// The message's command.
    pub command: Command,
    /// Why the value is invalid.
    pub reason: &'static str,
}

/// Why one batch entry was rejected (R17, R21, R29). The other entries of the
/// batch are unaffected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{command} entry {index} (group {group}) rejected: {reason}")]
pub struct EntryError {
    /// Commit or CommitReply.
    pub command: Command,
    /// The entry's position in its batch.
    pub index: usize,
    /// The group the entry names (read even from a bad entry, for logs).
    pub group: GroupId,
    /// Why it is bad.
    pub reason: &'static str,
}

impl EntryError {
    /// A stable label for metrics.
    pub fn kind(&self) -> &'static str {
        self.reason
    }
}

/// Either level of error, for callers that decode a whole frame in one call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The frame is bad.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The body is bad.
    #[error(transparent)]
    Body(#[from] BodyError),
}

impl DecodeError {
    /// A stable label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            DecodeError::Frame(error) => error.kind(),
            DecodeError::Body(error) => error.kind(),
        }
    }
}

/// Shorthand used by validation functions.
pub(crate) fn invalid(command: Command, reason: &'static str) -> Invalid {
    Invalid { command, reason }
}
