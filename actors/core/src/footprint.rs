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
//! are cheap to compute (one walk over the hosted groups), so a node may
//! export them too.

use crate::shard::Shard;

/// One shard's input-driven memory, between two turns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// The longest in-memory log of any hosted replica, in entries.
    pub log_entries_max: usize,
    /// Bytes of operations in every hosted replica's in-memory log.
    pub log_bytes: u64,
    /// The most requests any replica has queued.
    pub request_queue_max: usize,
    /// The most DoViewChanges any replica holds: the current election's
    /// and those kept early for a view it will lead.
    pub do_view_changes_max: usize,
    /// Bytes of snapshots being fetched by state transfer, over all replicas.
    pub state_transfer_bytes: u64,
    /// The largest snapshot size any state transfer in progress declared.
    pub state_transfer_declared_max_bytes: u64,
    /// Sends waiting for a flush to complete (or for a retried superblock).
    pub held_sends: usize,
    /// Commit entries queued for the next batches, over all peers.
    pub queued_commits: usize,
    /// CommitReply entries queued for the next batches, over all peers.
    pub queued_replies: usize,
}

impl Shard {
    /// T5: what this shard holds that input could grow (see the module docs).
    pub fn footprint(&self) -> Footprint {
        let queued = self.effects_queued();
        let mut footprint = Footprint {
            held_sends: queued.held_sends,
            queued_commits: queued.queued_commits,
            queued_replies: queued.queued_replies,
            ..Footprint::default()
        };
        for replica in self.replicas() {
            let entries = (replica.log.op().0 - replica.log.base().0) as usize;
            footprint.log_entries_max = footprint.log_entries_max.max(entries);
            footprint.log_bytes += replica.log.size_bytes();
            footprint.request_queue_max = footprint.request_queue_max.max(replica.request_queue.len());
            let election = replica.election().map_or(0, |election| election.dvcs.iter().flatten().count());
            let dvcs = election + replica.early_dvcs.len();
            footprint.do_view_changes_max = footprint.do_view_changes_max.max(dvcs);
            if let Some(transfer) = &replica.state_transfer {
                footprint.state_transfer_bytes += transfer.data.len() as u64;
                footprint.state_transfer_declared_max_bytes =
                    footprint.state_transfer_declared_max_bytes.max(transfer.total_size_bytes);
            }
        }
        footprint
    }
}
