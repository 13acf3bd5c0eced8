//! Maps keyed by group id, hashed by one splitmix64 mix of the id instead
//! of SipHash's rounds: a shard looks its groups up several times per input (the
//! replica, its filed wakeup), and at 100,000 groups the SipHash rounds were
//! a visible share of an idle node's CPU (Z2).
//!
//! Safe against hash flooding here because only hosted groups are ever
//! inserted (from the configuration or the metadata group), never an id a
//! peer chose: a forged id only costs one lookup that finds nothing.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use cohort_messages::GroupId;

/// A map from group id.
pub type GroupMap<V> = HashMap<GroupId, V, BuildHasherDefault<GroupHasher>>;

/// The hasher of [`GroupMap`]: a group id is one `u64`, finished by
/// splitmix64's mixer so that dense ids spread over the buckets.
#[derive(Default, Clone, Copy)]
pub struct GroupHasher(u64);

impl Hasher for GroupHasher {
    fn finish(&self) -> u64 {
        cohort_messages::pair_heartbeat::mix64(self.0)
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 ^= value;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_group_ids_spread_over_the_low_bits() {
        let mut low = std::collections::BTreeSet::new();
        for group in 0..1024u64 {
            let mut hasher = GroupHasher::default();
            std::hash::Hash::hash(&GroupId(group), &mut hasher);
            low.insert(hasher.finish() & 1023);
        }
        assert!(low.len() > 600, "{} distinct buckets of 1024", low.len());
    }
}
