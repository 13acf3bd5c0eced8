//! Z3: quiesced idle groups (opt-in, beyond seed 000).
//!
//! Seed 000 keeps every idle group heartbeating (R20), so 100,000 idle
//! groups cost O(groups) bytes and CPU even though their frames are shared.
//! With `commit_quiesce_timeout_ticks` set, a primary whose group stayed
//! idle that long proposes, per backup, to stop its Commits. From then on
//! one [`PairHeartbeat`](cohort_messages::PairHeartbeat) per idle interval between the two shards stands in
//! for the Commits of every group quiesced between them (R8 on the backup,
//! R24 on the primary), and its reply for their CommitReplies.
//!
//! Why it is safe. Each end keeps the set of groups quiesced between the
//! pair, with a digest (a count and a sum of hashes of group, incarnation,
//! view and commit; [`QuietDigest`]). A heartbeat carries the primary end's
//! digest; the backup end renews the lease and the timeout of its quiesced
//! groups only if the digests match, and says so in the reply; the primary
//! end credits the reply as a CommitReply of each quiesced group only then.
//! So a lease is granted and counted for exactly the same groups at the same
//! view and commit point, which is what a Commit and its reply do for one
//! group. Any difference wakes every group of the pair on both ends.
//!
//! Set changes travel as entries: proposals (the backup accepts one only if
//! its replica follows that primary in that view with exactly that log,
//! applied), and leaves (a woken group, sent until a reply to a heartbeat
//! that carried it arrives). Both are processed in heartbeat order: a
//! receiver takes heartbeats of one sender process (epoch) in increasing
//! tick order only, and the sender takes replies likewise.
//!
//! What a heartbeat costs. A matching heartbeat renews every group of the
//! pair, but it writes only the pair's tick (`match_tick` on the backup
//! end, `contact_tick` on the primary end): O(1), however many groups it
//! carries. A replica reads that tick when the shard next settles it
//! ([`crate::Replica`]'s `settle_quiet`, before any input of the group and
//! before it wakes), and queries between inputs read it the same way, so
//! each replica sees exactly what renewing it on every heartbeat would
//! have given. At 100,000 idle groups a node, renewing each replica on
//! every heartbeat and reply was over a third of the node's idle CPU.
//!
//! What wakes a group: a request, any peer message for it, a seal, a
//! transfer or a learner change, a view change or anything else that moves
//! its view or commit point (checked after every input), a digest mismatch,
//! a new epoch from the peer, and silence: no matching heartbeat (or reply)
//! for [`TimingConfig::quiet_wake_after_ticks`]. A woken group is idle again
//! and heartbeats per seed 000 at once; its backup's timeout runs from the
//! last matching heartbeat, so a quiesced group whose primary died fails
//! over within `commit_idle_heartbeat_timeout` + 2 × broadcast, like any
//! idle group.
//!
//! [`TimingConfig::quiet_wake_after_ticks`]: crate::config::TimingConfig::quiet_wake_after_ticks

use std::collections::{BTreeMap, VecDeque};

use cohort_messages::{GroupId, NodeId, QUIET_CHANGES_MAX, QuietDigest, QuietGroup};

/// Heartbeat ticks a primary end remembers, to know a reply answers one of
/// its own (older replies are stale).
pub(crate) const SENT_TICKS_REMEMBERED: usize = 16;

/// The primary end of a pair: groups this shard leads, quiesced for the peer.
#[derive(Debug, Default)]
pub(crate) struct LeadPair {
    pub(crate) quiet: BTreeMap<GroupId, QuietGroup>,
    pub(crate) digest: QuietDigest,
    /// Proposed and not yet answered, with the tick of the first heartbeat
    /// that carried each (0: not sent yet).
    pub(crate) proposed: BTreeMap<GroupId, (QuietGroup, u64)>,
    /// Woken groups the peer may still hold, with the first heartbeat tick
    /// that carried each (0: not sent yet).
    pub(crate) leaves: BTreeMap<GroupId, (QuietGroup, u64)>,
    pub(crate) sent: VecDeque<u64>,
    /// The newest heartbeat tick answered (replies older are stale).
    pub(crate) answered_tick: u64,
    /// The tick of the newest heartbeat answered with a match: the send
    /// tick the quiesced groups' contact with the peer dates from (R24).
    pub(crate) contact_tick: u64,
    /// When a reply last came, or the pair last had something to say.
    pub(crate) heard_tick: u64,
}

impl LeadPair {
    pub(crate) fn is_empty(&self) -> bool {
        self.quiet.is_empty() && self.proposed.is_empty() && self.leaves.is_empty()
    }
}

/// The backup end of a pair: groups the peer leads, quiesced here.
#[derive(Debug, Default)]
pub(crate) struct FollowPair {
    pub(crate) quiet: BTreeMap<GroupId, QuietGroup>,
    pub(crate) digest: QuietDigest,
    /// The peer process whose heartbeats are taken.
    pub(crate) epoch: u64,
    /// The newest heartbeat tick taken from it.
    pub(crate) last_tick: u64,
    /// This shard's tick of the newest matching heartbeat.
    pub(crate) match_tick: u64,
}

/// Every pair of one shard. The shard owns it and lends it to the replica
/// handlers that record their own proposals, leaves and drops as they
/// happen; the shard's heartbeats and their replies are in `shard::pairs`.
#[derive(Debug, Default)]
pub struct Pairs {
    /// The shard's index on its node (the same on every node, K2).
    pub(crate) shard_index: u16,
    /// This process's epoch (new after every start).
    pub(crate) epoch: u64,
    pub(crate) lead: BTreeMap<NodeId, LeadPair>,
    pub(crate) follow: BTreeMap<NodeId, FollowPair>,
}

impl Pairs {
    /// The send tick of the newest heartbeat `peer` answered with a match:
    /// the last contact of every group this shard leads quiesced for it
    /// (R24). None before any.
    pub(crate) fn lead_contact_tick(&self, peer: NodeId) -> Option<u64> {
        self.lead.get(&peer).map(|pair| pair.contact_tick).filter(|tick| *tick != 0)
    }

    /// This shard's tick of the newest matching heartbeat from `primary`:
    /// the last stand-in Commit of every group quiesced here under its
    /// lead (R8). None before any.
    pub(crate) fn follow_match_tick(&self, primary: NodeId) -> Option<u64> {
        self.follow.get(&primary).map(|pair| pair.match_tick).filter(|tick| *tick != 0)
    }

    /// A replica proposes to quiesce `quiet` for `peer`.
    pub(crate) fn propose(&mut self, peer: NodeId, quiet: QuietGroup, now: u64) {
        let pair = self.lead.entry(peer).or_default();
        if pair.is_empty() {
            pair.heard_tick = now;
        }
        debug_assert!(!pair.quiet.contains_key(&quiet.group), "a quiesced group is not proposed again");
        pair.proposed.insert(quiet.group, (quiet, 0));
    }

    /// A lead replica woke: `peer` forgets the group (if it may hold it).
    pub(crate) fn lead_leave(&mut self, peer: NodeId, group: GroupId) {
        let Some(pair) = self.lead.get_mut(&peer) else { return };
        if let Some(quiet) = pair.quiet.remove(&group) {
            pair.digest.remove(&quiet);
            pair.leaves.insert(group, (quiet, 0));
        } else if let Some((quiet, sent)) = pair.proposed.remove(&group)
            && sent != 0
        {
            // The peer may have accepted it already.
            pair.leaves.insert(group, (quiet, 0));
        }
    }

    /// A follow replica left its quiet state on its own.
    pub(crate) fn follow_drop(&mut self, primary: NodeId, group: GroupId) {
        let Some(pair) = self.follow.get_mut(&primary) else { return };
        if let Some(quiet) = pair.quiet.remove(&group) {
            pair.digest.remove(&quiet);
        }
    }

    /// The shard's index on its node, the same on both ends of a pair.
    pub fn shard_index(&self) -> u16 {
        self.shard_index
    }

    /// This process's epoch, which every reply to its heartbeats echoes.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Each peer's pair contact on the primary end (R24): the send tick of
    /// the newest heartbeat it answered with a match, as the quiesced
    /// groups read it; 0 before any. For checkers.
    pub fn lead_contacts(&self) -> impl Iterator<Item = (NodeId, u64)> + '_ {
        self.lead.iter().map(|(peer, pair)| (*peer, pair.contact_tick))
    }

    /// Quiesced group members on this shard: (led for a peer, followed).
    pub fn counts(&self) -> (usize, usize) {
        (self.lead.values().map(|pair| pair.quiet.len()).sum(), self.follow.values().map(|pair| pair.quiet.len()).sum())
    }

    /// True if `group` is quiesced for `peer`, led here.
    pub(crate) fn leads(&self, peer: NodeId, group: GroupId) -> bool {
        self.lead.get(&peer).is_some_and(|pair| pair.quiet.contains_key(&group))
    }

    /// True if `group` is quiesced here under `primary`'s lead.
    pub(crate) fn follows(&self, primary: NodeId, group: GroupId) -> bool {
        self.follow.get(&primary).is_some_and(|pair| pair.quiet.contains_key(&group))
    }

    /// The groups this shard leads quiesced, each with the peer it is
    /// quiesced for.
    pub(crate) fn lead_groups(&self) -> impl Iterator<Item = (NodeId, GroupId)> + '_ {
        self.lead.iter().flat_map(|(peer, pair)| pair.quiet.keys().map(move |group| (*peer, *group)))
    }

    /// The groups quiesced here, each with the primary it follows.
    pub(crate) fn follow_groups(&self) -> impl Iterator<Item = (NodeId, GroupId)> + '_ {
        self.follow.iter().flat_map(|(peer, pair)| pair.quiet.keys().map(move |group| (*peer, *group)))
    }

    /// Assertions: each digest sums its set.
    pub(crate) fn invariants(&self) {
        let digest_of = |set: &BTreeMap<GroupId, QuietGroup>| {
            let mut digest = QuietDigest::default();
            set.values().for_each(|quiet| digest.add(quiet));
            digest
        };
        for (peer, pair) in &self.lead {
            assert_eq!(pair.digest, digest_of(&pair.quiet), "Z3: lead digest for {peer} is its set's");
            assert!(pair.quiet.keys().all(|group| !pair.proposed.contains_key(group)), "Z3: quiet or proposed");
        }
        for (peer, pair) in &self.follow {
            assert_eq!(pair.digest, digest_of(&pair.quiet), "Z3: follow digest under {peer} is its set's");
        }
    }
}

/// The peers whose pair is `due`, in node order.
pub(crate) fn peers_where<P>(pairs: &BTreeMap<NodeId, P>, due: impl Fn(&P) -> bool) -> Vec<NodeId> {
    pairs.iter().filter(|(_, pair)| due(pair)).map(|(peer, _)| *peer).collect()
}

/// The first `QUIET_CHANGES_MAX` changes of a list, for a heartbeat sent at
/// `now`; each remembers the first heartbeat that carried it.
pub(crate) fn carry(changes: &mut BTreeMap<GroupId, (QuietGroup, u64)>, now: u64) -> Vec<QuietGroup> {
    changes
        .values_mut()
        .take(QUIET_CHANGES_MAX)
        .map(|(quiet, sent)| {
            if *sent == 0 {
                *sent = now;
            }
            *quiet
        })
        .collect()
}
