//! Z3: quiesced idle groups (opt-in, beyond seed 000).
//!
//! Seed 000 keeps every idle group heartbeating (R20), so 100,000 idle
//! groups cost O(groups) bytes and CPU even though their frames are shared.
//! With `commit_quiesce_timeout_ticks` set, a primary whose group stayed
//! idle that long proposes, per backup, to stop its Commits. From then on
//! one [`PairHeartbeat`] per idle interval between the two shards stands in
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

use cohort_messages::{
    GroupId, Message, NodeId, PairHeartbeat, PairHeartbeatReply, QUIET_CHANGES_MAX, QuietDigest, QuietGroup,
};

use crate::refusal::Refusal;
use crate::shard::Shard;

/// Heartbeat ticks a primary end remembers, to know a reply answers one of
/// its own (older replies are stale).
const SENT_TICKS_REMEMBERED: usize = 16;

/// The primary end of a pair: groups this shard leads, quiesced for the peer.
#[derive(Debug, Default)]
struct LeadPair {
    quiet: BTreeMap<GroupId, QuietGroup>,
    digest: QuietDigest,
    /// Proposed and not yet answered, with the tick of the first heartbeat
    /// that carried each (0: not sent yet).
    proposed: BTreeMap<GroupId, (QuietGroup, u64)>,
    /// Woken groups the peer may still hold, with the first heartbeat tick
    /// that carried each (0: not sent yet).
    leaves: BTreeMap<GroupId, (QuietGroup, u64)>,
    sent: VecDeque<u64>,
    /// The newest heartbeat tick answered (replies older are stale).
    answered_tick: u64,
    /// The tick of the newest heartbeat answered with a match: the send
    /// tick the quiesced groups' contact with the peer dates from (R24).
    contact_tick: u64,
    /// When a reply last came, or the pair last had something to say.
    heard_tick: u64,
}

impl LeadPair {
    fn is_empty(&self) -> bool {
        self.quiet.is_empty() && self.proposed.is_empty() && self.leaves.is_empty()
    }
}

/// The backup end of a pair: groups the peer leads, quiesced here.
#[derive(Debug, Default)]
struct FollowPair {
    quiet: BTreeMap<GroupId, QuietGroup>,
    digest: QuietDigest,
    /// The peer process whose heartbeats are taken.
    epoch: u64,
    /// The newest heartbeat tick taken from it.
    last_tick: u64,
    /// This shard's tick of the newest matching heartbeat.
    match_tick: u64,
}

/// Every pair of one shard. Lives in [`crate::effects::Effects`] so that
/// replicas record their own proposals, leaves and drops as they happen.
#[derive(Debug, Default)]
pub struct Pairs {
    /// The shard's index on its node (the same on every node, K2).
    pub(crate) shard_index: u16,
    /// This process's epoch (new after every start).
    pub(crate) epoch: u64,
    lead: BTreeMap<NodeId, LeadPair>,
    follow: BTreeMap<NodeId, FollowPair>,
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
fn peers_where<P>(pairs: &BTreeMap<NodeId, P>, due: impl Fn(&P) -> bool) -> Vec<NodeId> {
    pairs.iter().filter(|(_, pair)| due(pair)).map(|(peer, _)| *peer).collect()
}

/// The first `QUIET_CHANGES_MAX` changes of a list, for a heartbeat sent at
/// `now`; each remembers the first heartbeat that carried it.
fn carry(changes: &mut BTreeMap<GroupId, (QuietGroup, u64)>, now: u64) -> Vec<QuietGroup> {
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

impl Shard {
    /// Z3, once per tick after the groups ran: wake what went silent, and on
    /// send ticks send each peer its heartbeat.
    pub(crate) fn quiet_tick(&mut self) {
        if self.config().timing.commit_quiesce_timeout_ticks.is_none() {
            return;
        }
        let timing = self.config().timing.clone();
        let now = self.now();
        let wake_after = timing.quiet_wake_after_ticks();
        // Silence: wake a pair's groups on both ends.
        let silent_leads = peers_where(&self.fx.quiet.lead, |pair| {
            !pair.quiet.is_empty() && now >= pair.contact_tick.saturating_add(wake_after)
        });
        for peer in silent_leads {
            self.wake_lead_pair(peer);
        }
        let forget_after = timing.idle_timeout_effective_ticks();
        let forgotten = peers_where(&self.fx.quiet.lead, |pair| {
            pair.quiet.is_empty() && now >= pair.heard_tick.saturating_add(forget_after)
        });
        for peer in forgotten {
            // The peer answered nothing for an idle timeout: it woke what it
            // held by itself long ago (see the follow end's silence).
            self.withdraw_proposals(peer);
            self.fx.quiet.lead.remove(&peer);
        }
        let silent_follows = peers_where(&self.fx.quiet.follow, |pair| {
            !pair.quiet.is_empty() && now >= pair.match_tick.saturating_add(wake_after)
        });
        for peer in silent_follows {
            self.wake_follow_pair(peer);
        }
        if !now.is_multiple_of(timing.commit_broadcast_interval_ticks) {
            return;
        }
        let idle_interval = timing.commit_idle_heartbeat_interval_ticks;
        let idle_tick = now.is_multiple_of(idle_interval);
        let (shard, epoch) = (self.fx.quiet.shard_index, self.fx.quiet.epoch);
        let mut sends = Vec::new();
        for (peer, pair) in self.fx.quiet.lead.iter_mut() {
            // Changes go on every send tick; the quiet set's liveness on idle
            // ticks (R20's cadence), and on every send tick while the last
            // idle heartbeat is unanswered (a lost frame is not yet silence).
            let changes = !pair.proposed.is_empty() || !pair.leaves.is_empty();
            let unanswered = now >= pair.contact_tick.saturating_add(idle_interval);
            if !changes && !(!pair.quiet.is_empty() && (idle_tick || unanswered)) {
                continue;
            }
            let proposals = carry(&mut pair.proposed, now);
            let leaves = carry(&mut pair.leaves, now);
            pair.sent.push_back(now);
            if pair.sent.len() > SENT_TICKS_REMEMBERED {
                pair.sent.pop_front();
            }
            let heartbeat = PairHeartbeat { shard, epoch, tick: now, digest: pair.digest, proposals, leaves };
            sends.push((*peer, heartbeat));
        }
        for (peer, heartbeat) in sends {
            self.fx.metrics.pair_heartbeats_sent += 1;
            self.fx.send(peer, Message::PairHeartbeat(heartbeat));
        }
    }

    /// Z3: the backup end takes a heartbeat from `from` (see the module docs).
    pub(crate) fn on_pair_heartbeat(&mut self, from: NodeId, heartbeat: PairHeartbeat) {
        if self.config().timing.commit_quiesce_timeout_ticks.is_none() {
            return self.fx.refused.count(Refusal::QuiescenceOff);
        }
        let now = self.now();
        let pair = self.fx.quiet.follow.entry(from).or_default();
        if pair.epoch != heartbeat.epoch {
            // Another process of the peer: nothing it said before holds.
            pair.epoch = heartbeat.epoch;
            pair.last_tick = 0;
            self.wake_follow_pair(from);
        }
        let pair = self.fx.quiet.follow.entry(from).or_default();
        if heartbeat.tick <= pair.last_tick {
            return self.fx.refused.count(Refusal::PairHeartbeatStale);
        }
        pair.last_tick = heartbeat.tick;
        let mut left = Vec::new();
        for leave in &heartbeat.leaves {
            if pair.quiet.get(&leave.group) == Some(leave) {
                pair.quiet.remove(&leave.group);
                pair.digest.remove(leave);
                left.push(leave.group);
            }
        }
        // Proposals already taken (their reply was lost) are not yet in the
        // sender's digest.
        let mut digest = pair.digest;
        for proposal in &heartbeat.proposals {
            if pair.quiet.get(&proposal.group) == Some(proposal) {
                digest.remove(proposal);
            }
        }
        let matched = digest == heartbeat.digest;
        for group in left {
            self.unfollow(group);
        }
        let mut accepted = Vec::new();
        if matched {
            let pair = self.fx.quiet.follow.entry(from).or_default();
            // Renews every group quiesced here under `from` (R8); each
            // replica reads it when next settled (`Replica::settle_quiet`).
            pair.match_tick = now;
            for proposal in heartbeat.proposals {
                if self.accept_proposal(from, proposal) {
                    accepted.push(proposal);
                }
            }
        } else {
            self.fx.metrics.quiet_mismatches += 1;
            self.wake_follow_pair(from);
        }
        let reply = PairHeartbeatReply {
            shard: heartbeat.shard,
            epoch: heartbeat.epoch,
            tick: heartbeat.tick,
            matched,
            accepted,
        };
        self.fx.metrics.pair_replies_sent += 1;
        self.fx.send(from, Message::PairHeartbeatReply(reply));
    }

    /// Take one proposal from `from` if this shard's replica follows it
    /// there with exactly that log.
    fn accept_proposal(&mut self, from: NodeId, proposal: QuietGroup) -> bool {
        let held = self.fx.quiet.follow.get(&from).and_then(|pair| pair.quiet.get(&proposal.group)).copied();
        if held == Some(proposal) {
            return true;
        }
        let now = self.now();
        let Some(replica) = self.groups.get_mut(&proposal.group) else { return false };
        if held.is_some() || replica.incarnation() != proposal.incarnation {
            return false;
        }
        if !replica.accept_quiet(from, &proposal, now, &mut self.fx) {
            return false;
        }
        let pair = self.fx.quiet.follow.entry(from).or_default();
        pair.quiet.insert(proposal.group, proposal);
        pair.digest.add(&proposal);
        self.refile(proposal.group);
        true
    }

    /// Z3: the primary end takes a reply from `from`.
    pub(crate) fn on_pair_heartbeat_reply(&mut self, from: NodeId, reply: PairHeartbeatReply) {
        if self.config().timing.commit_quiesce_timeout_ticks.is_none() {
            return self.fx.refused.count(Refusal::QuiescenceOff);
        }
        let now = self.now();
        let epoch = self.fx.quiet.epoch;
        let Some(pair) = self.fx.quiet.lead.get_mut(&from) else {
            return self.fx.refused.count(Refusal::PairHeartbeatStale);
        };
        if reply.epoch != epoch || reply.tick <= pair.answered_tick || !pair.sent.contains(&reply.tick) {
            return self.fx.refused.count(Refusal::PairHeartbeatStale);
        }
        pair.answered_tick = reply.tick;
        pair.heard_tick = now;
        // Leaves carried by this heartbeat or an earlier one have reached the peer.
        pair.leaves.retain(|_, (_, sent)| *sent == 0 || *sent > reply.tick);
        if !reply.matched {
            // The peer woke everything it held for us: so do we.
            self.fx.metrics.quiet_mismatches += 1;
            self.wake_lead_pair(from);
            self.withdraw_proposals(from);
            if let Some(pair) = self.fx.quiet.lead.get_mut(&from) {
                pair.leaves.clear();
            }
            return;
        }
        // Renews the contact of every group quiesced for `from` (R24); each
        // replica reads it when next settled (`Replica::settle_quiet`).
        pair.contact_tick = pair.contact_tick.max(reply.tick);
        for quiet in reply.accepted {
            let pair = self.fx.quiet.lead.entry(from).or_default();
            match pair.proposed.get(&quiet.group) {
                Some((proposed, _)) if *proposed == quiet => {
                    pair.proposed.remove(&quiet.group);
                    let confirmed = self
                        .groups
                        .get_mut(&quiet.group)
                        .is_some_and(|replica| replica.quiet_confirmed(from, &quiet, reply.tick));
                    let pair = self.fx.quiet.lead.entry(from).or_default();
                    if confirmed {
                        pair.quiet.insert(quiet.group, quiet);
                        pair.digest.add(&quiet);
                        self.fx.metrics.quiesced += 1;
                        self.refile(quiet.group);
                    } else {
                        pair.leaves.insert(quiet.group, (quiet, 0));
                    }
                }
                // Withdrawn since, or never ours: the peer must forget it.
                _ => {
                    pair.leaves.insert(quiet.group, (quiet, 0));
                }
            }
        }
        // Proposals this reply's heartbeat carried and the peer did not take.
        let pair = self.fx.quiet.lead.entry(from).or_default();
        let refused: Vec<GroupId> = pair
            .proposed
            .iter()
            .filter(|(_, (_, sent))| *sent != 0 && *sent <= reply.tick)
            .map(|(group, _)| *group)
            .collect();
        for group in refused {
            pair.proposed.remove(&group);
            if let Some(replica) = self.groups.get_mut(&group) {
                replica.quiet_refused(from);
            }
        }
    }

    /// Wake every group this shard leads quiesced for `peer`.
    fn wake_lead_pair(&mut self, peer: NodeId) {
        let groups: Vec<GroupId> =
            self.fx.quiet.lead.get(&peer).map(|pair| pair.quiet.keys().copied().collect()).unwrap_or_default();
        for group in groups {
            if let Some(replica) = self.groups.get_mut(&group) {
                replica.settle_quiet(&self.fx.quiet);
                replica.wake_lead(&mut self.fx);
            }
            self.refile(group);
        }
        if let Some(pair) = self.fx.quiet.lead.get_mut(&peer) {
            debug_assert!(pair.quiet.is_empty(), "every woken group left the pair");
            pair.quiet.clear();
            pair.digest = QuietDigest::default();
        }
    }

    /// Forget every proposal to `peer`; their replicas may propose again.
    fn withdraw_proposals(&mut self, peer: NodeId) {
        let Some(pair) = self.fx.quiet.lead.get_mut(&peer) else { return };
        let groups: Vec<GroupId> = std::mem::take(&mut pair.proposed).into_keys().collect();
        for group in groups {
            if let Some(replica) = self.groups.get_mut(&group) {
                replica.quiet_refused(peer);
            }
        }
    }

    /// Wake every group quiesced here under `primary`'s lead.
    fn wake_follow_pair(&mut self, primary: NodeId) {
        let groups: Vec<GroupId> = match self.fx.quiet.follow.get_mut(&primary) {
            Some(pair) => {
                pair.digest = QuietDigest::default();
                std::mem::take(&mut pair.quiet).into_keys().collect()
            }
            None => Vec::new(),
        };
        for group in groups {
            self.unfollow(group);
        }
    }

    /// One followed group leaves its quiet state (its pair already forgot it).
    fn unfollow(&mut self, group: GroupId) {
        if let Some(replica) = self.groups.get_mut(&group) {
            replica.settle_quiet(&self.fx.quiet);
            replica.unfollow(&mut self.fx);
        }
        self.refile(group);
    }
}
