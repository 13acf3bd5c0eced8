//! D1: the backlog, the committed entries a primary's snapshots dropped
//! from its log that a lagging member still needs.
//!
//! Why: a member stopped for a moment (a restart, a short partition) comes
//! back a little behind. The primary's log holds only what followed its
//! newest snapshot (at most `snapshot_interval_bytes`, 8 MiB: about 120
//! writes of 64 KiB), so a member whose gap reached below it was sent the
//! whole state again: gigabytes, and minutes, for a gap of megabytes. A
//! primary that knows a member lags (it acknowledged less than what a
//! snapshot drops) keeps the dropped entries for it and answers its repair
//! requests from them, then from the log.
//!
//! - Only members that confirmed the view count: a new primary knows
//!   nothing yet of the others' logs, and keeps nothing for them.
//! - The backlog starts at the first op the most lagging member it can
//!   still serve needs, and ends where the log begins (it is contiguous
//!   with it). Acknowledgements let go of its front; once no member needs
//!   any of it, it goes.
//! - It is bounded per shard, not per group: `backlog_size_max_bytes` over
//!   all the groups the shard leads, kept in a ledger the shard's backlogs
//!   share. Past it a backlog drops its oldest entries (those only the most
//!   lagging member needs), and a member whose gap it no longer holds is
//!   sent the state, as before. So a dead node costs each peer shard at most
//!   that much memory, whatever the number of groups.
//! - It lives in the primary's role state: a view change, a removal or an
//!   incarnation switch drops it, and its bytes go back to the ledger
//!   (`Drop`). Its entries are committed, so any view's primary may send
//!   them; a repair answered from it is the answer the log would have given.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cohort_messages::{LogEntry, MemberIndex, Op};

use super::Replica;
use super::context::Context;
use crate::effects::Effects;

/// Entries a primary keeps for lagging members (see the module docs).
pub(crate) struct Backlog {
    /// The op of the first entry.
    start: Op,
    entries: VecDeque<LogEntry>,
    size_bytes: u64,
    /// The shard's ledger: every backlog's bytes, summed.
    ledger: Arc<AtomicU64>,
}

impl std::fmt::Debug for Backlog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Backlog({}..={}, {} bytes)", self.start, self.reaches(), self.size_bytes)
    }
}

impl Drop for Backlog {
    fn drop(&mut self) {
        self.ledger.fetch_sub(self.size_bytes, Ordering::Relaxed);
    }
}

impl Backlog {
    fn new(start: Op, ledger: &Arc<AtomicU64>) -> Backlog {
        Backlog { start, entries: VecDeque::new(), size_bytes: 0, ledger: Arc::clone(ledger) }
    }

    /// The op of the last entry (`start - 1` when empty).
    fn reaches(&self) -> Op {
        Op(self.start.0 + self.entries.len() as u64 - 1)
    }

    fn push(&mut self, entry: LogEntry) {
        assert_eq!(entry.op, self.reaches().next(), "D1: a backlog has no gap");
        let size = entry.operation.len() as u64;
        self.size_bytes += size;
        self.ledger.fetch_add(size, Ordering::Relaxed);
        self.entries.push_back(entry);
    }

    fn pop_front(&mut self) {
        let Some(entry) = self.entries.pop_front() else { return };
        debug_assert_eq!(entry.op, self.start, "a backlog's front is at its start");
        let size = entry.operation.len() as u64;
        self.size_bytes -= size;
        self.ledger.fetch_sub(size, Ordering::Relaxed);
        self.start = self.start.next();
    }

    /// Drop the entries below `op`; an emptied backlog goes on at `op`.
    fn let_go_below(&mut self, op: Op) {
        while self.start < op {
            if self.entries.is_empty() {
                self.start = op;
                break;
            }
            self.pop_front();
        }
        debug_assert!(self.start >= op, "nothing below {op} is kept");
    }
}

impl Replica {
    /// D1: bytes of operations this replica's backlog holds.
    pub(crate) fn backlog_size_bytes(&self) -> u64 {
        self.backlog().map_or(0, |backlog| backlog.size_bytes)
    }

    fn backlog(&self) -> Option<&Backlog> {
        match &self.role {
            super::RoleState::Primary(primary) => primary.backlog.as_ref(),
            _ => None,
        }
    }

    /// The first op any member that confirmed this view lacks of what lies
    /// through `through`, among those that lack nothing below `reachable`
    /// (what the backlog, or the log, still holds); `None` if none lacks
    /// anything there. Primary only.
    fn backlog_floor(&self, through: Op, reachable: Op) -> Option<Op> {
        let primary = self.lead();
        let me = self.spec.me.0 as usize;
        let voters = primary.acked.iter().zip(&primary.confirmed).enumerate().filter(|(member, _)| *member != me);
        let voters = voters.filter(|(_, (_, confirmed))| **confirmed).map(|(_, (acked, _))| *acked);
        let learners = primary.learners.iter().filter(|track| track.confirmed).map(|track| track.acked);
        voters.chain(learners).map(Op::next).filter(|needs| *needs <= through && *needs >= reachable).min()
    }

    /// D1: a primary's snapshot is about to drop its log through `op`:
    /// what a lagging member still needs of it goes to the backlog, within
    /// the shard's budget.
    pub(crate) fn keep_backlog(&mut self, op: Op, out: &mut Effects) {
        if !self.is_primary() {
            return;
        }
        let max = self.config.backlog_size_max_bytes;
        let base = self.log.base();
        // A backlog that no longer ends where the log begins (the log was
        // replaced under it) is dropped first.
        if self.backlog().is_some_and(|backlog| backlog.reaches() != base) {
            self.lead_mut().backlog = None;
        }
        let reachable = self.backlog().map_or(base.next(), |backlog| backlog.start);
        let Some(floor) = self.backlog_floor(op, reachable).filter(|_| max > 0) else {
            self.lead_mut().backlog = None;
            return;
        };
        let dropped: Vec<LogEntry> =
            self.log.entries_from(floor.max(base.next())).take_while(|entry| entry.op <= op).cloned().collect();
        let ledger = out.backlog_ledger();
        let backlog = self.lead_mut().backlog.get_or_insert_with(|| Backlog::new(floor.max(base.next()), ledger));
        backlog.let_go_below(floor);
        for entry in dropped {
            backlog.push(entry);
        }
        // The shard's budget: what the other backlogs leave.
        let others = backlog.ledger.load(Ordering::Relaxed) - backlog.size_bytes;
        let room = max.saturating_sub(others);
        while backlog.size_bytes > room && !backlog.entries.is_empty() {
            backlog.pop_front();
        }
        if backlog.entries.is_empty() {
            self.lead_mut().backlog = None;
        }
        debug_assert!(out.backlog_size_bytes() <= max.max(self.backlog_size_bytes()), "D1: backlogs within budget");
        debug_assert!(self.backlog().is_none_or(|backlog| backlog.reaches() == op), "D1: it joins the next log");
    }

    /// D1: an acknowledgement moved: the backlog lets go of what no member
    /// needs any more, and goes once nothing of it is needed.
    pub(crate) fn backlog_acked(&mut self) {
        let Some(backlog) = self.backlog() else { return };
        let (start, reaches) = (backlog.start, backlog.reaches());
        match self.backlog_floor(reaches, start) {
            Some(floor) => {
                if let Some(backlog) = self.lead_mut().backlog.as_mut() {
                    backlog.let_go_below(floor);
                }
            }
            None => self.lead_mut().backlog = None,
        }
    }

    /// D1: a repair request from `op_min` that the backlog answers: send
    /// its entries from `op_min` up to `op_max`, while `size_max_bytes` of
    /// operations last (one entry at least), and return the op after the
    /// last one sent and the bytes sent; `None` if the backlog does not
    /// hold `op_min`.
    pub(crate) fn serve_backlog(
        &mut self,
        op_min: Op,
        op_max: Op,
        receiver: MemberIndex,
        size_max_bytes: u64,
        cx: &mut Context<'_>,
    ) -> Option<(Op, u64)> {
        let backlog = self.backlog()?;
        if op_min < backlog.start || op_min > backlog.reaches() {
            return None;
        }
        let skip = (op_min.0 - backlog.start.0) as usize;
        let (entries, sent_bytes) =
            super::repair::answer_from(backlog.entries.iter().skip(skip), op_max, size_max_bytes);
        cx.out.count_backlog_served(sent_bytes);
        Some((self.send_answer(receiver, op_min, entries, cx), sent_bytes))
    }
}
