//! View change (V2, Q3, P1, P2).
//!
//! A backup whose heartbeat timeout passed (or a primary that lost its quorum
//! window, R24) moves to the next view: it makes the new view durable, then
//! sends StartViewChange to all and DoViewChange (its log since its snapshot)
//! to the new view's primary. The new primary waits for Qv DoViewChanges, its
//! own included, takes the log with the highest `(log_view, op)`, and sends
//! StartView. Qv + Qr > n, so the chosen log holds every committed op.
//!
//! Leases (V7): a normal backup does not join a view change while the lease
//! it granted the primary (one heartbeat timeout after the newest Commit it
//! accepted) is running. Any new view needs a DoViewChange from a member of
//! every replication quorum, so no new primary exists while the old one may
//! still serve reads. The one exception: a StartViewChange or DoViewChange
//! for a later view from that primary itself releases the lease at once
//! (the primary gave the view up; why that is safe is in `transfer`, C4).
//!
//! Adoption rule: a member adopts a new log only from the first op where the
//! two differ. Every op from there on in its old log was uncommitted (a
//! committed op is in every later view's log at the same op, and commits are
//! prefixes), so a crash halfway through the rewrite never loses a committed
//! op that this member held.

use cohort_messages::{
    DoViewChange, LogEntry, MemberIndex, Message, NodeId, Op, ReplyError, StartView, StartViewChange, View,
};

use super::Context;
use super::{Backup, Election, Primary, Replica, RoleState, Status};
use crate::effects::Effects;
use crate::mutants::Mutant;
use crate::quorum::{LogSummary, MemberSet, select_log};
use crate::refusal::Refusal;

/// What the new primary keeps of one DoViewChange.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DoViewChangeSummary {
    pub log_view: View,
    pub op: Op,
    pub commit: Op,
    pub replica: cohort_messages::MemberIndex,
    pub log: Vec<LogEntry>,
}

impl Replica {
    /// Enter the view change for `view`.
    pub(crate) fn start_view_change(&mut self, view: View, now: u64, cx: &mut Context<'_>) {
        assert!(!self.is_learner(), "{self:?}: a learner never starts a view change (P4)");
        assert!(view > self.view || (view == self.view && self.status() == Status::Normal && self.log_view < view));
        cx.metrics.view_changes_started += 1;
        let timing = &self.config.timing;
        let mut svc_from = MemberSet::EMPTY;
        svc_from.insert(self.spec.me);
        let deadline = now + timing.view_change_timeout_ticks;
        let election = Election::new(self.spec.members.len(), deadline, now + timing.repair_timeout_ticks, svc_from);
        let mut former = std::mem::replace(&mut self.role, RoleState::ViewChange(election));
        self.view = view;
        if matches!(former, RoleState::Primary(_)) || !self.request_queue.is_empty() {
            self.abandon_requests(cx.out);
        }
        self.fail_waits(former.take_waits(), cx.out);
        self.stage_superblock(cx.out);
        self.send_view_change_messages(now, cx);
        self.report_role(cx.out);
        for early in std::mem::take(&mut self.early_dvcs) {
            if early.view == self.view {
                // The election may be over already (ours completed it).
                if let Some(election) = self.election_mut() {
                    election.svc_from.insert(early.replica);
                }
                self.record_dvc(early, now, cx);
            }
        }
        assert_eq!(self.view, view, "{self:?}: a view change enters its view");
        assert!(self.early_dvcs.is_empty(), "early DoViewChanges are used or dropped when the replica joins");
        assert!(self.status() == Status::ViewChange || self.is_primary(), "{self:?}: electing, or elected at once");
    }

    /// Queued requests cannot be served in a view change: tell the clients.
    fn abandon_requests(&mut self, out: &mut Effects) {
        debug_assert!(!self.is_primary(), "requests are abandoned by a replica that stopped leading");
        for request in std::mem::take(&mut self.request_queue) {
            let detail = format!("{}: view change to {} started; retry", self.spec.group, self.view);
            self.reply_error(&request, ReplyError::ViewChange, detail, out);
        }
        assert!(self.request_queue.is_empty(), "every queued request is answered");
    }

    /// A StartViewChange, DoViewChange or StartView: it leaves once
    /// everything staged before it, the view's superblock included, is durable.
    pub(crate) fn send_view_change(&self, to: NodeId, message: Message, out: &mut Effects) {
        if self.config.mutated(Mutant::ViewChangeBeforeDurable) {
            out.send(to, message);
        } else {
            out.send_durable(to, message);
        }
    }

    /// SVC to all, DVC to the new primary (or to ourselves), after the view is durable.
    pub(crate) fn send_view_change_messages(&mut self, now: u64, cx: &mut Context<'_>) {
        assert_eq!(self.status(), Status::ViewChange, "{self:?}: election messages come from an election");
        let svc = StartViewChange {
            group: self.spec.group,
            incarnation: self.spec.incarnation,
            view: self.view,
            replica: self.spec.me,
        };
        for member in self.others() {
            self.send_view_change(self.node_of(member), Message::StartViewChange(svc), cx.out);
        }
        let dvc = self.do_view_change_message();
        let primary = self.primary_index();
        if primary == self.spec.me {
            self.record_dvc(dvc, now, cx);
        } else {
            self.send_view_change(self.node_of(primary), Message::DoViewChange(dvc), cx.out);
        }
    }

    fn do_view_change_message(&self) -> DoViewChange {
        DoViewChange {
            group: self.spec.group,
            incarnation: self.spec.incarnation,
            view: self.view,
            log_view: self.log_view,
            op: self.log.op(),
            commit: self.commit_max.min(self.log.op()),
            replica: self.spec.me,
            log: self.log.entries_from(self.log.base().next()).cloned().collect(),
        }
    }

    /// Join the view change for `view` that member `from` takes part in,
    /// unless this member is a primary still inside its quorum window, or a
    /// backup whose granted lease still runs (it joins when the lease ends;
    /// `on_tick` reads `svc_view_seen`). This is also what keeps one member
    /// that cannot hear the primary (a one-way partition) from dragging a
    /// healthy group through view changes. A backup's lease does not hold it
    /// back when `from` is the primary of its view: that primary gave the
    /// view up (see `transfer` for why this is safe, C4).
    fn join_view_change(&mut self, view: View, from: MemberIndex, now: u64, cx: &mut Context<'_>) {
        if view <= self.view || self.is_learner() {
            return;
        }
        self.svc_view_seen = self.svc_view_seen.max(view);
        debug_assert!(self.svc_view_seen > self.view, "the later election is remembered until joined");
        let healthy_primary = self.is_primary() && now < self.step_down_tick();
        let holder = if self.config.mutated(Mutant::LeaseReleasedByNextPrimary) {
            self.primary_index_of(view)
        } else {
            self.primary_index()
        };
        let released = from == holder && from != self.spec.me;
        let leased_backup = self.status() == Status::Normal
            && !self.is_primary()
            && now < self.lease_expiry
            && !released
            && !self.config.mutated(Mutant::LeaseIgnored);
        // A sealing incarnation serves no reads (its primary stopped when the
        // seal entered its log, before any backup holds it), so nothing rests
        // on leases any more: follow a member that moved to a later view, so
        // that it too reaches the seal before the group switches.
        if (healthy_primary || leased_backup) && !self.is_sealing() {
            return;
        }
        self.start_view_change(view, now, cx);
    }

    /// A lagging backup asks the primary of its view for the StartView: a
    /// StartViewChange for the primary's own view is answered with it.
    pub(crate) fn request_start_view(&mut self, out: &mut Effects) {
        debug_assert!(self.log_view < self.view && !self.is_primary(), "only a lagging backup asks");
        let svc = StartViewChange {
            group: self.spec.group,
            incarnation: self.spec.incarnation,
            view: self.view,
            replica: self.spec.me,
        };
        out.send(self.node_of(self.primary_index()), Message::StartViewChange(svc));
    }

    pub(crate) fn on_start_view_change(&mut self, svc: StartViewChange, now: u64, cx: &mut Context<'_>) {
        debug_assert!(self.spec.is_voter(svc.replica), "P4: the door refuses a learner's election messages");
        if self.is_learner() {
            return; // P4: a learner takes no part in elections.
        }
        if svc.view < self.view && self.is_primary() && self.spec.is_voter(svc.replica) {
            // A member still electing an earlier view (it fell back after a
            // restart, say) while this one runs: show it the current view.
            return self.answer_with_start_view(svc.replica, now, cx);
        }
        if self.view_jump_refused(svc.view, now) {
            return cx.refuse(Refusal::ViewJump);
        }
        if svc.view > self.view && self.recovering_voter_stranded(svc.replica, now) {
            // H1: a recovering voter that lent its vote to a later view
            // (its answers showed no primary) while this primary took over
            // cannot take this view's log: it promised not to act in
            // earlier views. It asks every repair timeout, so it hears us:
            // stranded, as a voter answering Commits from a later view is.
            self.note_stranded(svc.view, now);
        }
        if svc.view > self.view {
            self.join_view_change(svc.view, svc.replica, now, cx);
        }
        if svc.view == self.view
            && let Some(election) = self.election_mut()
        {
            election.svc_from.insert(svc.replica);
        } else if svc.view == self.view && self.is_primary() {
            // A member still electing our view missed the StartView.
            self.answer_with_start_view(svc.replica, now, cx);
        }
    }

    /// H1: this is a normal primary, and `member` (a voter: only voters
    /// recover, and the door lets no learner's election message in) asked
    /// it for its state, recovering, within the last two repair timeouts.
    fn recovering_voter_stranded(&self, member: MemberIndex, now: u64) -> bool {
        let window = 2 * self.config.timing.repair_timeout_ticks;
        self.is_primary()
            && self.status() == super::Status::Normal
            && self
                .lead()
                .recovery_asked_tick
                .get(member.0 as usize)
                .copied()
                .flatten()
                .is_some_and(|asked| now < asked.saturating_add(window))
    }

    pub(crate) fn on_do_view_change(&mut self, dvc: DoViewChange, now: u64, cx: &mut Context<'_>) {
        debug_assert!(self.spec.is_voter(dvc.replica), "P4: the door refuses a learner's election messages");
        self.take_do_view_change(dvc, now, cx);
        // T5: at most one kept per voter, however many arrive.
        assert!(self.early_dvcs.len() <= self.spec.members.len(), "{self:?}: early DoViewChanges past one per voter");
    }

    /// [`Replica::on_do_view_change`]: join, keep it for later, or count it.
    fn take_do_view_change(&mut self, dvc: DoViewChange, now: u64, cx: &mut Context<'_>) {
        if self.is_learner() {
            return; // P4: a learner takes no part in elections.
        }
        if self.view_jump_refused(dvc.view, now) {
            return cx.refuse(Refusal::ViewJump);
        }
        if dvc.view > self.view {
            self.join_view_change(dvc.view, dvc.replica, now, cx);
            if dvc.view > self.view && self.primary_index_of(dvc.view) == self.spec.me {
                // Our lease still runs: keep it for when we join, instead of
                // making the sender wait for its next re-send.
                self.early_dvcs.retain(|early| early.replica != dvc.replica);
                self.early_dvcs.push(dvc);
                return;
            }
        }
        if dvc.view == self.view
            && let Some(election) = self.election_mut()
        {
            election.svc_from.insert(dvc.replica);
        }
        if dvc.view != self.view || self.primary_index() != self.spec.me {
            return;
        }
        if self.is_primary() {
            return self.answer_with_start_view(dvc.replica, now, cx);
        }
        if self.status() == Status::ViewChange {
            self.record_dvc(dvc, now, cx);
        }
    }

    /// Z4: answer a member's election message about a view this primary
    /// leads with the StartView, at most once per repair timeout.
    ///
    /// A member re-sends its StartViewChange and DoViewChange together every
    /// repair timeout until it hears the StartView; each used to draw a
    /// StartView of its own, and so did one that crossed the StartView on
    /// its way. When thousands of groups fail over at once the StartView
    /// takes longer than that timeout to arrive and be handled, so those
    /// answers doubled or tripled the very work that delayed it (measured at
    /// 100,000 groups: docs/benchmarks.md). One within the timeout is
    /// presumed still on its way; a lost one is answered at the member's
    /// next re-send, or sent again by `resend_start_view`. Withholding a
    /// message is what a loss would do: no rule of seed 000 depends on it.
    pub(crate) fn answer_with_start_view(&mut self, member: MemberIndex, now: u64, cx: &mut Context<'_>) {
        debug_assert!(self.is_primary(), "only a primary answers with its view's StartView");
        if !self.start_view_due(member, now) {
            cx.metrics.start_views_withheld += 1;
            return;
        }
        self.send_start_view(member, now, cx.out);
    }

    /// The primary: whether `member` last got this view's StartView at
    /// least a repair timeout ago (or never; a learner is not tracked).
    pub(crate) fn start_view_due(&self, member: MemberIndex, now: u64) -> bool {
        let window = self.config.timing.repair_timeout_ticks;
        let sent = self.lead().start_view_sent_tick.get(member.0 as usize);
        sent.is_none_or(|sent| now >= sent.saturating_add(window))
    }

    /// The primary sends `member` the view's StartView now, and notes when.
    pub(crate) fn send_start_view(&mut self, member: MemberIndex, now: u64, out: &mut Effects) {
        if let Some(sent) = self.lead_mut().start_view_sent_tick.get_mut(member.0 as usize) {
            *sent = now;
        }
        let message = self.start_view_message();
        self.send_view_change(self.node_of(member), Message::StartView(message), out);
        debug_assert!(!self.start_view_due(member, now) || !self.spec.is_voter(member), "Z4: its send is noted");
    }

    /// Keep a DoViewChange of this replica's election (none once it is
    /// over), and complete the election if it can.
    fn record_dvc(&mut self, dvc: DoViewChange, now: u64, cx: &mut Context<'_>) {
        assert_eq!(dvc.view, self.view, "{self:?}: a DoViewChange of another view kept");
        let member = dvc.replica.0 as usize;
        let Some(election) = self.election_mut() else { return };
        if member >= election.dvcs.len() {
            return;
        }
        election.dvcs[member] = Some(DoViewChangeSummary {
            log_view: dvc.log_view,
            op: dvc.op,
            commit: dvc.commit,
            replica: dvc.replica,
            log: dvc.log,
        });
        self.try_complete_view_change(now, cx);
    }

    /// T5: forget the DoViewChange of `member`, whose log must not win.
    fn drop_dvc(&mut self, member: MemberIndex) {
        if let Some(election) = self.election_mut() {
            election.dvcs[member.0 as usize] = None;
        }
    }

    /// With Qv DoViewChanges (ours included), adopt the best log and start the view.
    pub(crate) fn try_complete_view_change(&mut self, now: u64, cx: &mut Context<'_>) {
        let Some(election) = self.election() else { return };
        if self.primary_index() != self.spec.me {
            return;
        }
        let count = election.dvcs.iter().filter(|d| d.is_some()).count();
        let short = usize::from(self.config.mutated(Mutant::ViewChangeQuorumShort));
        let needed = self.spec.quorums.view_change.saturating_sub(short).max(1);
        if count < needed || election.dvcs[self.spec.me.0 as usize].is_none() {
            return;
        }
        let logs: Vec<LogSummary> = election
            .dvcs
            .iter()
            .flatten()
            .map(|d| LogSummary { member: d.replica, log_view: d.log_view, op: d.op, commit: d.commit })
            .collect();
        let (mut best, commit_known) = select_log(&logs, self.spec.me);
        if self.config.mutated(Mutant::LogSelectionByOp) {
            let me = self.spec.me;
            let longest = logs.iter().max_by_key(|log| (log.op, log.log_view, log.member == me));
            best = longest.map_or(best, |log| log.member);
        }
        let best = election.dvcs[best.0 as usize].clone().expect("the chosen log is one we hold");
        if best.replica != self.spec.me && self.rewrites_applied(&best.log) {
            // T5: no correct member's log wins and differs from what we
            // applied (committed ops are in it). Drop it; others may do.
            cx.refuse(Refusal::LogRewritesApplied);
            self.drop_dvc(best.replica);
            return self.try_complete_view_change(now, cx);
        }
        if best.replica != self.spec.me && self.joins_going_back(best.log_view, &best.log, best.op) {
            // T5: likewise for a log whose views would go back where it
            // joins ours (a correct log and ours agree up to the join).
            cx.refuse(Refusal::LogViewsGoBack);
            self.drop_dvc(best.replica);
            return self.try_complete_view_change(now, cx);
        }
        if best.replica != self.spec.me && !self.adopt_log(best.log_view, &best.log, best.op, cx.out) {
            // Our log cannot be joined to the chosen one (we lag behind its
            // snapshot). Abstain; the timeout moves the group to the next view,
            // and we fetch the state meanwhile (its member serves us while it
            // is in this election, T5).
            self.request_state_transfer(best.replica, now, cx.out);
            return;
        }
        self.log_view = self.view;
        self.commit_max = self.commit_max.max(commit_known).min(self.log.op()).max(self.commit_min);
        self.become_primary(now, cx);
        assert!(self.is_primary(), "{self:?}: a completed election makes its primary");
    }

    /// Take the role of primary of the current view: the log is the view's.
    pub(crate) fn become_primary(&mut self, now: u64, cx: &mut Context<'_>) {
        debug_assert_eq!(self.primary_index(), self.spec.me, "only the view's primary index leads it");
        debug_assert!(!self.is_learner(), "P4: a learner never leads");
        debug_assert!(
            matches!(self.role, RoleState::ViewChange(_)) || self.view == View(0),
            "a primary is elected, or leads view 0 from the start"
        );
        cx.metrics.primaries_started += 1;
        self.log_view = self.view;
        self.stage_superblock(cx.out);
        // The StartView leaves with this flush; the view's Prepares follow
        // it. Nothing of an earlier role carries over: no member has
        // confirmed the new view, so no read until a quorum answers, and
        // the step-down clock starts with the view (R24, V7).
        let spec = &self.spec;
        let primary =
            Primary::new(spec.members.len(), spec.me, &spec.learners, now, self.log.op(), self.superblock_flush);
        self.role = RoleState::Primary(Box::new(primary));
        let message = self.start_view_message();
        for member in self.receivers() {
            self.send_view_change(self.node_of(member), Message::StartView(message.clone()), cx.out);
        }
        self.report_role(cx.out);
        self.apply_committed(cx.out);
        self.advance_commit(now, cx);
        debug_assert!(self.is_primary() && self.log_view == self.view, "the new primary's log is its view's");
        debug_assert!(self.lead().start_view_op <= self.log.op(), "Q3: it inherited only what its log holds");
    }

    /// T5: whether `log` differs from ours at an op we already applied, so
    /// that adopting it would rewrite committed state ([`Replica::adopt_log`]
    /// asserts it never does). Logs are compared as adoption compares them:
    /// by the view of each entry we hold.
    fn rewrites_applied(&self, log: &[LogEntry]) -> bool {
        log.iter()
            .filter(|entry| entry.op > self.log.base() && entry.op <= self.commit_min)
            .any(|entry| self.log.get(entry.op).is_some_and(|ours| ours.view != entry.view))
    }

    /// Where adopting `log` (a view's log ending at `op`) would start: the
    /// first op where it differs from ours. `None` if our trusted prefix
    /// does not reach the start of `log`.
    fn adoption_start(&self, source_log_view: View, log: &[LogEntry], op: Op) -> Option<Op> {
        let start = log.first().map(|entry| entry.op).unwrap_or(op.next());
        // H1: a recovering member trusts only what it applied: the rest of
        // its log may be what an earlier process of it took part-way.
        let trusted_end =
            if self.log_view == source_log_view && self.recovery.is_none() { self.log.op() } else { self.commit_min };
        if start.0 > trusted_end.0 + 1 || op < self.log.base() || op < self.commit_min {
            return None;
        }
        let overlap_from = start.max(self.log.base().next());
        let mut diverge = self.log.op().min(op).next();
        for entry in log.iter().filter(|entry| entry.op >= overlap_from) {
            match self.log.get(entry.op) {
                Some(ours) if ours.view == entry.view && entry.op <= self.log.op() => continue,
                _ => {
                    diverge = diverge.min(entry.op);
                    break;
                }
            }
        }
        Some(diverge)
    }

    /// T5: whether adopting `log` would put one of its entries right after
    /// an entry of ours of a later view. The views of a log never go back
    /// ([`Replica::invariants`]); a correct log agrees with ours up to where
    /// adoption starts, so only a forged one does this.
    fn joins_going_back(&self, source_log_view: View, log: &[LogEntry], op: Op) -> bool {
        let Some(diverge) = self.adoption_start(source_log_view, log, op) else { return false };
        let Some(first) = log.iter().find(|entry| entry.op == diverge) else { return false };
        diverge.0 > 0 && self.log.view_at(Op(diverge.0 - 1)).is_some_and(|ours| first.view < ours)
    }

    /// Replace our log with `log` (a view's log ending at `op`) from the first
    /// op where they differ. False if our trusted prefix does not reach the
    /// start of `log`.
    pub(crate) fn adopt_log(&mut self, source_log_view: View, log: &[LogEntry], op: Op, out: &mut Effects) -> bool {
        let Some(diverge) = self.adoption_start(source_log_view, log, op) else { return false };
        assert!(diverge > self.commit_min, "{self:?}: adoption would rewrite applied op {diverge}");
        if self.log.op() >= diverge {
            self.stage_truncate(Op(diverge.0 - 1), out);
        }
        for entry in log.iter().filter(|entry| entry.op >= diverge) {
            self.stage_append(entry.clone(), out);
        }
        debug_assert_eq!(self.log.op(), op);
        true
    }

    /// A backup receives the new view's log.
    pub(crate) fn on_start_view(&mut self, sv: StartView, now: u64, cx: &mut Context<'_>) {
        debug_assert!(self.spec.node_at(sv.replica).is_some(), "the door checked the sender");
        if sv.view < self.view || sv.replica != self.primary_index_of(sv.view) || sv.replica == self.spec.me {
            return;
        }
        if !self.recovery_takes_start_view(sv.view) {
            return; // H1: not before it knows which view's log to take.
        }
        if sv.view == self.view
            && self.status() == Status::Normal
            && self.log_view == self.view
            && self.recovery.is_none()
        {
            // Already in this view: confirm to the primary.
            self.on_durable(now, cx);
            return;
        }
        if self.view_jump_refused(sv.view, now) {
            // T5: a replica that follows a live primary does not leave it for
            // a far view on one message; once its lease ends, it does.
            return cx.refuse(Refusal::ViewJump);
        }
        if self.rewrites_applied(&sv.log) {
            // T5: a correct primary's log holds every op we applied.
            return cx.refuse(Refusal::LogRewritesApplied);
        }
        if self.joins_going_back(sv.view, &sv.log, sv.op) {
            return cx.refuse(Refusal::LogViewsGoBack);
        }
        let view_changed = sv.view > self.view;
        // It follows the view's primary from now on: as a backup, whose
        // timeout starts now, or as the learner it is.
        let follower = if self.is_learner() {
            RoleState::Learner
        } else {
            RoleState::Backup(Backup::new(now, self.config.timing.commit_heartbeat_timeout_ticks))
        };
        let mut former = std::mem::replace(&mut self.role, follower);
        self.view = sv.view;
        self.svc_view_seen = self.svc_view_seen.max(sv.view);
        self.fail_waits(former.take_waits(), cx.out);
        if self.adopt_log(sv.view, &sv.log, sv.op, cx.out) {
            // H1: the primary's whole log, at or past the target view: the
            // superblock staged below, after it, ends the recovery.
            self.end_recovery(cx);
            self.log_view = self.view;
            self.commit_max = self.commit_max.max(sv.commit);
            self.state_transfer = None;
            self.stage_superblock(cx.out);
            self.apply_committed(cx.out);
            self.repair_target = self.repair_target.max(self.commit_max);
            if self.is_learner() {
                self.confirm_view_as_learner(cx.out);
            }
        } else {
            // Lagging: fetch the primary's snapshot; the primary re-sends
            // StartView until we confirm. A transfer from another member (the
            // log chosen in an election we were to lead) is dropped for it:
            // that member serves only the election's primary (T5).
            self.stage_superblock(cx.out);
            let from_primary = self.state_transfer.as_ref().is_some_and(|transfer| transfer.source == sv.replica);
            if view_changed || !from_primary {
                self.request_state_transfer(sv.replica, now, cx.out);
            }
        }
        debug_assert!(
            self.view == sv.view && self.status() == Status::Normal,
            "a StartView puts the replica in its view"
        );
        debug_assert!(!self.is_primary(), "a StartView makes a backup or a learner");
        self.report_role(cx.out);
    }
}
