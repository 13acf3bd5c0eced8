//! Named limits of the wire format, with the static checks that relate them.
//!
//! A limit on everything: every length read from the network is compared
//! against one of these before it is trusted.

use crate::batch::{COMMIT_ENTRY_SIZE_BYTES, COMMIT_REPLY_ENTRY_SIZE_BYTES};
use crate::header::HEADER_SIZE_BYTES;

/// The largest frame (header plus body) a node sends or accepts: 64 MiB.
pub const FRAME_SIZE_MAX_BYTES: usize = 64 * 1024 * 1024;

/// The largest body a frame may carry.
pub const BODY_SIZE_MAX_BYTES: usize = FRAME_SIZE_MAX_BYTES - HEADER_SIZE_BYTES;

/// R13: the most Commit entries one frame can hold (about 1.7 million). A batch
/// is never split, so a shard must never lead more groups than this; it runs out
/// of memory long before.
pub const COMMIT_BATCH_ENTRIES_MAX: usize = BODY_SIZE_MAX_BYTES / COMMIT_ENTRY_SIZE_BYTES;

/// R26/R13: the most CommitReply entries one frame can hold.
pub const COMMIT_REPLY_BATCH_ENTRIES_MAX: usize = BODY_SIZE_MAX_BYTES / COMMIT_REPLY_ENTRY_SIZE_BYTES;

/// The largest client operation or result payload, in bytes.
pub const OPERATION_SIZE_MAX_BYTES: usize = 1024 * 1024;

/// The most log entries a DoViewChange or StartView may carry.
pub const VIEW_CHANGE_LOG_ENTRIES_MAX: usize = 4096;

/// The largest chunk of a state transfer.
pub const STATE_CHUNK_SIZE_MAX_BYTES: usize = 4 * 1024 * 1024;

/// The most members (voters) a group may have: quorum sets are kept as bit
/// masks of this width.
pub const GROUP_MEMBERS_MAX: usize = 64;

/// The most replicas a group may have, voters and learners together (P4,
/// Z5): a member index is one byte, and 255 is never one. Learners take the
/// indexes after the voters and never enter a quorum set.
pub const REPLICAS_MAX: usize = 255;

/// The most shards one node may run.
pub const SHARD_COUNT_MAX: u16 = 1024;

/// The most ops one repair request may ask for.
pub const REPAIR_OPS_MAX: u64 = 1024;

const _: () = {
    // R13: the full entry-count limit of both batches fits one frame.
    assert!(HEADER_SIZE_BYTES + COMMIT_BATCH_ENTRIES_MAX * COMMIT_ENTRY_SIZE_BYTES <= FRAME_SIZE_MAX_BYTES);
    assert!(HEADER_SIZE_BYTES + COMMIT_REPLY_BATCH_ENTRIES_MAX * COMMIT_REPLY_ENTRY_SIZE_BYTES <= FRAME_SIZE_MAX_BYTES);
    // One more entry would not fit.
    assert!(HEADER_SIZE_BYTES + (COMMIT_BATCH_ENTRIES_MAX + 1) * COMMIT_ENTRY_SIZE_BYTES > FRAME_SIZE_MAX_BYTES);
    // The seed's figure: about 1.7 million entries per frame.
    assert!(COMMIT_BATCH_ENTRIES_MAX > 1_600_000 && COMMIT_BATCH_ENTRIES_MAX < 1_800_000);
    // Body sizes travel as u32.
    assert!(BODY_SIZE_MAX_BYTES <= u32::MAX as usize);
    // Largest variable bodies fit a frame with room for their fixed fields.
    assert!(OPERATION_SIZE_MAX_BYTES * 2 < BODY_SIZE_MAX_BYTES);
    assert!(STATE_CHUNK_SIZE_MAX_BYTES * 2 < BODY_SIZE_MAX_BYTES);
    assert!(GROUP_MEMBERS_MAX <= REPLICAS_MAX && REPLICAS_MAX <= u8::MAX as usize);
};
