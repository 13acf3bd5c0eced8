//! D2: runs of committed ops applied off the shard's thread.
//!
//! A state machine whose apply does I/O (a storage engine's transaction)
//! would hold up every group of its shard while it writes. Such a state
//! machine asks to be applied elsewhere
//! ([`StateMachine::apply_off_shard`]); its replica then *lends* it, with
//! the next run of committed ops, to the shard's apply worker
//! ([`Effect::Apply`](crate::effect::Effect::Apply)) and goes on with the
//! protocol: Prepares, PrepareOks, commits and every other group's work
//! continue while the run is away. The worker hands it back with the
//! results ([`Replica::on_applied`]); only then does the replica record
//! them in its client table, answer the clients and move its applied
//! point, in op order, exactly as an inline apply does.
//!
//! While the state machine is away, what needs it waits for it: the next
//! run, reads and writes (a write's admission, T3, reads the state), a
//! snapshot point, and state transfers in either direction (a request for
//! one, or a chunk of one, is left unanswered; the other side asks again).
//! One run is away per group at most. A read that waited is answered after
//! the run comes back, so it sees every op applied before it arrived (V7),
//! and it is checked against the quorum window then, not when it arrived.
//!
//! A run is recorded with the clients and requests of its ops when it is
//! lent, so that its return depends on nothing the log does meanwhile (a
//! committed op is never truncated, but a view change may re-append it).

use std::collections::VecDeque;

use bytes::Bytes;
use cohort_messages::{ClientId, NodeId, Op, ReplyError, Request, RequestNumber};

use super::{Context, Replica, Status};
use crate::effect::ApplyId;
use crate::effects::Effects;
use crate::state_machine::StateMachine;

/// A run lent to the apply worker.
#[derive(Debug)]
pub(crate) struct Lent {
    /// The job.
    pub(crate) id: ApplyId,
    /// Its ops, with the client and request each answers.
    pub(crate) ops: Vec<(Op, ClientId, RequestNumber, Bytes)>,
    /// How far the apply that lent it was to go: the return goes on to
    /// there (see `Replica::apply_through`).
    pub(crate) target: Op,
}

/// What a replica holds in place of its state machine while it is lent.
/// The replica never calls it: every path that needs the state machine
/// waits for it or leaves (see the module docs), so a call is a bug.
pub(crate) struct Away;

const AWAY: &str = "D2: the state machine is on the apply worker; nothing calls it until it is back";

impl StateMachine for Away {
    fn apply(&mut self, _op: Op, _operation: &[u8]) -> Bytes {
        unreachable!("{AWAY}")
    }

    fn read(&self, _query: &[u8]) -> Bytes {
        unreachable!("{AWAY}")
    }

    fn snapshot(&self) -> Bytes {
        unreachable!("{AWAY}")
    }

    fn restore(&mut self, _snapshot: &[u8]) -> Result<(), String> {
        unreachable!("{AWAY}")
    }
}

impl Replica {
    /// D2: true while a run of this replica is on the apply worker.
    pub fn applying_away(&self) -> bool {
        self.lent.is_some()
    }

    /// D2: the job of the run on the apply worker, if one is.
    pub fn lent_job(&self) -> Option<ApplyId> {
        self.lent.as_ref().map(|lent| lent.id)
    }

    /// D2: lend the state machine with `run` (committed ops right after the
    /// applied point, in order), on the way to `target`.
    pub(crate) fn lend(&mut self, run: Vec<(Op, Bytes)>, target: Op, out: &mut Effects) {
        assert!(self.lent.is_none(), "{self:?}: D2: one run away at a time");
        assert!(
            run.first().is_some_and(|(op, _)| *op == self.commit_min.next())
                && run.windows(2).all(|pair| pair[1].0 == pair[0].0.next()),
            "{self:?}: D2: a run follows the applied point without a gap"
        );
        let ops = run
            .iter()
            .map(|(op, operation)| {
                let entry = self.log.get(*op).expect("a run holds ops of the log");
                (*op, entry.client, entry.request, operation.clone())
            })
            .collect();
        let state = std::mem::replace(&mut self.state, Box::new(Away));
        let id = out.lend(self.spec.group, run, state);
        self.lent = Some(Box::new(Lent { id, ops, target }));
    }

    /// D2: the apply worker is done with run `id`: take the state machine
    /// back, record and answer the run's results, then serve what waited
    /// for it and apply on. Returns false (and keeps `state` out) if `id`
    /// is not this replica's run away.
    pub(crate) fn on_applied(
        &mut self,
        id: ApplyId,
        state: Box<dyn StateMachine>,
        results: Vec<Bytes>,
        now: u64,
        cx: &mut Context<'_>,
    ) -> Result<(), Box<dyn StateMachine>> {
        if self.lent.as_ref().is_none_or(|lent| lent.id != id) {
            return Err(state);
        }
        let lent = self.lent.take().expect("checked above");
        assert_eq!(results.len(), lent.ops.len(), "{self:?}: D2: one result per op of the run");
        assert_eq!(lent.ops[0].0, self.commit_min.next(), "{self:?}: D2: nothing was applied while the run was away");
        self.state = state;
        let (primary, async_acked_op) = self.answer_mode();
        let applied_before = self.commit_min;
        let mut applied = Vec::new();
        let target = lent.target;
        for ((op, client, request, operation), result) in lent.ops.into_iter().zip(results) {
            self.record_applied(op, client, request, operation, result.clone(), &mut applied);
            self.answer_applied(client, request, op, Some(result), primary, async_acked_op, cx.out);
        }
        self.after_applied(applied_before, applied, cx.out);
        // On to where the apply that lent the run was going.
        self.apply_through(target, cx.out);
        // What waited for the state machine, in the order it came.
        for (sender, request) in std::mem::take(&mut self.waiting_for_state) {
            if self.lent.is_some() {
                // Something above lent it again: the rest waits on.
                self.waiting_for_state.push_back((sender, request));
                continue;
            }
            self.on_request(sender, request, now, cx);
        }
        if self.lent.is_none() && self.status() == Status::Normal && self.log_view == self.view {
            self.apply_committed(cx.out);
        }
        Ok(())
    }

    /// D2: a request that needs the state machine while it is away waits
    /// for it, up to the request queue's limit (then `Busy`, as a full
    /// pipeline answers).
    pub(crate) fn wait_for_state(&mut self, sender: NodeId, request: Request, out: &mut Effects) {
        debug_assert!(self.lent.is_some(), "only a lent state machine is waited for");
        if self.waiting_for_state.len() >= self.config.request_queue_max {
            let detail = format!(
                "{}: {} requests already wait for the state machine's run on the apply worker",
                self.spec.group,
                self.waiting_for_state.len()
            );
            return self.reply_error(&request, ReplyError::Busy, detail, out);
        }
        out.count_waited_for_state();
        self.waiting_for_state.push_back((sender, request));
    }

    /// D2: requests that wait for the state machine.
    pub fn waiting_for_state(&self) -> usize {
        self.waiting_for_state.len()
    }
}

/// D2: requests waiting for a state machine, as a replica holds them.
pub(crate) type WaitingForState = VecDeque<(NodeId, Request)>;
