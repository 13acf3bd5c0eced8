//! Z3: a replica's side of quiescence (see [`crate::quiesce`]).
//!
//! A primary keeps, per member, whether its group is quiesced for that
//! member's node (no Commit entries go there) or proposed; a backup keeps
//! whether it follows its primary quiesced. The shard's pairs hold the sets
//! and digests; the replica says when it may enter and when it must leave.

use cohort_messages::{GroupId, MemberIndex, NodeId, QuietGroup};

use super::{Replica, RoleState, Status};
use crate::effect::FlushId;
use crate::effects::Effects;
use crate::metrics::ShardMetrics;
use crate::quiesce::Pairs;
use crate::replica::GroupActivity;

/// `member`'s bit in the quiet sets. Only voters quiesce (a group with
/// learners never does), so a learner's index past 63 has none.
fn bit(member: MemberIndex) -> u64 {
    crate::quorum::member_bit(member)
}

/// A backup's quiet state: it follows `primary` quiesced in `view`, and its
/// timeout and lease were last renewed from the pair heartbeat taken at
/// `renewed_tick` (so that a settle applies each heartbeat once, as if
/// renewed when it came; see [`Replica::settle_quiet`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct QuietFollow {
    pub(crate) primary: NodeId,
    pub(crate) view: cohort_messages::View,
    renewed_tick: u64,
}

impl Replica {
    /// This group's quiet state as its primary would propose it now.
    fn quiet_group(&self) -> QuietGroup {
        QuietGroup {
            group: self.spec.group,
            incarnation: self.spec.incarnation,
            view: self.view,
            commit: self.commit_max,
        }
    }

    /// The primary this backup follows quiesced, and the view it quiesced
    /// in; None when it does not. For checkers.
    pub fn quiet_follow(&self) -> Option<(NodeId, cohort_messages::View)> {
        self.follow_quiet.map(|follow| (follow.primary, follow.view))
    }

    /// True if the primary holds the group quiesced for `member`.
    pub(crate) fn quiet_member(&self, member: MemberIndex) -> bool {
        self.quiet_members & bit(member) != 0
    }

    /// True if every member that receives the log is quiesced: the group
    /// has no heartbeat of its own to send.
    pub(crate) fn fully_quiet(&self) -> bool {
        self.quiet_members != 0
            && self.spec.learners.is_empty()
            && self.others().all(|member| self.quiet_member(member))
    }

    /// The primary's state still is the one it quiesced.
    fn lead_quiet_holds(&self) -> bool {
        self.is_primary() && self.quiet_at == (self.view, self.commit_max) && self.log.op() == self.commit_max
    }

    /// The backup still follows the view it quiesced in.
    fn follow_holds(&self, primary: NodeId, view: cohort_messages::View) -> bool {
        if self.config.mutated(crate::mutants::Mutant::QuietFollowAcrossViews) {
            return self.status() == Status::Normal && !self.is_learner();
        }
        self.status() == Status::Normal
            && !self.is_learner()
            && self.view == view
            && self.log_view == view
            && self.spec.node_at(self.primary_index()) == Some(primary)
    }

    /// On an idle heartbeat: propose quiescence to every voter that has
    /// answered this view's idle Commits, once the group has been idle for
    /// `commit_quiesce_timeout_ticks` with nothing in flight (every flush up
    /// to `flush_completed` is durable). The proposals go into `pairs`.
    pub(crate) fn propose_quiet(&mut self, now: u64, flush_completed: FlushId, pairs: &mut Pairs) {
        let Some(quiesce_ticks) = self.config.timing.commit_quiesce_timeout_ticks else { return };
        let RoleState::Primary(primary) = &self.role else { return };
        let timing = &self.config.timing;
        let idle_since = primary.heartbeat.progress_tick.saturating_add(timing.commit_heartbeat_timeout_ticks);
        let ready = self.spec.group != GroupId::METADATA
            && primary.heartbeat.activity == GroupActivity::Idle
            && now >= idle_since.saturating_add(quiesce_ticks)
            && self.log.op() == self.commit_max
            && self.commit_min == self.commit_max
            && self.request_queue.is_empty()
            && primary.waits.is_empty()
            && primary.stranded.is_none()
            && !self.is_sealing()
            && self.sealed.is_none()
            && self.superblock_blocked.is_none()
            && !self.superblock_retry
            && self.superblock_flush <= flush_completed
            && primary.lead_after_flush <= flush_completed;
        if !ready {
            return;
        }
        if self.quiet_members | self.quiet_proposed != 0 && !self.lead_quiet_holds() {
            return; // `check_quiet` wakes it after this input.
        }
        let recent = now.saturating_sub(2 * timing.commit_idle_heartbeat_interval_ticks);
        let progress = primary.heartbeat.progress_tick;
        let candidates: Vec<MemberIndex> = self
            .others()
            .filter(|member| (self.quiet_members | self.quiet_proposed) & bit(*member) == 0)
            .filter(|member| primary.confirmed[member.0 as usize])
            .filter(|member| primary.contact_tick[member.0 as usize].is_some_and(|tick| tick >= progress.max(recent)))
            .collect();
        if candidates.is_empty() {
            return;
        }
        self.quiet_at = (self.view, self.commit_max);
        let quiet = self.quiet_group();
        for member in candidates {
            self.quiet_proposed |= bit(member);
            pairs.propose(self.node_of(member), quiet, now);
        }
        assert_eq!(self.quiet_members & self.quiet_proposed, 0, "Z3: a member is quiesced or proposed, not both");
        assert!(self.lead_quiet_holds(), "Z3: proposed at the state it holds");
    }

    /// The peer on `from` accepted the proposal `quiet`, answering the
    /// heartbeat of `tick`: the group stops its Commits to it. False if the
    /// group moved on since (the peer must then forget it).
    pub(crate) fn quiet_confirmed(&mut self, from: NodeId, quiet: &QuietGroup, tick: u64) -> bool {
        let Some(member) = self.spec.index_of(from) else { return false };
        let proposed = self.quiet_proposed & bit(member) != 0;
        self.quiet_proposed &= !bit(member);
        if !proposed || !self.lead_quiet_holds() || *quiet != self.quiet_group() {
            return false;
        }
        self.quiet_members |= bit(member);
        self.renew_contact(member, tick);
        assert!(self.quiet_member(member) && self.quiet_proposed & bit(member) == 0, "Z3: proposed, then quiesced");
        true
    }

    /// The peer on `from` did not take the proposal (or it was withdrawn).
    pub(crate) fn quiet_refused(&mut self, from: NodeId) {
        if let Some(member) = self.spec.index_of(from) {
            self.quiet_proposed &= !bit(member);
            debug_assert_eq!(self.quiet_proposed & bit(member), 0, "Z3: the proposal is withdrawn");
        }
    }

    /// R24 for a quiesced group: a matching reply from the member's node to
    /// the pair heartbeat of `tick` stands in for that member's CommitReply.
    fn renew_contact(&mut self, member: MemberIndex, tick: u64) {
        let slot = &mut self.lead_mut().contact_tick[member.0 as usize];
        *slot = Some(slot.map_or(tick, |before| before.max(tick)));
        debug_assert!(slot.is_some_and(|contact| contact >= tick), "R24: the pair's contact counts");
    }

    /// R8 and the lease for a quiesced backup: a matching pair heartbeat
    /// taken at `now` stands in for an idle Commit of its primary.
    fn renew_lease(&mut self, now: u64) {
        let (idle_timeout, lease) =
            (self.config.timing.idle_timeout_effective_ticks(), self.config.timing.commit_heartbeat_timeout_ticks);
        let RoleState::Backup(backup) = &mut self.role else {
            panic!("Z3: only a backup follows its primary quiesced")
        };
        backup.heartbeat_deadline = backup.heartbeat_deadline.max(now + idle_timeout);
        backup.follows_idle = true;
        self.lease_expiry = self.lease_expiry.max(now + lease);
        debug_assert!(self.lease_expiry > now, "V7: the stand-in Commit grants a lease");
    }

    /// Bring a quiesced replica's contact ticks (primary) or its timeout
    /// and lease (backup) up to its pairs' newest match. A pair heartbeat
    /// renews every group quiesced between the two shards, so the pair
    /// keeps that tick once instead of writing it into each replica (which
    /// cost O(groups) per idle interval); the shard settles a replica
    /// before it handles any input of it or wakes it, while its state is
    /// still the one it quiesced in. Renewals only ever move forward, so
    /// settling late gives what renewing each replica at once would have.
    pub(crate) fn settle_quiet(&mut self, pairs: &Pairs) {
        debug_assert!(self.quiet_members & self.quiet_proposed == 0, "Z3: a member is quiesced or proposed, not both");
        if let Some(follow) = self.follow_quiet
            && let Some(tick) = pairs.follow_match_tick(follow.primary)
            && tick > follow.renewed_tick
        {
            // A Commit handled since the last settle may have set the
            // timeout anew: older heartbeats were applied before it.
            self.follow_quiet = Some(QuietFollow { renewed_tick: tick, ..follow });
            self.renew_lease(tick);
        }
        if self.quiet_members == 0 {
            return;
        }
        for index in 0..self.spec.total() as u8 {
            if let Some(tick) = self.settled_contact(pairs, MemberIndex(index)) {
                self.renew_contact(MemberIndex(index), tick);
            }
        }
    }

    /// The contact with `member` its pair vouches for, if the group is
    /// quiesced for it.
    pub(crate) fn settled_contact(&self, pairs: &Pairs, member: MemberIndex) -> Option<u64> {
        if !self.quiet_member(member) {
            return None;
        }
        self.spec.node_at(member).and_then(|node| pairs.lead_contact_tick(node))
    }

    /// Assertions: the replica is quiesced only where its pairs hold it (the
    /// shard checks the converse).
    pub(crate) fn quiet_invariants(&self, pairs: &Pairs) {
        let group = self.spec.group;
        // What `check_quiet` leaves after every input: each end is still
        // where it quiesced (so a primary still leads, a backup follows).
        let leads = self.quiet_members | self.quiet_proposed != 0;
        assert!(!leads || self.lead_quiet_holds(), "Z3: {group} quiet for a view or commit point it left");
        assert_eq!(self.quiet_members & self.quiet_proposed, 0, "Z3: {group}: a member is quiesced or proposed");
        if let Some(QuietFollow { primary, view, .. }) = self.follow_quiet {
            assert!(self.follow_holds(primary, view), "Z3: {group} follows {primary} quiet in a view it left");
            assert!(matches!(self.role, RoleState::Backup(_)), "Z3: {group} follows quiet as a backup");
            assert!(pairs.follows(primary, group), "Z3: {group} follows {primary} quiet in their pair");
        }
        for index in 0..self.spec.total() as u8 {
            let member = MemberIndex(index);
            if self.quiet_member(member) {
                let node = self.spec.node_at(member);
                assert!(
                    node.is_some_and(|node| pairs.leads(node, group)),
                    "Z3: {group} is quiet in its pair with {member:?}"
                );
            }
        }
    }

    /// A backup takes a proposal from its primary's node `from` only if it
    /// follows that primary in that view with exactly that log, all of it
    /// durable and applied. Taking it is a Commit of that view: the timeout
    /// and the lease start again.
    pub(crate) fn accept_quiet(&mut self, from: NodeId, quiet: &QuietGroup, now: u64, out: &mut Effects) -> bool {
        if self.config.timing.commit_quiesce_timeout_ticks.is_none()
            || self.follow_quiet.is_some()
            || self.is_primary()
            || self.state_transfer.is_some()
            || self.recovery.is_some()
            || !self.follow_holds(from, quiet.view)
            || self.log.op() != quiet.commit
            || self.durable_op != self.log.op()
        {
            return false;
        }
        self.learn_commit(quiet.commit, out);
        if self.commit_min != quiet.commit {
            return false;
        }
        self.follow_quiet = Some(QuietFollow { primary: from, view: quiet.view, renewed_tick: now });
        self.renew_lease(now);
        assert!(self.follow_holds(from, quiet.view), "Z3: it follows what it accepted");
        true
    }

    /// The primary wakes: every peer forgets the group, and its Commits go
    /// out again from the next send tick.
    pub(crate) fn wake_lead(&mut self, pairs: &mut Pairs, metrics: &mut ShardMetrics) {
        let members = self.quiet_members | self.quiet_proposed;
        if members == 0 {
            return;
        }
        metrics.quiet_woken += u64::from(self.quiet_members.count_ones());
        for index in 0..self.spec.total() as u8 {
            let member = MemberIndex(index);
            if members & bit(member) != 0
                && let Some(node) = self.spec.node_at(member)
            {
                pairs.lead_leave(node, self.spec.group);
            }
        }
        self.quiet_members = 0;
        self.quiet_proposed = 0;
        debug_assert!(!self.fully_quiet(), "Z3: a woken primary heartbeats again");
    }

    /// The backup leaves its quiet state: its own timeout runs again, from
    /// the last matching heartbeat.
    pub(crate) fn unfollow(&mut self, pairs: &mut Pairs, metrics: &mut ShardMetrics) {
        if let Some(QuietFollow { primary, .. }) = self.follow_quiet.take() {
            metrics.quiet_woken += 1;
            pairs.follow_drop(primary, self.spec.group);
        }
        debug_assert!(self.follow_quiet.is_none(), "Z3: its own timeout runs again");
    }

    /// The replica leaves the shard (removed, or replaced by its next
    /// incarnation): its pairs forget it on both ends.
    pub(crate) fn leave_quiet(&mut self, pairs: &mut Pairs, metrics: &mut ShardMetrics) {
        self.wake_lead(pairs, metrics);
        self.unfollow(pairs, metrics);
        assert!(self.quiet_members | self.quiet_proposed == 0 && self.follow_quiet.is_none(), "Z3: it left its pairs");
    }

    /// After any input: a primary or backup whose state moved away from the
    /// one it quiesced in leaves the quiet state.
    pub(crate) fn check_quiet(&mut self, pairs: &mut Pairs, metrics: &mut ShardMetrics) {
        if self.quiet_members | self.quiet_proposed != 0 && !self.lead_quiet_holds() {
            self.wake_lead(pairs, metrics);
        }
        if let Some(QuietFollow { primary, view, .. }) = self.follow_quiet
            && !self.follow_holds(primary, view)
        {
            self.unfollow(pairs, metrics);
        }
        debug_assert!(self.quiet_members | self.quiet_proposed == 0 || self.lead_quiet_holds(), "Z3: checked");
    }
}
