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
use cohort_messages::{ClientId, MemberIndex, NodeId, Op, ReplyError, Request, RequestNumber};

use super::{Context, Replica, Status};
use crate::effect::ApplyId;
use crate::effects::Effects;
use crate::state_machine::{Done, StateMachine, Work};

/// A job lent to the apply worker.
#[derive(Debug)]
pub(crate) struct Lent {
    /// The job.
    pub(crate) id: ApplyId,
    /// What it does.
    pub(crate) job: LentJob,
}

/// What a lent job does.
#[derive(Debug)]
pub(crate) enum LentJob {
    /// A run of committed ops.
    Run {
        /// Its ops, with the client and request each answers.
        ops: Vec<(Op, ClientId, RequestNumber, Bytes)>,
        /// How far the apply that lent it was to go: the return goes on to
        /// there (see `Replica::apply_through`).
        target: Op,
    },
    /// D3: a chunk of a streamed transfer, staged (see
    /// `Replica::lend_chunk`).
    Stage {
        /// The transfer's source.
        source: MemberIndex,
        /// The transfer's snapshot.
        snapshot_op: Op,
        /// The transfer's bytes received with this chunk.
        received_bytes: u64,
    },
}

impl Lent {
    /// The last op of a run away (`None` for a chunk).
    pub(crate) fn last_op(&self) -> Option<Op> {
        match &self.job {
            LentJob::Run { ops, .. } => ops.last().map(|(op, ..)| *op),
            LentJob::Stage { .. } => None,
        }
    }

    /// D3: true if this is a chunk of the transfer from `source` of the
    /// snapshot at `snapshot_op`.
    pub(crate) fn stages(&self, source: MemberIndex, snapshot_op: Op) -> bool {
        matches!(self.job, LentJob::Stage { source: from, snapshot_op: at, .. } if from == source && at == snapshot_op)
    }
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
        let id = out.lend(self.spec.group, Work::Apply(run), state);
        self.lent = Some(Box::new(Lent { id, job: LentJob::Run { ops, target } }));
    }

    /// D3: lend the state machine to stage `chunk` at `offset_bytes` of
    /// the stream the transfer takes (its bytes received, this chunk
    /// included, are what the job remembers). The shard's thread goes on
    /// receiving meanwhile: chunks of the same transfer that arrive are
    /// held (`StateTransfer::held`) and taken once the state machine is
    /// back ([`Replica::on_applied`]), where the transfer also ends if
    /// this chunk was its last.
    pub(crate) fn lend_chunk(&mut self, offset_bytes: u64, chunk: Bytes, out: &mut Effects) {
        assert!(self.lent.is_none(), "{self:?}: D2: one job away at a time");
        let transfer = self.state_transfer.as_deref().expect("D3: a chunk is staged for a transfer");
        let (source, snapshot_op, received_bytes) = (transfer.source, transfer.snapshot_op, transfer.received_bytes);
        let state = std::mem::replace(&mut self.state, Box::new(Away));
        let id = out.lend(self.spec.group, Work::Stage { offset_bytes, chunk }, state);
        self.lent = Some(Box::new(Lent { id, job: LentJob::Stage { source, snapshot_op, received_bytes } }));
    }

    /// D2: the apply worker is done with run `id`: take the state machine
    /// back, record and answer the run's results, then serve what waited
    /// for it and apply on. Returns false (and keeps `state` out) if `id`
    /// is not this replica's run away.
    pub(crate) fn on_applied(
        &mut self,
        id: ApplyId,
        state: Box<dyn StateMachine>,
        done: Done,
        now: u64,
        cx: &mut Context<'_>,
    ) -> Result<(), Box<dyn StateMachine>> {
        if self.lent.as_ref().is_none_or(|lent| lent.id != id) {
            return Err(state);
        }
        let lent = self.lent.take().expect("checked above");
        self.state = state;
        match (lent.job, done) {
            (LentJob::Run { ops, target }, Done::Applied(results)) => self.on_run_applied(ops, target, results, cx),
            (LentJob::Stage { source, snapshot_op, received_bytes }, Done::Staged(staged)) => {
                self.on_chunk_staged(source, snapshot_op, received_bytes, staged, now, cx);
            }
            (job, done) => panic!("{self:?}: D2: the worker did other work than lent: {job:?} came back as {done:?}"),
        }
        self.after_state_back(now, cx);
        Ok(())
    }

    /// D2: a run came back applied: record and answer its ops in op order,
    /// then apply on to where the apply that lent it was going.
    fn on_run_applied(
        &mut self,
        ops: Vec<(Op, ClientId, RequestNumber, Bytes)>,
        target: Op,
        results: Vec<Bytes>,
        cx: &mut Context<'_>,
    ) {
        assert_eq!(results.len(), ops.len(), "{self:?}: D2: one result per op of the run");
        assert_eq!(ops[0].0, self.commit_min.next(), "{self:?}: D2: nothing was applied while the run was away");
        let (primary, async_acked_op) = self.answer_mode();
        let applied_before = self.commit_min;
        let mut applied = Vec::new();
        for ((op, client, request, operation), result) in ops.into_iter().zip(results) {
            self.record_applied(op, client, request, operation, result.clone(), &mut applied);
            self.answer_applied(client, request, op, Some(result), primary, async_acked_op, cx.out);
        }
        self.after_applied(applied_before, applied, cx.out);
        self.apply_through(target, cx.out);
    }

    /// D2: the state machine is back: serve what waited for it, then
    /// apply on.
    fn after_state_back(&mut self, now: u64, cx: &mut Context<'_>) {
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
