//! Quorum math for flexible quorums.
//!
//! A group of `n` members commits with a replication quorum `Qr` and changes
//! view with a view-change quorum `Qv = n - Qr + 1`, so that every view-change
//! quorum meets every replication quorum (`Qv + Qr > n`). `Qr` = majority is
//! VSR's choice; `Qr = n, Qv = 1` is PacificA's write-all / first-win.

use cohort_messages::{GROUP_MEMBERS_MAX, MemberIndex, Op};

/// A group's two quorum sizes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Quorums {
    /// Members.
    pub members: usize,
    /// Qr: members that must durably hold an op before it commits.
    pub replication: usize,
    /// Qv: members whose logs a new view must see.
    pub view_change: usize,
}

/// Why a quorum choice is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quorum for a group of {members} members: {reason}")]
pub struct QuorumError {
    /// Group size.
    pub members: usize,
    /// The rule broken.
    pub reason: &'static str,
}

impl Quorums {
    /// Quorums for `members` with replication quorum `replication` (`None`: majority).
    pub fn new(members: usize, replication: Option<usize>) -> Result<Quorums, QuorumError> {
        if members == 0 || members > GROUP_MEMBERS_MAX {
            return Err(QuorumError { members, reason: "a group has 1 to 64 members" });
        }
        let replication = replication.unwrap_or(members / 2 + 1);
        if replication == 0 || replication > members {
            return Err(QuorumError { members, reason: "replication quorum must be in 1..=members" });
        }
        let quorums = Quorums { members, replication, view_change: members - replication + 1 };
        debug_assert!(quorums.view_change + quorums.replication > members);
        Ok(quorums)
    }
}

/// `member`'s bit in a 64-wide set of voters. A learner's index may pass 63
/// (Z5); such an index has no bit: 0.
pub(crate) fn member_bit(member: MemberIndex) -> u64 {
    1u64.checked_shl(u32::from(member.0)).unwrap_or(0)
}

/// A set of member indexes as a bit mask.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberSet(u64);

const _: () = assert!(GROUP_MEMBERS_MAX <= 64);

impl MemberSet {
    /// The empty set.
    pub const EMPTY: MemberSet = MemberSet(0);

    /// Add a member; true if it was new.
    pub fn insert(&mut self, member: MemberIndex) -> bool {
        // Only voters enter a quorum set: the door refuses a learner's
        // election messages (P4), and learners' indexes may pass 63 (Z5).
        assert!((member.0 as usize) < GROUP_MEMBERS_MAX, "{member} is no voter's index");
        let bit = 1u64 << member.0;
        let new = self.0 & bit == 0;
        self.0 |= bit;
        new
    }

    /// Membership test.
    pub fn contains(&self, member: MemberIndex) -> bool {
        self.0 & member_bit(member) != 0
    }

    /// Size.
    pub fn count(&self) -> usize {
        self.0.count_ones() as usize
    }
}

/// The `k`-th largest of `values` (k from 1), without allocating: groups have
/// at most [`GROUP_MEMBERS_MAX`] members, so the copy lives on the stack.
/// This runs on every acknowledgement and every primary's wakeup.
pub fn kth_largest<T: Copy + Ord + Default>(values: &[T], k: usize) -> T {
    assert!(k >= 1 && k <= values.len() && values.len() <= GROUP_MEMBERS_MAX, "k {k} of {} values", values.len());
    let mut buffer = [T::default(); GROUP_MEMBERS_MAX];
    let sorted = &mut buffer[..values.len()];
    sorted.copy_from_slice(values);
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    sorted[k - 1]
}

/// The highest op that at least `quorum` members hold, given the highest op
/// each member holds. Ops are held as prefixes (holding op n means holding
/// every op up to n in the current view), so this is the `quorum`-th largest.
pub fn quorum_op(held: &[Op], quorum: usize) -> Op {
    kth_largest(held, quorum)
}

/// How many members hold `op`.
pub fn holders(held: &[Op], op: Op) -> usize {
    held.iter().filter(|h| **h >= op).count()
}

/// What a view change knows of one member's log.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LogSummary {
    /// The member.
    pub member: MemberIndex,
    /// The last view in which its status was normal.
    pub log_view: cohort_messages::View,
    /// Its highest op.
    pub op: Op,
    /// Its commit point.
    pub commit: Op,
}

/// The view-change log choice (V2): the log with the highest
/// `(log_view, op)`, preferring `me` on a tie (it needs no copying), and the
/// highest commit point any member reported.
///
/// # Panics
/// If `logs` is empty: a view change always has the new primary's own log.
pub fn select_log(logs: &[LogSummary], me: MemberIndex) -> (MemberIndex, Op) {
    let best = logs
        .iter()
        .max_by_key(|log| (log.log_view, log.op, log.member == me, std::cmp::Reverse(log.member)))
        .expect("a view change has at least the new primary's log");
    let commit = logs.iter().map(|log| log.commit).max().unwrap_or(Op(0));
    (best.member, commit)
}
