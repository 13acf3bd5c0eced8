//! Z3: the shard's ends of its pairs: the pair heartbeats it sends on its
//! send ticks, and what it does with those and their replies from peers.
//! The pairs themselves, and why quiescence is safe, are in
//! [`crate::quiesce`]; a replica's side is in `replica::quiet`.

use cohort_messages::{GroupId, Message, NodeId, PairHeartbeat, PairHeartbeatReply, QuietDigest, QuietGroup};

use super::Shard;
use crate::quiesce::{SENT_TICKS_REMEMBERED, carry, peers_where};
use crate::refusal::Refusal;

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
        let silent_leads = peers_where(&self.quiet.lead, |pair| {
            !pair.quiet.is_empty() && now >= pair.contact_tick.saturating_add(wake_after)
        });
        for peer in silent_leads {
            self.wake_lead_pair(peer);
        }
        let forget_after = timing.idle_timeout_effective_ticks();
        let forgotten = peers_where(&self.quiet.lead, |pair| {
            pair.quiet.is_empty() && now >= pair.heard_tick.saturating_add(forget_after)
        });
        for peer in forgotten {
            // The peer answered nothing for an idle timeout: it woke what it
            // held by itself long ago (see the follow end's silence).
            self.withdraw_proposals(peer);
            self.quiet.lead.remove(&peer);
        }
        let silent_follows = peers_where(&self.quiet.follow, |pair| {
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
        let (shard, epoch) = (self.quiet.shard_index, self.quiet.epoch);
        let mut sends = Vec::new();
        for (peer, pair) in self.quiet.lead.iter_mut() {
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
            self.metrics.pair_heartbeats_sent += 1;
            self.out.send(peer, Message::PairHeartbeat(heartbeat));
        }
    }

    /// Z3: the backup end takes a heartbeat from `from` (see the module docs).
    pub(crate) fn on_pair_heartbeat(&mut self, from: NodeId, heartbeat: PairHeartbeat) {
        if self.config().timing.commit_quiesce_timeout_ticks.is_none() {
            return self.refused.count(Refusal::QuiescenceOff);
        }
        let now = self.now();
        let pair = self.quiet.follow.entry(from).or_default();
        if pair.epoch != heartbeat.epoch {
            // Another process of the peer: nothing it said before holds.
            pair.epoch = heartbeat.epoch;
            pair.last_tick = 0;
            self.wake_follow_pair(from);
        }
        let pair = self.quiet.follow.entry(from).or_default();
        if heartbeat.tick <= pair.last_tick {
            return self.refused.count(Refusal::PairHeartbeatStale);
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
            let pair = self.quiet.follow.entry(from).or_default();
            // Renews every group quiesced here under `from` (R8); each
            // replica reads it when next settled (`Replica::settle_quiet`).
            pair.match_tick = now;
            for proposal in heartbeat.proposals {
                if self.accept_proposal(from, proposal) {
                    accepted.push(proposal);
                }
            }
        } else {
            self.metrics.quiet_mismatches += 1;
            self.wake_follow_pair(from);
        }
        let reply = PairHeartbeatReply {
            shard: heartbeat.shard,
            epoch: heartbeat.epoch,
            tick: heartbeat.tick,
            matched,
            accepted,
        };
        self.metrics.pair_replies_sent += 1;
        self.out.send(from, Message::PairHeartbeatReply(reply));
    }

    /// Take one proposal from `from` if this shard's replica follows it
    /// there with exactly that log.
    fn accept_proposal(&mut self, from: NodeId, proposal: QuietGroup) -> bool {
        let held = self.quiet.follow.get(&from).and_then(|pair| pair.quiet.get(&proposal.group)).copied();
        if held == Some(proposal) {
            return true;
        }
        let now = self.now();
        let Some(replica) = self.groups.get_mut(&proposal.group) else { return false };
        if held.is_some() || replica.incarnation() != proposal.incarnation {
            return false;
        }
        if !replica.accept_quiet(from, &proposal, now, &mut self.out) {
            return false;
        }
        let pair = self.quiet.follow.entry(from).or_default();
        pair.quiet.insert(proposal.group, proposal);
        pair.digest.add(&proposal);
        self.refile(proposal.group);
        true
    }

    /// Z3: the primary end takes a reply from `from`.
    pub(crate) fn on_pair_heartbeat_reply(&mut self, from: NodeId, reply: PairHeartbeatReply) {
        if self.config().timing.commit_quiesce_timeout_ticks.is_none() {
            return self.refused.count(Refusal::QuiescenceOff);
        }
        let now = self.now();
        let epoch = self.quiet.epoch;
        let contact_without_match = self.config().mutated(crate::mutants::Mutant::PairContactWithoutMatch);
        let Some(pair) = self.quiet.lead.get_mut(&from) else {
            return self.refused.count(Refusal::PairHeartbeatStale);
        };
        if reply.epoch != epoch || reply.tick <= pair.answered_tick || !pair.sent.contains(&reply.tick) {
            return self.refused.count(Refusal::PairHeartbeatStale);
        }
        pair.answered_tick = reply.tick;
        pair.heard_tick = now;
        if contact_without_match {
            pair.contact_tick = pair.contact_tick.max(reply.tick);
        }
        // Leaves carried by this heartbeat or an earlier one have reached the peer.
        pair.leaves.retain(|_, (_, sent)| *sent == 0 || *sent > reply.tick);
        if !reply.matched {
            // The peer woke everything it held for us: so do we.
            self.metrics.quiet_mismatches += 1;
            self.wake_lead_pair(from);
            self.withdraw_proposals(from);
            if let Some(pair) = self.quiet.lead.get_mut(&from) {
                pair.leaves.clear();
            }
            return;
        }
        // Renews the contact of every group quiesced for `from` (R24); each
        // replica reads it when next settled (`Replica::settle_quiet`).
        pair.contact_tick = pair.contact_tick.max(reply.tick);
        for quiet in reply.accepted {
            let pair = self.quiet.lead.entry(from).or_default();
            match pair.proposed.get(&quiet.group) {
                Some((proposed, _)) if *proposed == quiet => {
                    pair.proposed.remove(&quiet.group);
                    let confirmed = self
                        .groups
                        .get_mut(&quiet.group)
                        .is_some_and(|replica| replica.quiet_confirmed(from, &quiet, reply.tick));
                    let pair = self.quiet.lead.entry(from).or_default();
                    if confirmed {
                        pair.quiet.insert(quiet.group, quiet);
                        pair.digest.add(&quiet);
                        self.metrics.quiesced += 1;
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
        let pair = self.quiet.lead.entry(from).or_default();
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
            self.quiet.lead.get(&peer).map(|pair| pair.quiet.keys().copied().collect()).unwrap_or_default();
        for group in groups {
            if let Some(replica) = self.groups.get_mut(&group) {
                replica.settle_quiet(&self.quiet);
                replica.wake_lead(&mut self.quiet, &mut self.metrics);
            }
            self.refile(group);
        }
        if let Some(pair) = self.quiet.lead.get_mut(&peer) {
            debug_assert!(pair.quiet.is_empty(), "every woken group left the pair");
            pair.quiet.clear();
            pair.digest = QuietDigest::default();
        }
    }

    /// Forget every proposal to `peer`; their replicas may propose again.
    fn withdraw_proposals(&mut self, peer: NodeId) {
        let Some(pair) = self.quiet.lead.get_mut(&peer) else { return };
        let groups: Vec<GroupId> = std::mem::take(&mut pair.proposed).into_keys().collect();
        for group in groups {
            if let Some(replica) = self.groups.get_mut(&group) {
                replica.quiet_refused(peer);
            }
        }
    }

    /// Wake every group quiesced here under `primary`'s lead.
    fn wake_follow_pair(&mut self, primary: NodeId) {
        let groups: Vec<GroupId> = match self.quiet.follow.get_mut(&primary) {
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
            replica.settle_quiet(&self.quiet);
            replica.unfollow(&mut self.quiet, &mut self.metrics);
        }
        self.refile(group);
    }
}
