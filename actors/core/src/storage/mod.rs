//! The storage trait: what the replica core needs made durable.
//!
//! One [`Storage`] value serves one shard: all of the shard's groups share it,
//! so that one [`Storage::flush`] makes every group's pending records durable
//! with one sync (group commit). The trait is synchronous; the runtime calls
//! it from a thread of its own so the shard's event loop never waits on a
//! sync, and the simulator calls [`memory::MemoryStorage`] inline.
//!
//! # Contract
//! - `append`, `truncate_after` and `stage_superblock` only *stage*. Nothing
//!   staged is durable, and nothing may be acknowledged to a peer or client on
//!   its account, until a later `flush` returns `Ok`.
//! - `flush` makes everything staged durable. Log records (appends and
//!   truncations) of a flush become durable before the superblocks of the
//!   same flush: after a crash in the middle of a flush, a superblock is never
//!   newer than the log it describes. Within the log, what survives a crash
//!   is a prefix of the staged records in staging order.
//! - An `append` of op `n` for a group replaces every entry of that group at
//!   op `n` and above (a new view's log overwrites an uncommitted suffix).
//! - `save_snapshot` is durable on return. `defer_snapshot` is for a
//!   snapshot of what the replica applied from its own log: if the group's
//!   staged log reaches the snapshot's op ([`deferred::may_defer`]), the
//!   storage keeps it and writes it later, oldest first, in
//!   `write_deferred_snapshots`; otherwise it is saved as by
//!   `save_snapshot`. Until a deferred snapshot is written, a crash recovers
//!   the group as if it had not been taken (the older snapshot and the log
//!   after it), and a `truncate_after` below its op or a `save_snapshot` of
//!   the group writes or replaces it first. A durable snapshot permits the
//!   storage to discard the group's entries at or below its op. See
//!   [`deferred`] for why.
//! - A `flush` error means the environment is dead (disk gone, fsync failed):
//!   the caller must stop the node; the data may not be assumed durable and
//!   the flush must not be retried as if it were (fsyncgate).
//! - `stage_superblock` may fail for one group alone (R12); the caller then
//!   holds back what depended on that superblock and retries later, while the
//!   other groups proceed.
//!
//! # Preconditions
//! These make the contract checkable; both implementations enforce them with
//! the same [`AppendCursor`], and a violation is a bug in the caller, so it
//! panics (like any broken invariant) instead of returning an error.
//! - `append` never leaves a gap: the op of an appended entry is at most one
//!   above the group's staged last op or its snapshot op, whichever is higher.
//!   That is what keeps [`RecoveredGroup::entries`] contiguous.
//! - A group's snapshot op never goes down (until `remove_group`).
//!
//! And four points the contract above leaves open, settled here:
//! - An `append` or `truncate_after` at or below the snapshot op is allowed
//!   and follows the same replace/drop rule; [`RecoveredGroup::entries`] only
//!   ever shows entries above the snapshot op.
//! - `remove_group` also discards what is staged for that group, and does not
//!   make other groups' staged records durable.
//! - A group appears in [`Recovered::groups`] if and only if it has a durable
//!   superblock, a durable snapshot, or at least one durable entry above its
//!   snapshot op.
//! - A `flush` that fails with [`StorageError::Full`] (not fatal) leaves the
//!   storage consistent: what it did not make durable stays staged. Stopping
//!   the node is always safe; waiting for space and flushing again is too.
//!
//! [`execute()`] runs the core's storage effects against a [`Storage`]: the
//! one executor that the node and the simulator share.
//!
//! [`conformance`] holds one set of checks that every implementation must
//! pass, with a deliberately naive [`conformance::Model`] to compare against.

use std::collections::BTreeMap;

use bytes::Bytes;
use cohort_messages::{GroupId, Incarnation, LogEntry, NodeId, Op, View};

pub mod conformance;
mod cursor;
pub mod deferred;
pub mod execute;
pub mod memory;

pub use cursor::AppendCursor;
pub use deferred::DeferredSnapshots;
pub use execute::{Executed, execute};

/// A group's durable control state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// The highest view this member has taken part in; never goes down.
    pub view: View,
    /// The last view in which this member's status was normal; its log is
    /// that view's log (up to the member's op).
    pub log_view: View,
    /// A commit point known to be committed (may trail the true one).
    pub commit: Op,
    /// The group's incarnation.
    pub incarnation: Incarnation,
    /// The group's members in member-index order.
    pub members: Vec<NodeId>,
    /// The replication quorum Qr of the group.
    pub replication_quorum: u8,
    /// H1: this member was created without its data (a new disk, an
    /// emptied directory, a member added empty) and has not yet taken the
    /// group's state from its current primary: it votes in no election and
    /// acknowledges nothing until it has (see `replica::recovery`).
    pub recovering: bool,
}

/// An application snapshot of one group: its state after applying every op up
/// to and including `op`. `data` is opaque to storage (the core puts the state
/// machine's snapshot and the client table in it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The last op the snapshot includes.
    pub op: Op,
    /// The view of that op's entry.
    pub view: View,
    /// The encoded state.
    pub data: Bytes,
}

/// Everything that survived for one group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveredGroup {
    /// The newest durable superblock, if one was ever saved.
    pub superblock: Option<Superblock>,
    /// The newest durable snapshot, if any.
    pub snapshot: Option<Snapshot>,
    /// The log entries after the snapshot (or from op 1), contiguous and
    /// ascending by op.
    pub entries: Vec<LogEntry>,
}

impl RecoveredGroup {
    /// The recovered view of one group from its durable parts: `log` holds the
    /// group's durable entries (any ops, ascending); only those above the
    /// snapshot op are kept. `None` when nothing is left, so that every
    /// implementation lists the same groups (see the module docs).
    pub fn from_parts(
        superblock: Option<Superblock>,
        snapshot: Option<Snapshot>,
        log: impl IntoIterator<Item = LogEntry>,
    ) -> Option<Self> {
        let snapshot_op = snapshot.as_ref().map_or(Op(0), |snapshot| snapshot.op);
        let entries: Vec<LogEntry> = log.into_iter().filter(|entry| entry.op > snapshot_op).collect();
        if superblock.is_none() && snapshot.is_none() && entries.is_empty() {
            return None;
        }
        Some(Self { superblock, snapshot, entries })
    }
}

/// Everything that survived, per group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Per group.
    pub groups: BTreeMap<GroupId, RecoveredGroup>,
    /// H1: the storage held nothing at all, not even its own format: this
    /// recovery created it (a first start, a new disk, an emptied
    /// directory). A voter this shard creates empty afterwards cannot
    /// tell a new group from one whose history it lost, and recovers
    /// first (`Shard::join_group`). On a storage that was already there, a
    /// group with no durable superblock never acknowledged anything here.
    pub formatted: bool,
    /// H2: records that had been synced were found missing (a cut log).
    /// The storage marked every superblock it holds recovering, durably;
    /// a group it holds with no superblock, or a voter hosted empty, may
    /// have lost what it acknowledged as much, and recovers too.
    pub lost_synced_records: bool,
}

impl Recovered {
    /// H1: whether a voter hosted empty on this storage may have lost what
    /// it acknowledged, and must recover first (`Shard::join_group`): the
    /// storage was formatted by this recovery, lost synced records (H2),
    /// or every group it holds is still recovering (or has no superblock). The second case is a
    /// storage formatted by an earlier process that crashed before every
    /// joining member's first superblock was durable: a member missing
    /// from it may have lost its data as much as the others.
    pub fn may_have_lost_data(&self) -> bool {
        self.formatted
            || self.lost_synced_records
            || self.groups.values().all(|group| group.superblock.as_ref().is_none_or(|sb| sb.recovering))
    }
}

/// What went wrong, with enough context to act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    /// The device or file system failed (includes a failed fsync). Fatal.
    #[error("storage I/O failed during {operation} on {path}: {reason}")]
    Io {
        /// What was being done.
        operation: &'static str,
        /// Which file.
        path: String,
        /// The OS error.
        reason: String,
    },
    /// No space left. Nothing acknowledged is lost; new writes are refused.
    #[error("storage is full during {operation} on {path}")]
    Full {
        /// What was being done.
        operation: &'static str,
        /// Which file.
        path: String,
    },
    /// A record or file failed its checksum where a torn tail is not possible.
    #[error("corruption in {path} at offset {offset}: {reason}")]
    Corrupt {
        /// Which file.
        path: String,
        /// Byte offset of the bad record.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A value exceeds a configured limit.
    #[error("{what} of {size_bytes} bytes exceeds the limit of {max_bytes} bytes")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// Its size.
        size_bytes: u64,
        /// The limit.
        max_bytes: u64,
    },
    /// A fault injected by a test double.
    #[error("injected fault: {0}")]
    Injected(&'static str),
}

impl StorageError {
    /// True if the node must stop (the environment is dead).
    pub fn is_fatal(&self) -> bool {
        matches!(self, StorageError::Io { .. } | StorageError::Corrupt { .. })
    }
}

/// A shard's durable storage. See the module docs for the contract.
pub trait Storage {
    /// Stage an entry of `group`; replaces the group's entries at `entry.op` and above.
    fn append(&mut self, group: GroupId, entry: &LogEntry) -> Result<(), StorageError>;

    /// Stage dropping every entry of `group` after `op`.
    fn truncate_after(&mut self, group: GroupId, op: Op) -> Result<(), StorageError>;

    /// Stage the group's new superblock (written atomically at the next flush).
    fn stage_superblock(&mut self, group: GroupId, superblock: &Superblock) -> Result<(), StorageError>;

    /// Make everything staged durable with as few syncs as possible (one for
    /// the log). An error is fatal for the node.
    fn flush(&mut self) -> Result<(), StorageError>;

    /// Durably store a snapshot; entries at or below `snapshot.op` may go.
    fn save_snapshot(&mut self, group: GroupId, snapshot: &Snapshot) -> Result<(), StorageError>;

    /// Store a snapshot of what the replica applied from its own log: kept
    /// to write later if the group's staged log reaches its op, else saved
    /// at once (see the module docs).
    fn defer_snapshot(&mut self, group: GroupId, snapshot: &Snapshot) -> Result<(), StorageError>;

    /// Durably write up to `snapshots_max` deferred snapshots, the oldest
    /// first; returns how many still wait. An error is fatal for the node.
    fn write_deferred_snapshots(&mut self, snapshots_max: usize) -> Result<usize, StorageError>;

    /// How many deferred snapshots wait to be written.
    fn deferred_snapshots(&self) -> usize;

    /// How many of them are worth writing now: a storage whose log could
    /// not let anything go for them yet (one segment only, say) says 0, and
    /// they go on waiting at no cost. Drivers write only these.
    fn deferred_snapshots_due(&self) -> usize {
        self.deferred_snapshots()
    }

    /// Durably remove everything of `group` (the group was deleted or moved away).
    fn remove_group(&mut self, group: GroupId) -> Result<(), StorageError>;

    /// D1, H1: durably replace everything of `group` by `superblock` alone
    /// (a replica rebuilt from the other members, its superblock marked
    /// recovering). Atomic: a crash during it leaves either the group as it
    /// was or `superblock` alone, never the group gone, which would read
    /// as a member that never acknowledged anything here. Staged records
    /// and a deferred snapshot of the group are dropped, as by
    /// [`Storage::remove_group`].
    fn reset_group(&mut self, group: GroupId, superblock: &Superblock) -> Result<(), StorageError>;

    /// Read back everything durable. Called once, before any other call.
    fn recover(&mut self) -> Result<Recovered, StorageError>;
}
