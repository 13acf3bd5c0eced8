//! Normal operation (V1): Request → Prepare → PrepareOk → commit → apply → Reply.
//!
//! The primary assigns the next op, stages it, and sends the Prepare to every
//! backup at once (not waiting for its own write). A backup appends Prepares
//! in op order and answers PrepareOk only for what is durable. A PrepareOk for
//! op n means the backup durably holds the view's log up to n, so the commit
//! point is the Qr-th highest of the members' durable ops, the primary's own
//! included. Ops are applied in order; the client table makes each
//! (client, request number) apply once.

use cohort_messages::{
    ClientId, CommitEntry, HeartbeatState, LogEntry, Message, Op, Outcome, Prepare, PrepareOk, Redirect, Reply,
    ReplyError, Request, RequestKind, RequestNumber,
};

use super::{Replica, RoleState, Status};

/// Timestamps per tick: a group's Commits within one tick are ordered by the
/// low part (saturating), the tick is the high part.
pub(crate) const TIMESTAMP_PER_TICK: u64 = 16;
use super::Context;
use bytes::Bytes;

use crate::client_table::{Admission, is_registration};
use crate::effect::{AppliedOp, Effect};
use crate::effects::Effects;
use crate::mutants::Mutant;

impl Replica {
    /// A client request (V1, V5, V7) that `sender` sent (this node for a
    /// local submit).
    pub(crate) fn on_request(
        &mut self,
        sender: cohort_messages::NodeId,
        request: Request,
        now: u64,
        cx: &mut Context<'_>,
    ) {
        let (role, view) = (self.role(), self.view);
        self.serve_request(sender, request, now, cx);
        assert!(self.role() == role && self.view == view, "{self:?}: a request moved the replica's role or view");
        let queue_max = self.config.request_queue_max + 1; // A seal goes ahead of a full queue.
        assert!(self.request_queue.len() <= queue_max, "{self:?}: request queue past its limit");
    }

    /// [`Replica::on_request`]: redirect, read, or queue for the pipeline.
    fn serve_request(&mut self, sender: cohort_messages::NodeId, request: Request, now: u64, cx: &mut Context<'_>) {
        if !self.is_primary() {
            // H1: a recovering member knows no primary to point to (it may
            // be the index of one itself).
            let knows = self.status() == Status::Normal && self.recovery.is_none();
            let primary = knows.then(|| self.node_of(self.primary_index()));
            cx.out.push(Effect::Redirect(Redirect {
                group: self.spec.group,
                client: request.client,
                request: request.request,
                view: self.view,
                primary,
            }));
            return;
        }
        match request.kind {
            // D2: both read the state machine (T3's admission too).
            _ if self.lent.is_some() => self.wait_for_state(sender, request, cx.out),
            RequestKind::Read => self.on_read(request, now, cx.out),
            RequestKind::Write | RequestKind::WriteBatch => {
                if let Err((code, detail)) = self.admit_write(sender, &request) {
                    return self.reply_error(&request, code, detail, cx.out);
                }
                self.on_write(request, now, cx)
            }
        }
    }

    /// T3: the state machine decides who may ask for what (`Forbidden`).
    /// K5: a group whose state machine takes op batches takes only batches
    /// (`RequestKind::WriteBatch`, a valid op batch), and admits each of
    /// its ops; any other takes only plain writes (`Rejected` otherwise,
    /// so that neither is applied as the other). A registration is either
    /// kind.
    fn admit_write(&self, sender: cohort_messages::NodeId, request: &Request) -> Result<(), (ReplyError, String)> {
        let (group, members) = (self.spec.group, &self.spec.members);
        let batch = request.kind == RequestKind::WriteBatch;
        if !is_registration(request.request) && batch != self.op_batches {
            let detail = if batch {
                format!(
                    "{group}: its state machine takes one op per write, not op batches (K5): send each op with Client::write"
                )
            } else {
                format!("{group}: its state machine takes op batches (K5): send ops with Client::write_batch")
            };
            return Err((ReplyError::Rejected, detail));
        }
        if !self.op_batches || is_registration(request.request) {
            return self
                .state
                .admit(sender, members, &request.operation)
                .map_err(|detail| (ReplyError::Forbidden, detail));
        }
        let batch = cohort_messages::op_batch::OpBatch::parse(&request.operation).map_err(|error| {
            let detail = format!("{group}: the write is no op batch (K5): {error}");
            (ReplyError::Rejected, detail)
        })?;
        for (index, operation) in batch.iter().enumerate() {
            self.state
                .admit(sender, members, operation)
                .map_err(|detail| (ReplyError::Forbidden, format!("op {index} of the batch: {detail}")))?;
        }
        Ok(())
    }

    /// K5: whether a Prepare's entry may join the log of this replica: any
    /// entry, or (a state machine that takes op batches) a seal, a
    /// registration or a write that is an op batch.
    fn entry_fits_state(&self, entry: &LogEntry) -> bool {
        !self.op_batches
            || entry.client == ClientId::SEAL
            || is_registration(entry.request)
            || cohort_messages::op_batch::OpBatch::parse(&entry.operation).is_ok()
    }

    /// Answer a request with an error (nothing was applied).
    pub(crate) fn reply_error(&self, request: &Request, code: ReplyError, detail: String, out: &mut Effects) {
        out.push(Effect::Reply(Reply {
            client: request.client,
            request: request.request,
            group: self.spec.group,
            view: self.view,
            op: Op(0),
            outcome: Outcome::Error { code, detail },
        }));
    }

    /// V7: reads are served by the primary only while its quorum window
    /// holds and after it has applied everything it inherited. The reply
    /// carries the applied point, so a host can serve a linearizable read
    /// from its own index once that index has reached it (read index).
    fn on_read(&mut self, request: Request, now: u64, out: &mut Effects) {
        debug_assert!(self.is_primary(), "only the primary reads");
        if self.is_sealing() {
            return self.refuse_sealed(&request, out);
        }
        let window = self.quorum_window_ticks();
        match self.quorum_contact_tick() {
            _ if self.config.mutated(Mutant::ReadWithoutQuorum) => {}
            None => {
                let detail = format!(
                    "{}: primary of {} has not yet been confirmed by a replication quorum in this view",
                    self.spec.group, self.view
                );
                return self.reply_error(&request, ReplyError::QuorumWindowExpired, detail, out);
            }
            Some(contact) if now >= contact.saturating_add(window) => {
                let detail = format!(
                    "{}: primary of {} has not heard a quorum since tick {contact} (window {window} ticks)",
                    self.spec.group, self.view
                );
                return self.reply_error(&request, ReplyError::QuorumWindowExpired, detail, out);
            }
            Some(_) => {}
        }
        if self.commit_min < self.lead().start_view_op && !self.config.mutated(Mutant::InheritedOpsNotFirst) {
            let detail = format!("{}: new primary of {} is still committing inherited ops", self.spec.group, self.view);
            return self.reply_error(&request, ReplyError::ViewChange, detail, out);
        }
        // The reply's op is the applied point the read saw: every synchronous
        // write acknowledged before the read arrived is at or below it.
        let result = self.state.read(&request.operation);
        out.push(Effect::Reply(Reply {
            client: request.client,
            request: request.request,
            group: self.spec.group,
            view: self.view,
            op: self.commit_min,
            outcome: Outcome::Ok(result),
        }));
    }

    /// True if a replication quorum confirmed this primary within the last
    /// `commit_heartbeat_timeout_ticks` (R24): no newer view can exist yet.
    /// `pairs`: for a query between inputs, the shard's (Z3: a quiesced
    /// primary's contact is its pairs' until it is settled again).
    pub(crate) fn quorum_window_holds(&self, pairs: Option<&crate::quiesce::Pairs>, now: u64) -> bool {
        let window = self.quorum_window_ticks();
        self.quorum_contact_with(pairs).is_some_and(|contact| now < contact.saturating_add(window))
    }

    /// R24: how long a quorum's confirmation lets this primary serve reads
    /// and stay primary: the heartbeat timeout, never longer than the lease
    /// a backup grants on each Commit.
    pub(crate) fn quorum_window_ticks(&self) -> u64 {
        let window = self.config.timing.commit_heartbeat_timeout_ticks;
        if self.config.mutated(Mutant::QuorumWindowTooLong) { 2 * window } else { window }
    }

    fn on_write(&mut self, request: Request, now: u64, cx: &mut Context<'_>) {
        debug_assert!(self.is_primary(), "only the primary writes");
        if self.is_sealing() {
            return self.refuse_sealed(&request, cx.out);
        }
        // H5: request 1 registers the client and applies nothing; one that
        // carries an operation comes from a client that skipped its
        // registration, and is refused rather than written unprotected.
        if is_registration(request.request) && !request.operation.is_empty() {
            let detail = format!(
                "{}: request 1 of {} is its registration and carries no operation; register with an empty write, then number writes after the op it commits at",
                self.spec.group, request.client
            );
            return self.reply_error(&request, ReplyError::Rejected, detail, cx.out);
        }
        match self.clients.admit(request.client, request.request) {
            Admission::Duplicate(entry) => {
                return cx.out.push(Effect::Reply(Reply {
                    client: request.client,
                    request: request.request,
                    group: self.spec.group,
                    view: self.view,
                    op: entry.op,
                    outcome: Outcome::Ok(entry.result),
                }));
            }
            Admission::Superseded => {
                let detail = format!(
                    "{}: {} is older than the client's latest request; start a new client",
                    self.spec.group, request.request
                );
                return self.reply_error(&request, ReplyError::Superseded, detail, cx.out);
            }
            // H5: evicted, then registered again by a late copy of its
            // registration: this write belongs to the earlier registration.
            Admission::BeforeRegistration { registered } => {
                let detail = format!(
                    "{}: {} of {} is not past {registered}, where the client registered again (evicted from the client table, then a late copy of its registration arrived); start a new client at request 1",
                    self.spec.group, request.request, request.client
                );
                return self.reply_error(&request, ReplyError::Superseded, detail, cx.out);
            }
            // The table only knows applied ops. An earlier request of this
            // client may still be in the log unapplied (an async write is
            // acknowledged on the primary's durable copy), or a new primary
            // may not yet have applied what it inherited: neither is an
            // eviction.
            Admission::UnknownClient if self.log.has_client_after(self.commit_min, request.client) => {}
            Admission::UnknownClient if self.commit_min < self.lead().start_view_op => {
                let detail = format!(
                    "{}: new primary of {} is still applying inherited ops; {} is not in its client table yet",
                    self.spec.group, self.view, request.client
                );
                return self.reply_error(&request, ReplyError::ViewChange, detail, cx.out);
            }
            // Only a primary that a quorum confirmed within its window (R24)
            // knows every committed op: a stale one (paused, or elected in a
            // view the others already left) may simply not have applied the
            // client's earlier writes, so it must not refuse the client.
            Admission::UnknownClient if !self.quorum_window_holds(None, now) => {
                let detail = format!(
                    "{}: primary of {} is not confirmed by a quorum within its window; {} may be known to a newer view",
                    self.spec.group, self.view, request.client
                );
                return self.reply_error(&request, ReplyError::QuorumWindowExpired, detail, cx.out);
            }
            Admission::UnknownClient => {
                let detail = format!(
                    "{}: {} is not known (evicted from the client table, or its earlier async writes were lost in a view change); start a new client at request 1",
                    self.spec.group, request.client
                );
                return self.reply_error(&request, ReplyError::Superseded, detail, cx.out);
            }
            Admission::New => {}
        }
        // In flight already (in the log or queued): the reply comes on apply.
        if self.log.find_request(self.commit_min, request.client, request.request).is_some()
            || self
                .request_queue
                .iter()
                .any(|queued| queued.client == request.client && queued.request == request.request)
        {
            return;
        }
        if self.request_queue.len() >= self.config.request_queue_max {
            let detail = format!("{}: {} requests already queued", self.spec.group, self.request_queue.len());
            return self.reply_error(&request, ReplyError::Busy, detail, cx.out);
        }
        self.request_queue.push_back(request);
        self.prepare_queued(cx);
    }

    /// Move queued requests into the pipeline while it has room. Q3: nothing
    /// new enters before every inherited op is committed.
    pub(crate) fn prepare_queued(&mut self, cx: &mut Context<'_>) {
        let RoleState::Primary(primary) = &self.role else { return };
        let inherited_pending =
            self.commit_max < primary.start_view_op && !self.config.mutated(Mutant::InheritedOpsNotFirst);
        if inherited_pending {
            return;
        }
        if self.seal_in_log() {
            return self.refuse_queued(cx.out);
        }
        while self.log.op().0 - self.commit_max.0 < self.config.pipeline_max_ops {
            let Some(request) = self.request_queue.pop_front() else { break };
            let entry = LogEntry {
                op: self.log.op().next(),
                view: self.view,
                client: request.client,
                request: request.request,
                operation: request.operation,
            };
            let seal = entry.client == cohort_messages::ClientId::SEAL;
            self.stage_append(entry.clone(), cx.out);
            for member in self.receivers() {
                let prepare = self.prepare_message(entry.clone());
                self.send_prepare(self.node_of(member), prepare, cx);
            }
            if seal {
                // Nothing is prepared after a seal (see `seal`).
                return self.refuse_queued(cx.out);
            }
        }
        let inherited = self.commit_max.max(self.lead().start_view_op);
        assert!(self.log.op().0 <= inherited.0 + self.config.pipeline_max_ops, "{self:?}: pipeline over its limit");
    }

    pub(crate) fn prepare_message(&self, entry: LogEntry) -> Prepare {
        Prepare {
            group: self.spec.group,
            incarnation: self.spec.incarnation,
            view: self.view,
            commit: self.commit_max.min(self.log.op()),
            replica: self.spec.me,
            entry,
        }
    }

    /// A backup receives a Prepare. R7: Prepares never restart the heartbeat timeout.
    pub(crate) fn on_prepare(&mut self, prepare: Prepare, cx: &mut Context<'_>) {
        debug_assert!(self.spec.node_at(prepare.replica).is_some(), "the door checked the sender");
        let stale = prepare.view < self.view && !self.config.mutated(Mutant::StaleViewAccepted);
        if stale || prepare.replica != self.primary_index_of(prepare.view) {
            return;
        }
        if prepare.view > self.view || self.status() != Status::Normal || self.log_view != self.view {
            // We missed the StartView; the primary re-sends it to members
            // that have not confirmed the view.
            return;
        }
        if self.is_primary() {
            return;
        }
        let op = prepare.entry.op;
        let (held_before, commit_before) = (self.log.op(), self.commit_max);
        if op <= self.log.op() {
            // A duplicate (or a repair of something we hold): re-acknowledge.
            if self.durable_op >= op {
                self.send_prepare_ok(cx.out);
            }
        } else if op == self.log.op().next() {
            if self.log.view_at(self.log.op()).is_some_and(|last| prepare.entry.view < last) {
                // T5: a correct primary's entry is of its view, or a repair
                // from its log, whose views never go back; ours is a prefix.
                return cx.refuse(crate::refusal::Refusal::LogViewsGoBack);
            }
            if !self.entry_fits_state(&prepare.entry) {
                return cx.refuse(crate::refusal::Refusal::NotAnOpBatch);
            }
            if (self.repair_asked.0..=self.repair_asked.1).contains(&op) {
                self.repair_answer_bytes += prepare.entry.operation.len() as u64;
            }
            self.stage_append(prepare.entry, cx.out);
            debug_assert_eq!(self.log.op(), op, "a Prepare next in line extends the log by one");
            if self.config.mutated(Mutant::AckBeforeDurable) {
                let staged = PrepareOk { op, ..self.prepare_ok() };
                cx.out.send(self.node_of(self.primary_index()), Message::PrepareOk(staged));
            }
        } else {
            // A gap: ask for what is missing.
            self.repair_target = self.repair_target.max(op);
        }
        self.learn_commit(prepare.commit, cx.out);
        debug_assert!(self.log.op() >= held_before, "a Prepare never shortens the log");
        debug_assert!(self.commit_max >= commit_before, "the known commit point never goes back");
        debug_assert!(self.durable_op <= self.log.op(), "durable only what is in the log");
    }

    /// A backup's log became durable further.
    pub(crate) fn on_durable(&mut self, now: u64, cx: &mut Context<'_>) {
        debug_assert!(self.durable_op <= self.log.op(), "durable only what is in the log");
        if self.is_primary() {
            self.acknowledge_async(cx.out);
            self.advance_commit(now, cx);
        } else if self.status() == Status::Normal && self.log_view == self.view {
            self.send_prepare_ok(cx.out);
            self.repair_on(now, cx.out);
        }
    }

    /// Q4: in an async group, a write is acknowledged once the primary's
    /// own copy is durable.
    fn acknowledge_async(&mut self, out: &mut Effects) {
        if self.spec.write_mode != super::WriteMode::Async {
            return;
        }
        while self.lead().async_acked_op < self.durable_op {
            let op = self.lead().async_acked_op.next();
            self.lead_mut().async_acked_op = op;
            let Some(entry) = self.log.get(op) else { continue };
            out.push(Effect::Reply(Reply {
                client: entry.client,
                request: entry.request,
                group: self.spec.group,
                view: self.view,
                op,
                outcome: Outcome::Ok(bytes::Bytes::new()),
            }));
        }
        assert!(self.lead().async_acked_op >= self.durable_op, "Q4: every durable write is acknowledged");
    }

    fn send_prepare_ok(&mut self, out: &mut Effects) {
        debug_assert!(!self.is_primary(), "a primary counts itself by its durable op");
        if self.durable_op == Op(0)
            || self.superblock_durable_log_view != Some(self.log_view)
            || self.recovery.is_some()
        {
            // Nothing durable yet, or the view is not (`on_flushed` calls
            // again once it is), or it is recovering (H1).
            return;
        }
        out.send(self.node_of(self.primary_index()), Message::PrepareOk(self.prepare_ok()));
    }

    /// What this member holds durably in its view, for the primary.
    pub(crate) fn prepare_ok(&self) -> PrepareOk {
        PrepareOk {
            group: self.spec.group,
            incarnation: self.spec.incarnation,
            view: self.view,
            op: self.durable_op,
            replica: self.spec.me,
        }
    }

    /// The primary counts an acknowledgement.
    pub(crate) fn on_prepare_ok(&mut self, ok: PrepareOk, now: u64, cx: &mut Context<'_>) {
        debug_assert!(self.spec.node_at(ok.replica).is_some(), "the door checked the sender");
        if !self.is_primary() || ok.view != self.view || ok.replica == self.spec.me {
            return;
        }
        // D3: what it holds, it needs from no stream's tail.
        self.receiver_holds(ok.replica, ok.op);
        if let Some(slot) = self.learner_slot(ok.replica) {
            return self.on_learner_prepare_ok(slot, ok.op, now, cx);
        }
        let member = ok.replica.0 as usize;
        let (log_op, commit_before) = (self.log.op(), self.commit_max);
        let primary = self.lead_mut();
        if member >= primary.acked.len() {
            return;
        }
        primary.confirmed[member] = true;
        if ok.op > primary.acked[member] && ok.op <= log_op {
            primary.acked[member] = ok.op;
            self.backlog_acked();
            self.advance_commit(now, cx);
            self.check_waits(cx.out);
            debug_assert!(self.lead().acked[member] == ok.op, "an acknowledgement is kept as counted");
            debug_assert!(self.commit_max >= commit_before, "the commit point never goes back");
        }
    }

    /// Durable ops per member, the primary's own by `durable_op`.
    pub(crate) fn held_ops(&self) -> Vec<Op> {
        let mut held = self.lead().acked.clone();
        held[self.spec.me.0 as usize] = self.durable_op;
        debug_assert_eq!(held.len(), self.spec.members.len(), "only voters are counted");
        held
    }

    /// Recompute the commit point from acknowledgements (V1, Q3).
    pub(crate) fn advance_commit(&mut self, now: u64, cx: &mut Context<'_>) {
        debug_assert!(self.is_primary());
        let short = usize::from(self.config.mutated(Mutant::CommitQuorumShort));
        let quorum = self.spec.quorums.replication.saturating_sub(short).max(1);
        let commit = crate::quorum::quorum_op(&self.held_ops(), quorum).min(self.seal_commit_cap());
        if commit <= self.commit_max {
            self.check_waits(cx.out);
            return;
        }
        debug_assert!(commit <= self.log.op(), "a quorum holds only what the primary's log holds");
        debug_assert!(
            self.held_ops().iter().filter(|held| **held >= commit).count() >= quorum,
            "{commit} is held by a replication quorum"
        );
        self.commit_max = commit;
        self.apply_committed(cx.out);
        // R6: an eager Commit to each backup that holds the new commit point.
        for member in self.others() {
            if self.lead().acked[member.0 as usize] >= commit {
                let entry = self.commit_entry(HeartbeatState::Eager, now);
                cx.out.queue_commit(self.node_of(member), entry, self.superblock_flush);
            }
        }
        self.eager_commits_to_learners(commit, now, cx.out);
        self.check_waits(cx.out);
        self.prepare_queued(cx);
    }

    /// A new Commit entry, with the next monotonic timestamp (R14).
    ///
    /// A timestamp is `tick * TIMESTAMP_PER_TICK + sequence`: it grows for
    /// each Commit of the group, and a CommitReply that echoes it tells the
    /// primary the tick at which the backup's lease began (R24, V7).
    pub(crate) fn commit_entry(&mut self, state: HeartbeatState, now: u64) -> CommitEntry {
        let floor = now * TIMESTAMP_PER_TICK;
        let before = self.timestamp;
        let next = (self.timestamp.0 + 1).max(floor).min(floor + TIMESTAMP_PER_TICK - 1).max(self.timestamp.0);
        self.timestamp = cohort_messages::Timestamp(next);
        assert!(self.timestamp >= before, "R14: Commit timestamps never go back");
        CommitEntry {
            group: self.spec.group,
            partition_incarnation: self.spec.incarnation,
            view: self.view,
            commit: self.commit_max.min(self.log.op()),
            timestamp_monotonic: self.timestamp,
            heartbeat_state: state,
            replica: self.spec.me,
        }
    }

    /// A backup learns a commit point.
    pub(crate) fn learn_commit(&mut self, commit: Op, out: &mut Effects) {
        debug_assert!(!self.is_primary(), "a primary computes its commit point, it does not learn one");
        if commit > self.commit_max {
            self.commit_max = commit;
        }
        if self.log_view == self.view {
            self.apply_committed(out);
        }
        if self.commit_max > self.log.op() {
            self.repair_target = self.repair_target.max(self.commit_max);
        }
        assert!(self.commit_max >= commit, "a backup knows at least the commit point it learned");
    }

    /// Apply every committed op held in the log, in order. D2: a state
    /// machine applied off the shard's thread gets its next run lent
    /// instead (see `apply`), and nothing more is applied until it is back.
    pub(crate) fn apply_committed(&mut self, out: &mut Effects) {
        debug_assert!(self.commit_min >= self.log.base(), "the snapshot holds only applied ops");
        if self.lent.is_some() {
            return; // D2: the next run waits for the one away.
        }
        let target = self.commit_max.min(self.log.op());
        self.apply_through(target, out);
    }

    /// [`Replica::apply_committed`] up to `target`, which the caller knows
    /// committed in this replica's log. D2: a run's return goes on to the
    /// target its lending stopped short of, whatever the replica went
    /// through meanwhile, so that the ops are applied as an inline apply
    /// would have applied them at once (a seal among them, say, before the
    /// view change that followed).
    pub(crate) fn apply_through(&mut self, target: Op, out: &mut Effects) {
        if self.lent.is_some() || target <= self.commit_min {
            return;
        }
        let applied_before = self.commit_min;
        let (primary, async_acked_op) = self.answer_mode();
        let mut applied = Vec::new();
        while self.commit_min < target {
            // D1: a run of ops the state machine applies goes to it in one
            // call; anything else (a seal, a registration, a duplicate, a
            // client's first write) alone, below.
            let run = self.apply_run(target);
            if !run.is_empty() {
                if self.apply_off_shard {
                    self.lend(run, target, out);
                    break;
                }
                let results = crate::state_machine::apply_run(self.state.as_mut(), &run);
                for ((op, operation), result) in run.into_iter().zip(results) {
                    let entry = self.log.get(op).expect("a run holds ops of the log");
                    let (client, request) = (entry.client, entry.request);
                    self.record_applied(op, client, request, operation, result.clone(), &mut applied);
                    self.answer_applied(client, request, op, Some(result), primary, async_acked_op, out);
                }
                continue;
            }
            let op = self.commit_min.next();
            let Some(entry) = self.log.get(op) else { break };
            if entry.client == ClientId::SEAL {
                let operation = entry.operation.clone();
                self.commit_min = op;
                self.apply_seal(op, &operation, out);
                continue;
            }
            let (client, request) = (entry.client, entry.request);
            let result = if !self.clients.should_apply(client, request) {
                self.clients.get(client).filter(|e| e.request == request).map(|e| e.result.clone())
            } else if is_registration(request) {
                // H5: a registration puts the client in the table and applies
                // nothing, so a second one (a retry after an eviction) is
                // harmless. The rule holds whatever the entry carries, on
                // every member alike.
                self.clients.record(client, request, op, Bytes::new());
                Some(Bytes::new())
            } else {
                let operation = entry.operation.clone();
                if self.apply_off_shard {
                    self.lend(vec![(op, operation)], target, out);
                    break;
                }
                let result = crate::state_machine::apply_one(self.state.as_mut(), op, &operation);
                self.record_applied(op, client, request, operation, result.clone(), &mut applied);
                Some(result)
            };
            self.commit_min = op;
            self.answer_applied(client, request, op, result, primary, async_acked_op, out);
        }
        debug_assert!(self.commit_min <= target, "applied forward, up to the target");
        self.after_applied(applied_before, applied, out);
    }

    /// Who answers applied ops: whether this replica is the primary, and
    /// (Q4) what an async primary already answered on its own durable copy.
    pub(crate) fn answer_mode(&self) -> (bool, Op) {
        let async_acked_op = match &self.role {
            RoleState::Primary(primary) => primary.async_acked_op,
            _ => Op(0),
        };
        (self.is_primary(), async_acked_op)
    }

    /// The state machine applied `op` with `result`: the client table
    /// records it, the applied point moves to it, and (for a group that
    /// reports them) `applied` lists it.
    pub(crate) fn record_applied(
        &mut self,
        op: Op,
        client: ClientId,
        request: RequestNumber,
        operation: Bytes,
        result: Bytes,
        applied: &mut Vec<AppliedOp>,
    ) {
        debug_assert_eq!(op, self.commit_min.next(), "ops are applied in order");
        self.clients.record(client, request, op, result.clone());
        if self.spec.report_applied {
            applied.push(AppliedOp { op, operation, result });
        }
        self.commit_min = op;
    }

    /// What follows a move of the applied point from `applied_before`
    /// (nothing if it did not move): the applied ops reported, the commit
    /// point saved (R12), a snapshot if one is due.
    pub(crate) fn after_applied(&mut self, applied_before: Op, applied: Vec<AppliedOp>, out: &mut Effects) {
        if self.commit_min == applied_before {
            debug_assert!(applied.is_empty(), "nothing reported unless applied");
            return;
        }
        debug_assert!(self.commit_min > applied_before, "applied forward");
        debug_assert!(applied.iter().all(|applied| applied.op > applied_before && applied.op <= self.commit_min));
        if self.spec.report_applied {
            out.push(Effect::Applied { group: self.spec.group, ops: applied, through: self.commit_min });
        }
        out.push(Effect::Committed { group: self.spec.group, op: self.commit_min });
        // R12: the new commit point is saved before a Commit carries it.
        self.stage_superblock(out);
        self.maybe_snapshot(out);
    }

    /// D1: the committed ops from the next one up to `target` that go to
    /// the state machine as one batch: writes of clients the table knows
    /// that it has not applied, each client once (so the table's answer to
    /// each is as it would be op by op, and no record of the run evicts a
    /// client: only a client's first record does), at most
    /// `APPLY_BATCH_OPS_MAX`. Empty if the next op is not such a write.
    fn apply_run(&self, target: Op) -> Vec<(Op, Bytes)> {
        let mut run: Vec<(Op, Bytes)> = Vec::new();
        // The run's clients, sorted: each op's check is a binary search,
        // not a scan of the run (a run of 64 clients cost 2,000 lookups).
        let mut clients: Vec<ClientId> = Vec::new();
        let mut op = self.commit_min.next();
        while op <= target && run.len() < APPLY_BATCH_OPS_MAX {
            let Some(entry) = self.log.get(op) else { break };
            let (client, request) = (entry.client, entry.request);
            if client == ClientId::SEAL
                || is_registration(request)
                || self.clients.get(client).is_none()
                || !self.clients.should_apply(client, request)
            {
                break;
            }
            let Err(at) = clients.binary_search(&client) else { break }; // In the run already.
            clients.insert(at, client);
            run.push((op, entry.operation.clone()));
            op = op.next();
        }
        debug_assert_eq!(clients.len(), run.len(), "each client once");
        run
    }

    /// The primary answers an applied op's client (Q4: unless an async
    /// primary answered it already on its own durable copy). `result` is
    /// `None` for a duplicate the table holds no answer for.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn answer_applied(
        &self,
        client: ClientId,
        request: RequestNumber,
        op: Op,
        result: Option<Bytes>,
        primary: bool,
        async_acked_op: Op,
        out: &mut Effects,
    ) {
        let acknowledged = self.spec.write_mode == super::WriteMode::Async && op <= async_acked_op;
        if primary
            && !acknowledged
            && let Some(result) = result
        {
            out.push(Effect::Reply(Reply {
                client,
                request,
                group: self.spec.group,
                view: self.view,
                op,
                outcome: Outcome::Ok(result),
            }));
        }
    }
}

/// D1: the most ops one [`StateMachine::apply_batch`](crate::StateMachine::apply_batch) call takes.
const APPLY_BATCH_OPS_MAX: usize = 64;
