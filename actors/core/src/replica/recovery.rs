//! H1: a member that does not hold its data never acts as if it did.
//!
//! A voter created without data (a node whose disk was replaced or whose
//! directory was emptied, a member that crashed before its first flush, a
//! member of a group created while it was down) cannot tell from its own
//! storage whether the group is brand new or has a history it acknowledged
//! and lost. Voting in a view change with an empty log, or leading view 0
//! as member 0, would then let a view change drop acknowledged writes (the
//! rebuild run of issue 33: two of two runs lost one).
//!
//! So such a member starts *recovering*, durably (a flag in its
//! superblock, so a crash in the middle does not end it). While recovering
//! it sends no StartViewChange, DoViewChange (but the empty vote it may
//! lend, below), PrepareOk or CommitReply,
//! starts no election, takes part in no quiescence, serves nothing, and
//! takes no Prepare or Commit: it counts toward no quorum. Every repair
//! timeout it asks every other voter for its state ([`RecoveryQuery`]),
//! under a nonce of this round, and decides from the answers:
//!
//! - **Every other voter answered, and every answer is blank** (it is
//!   recovering, or holds no op and knows none committed; in any view): no
//!   member but this one holds an op that ever counted toward a commit, so
//!   none was ever committed (with a replication quorum of two or more),
//!   and the group starts here as a new group does, in view 0, without the
//!   ops this member holds itself (member 0 leads it unless an election of
//!   a later view, with no op in it, is already under way). A group created while one
//!   of its members is down therefore starts only once that member answers:
//!   no member can tell a new group from one whose history is on the
//!   member that is missing.
//! - **`n − Qv + 1` other voters that are not recovering answered**: some
//!   one of them is in every election quorum this member ever joined
//!   (`Qv − 1` others in each), so the highest view among their answers is
//!   at least every view this member voted in. It then takes the log of a
//!   primary of that view or a later one, whole, from its StartView (which
//!   a normal primary sends with its answer), by state transfer first if
//!   the log no longer reaches back to op 1. That log holds every op
//!   committed, and every op this member acknowledged in that view. Only
//!   then does it stop recovering, in the same flush as that log.
//! - **Every other voter answered and at least one holds data**: the
//!   same, from the holders. A member that recovers never voted or
//!   acknowledged with the data it has now (its election messages and
//!   acknowledgements wait for the superblock that ends its recovery), so
//!   the holders are all the voters that can have been in an election
//!   quorum with it. When the holders are fewer than `n − Qv + 1` and none
//!   of them is a normal primary, they may be too few to elect one alone
//!   (a new group whose founder restarted before the others took its log;
//!   a member rebuilt while another had not yet recovered). The member
//!   then *lends its vote*, still recovering: it moves, durably, to the
//!   first view past every view answered whose primary is the holder with
//!   the best log (highest log view, then op), and sends that primary a
//!   DoViewChange holding nothing (log view 0, op 0), which never chooses
//!   the log. That primary's own log is in its election; as long as one
//!   member that acknowledged an op still holds its data (fewer than `Qr`
//!   lost what they acknowledged), that log holds every op committed: the
//!   best of the holders' logs does (a committed op is in every log of
//!   its view from that op on and in every log of a later view). The
//!   member takes that view's StartView like any other and so recovers.
//!   If the others went on under a primary of an earlier view instead
//!   (the answers it decided on were of different moments: a member still
//!   recovering in one, the group founded by the next), the member cannot
//!   take that primary's log: it promised not to act before the view it
//!   voted in. It keeps asking that primary and sending its vote, so the
//!   primary counts it as stranded in that view, as a voter answering
//!   Commits from a later view, and moves the group up to it once
//!   (`Replica::note_stranded`); the member then recovers from that view's
//!   StartView. Before, it stayed recovering until the next view change,
//!   with its group committing (the simulator, seed 6100708 of five
//!   nodes). A member back recovering whose durable view is past the
//!   group's is in the same place without a vote: it sends a
//!   StartViewChange of its own view each round (`send_view_ahead`).
//!   Voting with its own log instead is what two recovering members must
//!   not do: they could elect each other without the holder, and with it
//!   the acknowledged write (mutant `RecoveryVotesWithItsLog`).
//! - Otherwise it waits and asks again: with fewer than that many voters
//!   holding data, the group stays unavailable rather than lose a write.
//!
//! The rule is Viewstamped Replication's recovery protocol (with flexible
//! quorums: the answers needed are those that meet every election quorum),
//! applied to a member that lost its disk rather than its memory, plus the
//! all-blank case that lets a new group start with no outside help.
//!
//! Why a nonce: the argument above needs answers given after this
//! member lost its data, that is, to this process. The nonce (the tick of
//! the round and a counter, growing within a process) names the rounds of
//! this process; answers to any of them count, the latest of each voter
//! kept. An answer to an earlier process travels on that process's
//! connection and is lost with it; the nonce check covers the rest.

use cohort_messages::{MemberIndex, Message, Op, RecoveryAnswer, RecoveryQuery, View};

use super::{Context, Replica, RoleState};
use crate::effects::Effects;

/// A recovering member's round of questions and the answers to it.
#[derive(Clone, Debug)]
pub(crate) struct Recovery {
    /// The current round's nonce.
    pub nonce: u64,
    /// The first round's nonce: answers to any round of this process count
    /// (nonces only grow within one process).
    pub first_nonce: u64,
    /// Rounds asked so far (the low bits of the nonce).
    pub rounds: u64,
    /// The latest answer of each voter to this round (by member index).
    pub answers: Vec<Option<RecoveryAnswer>>,
    /// When the next round is asked.
    pub next_query_tick: u64,
    /// Decided: the lowest view whose primary's log it takes.
    pub target: Option<View>,
    /// The view it voted in while still recovering (see `cast_ballot`).
    pub ballot: Option<View>,
}

impl Recovery {
    pub(crate) fn new(voters: usize) -> Recovery {
        Recovery {
            nonce: 0,
            first_nonce: 0,
            rounds: 0,
            answers: vec![None; voters],
            next_query_tick: 0,
            target: None,
            ballot: None,
        }
    }
}

/// True if `answer` says its member holds nothing of the group that ever
/// counted toward a commit: no op in its log and none committed, or it is
/// recovering itself. (A recovering member's ops never counted: a backup
/// acknowledges, and a primary counts its own copy, only after the flush
/// that also made the superblock ending its recovery durable; a crash that
/// kept the ops but not that superblock left them uncounted. Its view may
/// have moved too: an election with no op anywhere changes nothing a new
/// member could lose.)
fn blank(answer: &RecoveryAnswer) -> bool {
    answer.recovering || (answer.op == Op(0) && answer.commit == Op(0))
}

impl Replica {
    /// What a recovering member hears: the answers, the StartView and state
    /// it is to take, a client (redirected) and other members' questions.
    pub(crate) fn heard_while_recovering(message: &Message) -> bool {
        matches!(
            message,
            Message::RecoveryQuery(_)
                | Message::RecoveryAnswer(_)
                | Message::StartView(_)
                | Message::StateChunk(_)
                | Message::Request(_)
        )
    }

    /// H1: whether this member is recovering (see the module docs).
    pub fn is_recovering(&self) -> bool {
        self.recovery.is_some()
    }

    /// H1: whether a crash now would leave this member recovering: it is
    /// recovering, or the superblock that ended its recovery is not durable
    /// yet. (The simulator replaces a disk only while no other member is
    /// recovering in this sense: one member without its data at a time.)
    pub fn recovering_durably(&self) -> bool {
        self.recovery.is_some() || self.superblock_durable_recovering
    }

    /// Start recovering: no lease granted, no follower's timeout; the first
    /// round goes out at once.
    pub(crate) fn begin_recovery(&mut self, now: u64) {
        assert!(self.spec.is_voter(self.spec.me), "{self:?}: only a voter recovers (a learner never votes)");
        self.role = RoleState::Backup(super::Backup::new(now, u64::MAX / 4));
        self.lease_expiry = now;
        let mut recovery = Recovery::new(self.spec.members.len());
        recovery.next_query_tick = now;
        self.recovery = Some(Box::new(recovery));
        assert!(!self.is_primary(), "a recovering member leads nothing");
    }

    /// The timed work of a recovering member: a new round of questions.
    pub(crate) fn recovery_tick(&mut self, now: u64, out: &mut Effects) {
        let others: Vec<MemberIndex> = self.others().collect();
        let timeout = self.config.timing.repair_timeout_ticks;
        let (group, incarnation, me) = (self.spec.group, self.spec.incarnation, self.spec.me);
        let Some(recovery) = self.recovery.as_mut() else { return };
        if now < recovery.next_query_tick {
            return;
        }
        recovery.rounds += 1;
        recovery.nonce = ((now << 16) | (recovery.rounds & 0xffff)).max(recovery.nonce + 1);
        if recovery.rounds == 1 {
            recovery.first_nonce = recovery.nonce;
        }
        recovery.next_query_tick = now + timeout;
        let query = RecoveryQuery { group, incarnation, replica: me, nonce: recovery.nonce };
        for member in others {
            if let Some(node) = self.spec.node_at(member) {
                out.send(node, Message::RecoveryQuery(query));
            }
        }
        self.send_ballot(out);
        self.send_view_ahead(out);
        assert!(self.recovery.as_ref().is_some_and(|r| r.next_query_tick > now), "the next round waits a timeout");
    }

    /// H1: the only voter of its group has no one to ask: what it lost,
    /// no copy elsewhere holds. It starts the group again with what it
    /// holds: a new group in view 0, or, holding anything, as the primary
    /// of its next view (its own vote elects it).
    pub(crate) fn recover_alone(&mut self, now: u64, cx: &mut Context<'_>) {
        assert_eq!(self.spec.members.len(), 1, "{self:?}: only a lone voter decides alone");
        self.start_as_new(now, cx);
        let fresh = self.view == View(0) && self.log_view == View(0) && self.log.op() == Op(0);
        if fresh && self.commit_min == Op(0) {
            self.start_view_zero(now, cx);
        } else {
            self.start_view_change(self.view.next(), now, cx);
        }
        assert!(self.recovery.is_none(), "{self:?}: a lone voter decides at once");
    }

    /// Any member answers a recovering one with its state; a normal
    /// primary sends its view's StartView along (the log it is to take).
    pub(crate) fn on_recovery_query(&mut self, query: RecoveryQuery, now: u64, cx: &mut Context<'_>) {
        debug_assert!(self.spec.node_at(query.replica).is_some(), "the door checked the sender");
        if query.replica == self.spec.me || !self.spec.is_voter(query.replica) {
            return;
        }
        // The asker lost its data: what its earlier life promised in
        // elections is void, as is the durable view behind it. A vote of
        // that life kept here (a DoViewChange held for a view this member
        // is to lead, or counted in its election under way) would elect a
        // log without the ops the new life acknowledges in the view it
        // recovers into (seed 2000400). Only what it sends from now on counts.
        self.early_dvcs.retain(|dvc| dvc.replica != query.replica);
        if let Some(election) = self.election_mut()
            && let Some(vote) = election.dvcs.get_mut(query.replica.0 as usize)
        {
            *vote = None;
        }
        let primary = self.is_primary() && self.status() == super::Status::Normal && self.recovery.is_none();
        let answer = RecoveryAnswer {
            group: self.spec.group,
            incarnation: self.spec.incarnation,
            replica: self.spec.me,
            nonce: query.nonce,
            view: self.view,
            log_view: self.log_view,
            op: self.log.op(),
            commit: self.commit_max.max(self.commit_min),
            recovering: self.recovery.is_some(),
            primary,
        };
        cx.out.send(self.node_of(query.replica), Message::RecoveryAnswer(answer));
        if primary && let Some(asked) = self.lead_mut().recovery_asked_tick.get_mut(query.replica.0 as usize) {
            *asked = Some(now);
        }
        if primary && self.spec.is_voter(query.replica) {
            self.answer_with_start_view(query.replica, now, cx);
        }
    }

    /// A recovering member takes an answer of its current round, and
    /// decides once it can (see the module docs).
    pub(crate) fn on_recovery_answer(&mut self, answer: RecoveryAnswer, now: u64, cx: &mut Context<'_>) {
        let voters = self.spec.members.len();
        let needed = voters + 1 - self.spec.quorums.view_change;
        let me = self.spec.me;
        let Some(recovery) = self.recovery.as_mut() else { return };
        if answer.nonce < recovery.first_nonce || answer.nonce > recovery.nonce || answer.replica == me {
            return;
        }
        let Some(slot) = recovery.answers.get_mut(answer.replica.0 as usize) else { return };
        *slot = Some(answer);
        let others = recovery.answers.iter().enumerate().filter(|(index, _)| *index != me.0 as usize);
        let answered: Vec<RecoveryAnswer> = others.filter_map(|(_, answer)| *answer).collect();
        let all_blank = answered.len() == voters - 1 && answered.iter().all(blank);
        if all_blank && self.view == View(0) && self.log_view == View(0) && self.commit_min == Op(0) {
            // A new group: no voter holds anything that counted. It starts
            // here, without the ops it holds itself (they never counted
            // either, and a primary of view 0 may put others at their ops).
            if self.log.op() > Op(0) {
                self.stage_truncate(Op(0), cx.out);
            }
            self.start_as_new(now, cx);
            // The group may have moved past view 0 with no op (an election
            // among the others): it joins that view, never leads view 0
            // behind a primary of a later one (R24).
            let highest = answered.iter().map(|answer| answer.view).max().unwrap_or(View(0));
            if highest == View(0) {
                self.start_view_zero(now, cx);
            } else if self.primary_index_of(highest) == self.spec.me {
                self.start_view_change(highest, now, cx);
            } else {
                // A backup of that view still to take its primary's log:
                // it asks for the StartView at its next tick.
                self.view = highest;
                self.repair_deadline = now;
                self.stage_superblock(cx.out);
                self.report_role(cx.out);
            }
            return;
        }
        let everyone = answered.len() == voters - 1;
        let holders: Vec<RecoveryAnswer> = answered.into_iter().filter(|answer| !answer.recovering).collect();
        // Enough holders meet every election quorum this member joined; or
        // every voter answered, and those that recover never voted (see
        // the module docs), so the holders are all the voters that can
        // have been in one.
        let enough = holders.len() >= needed || everyone;
        if holders.is_empty() || !enough {
            return;
        }
        let highest = holders.iter().map(|answer| answer.view).max().unwrap_or(View(0));
        let primary_known = holders.iter().any(|answer| answer.primary && answer.view == highest);
        let Some(recovery) = self.recovery.as_mut() else { return };
        let target = recovery.target.map_or(highest, |target| target.max(highest));
        recovery.target = Some(target);
        if holders.len() < needed && !primary_known {
            // The holders alone are too few to elect a primary whose log it
            // could take, and the others recover: it lends its vote to the
            // holder with the best log (see the module docs).
            if self.config.mutated(crate::mutants::Mutant::RecoveryVotesWithItsLog) {
                self.end_recovery(cx);
                let view = if target > self.view { target } else { self.view.next() };
                return self.start_view_change(view, now, cx);
            }
            self.cast_ballot(&holders, highest, cx.out);
        }
    }

    /// H1: vote, still recovering, for the view led by the holder with the
    /// best log among the answers: the first view past every view answered
    /// (and its own) whose primary that holder is. The view is made durable
    /// (the superblock, still recovering, goes before the vote), and the
    /// vote is a DoViewChange holding nothing (log view 0, op 0), so it
    /// never chooses the log: the holder's own log is in its election, and
    /// it holds every op committed (see the module docs). The vote is sent
    /// again every round until a StartView of that view or a later one
    /// arrives; a new best holder, or one already past the view, gets a
    /// vote for a later view.
    fn cast_ballot(&mut self, holders: &[RecoveryAnswer], highest: View, out: &mut Effects) {
        let best =
            holders.iter().max_by_key(|answer| (answer.log_view, answer.op, std::cmp::Reverse(answer.replica.0)));
        let Some(best) = best.map(|answer| answer.replica) else { return };
        let current = self.recovery.as_ref().and_then(|recovery| recovery.ballot);
        let view = match current {
            Some(view) if self.primary_index_of(view) == best && view >= highest => view,
            _ => {
                let mut view = self.view.max(highest).next();
                while self.primary_index_of(view) != best {
                    view = view.next();
                }
                view
            }
        };
        if current == Some(view) {
            return;
        }
        assert!(view > self.view, "{self:?}: a ballot moves to a later view");
        self.view = view;
        self.svc_view_seen = self.svc_view_seen.max(view);
        if let Some(recovery) = self.recovery.as_mut() {
            recovery.ballot = Some(view);
            recovery.target = Some(recovery.target.map_or(view, |target| target.max(view)));
        }
        self.stage_superblock(out);
        self.send_ballot(out);
        assert!(self.is_recovering() && !self.is_primary(), "{self:?}: a ballot leaves it recovering");
    }

    /// The ballot of [`Replica::cast_ballot`]: a StartViewChange to every
    /// other voter (the holders join the view) and the empty DoViewChange
    /// to the view's primary, once the view is durable.
    fn send_ballot(&self, out: &mut Effects) {
        let Some(view) = self.recovery.as_ref().and_then(|recovery| recovery.ballot) else { return };
        self.send_start_view_change_to_voters(view, out);
        let (group, incarnation, me) = (self.spec.group, self.spec.incarnation, self.spec.me);
        let dvc = cohort_messages::DoViewChange {
            group,
            incarnation,
            view,
            log_view: View(0),
            op: Op(0),
            commit: Op(0),
            replica: me,
            log: Vec::new(),
        };
        self.send_view_change(self.node_of(self.primary_index_of(view)), Message::DoViewChange(dvc), out);
    }

    /// A member that decided to take the log of a view below its own (its
    /// durable view is past the group's: it started an election its crash
    /// cut short, say) cannot: it promised not to act before its view. It
    /// says where it stands every round, a StartViewChange of its view to
    /// every other voter (no vote: it holds nothing to vote with), so that
    /// the primary, which it asks every round, counts it as stranded there
    /// and moves the group up to its view (see `Replica::note_stranded`).
    /// The same holds for a target past every view the holders answer now:
    /// a holder answered that view in an earlier round and has lost it
    /// since (its disk replaced, its replica rebuilt), so no StartView of
    /// it will come unless the group moves up to it (seeds 6100212 of five
    /// nodes and 6106411, `--state disk`).
    fn send_view_ahead(&self, out: &mut Effects) {
        let Some(recovery) = self.recovery.as_ref() else { return };
        let Some(target) = recovery.target.filter(|_| recovery.ballot.is_none()) else { return };
        let held_now = recovery.answers.iter().flatten().filter(|answer| !answer.recovering).map(|answer| answer.view);
        let ahead = if target < self.view {
            self.view
        } else if held_now.max().is_some_and(|highest| highest < target) {
            target
        } else {
            return;
        };
        self.send_start_view_change_to_voters(ahead, out);
    }

    /// A recovering member's StartViewChange of `view` to every other voter.
    fn send_start_view_change_to_voters(&self, view: View, out: &mut Effects) {
        let (group, incarnation, me) = (self.spec.group, self.spec.incarnation, self.spec.me);
        let svc = cohort_messages::StartViewChange { group, incarnation, view, replica: me };
        for member in self.others() {
            if self.spec.is_voter(member) {
                self.send_view_change(self.node_of(member), Message::StartViewChange(svc), out);
            }
        }
    }

    /// Whether a recovering member may take `view`'s StartView: only once
    /// it decided, of its target view or a later one.
    pub(crate) fn recovery_takes_start_view(&self, view: View) -> bool {
        self.recovery.as_ref().is_none_or(|recovery| recovery.target.is_some_and(|target| view >= target))
    }

    /// Stop recovering to start the group as new: a follower with no lease
    /// granted, whose next step the caller takes.
    fn start_as_new(&mut self, now: u64, cx: &mut Context<'_>) {
        cx.metrics.recoveries_founded += 1;
        self.recovery = None;
        self.lease_expiry = now;
        self.role = RoleState::Backup(super::Backup::new(now, self.config.timing.commit_heartbeat_timeout_ticks));
    }

    /// The member took a primary's whole log at or past its target view:
    /// it recovered. The superblock staged next says so, after that log.
    pub(crate) fn end_recovery(&mut self, cx: &mut Context<'_>) {
        if self.recovery.take().is_some() {
            cx.metrics.recoveries_done += 1;
        }
        assert!(self.recovery.is_none());
    }
}
