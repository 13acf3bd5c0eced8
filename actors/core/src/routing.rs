//! Which shard owns a group, and splitting a received batch by shard (R16).
//!
//! A peer link receives one Commit or CommitReply frame for a whole node and
//! hands each shard its entries as one message per shard per frame (not one
//! per entry). Bad entries are rejected here, alone (R17, R29); every good
//! entry lands in exactly one shard's list, once.

use cohort_messages::{Batch, EntryError, FixedEntry, GroupId};

/// The shard of `group` among `shard_count` shards: a stable mix of the id,
/// so that consecutive group ids spread over shards.
pub fn shard_of(group: GroupId, shard_count: usize) -> usize {
    assert!(shard_count > 0, "a node has at least one shard");
    let mixed = group.0.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(31);
    (mixed % shard_count as u64) as usize
}

/// A batch split by owning shard, with the entries that were rejected.
#[derive(Debug)]
pub struct Routed<E> {
    /// Good entries per shard, in batch order.
    pub per_shard: Vec<Vec<E>>,
    /// Bad entries, each rejected alone.
    pub rejected: Vec<EntryError>,
}

/// Split `batch` over `shard_count` shards.
pub fn route<E: FixedEntry>(batch: &Batch<E>, shard_count: usize) -> Routed<E> {
    let mut per_shard: Vec<Vec<E>> = (0..shard_count).map(|_| Vec::new()).collect();
    let mut rejected = Vec::new();
    for entry in batch.entries() {
        match entry {
            Ok(entry) => per_shard[shard_of(entry.group(), shard_count)].push(entry),
            Err(error) => rejected.push(error),
        }
    }
    Routed { per_shard, rejected }
}
