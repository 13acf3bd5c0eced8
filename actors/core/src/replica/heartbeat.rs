//! Commit heartbeats and their replies (R1–R8, R14, R20–R24, R27).
//!
//! The primary's schedule runs on the shard's send ticks (every P ticks,
//! R1). A group is busy while its `(view, commit)` moves and heartbeats on
//! every send tick (R3); after `commit_heartbeat_timeout` without movement it
//! turns idle, sends its first idle heartbeat on that same send tick (R20),
//! and afterwards only on send ticks that are multiples of
//! `commit_idle_heartbeat_interval`, the same ticks for every group of the
//! shard so idle groups share frames. Eager Commits (R6) are sent by
//! [`Replica::advance_commit`] whenever the commit point moves.
//!
//! A backup restarts its timeout only on a newer Commit from the primary of
//! its current view (R8, R22), choosing the timeout by the entry's state,
//! and queues a CommitReply that echoes the Commit's timestamp (R27), from
//! which the primary dates its quorum window (R24).

use cohort_messages::{CommitEntry, CommitReplyEntry, HeartbeatState as WireState, Op, View};

use super::Context;
use super::normal::TIMESTAMP_PER_TICK;
use super::{Replica, RoleState};
use crate::config::CoreConfig;
use crate::effects::Effects;
use crate::quiesce::Pairs;

/// A primary group's activity (R20).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum GroupActivity {
    /// The commit point moved within `commit_heartbeat_timeout`.
    #[default]
    Busy,
    /// It did not.
    Idle,
}

/// The primary's heartbeat schedule state.
#[derive(Clone, Debug, Default)]
pub(crate) struct PrimaryHeartbeat {
    pub activity: GroupActivity,
    /// `(view, commit)` at the last heartbeat decision.
    pub last: Option<(View, Op)>,
    /// The send tick at which `(view, commit)` last changed.
    pub progress_tick: u64,
    /// The last tick processed; the next heartbeat is on a send tick after it.
    pub processed_tick: u64,
    /// When this member became primary (for re-sending StartView).
    pub view_start_tick: u64,
}

fn next_multiple_after(tick: u64, every: u64) -> u64 {
    (tick / every + 1) * every
}

impl PrimaryHeartbeat {
    /// A new primary: its first heartbeat goes on the next send tick (R2).
    pub(crate) fn reset(&mut self, now: u64) {
        *self = PrimaryHeartbeat {
            activity: GroupActivity::Busy,
            last: None,
            progress_tick: now,
            processed_tick: now,
            view_start_tick: now,
        };
    }

    /// The next tick at which the schedule has something to decide.
    pub(crate) fn next_due_tick(&self, config: &CoreConfig, commit: Op, view: View) -> u64 {
        let timing = &config.timing;
        let idle_unchanged = self.activity == GroupActivity::Idle && self.last == Some((view, commit));
        if idle_unchanged {
            next_multiple_after(self.processed_tick, timing.commit_idle_heartbeat_interval_ticks)
        } else {
            next_multiple_after(self.processed_tick, timing.commit_broadcast_interval_ticks)
        }
    }
}

impl Replica {
    /// The primary's work on a tick: decide and queue this send tick's
    /// heartbeats, and propose quiescence into `pairs` (Z3) on an idle one.
    pub(crate) fn heartbeat_tick(&mut self, now: u64, cx: &mut Context<'_>, pairs: &mut Pairs) {
        let timing = self.config.timing.clone();
        let current = (self.view, self.commit_max);
        let heartbeat = &mut self.lead_mut().heartbeat;
        if !now.is_multiple_of(timing.commit_broadcast_interval_ticks) || now <= heartbeat.processed_tick {
            return;
        }
        heartbeat.processed_tick = now;
        if heartbeat.last == Some(current) {
            // No commit since the last send tick: Prepares or PrepareOks may
            // have been lost.
            self.resend_uncommitted_prepares(cx);
        }
        let heartbeat = &mut self.lead_mut().heartbeat;
        let mut turned_idle = false;
        let state = if heartbeat.last != Some(current) {
            heartbeat.last = Some(current);
            heartbeat.progress_tick = now;
            heartbeat.activity = GroupActivity::Busy;
            Some(WireState::Busy)
        } else if heartbeat.activity == GroupActivity::Busy {
            if now - heartbeat.progress_tick >= timing.commit_heartbeat_timeout_ticks {
                // R20: turn idle and say so on this same send tick.
                heartbeat.activity = GroupActivity::Idle;
                turned_idle = true;
                Some(WireState::Idle)
            } else {
                Some(WireState::Busy)
            }
        } else if now.is_multiple_of(timing.commit_idle_heartbeat_interval_ticks) {
            Some(WireState::Idle)
        } else {
            None
        };
        debug_assert!(!turned_idle || state == Some(WireState::Idle), "R20: a group turns idle on an idle heartbeat");
        debug_assert_eq!(heartbeat.last, Some(current), "R3: the schedule saw this send tick's (view, commit)");
        if turned_idle {
            self.snapshot_on_idle(cx.out);
        }
        let Some(state) = state else { return };
        // R12: the superblock is saved before the group's Commit joins a batch.
        self.stage_superblock(cx.out);
        for member in self.receivers() {
            if self.quiet_member(member) {
                continue; // Z3: its pair's heartbeat stands in for this Commit.
            }
            let entry = self.commit_entry(state, now);
            cx.out.queue_commit(self.node_of(member), entry, self.superblock_flush);
        }
        if state == WireState::Idle {
            self.ask_for_missing_acks(now, cx);
            self.propose_quiet(now, cx.out.flush_completed(), pairs);
        }
        self.unconfirm_silent_learners(now);
        self.resend_start_view(now, cx.out);
        assert!(self.is_primary(), "{self:?}: a heartbeat keeps the role");
        assert_eq!(self.lead().heartbeat.processed_tick, now, "R1: each send tick is decided once");
    }

    /// On an idle heartbeat: each member in this view whose acknowledgement
    /// of the commit point is missing is asked for it again. An idle group
    /// sends no Prepare a member could acknowledge, so one lost PrepareOk
    /// (sent before a restarted node's links were up, say) would leave the
    /// primary counting it behind for good: a learner never promoted (P4,
    /// seed 5004109), a voter never handed the group (C4, C5). The ask is
    /// the Prepare of the commit point, which a member holding it durably
    /// acknowledges again (and one missing it repairs up to), or, once the
    /// log was snapshotted up to the commit point, the StartView, a few
    /// bytes then, which a member in this view answers the same way. Once
    /// per idle heartbeat, only while the acknowledgement is missing.
    fn ask_for_missing_acks(&mut self, now: u64, cx: &mut Context<'_>) {
        let commit = self.commit_max;
        let missing: Vec<_> = self
            .receivers()
            .filter(|member| {
                !self.quiet_member(*member) && self.confirmed_of(*member) && self.acked_of(*member) < commit
            })
            .collect();
        for member in missing {
            match self.log.get(commit).cloned() {
                Some(entry) if commit > self.log.base() => {
                    let prepare = self.prepare_message(entry);
                    self.send_prepare(self.node_of(member), prepare, cx);
                }
                _ => self.send_start_view(member, now, cx.out),
            }
        }
    }

    /// Re-send the uncommitted Prepares each backup has not acknowledged; a
    /// backup re-acknowledges a Prepare it already holds durably.
    fn resend_uncommitted_prepares(&mut self, cx: &mut Context<'_>) {
        let receivers: Vec<_> = self.receivers().collect();
        for member in receivers {
            self.resend_prepares_to_member(member, cx);
        }
    }

    /// A primary sends `member` every uncommitted op it has not acknowledged.
    fn resend_prepares_to_member(&mut self, member: cohort_messages::MemberIndex, cx: &mut Context<'_>) {
        if !self.is_primary() || self.log.op() <= self.commit_max {
            return;
        }
        let from = self.acked_of(member).max(self.commit_max).next();
        self.send_prepares_from(member, from, cx);
    }

    /// K4: the link to `member` drained. A primary sends it the ops it held
    /// back, committed or not, from the first it has not acknowledged: at most
    /// a pipeline's worth; a backup further behind repairs the rest itself.
    pub(crate) fn send_held_back_prepares(&mut self, member: cohort_messages::MemberIndex, cx: &mut Context<'_>) {
        assert!((member.0 as usize) < self.spec.total(), "K4: a member of the group");
        if !self.is_primary() {
            return;
        }
        let from = self.acked_of(member).next();
        self.send_prepares_from(member, from, cx);
    }

    fn send_prepares_from(
        &mut self,
        member: cohort_messages::MemberIndex,
        from: cohort_messages::Op,
        cx: &mut Context<'_>,
    ) {
        let limit = usize::try_from(self.config.pipeline_max_ops).unwrap_or(usize::MAX);
        let entries: Vec<_> = self.log.entries_from(from).take(limit).cloned().collect();
        for entry in entries {
            let prepare = self.prepare_message(entry);
            self.send_prepare(self.node_of(member), prepare, cx);
        }
    }

    /// Members that have not confirmed this view get the StartView again.
    fn resend_start_view(&mut self, now: u64, out: &mut Effects) {
        if now < self.lead().heartbeat.view_start_tick + 2 * self.config.timing.commit_broadcast_interval_ticks {
            return;
        }
        // Z4: not to one that got it within a repair timeout (an answer to
        // its election messages, see `answer_with_start_view`).
        let unconfirmed: Vec<_> =
            self.receivers().filter(|m| !self.confirmed_of(*m) && self.start_view_due(*m, now)).collect();
        for member in unconfirmed {
            self.send_start_view(member, now, out);
        }
    }

    /// A backup handles one Commit entry (R8, R17, R22).
    pub(crate) fn on_commit(
        &mut self,
        from: cohort_messages::NodeId,
        entry: CommitEntry,
        now: u64,
        cx: &mut Context<'_>,
    ) {
        debug_assert_eq!(self.spec.node_at(entry.replica), Some(from), "the shard checked the sender");
        let (seen_before, lease_before) = (self.last_commit_seen, self.lease_expiry);
        self.take_commit(from, entry, now, cx);
        assert!(self.last_commit_seen >= seen_before, "R8: the newest Commit seen only grows");
        assert!(self.lease_expiry >= lease_before, "V7: a granted lease is never taken back");
    }

    /// [`Replica::on_commit`]: restart the timeout, learn the commit point,
    /// queue the reply.
    fn take_commit(&mut self, from: cohort_messages::NodeId, entry: CommitEntry, now: u64, cx: &mut Context<'_>) {
        let election_short = self.election().is_some_and(|e| e.svc_from.count() < self.spec.quorums.view_change);
        if entry.view < self.view
            && election_short
            && entry.replica == self.primary_index_of(entry.view)
            && self.spec.node_at(entry.replica) == Some(from)
        {
            // Stranded alone in a later view while the group goes on: answer
            // from our view, so its primary knows we hear it and can move the
            // group up to us (see `on_tick`).
            return cx.queue_reply(
                from,
                CommitReplyEntry {
                    group: self.spec.group,
                    partition_incarnation: self.spec.incarnation,
                    view: self.view,
                    timestamp_monotonic: entry.timestamp_monotonic,
                    replica: self.spec.me,
                },
            );
        }
        let stale_accepted = self.config.mutated(crate::mutants::Mutant::StaleViewAccepted)
            && entry.view < self.view
            && entry.replica == self.primary_index_of(entry.view);
        let current = entry.view == self.view && entry.replica == self.primary_index();
        let follows = matches!(self.role, RoleState::Backup(_) | RoleState::Learner);
        if !(current || stale_accepted) || self.node_of(entry.replica) != from || !follows {
            // R8: only the primary of our current view restarts our timeout.
            return;
        }
        let stamp = (entry.view, entry.timestamp_monotonic);
        if stamp > self.last_commit_seen {
            self.last_commit_seen = stamp;
            let timing = &self.config.timing;
            let timeout = match entry.heartbeat_state {
                WireState::Idle => timing.idle_timeout_effective_ticks(),
                WireState::Busy | WireState::Eager => timing.commit_heartbeat_timeout_ticks,
            };
            self.lease_expiry = self.lease_expiry.max(now + timing.commit_heartbeat_timeout_ticks);
            // A learner keeps no timeout: it never starts a view change.
            if let RoleState::Backup(backup) = &mut self.role {
                backup.heartbeat_deadline = now + timeout;
                backup.follows_idle = entry.heartbeat_state == WireState::Idle;
                debug_assert!(
                    backup.heartbeat_deadline > now,
                    "R22: a newer Commit pushes the timeout into the future"
                );
            }
        }
        debug_assert!(self.last_commit_seen >= stamp, "the newest Commit seen only grows");
        if self.log_view != self.view {
            return; // Lagging: no reply until our log is the view's.
        }
        self.learn_commit(entry.commit, cx.out);
        if entry.heartbeat_state == WireState::Idle {
            self.snapshot_on_idle(cx.out);
        }
        cx.queue_reply(
            from,
            CommitReplyEntry {
                group: self.spec.group,
                partition_incarnation: self.spec.incarnation,
                view: entry.view,
                timestamp_monotonic: entry.timestamp_monotonic,
                replica: self.spec.me,
            },
        );
    }

    /// The primary: a voter that hears it is stuck in the later `view`
    /// (see `stranded`).
    pub(crate) fn note_stranded(&mut self, view: View, now: u64) {
        let primary = self.lead_mut();
        primary.stranded = match primary.stranded {
            Some((stranded, since, _)) if stranded == view => Some((stranded, since, now)),
            Some((stranded, since, last)) if stranded > view => Some((stranded, since, last)),
            _ => Some((view, now, now)),
        };
    }

    /// The primary handles one CommitReply entry (R24, R29).
    pub(crate) fn on_commit_reply(&mut self, entry: CommitReplyEntry, now: u64, cx: &mut Context<'_>) {
        debug_assert!(self.spec.node_at(entry.replica).is_some(), "the shard checked the sender");
        if self.is_primary() && entry.view > self.view && self.spec.is_voter(entry.replica) {
            if self.view_jump_refused(entry.view, now) {
                // T5: a voter stranded that far ahead is no honest one's
                // (see `view_jump_max_views`); the group stays where it is.
                return cx.refuse(crate::refusal::Refusal::ViewJump);
            }
            return self.note_stranded(entry.view, now);
        }
        if !self.is_primary() || entry.view != self.view || entry.replica == self.spec.me {
            return;
        }
        if entry.timestamp_monotonic > self.timestamp {
            // A reply echoes a Commit this process sent, and its timestamps
            // only grow; a later one is forged, or a stranded member's late
            // reply to the process before a restart, whose ticks may be
            // ahead of this one's: counted, it would date the quorum window
            // (R24) in the future and let this primary serve reads (V7).
            return cx.refuse(crate::refusal::Refusal::ReplyTimestampUnsent);
        }
        if let Some(slot) = self.learner_slot(entry.replica) {
            let sent_tick = entry.timestamp_monotonic.0 / TIMESTAMP_PER_TICK;
            return self.on_learner_commit_reply(slot, sent_tick);
        }
        let member = entry.replica.0 as usize;
        let primary = self.lead_mut();
        if member >= primary.contact_tick.len() {
            return;
        }
        primary.confirmed[member] = true;
        let sent_tick = entry.timestamp_monotonic.0 / TIMESTAMP_PER_TICK;
        let before = primary.contact_tick[member];
        primary.contact_tick[member] = Some(before.map_or(sent_tick, |tick| tick.max(sent_tick)));
        debug_assert!(primary.contact_tick[member] >= before, "R24: a member's last contact never goes back");
    }
}
