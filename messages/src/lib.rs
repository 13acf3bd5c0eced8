//! cohort's wire format.
//!
//! Everything two nodes say to each other is a *frame*: an 80-byte
//! [`Header`] with crc32c checksums of itself and of the body, the cluster id,
//! the sender, a command byte, the replica wire revision and a W3C trace
//! context, followed by a body. Most bodies are serde values encoded in one
//! codec module; Commit heartbeats and their replies are batches of fixed-size
//! entries ([`CommitEntry`], [`CommitReplyEntry`]) so that thousands of groups
//! share one frame (R10 and R26).
//!
//! This crate does no I/O and depends on neither actix nor tokio. Decoding
//! never panics on any input: a bad frame, body or entry is an error value
//! (see [`error`]) and can be counted with [`RejectCounters`].
//!
//! The layout of every field and the table of commands are in
//! `docs/protocol.md`.

#![warn(unreachable_pub)]

pub mod batch;
pub mod body;
mod codec;
pub mod command;
pub mod error;
pub mod frame;
pub mod header;
pub mod ids;
mod le;
pub mod limits;
pub mod message;
pub mod metadata;
pub mod op_batch;
pub mod pair_heartbeat;
pub mod preamble;
pub mod replication;
pub mod seal;
mod serde_fields;
pub mod stats;
pub mod view_change_batch;

pub use batch::{
    Batch, COMMIT_ENTRY_SIZE_BYTES, COMMIT_REPLY_ENTRY_SIZE_BYTES, CommitBatch, CommitEntry, CommitReplyBatch,
    CommitReplyEntry, FixedEntry, HeartbeatState,
};
pub use body::*;
pub use command::Command;
pub use error::{BodyError, DecodeError, EntryError, FrameError, Invalid};
pub use frame::{DECODER_RESERVE_MAX_BYTES, EncodedFrame, Frame, FrameDecoder, decode_message};
pub use header::{HEADER_SIZE_BYTES, Header, TraceContext, WIRE_REVISION};
pub use ids::*;
pub use limits::*;
pub use message::{Message, PAYLOAD_APART_SIZE_MIN_BYTES};
pub use pair_heartbeat::{PairHeartbeat, PairHeartbeatReply, QUIET_CHANGES_MAX, QuietDigest, QuietGroup};
pub use preamble::{LinkMode, PREAMBLE_SIZE_BYTES, Preamble, PreambleError};
pub use stats::RejectCounters;
pub use view_change_batch::{ViewChangeBatch, batch_view_changes};
