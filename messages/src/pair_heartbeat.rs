//! Z3: the shard-pair heartbeat that stands in for the Commits of quiesced
//! groups (opt-in, beyond seed 000; see docs/heartbeats.md, "Quiescence").
//!
//! One [`PairHeartbeat`] per send tick goes from a shard to the same-index
//! shard of a peer whenever the sender leads groups that are quiesced (or
//! about to be) for that peer. It names no group of the quiet set: it
//! carries a count and a sum of hashes of `(group, incarnation, view,
//! commit)` over it, so its size does not grow with the groups it covers.
//! Only the changes to the set travel as entries: groups the sender proposes
//! to quiesce, and groups it woke. The receiver answers every heartbeat it
//! takes with a [`PairHeartbeatReply`] saying whether the digests matched
//! and which proposals it accepted.

use serde::{Deserialize, Serialize};

use crate::command::Command;
use crate::error::{Invalid, invalid};
use crate::ids::{GroupId, Incarnation, Op, View};
use crate::limits::SHARD_COUNT_MAX;

/// The most proposals, and separately the most leaves, one heartbeat
/// carries; the rest wait for the next send tick. Also the most accepted
/// groups one reply carries.
pub const QUIET_CHANGES_MAX: usize = 4096;

/// One group's quiet state: what both sides must agree on.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct QuietGroup {
    /// The group.
    pub group: GroupId,
    /// Its incarnation.
    pub incarnation: Incarnation,
    /// The view the sender leads.
    pub view: View,
    /// Its commit point, which is also the end of its log.
    pub commit: Op,
}

impl QuietGroup {
    /// The group's share of a digest: a 64-bit mix of all four fields, so
    /// that any difference in any of them changes the sum.
    pub fn hash(&self) -> u64 {
        let mut h = mix64(self.group.0 ^ 0x9e37_79b9_7f4a_7c15);
        h = mix64(h ^ self.incarnation.0);
        h = mix64(h ^ u64::from(self.view.0));
        mix64(h ^ self.commit.0)
    }
}

/// splitmix64's finaliser: cheap, and any change of its input changes the
/// output. Digests fold it field after field (the agent's scan fingerprint
/// too).
pub fn mix64(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A compact summary of a quiet set: how many groups, and the wrapping sum
/// of their hashes. Adding and removing a group are O(1).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuietDigest {
    /// Groups in the set.
    pub count: u32,
    /// Wrapping sum of [`QuietGroup::hash`] over the set.
    pub sum: u64,
}

impl QuietDigest {
    /// The digest with `group` added.
    pub fn add(&mut self, group: &QuietGroup) {
        self.count = self.count.wrapping_add(1);
        self.sum = self.sum.wrapping_add(group.hash());
    }

    /// The digest with `group` removed (it must be in the set).
    pub fn remove(&mut self, group: &QuietGroup) {
        self.count = self.count.wrapping_sub(1);
        self.sum = self.sum.wrapping_sub(group.hash());
    }
}

/// Shard → same-index shard of a peer: "these groups I lead are still as I
/// told you" (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PairHeartbeat {
    /// The shard index of both ends.
    pub shard: u16,
    /// The sender process's epoch: a new one after every start, so that the
    /// receiver drops what it believed of the process before.
    pub epoch: u64,
    /// The sender's tick; grows from one heartbeat to the next of an epoch.
    pub tick: u64,
    /// The groups the receiver accepted earlier and the sender still holds
    /// quiesced for it, after this heartbeat's leaves.
    pub digest: QuietDigest,
    /// Groups the sender asks the receiver to quiesce (again, until answered).
    pub proposals: Vec<QuietGroup>,
    /// Groups the sender woke (until a reply to a heartbeat carrying them).
    pub leaves: Vec<QuietGroup>,
}

impl PairHeartbeat {
    /// Validate the value.
    pub fn validate(&self) -> Result<(), Invalid> {
        if self.shard >= SHARD_COUNT_MAX {
            return Err(invalid(Command::PairHeartbeat, "shard index must be below 1024"));
        }
        if self.proposals.len() > QUIET_CHANGES_MAX || self.leaves.len() > QUIET_CHANGES_MAX {
            return Err(invalid(Command::PairHeartbeat, "at most 4096 proposals and 4096 leaves"));
        }
        Ok(())
    }
}

/// The answer to a [`PairHeartbeat`], to its sender's shard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PairHeartbeatReply {
    /// The shard index of both ends.
    pub shard: u16,
    /// The heartbeat's epoch, echoed.
    pub epoch: u64,
    /// The heartbeat's tick, echoed.
    pub tick: u64,
    /// Whether the heartbeat's digest equalled the replier's own. If not,
    /// the replier woke every group it held quiesced for the sender.
    pub matched: bool,
    /// The heartbeat's proposals the replier took.
    pub accepted: Vec<QuietGroup>,
}

impl PairHeartbeatReply {
    /// Validate the value.
    pub fn validate(&self) -> Result<(), Invalid> {
        if self.shard >= SHARD_COUNT_MAX {
            return Err(invalid(Command::PairHeartbeatReply, "shard index must be below 1024"));
        }
        if self.accepted.len() > QUIET_CHANGES_MAX {
            return Err(invalid(Command::PairHeartbeatReply, "at most 4096 accepted groups"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quiet(group: u64, commit: u64) -> QuietGroup {
        QuietGroup { group: GroupId(group), incarnation: Incarnation(1), view: View(2), commit: Op(commit) }
    }

    #[test]
    fn z3_a_digest_is_the_same_whatever_the_order_and_changes_with_any_field() {
        let (a, b) = (quiet(1, 10), quiet(2, 10));
        let (mut one, mut two) = (QuietDigest::default(), QuietDigest::default());
        one.add(&a);
        one.add(&b);
        two.add(&b);
        two.add(&a);
        assert_eq!(one, two);
        two.remove(&a);
        two.add(&quiet(1, 11));
        assert_ne!(one, two, "another commit point is another digest");
        two.remove(&quiet(1, 11));
        assert_eq!(two.count, 1);
        two.remove(&b);
        assert_eq!(two, QuietDigest::default());
    }

    #[test]
    fn z3_too_many_changes_are_invalid() {
        let heartbeat = PairHeartbeat {
            shard: 0,
            epoch: 1,
            tick: 5,
            digest: QuietDigest::default(),
            proposals: vec![quiet(1, 1); QUIET_CHANGES_MAX + 1],
            leaves: Vec::new(),
        };
        assert!(heartbeat.validate().is_err());
        let reply = PairHeartbeatReply { shard: 1024, epoch: 1, tick: 5, matched: true, accepted: Vec::new() };
        assert!(reply.validate().is_err());
    }
}
