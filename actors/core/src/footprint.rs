//! What a shard holds in memory that peer input could make grow (T5).
//!
//! Why measure it: "no unbounded memory from any peer message" is a claim
//! about state, and state is what a test can check. The simulator reads a
//! [`Footprint`] of every shard after every step and checks each figure
//! against a bound that does not depend on how much input arrived (see
//! docs/simulator.md, "Forging peer"): a log never longer than a view change
//! can carry, a request queue never past `request_queue_max`, at most one
//! DoViewChange per voter in the election and one early one per voter, a
//! state transfer never past `state_transfer_size_max_bytes`. The figures
//! are cheap to compute (one walk over the hosted groups, `Shard::footprint`
//! in `shard/footprint.rs`), so a node may export them too.

/// One shard's input-driven memory, between two turns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// The longest in-memory log of any hosted replica, in entries.
    pub log_entries_max: usize,
    /// Bytes of operations in every hosted replica's in-memory log.
    pub log_bytes: u64,
    /// The most requests any replica has queued (for its pipeline, or
    /// D2 waiting for its state machine to come back).
    pub request_queue_max: usize,
    /// The most DoViewChanges any replica holds: the current election's
    /// and those kept early for a view it will lead.
    pub do_view_changes_max: usize,
    /// Bytes of snapshots being fetched by state transfer, over all replicas.
    pub state_transfer_bytes: u64,
    /// The largest snapshot size any state transfer in progress declared.
    pub state_transfer_declared_max_bytes: u64,
    /// D3: bytes of operations the tails of served streams hold, over all
    /// replicas (each at most `state_transfer_log_bytes_max`, and only what
    /// some receiver still needs).
    pub served_tail_bytes: u64,
    /// D1: bytes of operations the backlogs of the shard's primaries hold
    /// (at most `backlog_size_max_bytes` over the shard).
    pub backlog_bytes: u64,
    /// Sends waiting for a flush to complete (or for a retried superblock).
    pub held_sends: usize,
    /// Commit entries queued for the next batches, over all peers.
    pub queued_commits: usize,
    /// CommitReply entries queued for the next batches, over all peers.
    pub queued_replies: usize,
}
