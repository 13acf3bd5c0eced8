//! Catch-up of lagging members (V3): missing prepares, and state transfer
//! when the primary's log no longer holds what is missing.
//!
//! A backup that sees a gap (a Prepare beyond its next op, or a commit point
//! beyond its log) asks the primary for the missing range, at most
//! `REPAIR_OPS_MAX` ops at a time and again after `repair_timeout_ticks`.
//! The primary answers with ordinary Prepares, or, if the range starts at or
//! below its snapshot, with the first chunk of that snapshot. State transfer
//! is pulled chunk by chunk, so a lost chunk only costs a retry.
//!
//! T5: a chunk costs up to 4 MiB to answer a 60-byte request, so only the
//! member that must answer serves one: the primary, to a member that lags
//! behind its snapshot (a backup or learner whose StartView it could not
//! join, or whose repair reached below the snapshot), and, during a view
//! change, a member whose log the new primary chose, to that primary alone
//! (it cannot lead until it holds the snapshot the chosen log starts
//! after). A member takes chunks only from the member it fetches from (or,
//! fetching nothing, the primary of its view), of a snapshot no larger
//! than `state_transfer_size_max_bytes`.

use bytes::Bytes;
use cohort_messages::{
    LogEntry, MemberIndex, Message, Op, REPAIR_OPS_MAX, RequestPrepares, RequestStateTransfer, StateChunk, View,
};

use super::Context;
use super::{Replica, RoleState, Status};
use crate::effects::Effects;
use crate::refusal::Refusal;
use crate::storage::Snapshot;

/// A snapshot being fetched.
#[derive(Clone, Debug)]
pub(crate) struct StateTransfer {
    pub source: MemberIndex,
    pub snapshot_op: Op,
    pub snapshot_view: View,
    pub total_size_bytes: u64,
    /// Taken so far: the offset asked for next.
    pub received_bytes: u64,
    /// A whole snapshot: all of it so far. D3, a stream: its header, until
    /// whole (the rest goes to the state machine's staging).
    pub data: Vec<u8>,
    /// D3: set once the first chunk shows a stream.
    pub stream: Option<super::stream::Stream>,
    /// D3: the source started this snapshot over from its first byte (it
    /// cannot read on where we stopped): what is staged is dropped, not
    /// resumed.
    pub from_scratch: bool,
    /// D3: the offsets of a stream's staged part asked for and not taken
    /// yet, ascending (at most `STREAM_CHUNKS_IN_FLIGHT`).
    pub asked: std::collections::VecDeque<u64>,
    /// D3: requests still out for a stream this transfer left (its source
    /// moved to a newer one): each comes back as the newer stream's first
    /// chunk, which is then no sign that the source cannot resume.
    pub stale_asked: usize,
    /// D3: chunks of this transfer that arrived while the state machine
    /// was away staging the one before (on the apply worker), in arrival
    /// order, taken once it is back: at most `STREAM_CHUNKS_IN_FLIGHT`.
    pub held: std::collections::VecDeque<StateChunk>,
}

/// D3: chunks of a stream's staged part a receiver asks for ahead of the
/// one it takes, so that the sender's read and the link carry the next
/// chunk while the receiver writes and syncs this one (one at a time, the
/// three ran in sequence: 27 % of the disk's rate on an 8 GiB catch-up).
/// The receiver asks for offsets a chunk apart (the size of the chunk it
/// just took); a chunk that comes shorter than the one before makes it ask
/// again from where it is, and the chunk it asked for past that is dropped
/// on arrival. So a transfer has at most this many chunks in flight, and
/// an interruption sends at most this many again.
pub(crate) const STREAM_CHUNKS_IN_FLIGHT: usize = 2;

/// The most operation bytes one answer to a repair request carries (the
/// entry that crosses it goes too; the receiver asks for the rest with its
/// next request). Repair once sent up to `REPAIR_OPS_MAX` entries whatever
/// their size: from a stream's tail, 1,024 writes of 64 KiB passed the
/// link's queue (64 MiB), the whole turn's frames were dropped, again at
/// every retry, and a member that had installed a streamed state never
/// caught up (found by `cohort bench --restart`). 8 MiB per repair
/// timeout (500 ms on a node's 100 ms tick) would be 16 MB/s: a cut
/// answer is followed at once by the next request (`Replica::repair_on`).
pub const REPAIR_ANSWER_SIZE_MAX_BYTES: u64 = 8 << 20;

/// The entries of a repair answer taken from `entries` (committed, in op
/// order, from the op asked for): up to `op_max`, while `size_max_bytes`
/// of operations last (one entry at least); with their operation bytes.
pub(super) fn answer_from<'a>(
    entries: impl Iterator<Item = &'a LogEntry>,
    op_max: Op,
    size_max_bytes: u64,
) -> (Vec<LogEntry>, u64) {
    let (mut answer, mut size_bytes) = (Vec::new(), 0);
    for entry in entries.take_while(|entry| entry.op <= op_max) {
        if size_bytes >= size_max_bytes {
            break;
        }
        size_bytes += entry.operation.len() as u64;
        answer.push(entry.clone());
    }
    (answer, size_bytes)
}

impl Replica {
    /// True if this backup is missing ops it knows exist, or is fetching state.
    pub(crate) fn needs_repair(&self) -> bool {
        matches!(self.role, RoleState::Backup(_) | RoleState::Learner)
            && (self.state_transfer.is_some() || (self.log_view == self.view && self.repair_target > self.log.op()))
    }

    /// Ask the primary for the next missing range.
    pub(crate) fn request_repair(&mut self, now: u64, out: &mut Effects) {
        debug_assert!(self.needs_repair(), "{self:?}: only a follower missing something repairs");
        self.repair_deadline = now + self.config.timing.repair_timeout_ticks;
        assert!(self.repair_deadline > now, "the next repair request waits a repair timeout");
        self.drop_stale_transfer();
        if self.state_transfer.is_some() {
            return self.retry_state_transfer(now, out);
        }
        if !self.needs_repair() {
            return; // A stale transfer was all it missed.
        }
        let op_min = self.log.op().next();
        let op_max = Op(self.repair_target.0.min(op_min.0 + REPAIR_OPS_MAX - 1));
        self.repair_asked = (op_min, op_max);
        self.repair_answer_bytes = 0;
        let request = RequestPrepares {
            group: self.spec.group,
            incarnation: self.spec.incarnation,
            view: self.view,
            replica: self.spec.me,
            op_min,
            op_max,
        };
        out.send(self.node_of(self.primary_index()), Message::RequestPrepares(request));
    }

    /// A follower whose last repair answer was cut at
    /// [`REPAIR_ANSWER_SIZE_MAX_BYTES`] (it took that much from the range
    /// it asked for, and the range is not whole) asks for the rest as soon
    /// as that answer is durable (its first op at least), instead of at its
    /// repair deadline: one cut answer per repair timeout would be slower
    /// than the writes a lagging member must catch up with. Any other
    /// answer keeps the deadline, as before.
    pub(crate) fn repair_on(&mut self, now: u64, out: &mut Effects) {
        let (asked_from, asked_to) = self.repair_asked;
        if self.repair_answer_bytes >= REPAIR_ANSWER_SIZE_MAX_BYTES
            && self.durable_op >= asked_from
            && self.log.op() < asked_to
            && self.state_transfer.is_none()
            && self.needs_repair()
        {
            self.request_repair(now, out);
        }
    }

    /// The primary answers a repair request.
    pub(crate) fn on_request_prepares(&mut self, request: RequestPrepares, now: u64, cx: &mut Context<'_>) {
        debug_assert!(self.spec.node_at(request.replica).is_some(), "the door checked the sender");
        if !self.is_primary() || request.view != self.view || request.replica == self.spec.me {
            return;
        }
        let to = self.node_of(request.replica);
        let mut size_left_bytes = REPAIR_ANSWER_SIZE_MAX_BYTES;
        let mut op = request.op_min;
        if request.op_min <= self.log.base() {
            // D3: after a streamed state, what followed it comes from the
            // stream's tail, and the rest from the log.
            // D1: after a short stop, the primary's backlog holds it.
            let served = self
                .serve_tail(request.op_min, request.op_max, request.replica, size_left_bytes, now, cx)
                .or_else(|| self.serve_backlog(request.op_min, request.op_max, request.replica, size_left_bytes, cx));
            let Some((next, sent_bytes)) = served else {
                return self.serve_chunk(None, 0, request.replica, now, cx.out);
            };
            op = next;
            size_left_bytes = size_left_bytes.saturating_sub(sent_bytes);
        } else {
            // The log answers it: it needs no stream's tail any more.
            self.receiver_holds(request.replica, Op(request.op_min.0 - 1));
        }
        let last = request.op_max.min(self.log.op());
        while op <= last && size_left_bytes > 0 {
            if let Some(entry) = self.log.get(op).cloned() {
                size_left_bytes = size_left_bytes.saturating_sub(entry.operation.len() as u64);
                self.send_prepare(to, self.prepare_message(entry), cx);
            }
            op = op.next();
        }
    }

    /// A transfer of a snapshot this replica has applied past meanwhile
    /// (the log brought it there while the chunks came: more likely the
    /// more chunks a snapshot takes) has nothing left to give: dropped, so
    /// repair goes on from the log. A transfer not started yet (op 0) stays.
    pub(super) fn drop_stale_transfer(&mut self) {
        if self
            .state_transfer
            .as_ref()
            .is_some_and(|transfer| transfer.snapshot_op > Op(0) && transfer.snapshot_op <= self.commit_min)
        {
            self.state_transfer = None;
        }
    }

    /// Start fetching the snapshot of `source`.
    pub(crate) fn request_state_transfer(&mut self, source: MemberIndex, now: u64, out: &mut Effects) {
        assert_ne!(source, self.spec.me, "{self:?}: a state transfer from itself");
        debug_assert!(self.spec.is_voter(source), "T5: only a voter serves a snapshot");
        // D3: a stream staged from this source goes on where it stopped.
        let transfer = self.resumed_transfer(source).unwrap_or(StateTransfer {
            source,
            snapshot_op: Op(0),
            snapshot_view: View(0),
            total_size_bytes: 0,
            received_bytes: 0,
            data: Vec::new(),
            stream: None,
            from_scratch: false,
            asked: Default::default(),
            stale_asked: 0,
            held: Default::default(),
        });
        self.state_transfer = Some(Box::new(transfer));
        self.retry_state_transfer(now, out);
        assert!(self.state_transfer.as_ref().is_some_and(|transfer| transfer.source == source));
    }

    /// Ask for the next chunk (or again for a lost one).
    pub(crate) fn retry_state_transfer(&mut self, now: u64, out: &mut Effects) {
        self.drop_stale_transfer();
        let Some(transfer) = self.state_transfer.as_deref_mut() else { return };
        self.repair_deadline = now + self.config.timing.repair_timeout_ticks;
        transfer.asked.clear();
        let offset = transfer.received_bytes;
        self.ask_chunk(offset, out);
        assert!(self.repair_deadline > now, "the next chunk request waits a repair timeout");
    }

    /// D3: a chunk of a stream's staged part was taken: keep
    /// `STREAM_CHUNKS_IN_FLIGHT` chunks asked for ahead of it (the header
    /// goes one chunk at a time: its size is known only once it is whole).
    /// The offsets asked for ahead are `stride_bytes` apart: the size of
    /// the staged chunk just taken (`None`: a chunk of the header, which
    /// says nothing of the state machine's chunks, so only the next one is
    /// asked for), so a state machine that cuts its chunks shorter than
    /// `state_chunk_size_bytes` costs no chunk sent in vain.
    pub(crate) fn ask_next_chunks(&mut self, stride_bytes: Option<u64>, now: u64, out: &mut Effects) {
        let Some(chunk_bytes) = stride_bytes.filter(|stride| *stride > 0) else {
            return self.retry_state_transfer(now, out);
        };
        let Some(transfer) = self.state_transfer.as_deref_mut() else { return };
        if !transfer.stream.as_ref().is_some_and(|stream| stream.staging) {
            return self.retry_state_transfer(now, out);
        }
        let received = transfer.received_bytes;
        while transfer.asked.front().is_some_and(|offset| *offset < received) {
            transfer.asked.pop_front();
        }
        if transfer.asked.front() != Some(&received) {
            // A chunk came shorter than asked for: ask from here.
            transfer.asked.clear();
        }
        let first = transfer.asked.back().map_or(received, |last| last + chunk_bytes);
        let room = STREAM_CHUNKS_IN_FLIGHT.saturating_sub(transfer.asked.len());
        let total = transfer.total_size_bytes;
        self.repair_deadline = now + self.config.timing.repair_timeout_ticks;
        let offsets = (0..room as u64).map(|index| first + index * chunk_bytes).take_while(|offset| *offset < total);
        for offset in offsets {
            self.ask_chunk(offset, out);
        }
        debug_assert!(
            self.state_transfer.as_ref().is_none_or(|transfer| transfer.asked.len() <= STREAM_CHUNKS_IN_FLIGHT),
            "D3: a bounded number of chunks in flight"
        );
    }

    /// Send `receiver` the entries of a repair answer that starts at
    /// `op_min` (see [`answer_from`]); the op after the last one sent.
    pub(super) fn send_answer(
        &mut self,
        receiver: MemberIndex,
        op_min: Op,
        entries: Vec<LogEntry>,
        cx: &mut Context<'_>,
    ) -> Op {
        let next = entries.last().map_or(op_min, |entry| entry.op.next());
        let to = self.node_of(receiver);
        for entry in entries {
            self.send_prepare(to, self.prepare_message(entry), cx);
        }
        next
    }

    /// Send the source a request for the chunk at `offset_bytes`, and note
    /// it as asked for (offsets only grow: a retry clears them first).
    fn ask_chunk(&mut self, offset_bytes: u64, out: &mut Effects) {
        let Some(transfer) = self.state_transfer.as_deref_mut() else { return };
        debug_assert!(transfer.asked.back().is_none_or(|last| *last < offset_bytes), "asked for in offset order");
        transfer.asked.push_back(offset_bytes);
        let (source, snapshot_op) = (transfer.source, transfer.snapshot_op);
        let request = RequestStateTransfer {
            group: self.spec.group,
            incarnation: self.spec.incarnation,
            view: self.view,
            replica: self.spec.me,
            snapshot_op,
            offset_bytes,
        };
        out.send(self.node_of(source), Message::RequestStateTransfer(request));
    }

    /// The primary serves its snapshot, and so does a member in a view
    /// change to the member that is to lead it (T5: no other member does).
    pub(crate) fn on_request_state_transfer(&mut self, request: RequestStateTransfer, now: u64, cx: &mut Context<'_>) {
        debug_assert!(self.spec.node_at(request.replica).is_some(), "the door checked the sender");
        if request.replica == self.spec.me {
            return;
        }
        let to_new_primary =
            self.status() == Status::ViewChange && request.view == self.view && request.replica == self.primary_index();
        if !self.is_primary() && !to_new_primary {
            // A correct member asks the primary of its view, which may have
            // stepped down since (it asks the next one after its StartView),
            // or the view's chosen log, from an election since left.
            return cx.refuse(Refusal::StateTransferNotPrimary);
        }
        self.serve_chunk(Some(request.snapshot_op), request.offset_bytes, request.replica, now, cx.out);
    }

    /// A chunk arrives (asked for, or as the answer to a repair request).
    pub(crate) fn on_state_chunk(&mut self, chunk: StateChunk, now: u64, cx: &mut Context<'_>) {
        debug_assert!(self.spec.node_at(chunk.replica).is_some(), "the door checked the sender");
        let applied_before = self.commit_min;
        self.take_chunk(chunk, now, cx);
        assert!(self.commit_min >= applied_before, "{self:?}: a snapshot never takes back applied ops");
        // T5: no transfer buffers more than the cap allows (D3: a stream
        // buffers its header alone).
        let cap = self.config.state_transfer_size_max_bytes;
        assert!(self.state_transfer.as_ref().is_none_or(|transfer| {
            transfer.data.len() as u64 <= cap.max(super::stream::STREAM_HEADER_SIZE_MAX_BYTES as u64)
                && transfer.held.len() <= STREAM_CHUNKS_IN_FLIGHT
        }));
    }

    /// [`Replica::on_state_chunk`]: check it, keep it, and install the
    /// snapshot once whole.
    fn take_chunk(&mut self, chunk: StateChunk, now: u64, cx: &mut Context<'_>) {
        if let Some(lent) = self.lent.as_deref() {
            // D2: staging and installing need the state machine, which is
            // away. A chunk of the transfer whose chunk it is staging (D3)
            // is held until it is back, as many as are asked for ahead;
            // any other is dropped as if lost, and asked for again.
            if let Some(transfer) = self.state_transfer.as_deref_mut()
                && lent.stages(transfer.source, transfer.snapshot_op)
                && chunk.replica == transfer.source
                && chunk.snapshot_op == transfer.snapshot_op
                && transfer.held.len() < STREAM_CHUNKS_IN_FLIGHT
            {
                transfer.held.push_back(chunk);
            }
            return;
        }
        self.drop_stale_transfer();
        if chunk.replica == self.spec.me || chunk.snapshot_op <= self.commit_min {
            return;
        }
        if self.is_primary() {
            return;
        }
        if let Err(refusal) = self.check_chunk(&chunk) {
            return cx.refuse(refusal);
        }
        let fresh = StateTransfer {
            source: chunk.replica,
            snapshot_op: chunk.snapshot_op,
            snapshot_view: chunk.snapshot_view,
            total_size_bytes: chunk.total_size_bytes,
            received_bytes: 0,
            data: Vec::new(),
            stream: None,
            from_scratch: false,
            asked: Default::default(),
            stale_asked: 0,
            held: Default::default(),
        };
        if self.state_transfer.is_none()
            && let Some(resumed) = self.resumed_transfer(chunk.replica).filter(|resumed| {
                resumed.snapshot_op == chunk.snapshot_op && resumed.total_size_bytes == chunk.total_size_bytes
            })
        {
            // D3: the first chunk of a stream this replica staged part of
            // (before a restart, or a transfer it dropped): ask for the rest.
            self.state_transfer = Some(Box::new(resumed));
            return self.retry_state_transfer(now, cx.out);
        }
        let transfer = self.state_transfer.get_or_insert_with(|| Box::new(fresh.clone()));
        // A chunk at 0 starts the transfer over: of a newer snapshot, or of
        // the same one from a source that cannot resume where we stopped.
        let other = transfer.snapshot_op != chunk.snapshot_op || transfer.source != chunk.replica;
        // D3: with chunks asked for ahead, a source that moved to a newer
        // stream answers each request still out for the old one with the
        // newer one's first chunk: the first starts the new transfer, the
        // others are dropped here.
        if !other && chunk.offset_bytes == 0 && transfer.received_bytes > 0 && transfer.stale_asked > 0 {
            transfer.stale_asked -= 1;
            return;
        }
        if other || (chunk.offset_bytes == 0 && transfer.received_bytes > 0) {
            if chunk.offset_bytes != 0 {
                return;
            }
            // Starting over on the same stream (none stale: checked above)
            // leaves none; another stream inherits the old one's requests
            // still out, but for the one this chunk answered.
            let stale_asked = if other { transfer.stale_asked + transfer.asked.len().saturating_sub(1) } else { 0 };
            **transfer = StateTransfer { from_scratch: !other, stale_asked, ..fresh };
        }
        if chunk.offset_bytes != transfer.received_bytes || chunk.total_size_bytes != transfer.total_size_bytes {
            return;
        }
        cx.out.count_chunk_taken(chunk.chunk.len() as u64);
        let streamed = transfer.stream.is_some() || (chunk.offset_bytes == 0 && super::stream::is_stream(&chunk.chunk));
        // D3: a chunk of the staged part gives the stride to ask ahead by.
        let stride_bytes =
            transfer.stream.as_ref().is_some_and(|stream| stream.staging).then_some(chunk.chunk.len() as u64);
        if !streamed {
            return self.take_whole_chunk(chunk, now, cx);
        }
        let step = self.take_stream_chunk(&chunk, cx.out);
        self.after_stream_step(step, stride_bytes, now, cx);
    }

    /// D3: go on from what a chunk of a stream led to: ask for the next
    /// ones (`stride_bytes` apart, see [`Replica::ask_next_chunks`]),
    /// install the stream once whole, or drop a transfer that failed.
    pub(crate) fn after_stream_step(
        &mut self,
        step: Result<super::stream::StreamStep, super::stream::StreamError>,
        stride_bytes: Option<u64>,
        now: u64,
        cx: &mut Context<'_>,
    ) {
        match step {
            Ok(super::stream::StreamStep::More | super::stream::StreamStep::Staging) => {
                self.ask_next_chunks(stride_bytes, now, cx.out)
            }
            Ok(super::stream::StreamStep::Whole(snapshot)) => {
                self.state_transfer = None;
                if let Err(error) = self.install_snapshot(snapshot, now, cx) {
                    // The state machine installed it; cohort could not take
                    // its record. Counted; repair asks again.
                    debug_assert!(false, "a checked stream record installs: {error}");
                    cx.refuse(Refusal::SnapshotUnusable);
                    self.repair_deadline = now;
                }
            }
            Err(error) => {
                if let super::stream::StreamError::Refused = error {
                    cx.refuse(Refusal::SnapshotUnusable);
                }
                self.state_transfer = None;
                self.repair_deadline = now;
            }
        }
    }

    /// A chunk of a whole snapshot: buffered, and installed once whole.
    fn take_whole_chunk(&mut self, chunk: StateChunk, now: u64, cx: &mut Context<'_>) {
        if chunk.total_size_bytes > self.config.state_transfer_size_max_bytes {
            self.state_transfer = None;
            return cx.refuse(Refusal::StateTransferTooLarge);
        }
        let Some(transfer) = self.state_transfer.as_deref_mut() else { return };
        transfer.data.extend_from_slice(&chunk.chunk);
        transfer.received_bytes += chunk.chunk.len() as u64;
        if !chunk.is_last() {
            return self.retry_state_transfer(now, cx.out);
        }
        let Some(transfer) = self.state_transfer.take() else { return };
        let snapshot =
            Snapshot { op: transfer.snapshot_op, view: transfer.snapshot_view, data: Bytes::from(transfer.data) };
        // D1: a snapshot sent must carry its state; one that holds none is
        // not installed (a persistent state machine would take it as its
        // own checkpoint's).
        if super::snapshot::state_is_held(&snapshot.data) || self.install_snapshot(snapshot, now, cx).is_err() {
            // Dropped, and counted; repair asks again.
            cx.refuse(Refusal::SnapshotUnusable);
            self.repair_deadline = now;
        }
    }

    /// T5: a chunk comes from the member we fetch from (the primary of our
    /// view if we fetch nothing: it answers a repair below its snapshot with
    /// one), of a snapshot of a view we have reached, no larger than the
    /// configured cap.
    fn check_chunk(&self, chunk: &StateChunk) -> Result<(), Refusal> {
        let source = self.state_transfer.as_ref().map_or(self.primary_index(), |transfer| transfer.source);
        if chunk.replica != source {
            return Err(Refusal::StateChunkNotFromSource);
        }
        // A snapshot's entries are committed, so of views we have reached;
        // one of a later view (its primary moved on and leads a view with
        // the same primary index) would put a later view under our log.
        if chunk.snapshot_view > self.view {
            return Err(Refusal::SnapshotFromLaterView);
        }
        Ok(())
    }

    /// Install a fetched snapshot of committed state. Entries after it that
    /// we hold are kept: only the committed prefix is replaced (see
    /// docs/replication.md on why this never loses a committed op).
    pub(crate) fn install_snapshot(
        &mut self,
        snapshot: Snapshot,
        now: u64,
        cx: &mut Context<'_>,
    ) -> Result<(), String> {
        if snapshot.op <= self.commit_min {
            return Ok(());
        }
        let snapshot_op = snapshot.op;
        let kept: Vec<_> = self.log.entries_from(snapshot.op.next()).cloned().collect();
        let snapshot = self.install_snapshot_state(&snapshot, cx.out)?;
        // Keep what follows the snapshot only while views do not go
        // backwards: an entry of a view older than the snapshot's entry
        // cannot be committed (committed logs are prefixes, views in a log
        // never decrease), and neither can anything after it.
        let mut dropped = false;
        for entry in kept {
            if !dropped && entry.op == self.log.op().next() && entry.view >= snapshot.view {
                self.log.push(entry);
            } else {
                dropped = true;
            }
        }
        self.durable_op = self.durable_op.min(self.log.op());
        let flush = cx.out.stage(
            self.spec.group,
            crate::effect::Effect::SaveSnapshot {
                group: self.spec.group,
                snapshot: snapshot.clone(),
                deferrable: false,
            },
        );
        self.pending_durable.push_back((flush, self.log.op()));
        if dropped {
            let op = self.log.op();
            self.stage_truncate(op, cx.out);
        }
        self.snapshot = Some(snapshot);
        self.stage_superblock(cx.out);
        cx.out.push(crate::effect::Effect::Committed { group: self.spec.group, op: self.commit_min });
        if self.status() == Status::ViewChange {
            self.try_complete_view_change(now, cx);
        } else if self.log_view == self.view {
            self.apply_committed(cx.out);
        }
        assert!(self.commit_min >= snapshot_op, "{self:?}: the snapshot's ops are applied");
        // The installed snapshot, or a later one that applying what it
        // enabled took at once (a snapshot every `snapshot_interval_ops`).
        assert!(
            self.snapshot.as_ref().is_some_and(|snapshot| snapshot.op >= snapshot_op),
            "the snapshot served next holds the installed state"
        );
        Ok(())
    }
}
