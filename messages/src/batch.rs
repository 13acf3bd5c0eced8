//! Commit and CommitReply batches (R10, R13, R17, R21, R26, R29).
//!
//! A batch frame's body is N fixed-size entries and nothing else, so the entry
//! count is `body_size / entry size` and a body that is not a whole number of
//! entries is a bad frame. Entries are decoded lazily from the frame's
//! [`Bytes`] without allocating per entry; each yields its own `Result`, so a
//! bad entry is rejected alone (R17) and the others still pass.

use bytes::Bytes;

use crate::command::Command;
use crate::error::{BodyError, EntryError};
use crate::ids::{GroupId, Incarnation, MemberIndex, Op, Timestamp, View};
use crate::le::{get_u8, get_u32, get_u64, is_zero, put};
use crate::limits::REPLICAS_MAX;

/// R10: a Commit entry is exactly 40 bytes.
pub const COMMIT_ENTRY_SIZE_BYTES: usize = 40;
/// R26: a CommitReply entry is exactly 32 bytes.
pub const COMMIT_REPLY_ENTRY_SIZE_BYTES: usize = 32;

/// R21: why a Commit was sent. The wire holds no interval; each backup maps
/// the state to a timeout from its own configuration (R22).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum HeartbeatState {
    /// A heartbeat of a busy group: the backup waits `commit_heartbeat_timeout`.
    Busy = 1,
    /// A heartbeat of an idle group: the backup waits `commit_idle_heartbeat_timeout`.
    Idle = 2,
    /// A Commit sent because the commit point moved (R6): waits as `Busy`.
    Eager = 3,
}

impl HeartbeatState {
    /// The state for a wire byte; any other value is a bad entry (R21).
    pub fn from_u8(value: u8) -> Option<HeartbeatState> {
        match value {
            1 => Some(HeartbeatState::Busy),
            2 => Some(HeartbeatState::Idle),
            3 => Some(HeartbeatState::Eager),
            _ => None,
        }
    }
}

/// A member index read from an entry, if it is below [`REPLICAS_MAX`] (a
/// voter's or a learner's): a larger one is a bad entry, as it is a bad body
/// in every other message (see `body.rs`). Whether it names a member of the
/// group, and a voter where one is needed, the replica checks.
fn member_index(value: u8) -> Option<MemberIndex> {
    ((value as usize) < REPLICAS_MAX).then_some(MemberIndex(value))
}

/// A fixed-size batch entry.
pub trait FixedEntry: Sized + Copy {
    /// Entry size on the wire.
    const SIZE_BYTES: usize;
    /// The command of frames that carry these entries.
    const COMMAND: Command;
    /// Write the entry into exactly `SIZE_BYTES` bytes.
    fn encode(&self, out: &mut [u8]);
    /// Decode and validate one entry; `index` is its position, for the error.
    fn decode(bytes: &[u8], index: usize) -> Result<Self, EntryError>;
    /// The group this entry is for (used to route it to its shard, R16).
    fn group(&self) -> GroupId;
}

/// One group's Commit in a batch (R10).
///
/// Layout: group u64 @0, partition_incarnation u64 @8, view u32 @16, commit u64
/// @20, timestamp_monotonic u64 @28, heartbeat_state u8 @36, replica u8 @37,
/// reserved 2 bytes @38 (zero).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CommitEntry {
    /// The group.
    pub group: GroupId,
    /// The group's incarnation.
    pub partition_incarnation: Incarnation,
    /// The primary's view.
    pub view: View,
    /// The primary's commit point (`commit_min`).
    pub commit: Op,
    /// Per-group monotonic timestamp (R14).
    pub timestamp_monotonic: Timestamp,
    /// Busy, Idle or Eager (R21).
    pub heartbeat_state: HeartbeatState,
    /// The sender's member index in this group (below `REPLICAS_MAX`).
    pub replica: MemberIndex,
}

impl FixedEntry for CommitEntry {
    const SIZE_BYTES: usize = COMMIT_ENTRY_SIZE_BYTES;
    const COMMAND: Command = Command::Commit;

    fn encode(&self, out: &mut [u8]) {
        debug_assert_eq!(out.len(), Self::SIZE_BYTES);
        put(out, 0, &self.group.0.to_le_bytes());
        put(out, 8, &self.partition_incarnation.0.to_le_bytes());
        put(out, 16, &self.view.0.to_le_bytes());
        put(out, 20, &self.commit.0.to_le_bytes());
        put(out, 28, &self.timestamp_monotonic.0.to_le_bytes());
        out[36] = self.heartbeat_state as u8;
        out[37] = self.replica.0;
        out[38] = 0;
        out[39] = 0;
    }

    fn decode(bytes: &[u8], index: usize) -> Result<Self, EntryError> {
        let raw: &[u8; COMMIT_ENTRY_SIZE_BYTES] = bytes.try_into().map_err(|_| EntryError {
            command: Command::Commit,
            index,
            group: GroupId(0),
            reason: "entry is not 40 bytes",
        })?;
        let group = GroupId(get_u64(raw, 0));
        let bad = |reason| EntryError { command: Command::Commit, index, group, reason };
        let heartbeat_state = HeartbeatState::from_u8(get_u8(raw, 36)).ok_or_else(|| bad("unknown heartbeat_state"))?;
        let replica = member_index(get_u8(raw, 37)).ok_or_else(|| bad("replica index out of range"))?;
        if !is_zero(raw, 38, 2) {
            return Err(bad("reserved bytes are not zero"));
        }
        Ok(CommitEntry {
            group,
            partition_incarnation: Incarnation(get_u64(raw, 8)),
            view: View(get_u32(raw, 16)),
            commit: Op(get_u64(raw, 20)),
            timestamp_monotonic: Timestamp(get_u64(raw, 28)),
            heartbeat_state,
            replica,
        })
    }

    fn group(&self) -> GroupId {
        self.group
    }
}

/// One backup's reply to one accepted Commit entry (R26).
///
/// Layout: group u64 @0, partition_incarnation u64 @8, view u32 @16,
/// timestamp_monotonic u64 @20, replica u8 @28, reserved 3 bytes @29 (zero).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CommitReplyEntry {
    /// The group.
    pub group: GroupId,
    /// The group's incarnation.
    pub partition_incarnation: Incarnation,
    /// The view of the Commit being answered.
    pub view: View,
    /// The timestamp of the Commit being answered.
    pub timestamp_monotonic: Timestamp,
    /// The replying backup's or learner's member index in this group (below `REPLICAS_MAX`).
    pub replica: MemberIndex,
}

impl FixedEntry for CommitReplyEntry {
    const SIZE_BYTES: usize = COMMIT_REPLY_ENTRY_SIZE_BYTES;
    const COMMAND: Command = Command::CommitReply;

    fn encode(&self, out: &mut [u8]) {
        debug_assert_eq!(out.len(), Self::SIZE_BYTES);
        put(out, 0, &self.group.0.to_le_bytes());
        put(out, 8, &self.partition_incarnation.0.to_le_bytes());
        put(out, 16, &self.view.0.to_le_bytes());
        put(out, 20, &self.timestamp_monotonic.0.to_le_bytes());
        out[28] = self.replica.0;
        out[29..32].fill(0);
    }

    fn decode(bytes: &[u8], index: usize) -> Result<Self, EntryError> {
        let raw: &[u8; COMMIT_REPLY_ENTRY_SIZE_BYTES] = bytes.try_into().map_err(|_| EntryError {
            command: Command::CommitReply,
            index,
            group: GroupId(0),
            reason: "entry is not 32 bytes",
        })?;
        let group = GroupId(get_u64(raw, 0));
        let bad = |reason| EntryError { command: Command::CommitReply, index, group, reason };
        let replica = member_index(get_u8(raw, 28)).ok_or_else(|| bad("replica index out of range"))?;
        if !is_zero(raw, 29, 3) {
            return Err(bad("reserved bytes are not zero"));
        }
        Ok(CommitReplyEntry {
            group,
            partition_incarnation: Incarnation(get_u64(raw, 8)),
            view: View(get_u32(raw, 16)),
            timestamp_monotonic: Timestamp(get_u64(raw, 20)),
            replica,
        })
    }

    fn group(&self) -> GroupId {
        self.group
    }
}

/// A received batch body whose size is a whole number of entries. Entries are
/// decoded on iteration; cloning is cheap (the body is shared [`Bytes`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch<E> {
    body: Bytes,
    _entry: std::marker::PhantomData<E>,
}

/// A batch of Commit entries (command 9).
pub type CommitBatch = Batch<CommitEntry>;
/// A batch of CommitReply entries (command 10).
pub type CommitReplyBatch = Batch<CommitReplyEntry>;

impl<E: FixedEntry> Batch<E> {
    /// Accept a body whose length is a whole number of entries.
    pub fn from_body(body: Bytes) -> Result<Self, BodyError> {
        if !body.len().is_multiple_of(E::SIZE_BYTES) {
            return Err(BodyError::BatchSize {
                command: E::COMMAND,
                size_bytes: body.len(),
                entry_size_bytes: E::SIZE_BYTES,
            });
        }
        Ok(Batch { body, _entry: std::marker::PhantomData })
    }

    /// Encode entries into a batch body. The caller must keep the count within
    /// the frame limit (R13); a batch is never split.
    pub fn encode<'a>(entries: impl IntoIterator<Item = &'a E>) -> Self
    where
        E: 'a,
    {
        let entries = entries.into_iter();
        let mut body = vec![0u8; 0];
        body.reserve(entries.size_hint().0 * E::SIZE_BYTES);
        for entry in entries {
            let at = body.len();
            body.resize(at + E::SIZE_BYTES, 0);
            entry.encode(&mut body[at..]);
        }
        debug_assert!(
            body.len() / E::SIZE_BYTES <= crate::limits::BODY_SIZE_MAX_BYTES / E::SIZE_BYTES,
            "R13: a batch exceeds the entries one frame can hold"
        );
        Batch { body: Bytes::from(body), _entry: std::marker::PhantomData }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.body.len() / E::SIZE_BYTES
    }

    /// True if the batch has no entries.
    pub fn is_empty(&self) -> bool {
        self.body.is_empty()
    }

    /// The encoded body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// Decode entry by entry; each item is that entry's own result.
    pub fn entries(&self) -> Entries<'_, E> {
        Entries { chunks: self.body.chunks_exact(E::SIZE_BYTES).enumerate(), _entry: std::marker::PhantomData }
    }
}

/// Iterator over a batch's entries, one `Result` each.
pub struct Entries<'a, E> {
    chunks: std::iter::Enumerate<std::slice::ChunksExact<'a, u8>>,
    _entry: std::marker::PhantomData<E>,
}

impl<E: FixedEntry> Iterator for Entries<'_, E> {
    type Item = Result<E, EntryError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.chunks.next().map(|(index, bytes)| E::decode(bytes, index))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.chunks.size_hint()
    }
}

impl<E: FixedEntry> ExactSizeIterator for Entries<'_, E> {}
