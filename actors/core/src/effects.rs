//! The shard's output buffer, shared by all of its replicas.
//!
//! Replicas never build the effect list by hand; they call these methods,
//! which keep the three ordering rules in one place:
//! 1. Storage effects are staged; the first staged effect after a flush
//!    starts a new flush id, and [`Effects::end_turn`] closes it with a
//!    [`Effect::Flush`].
//! 2. A durable send ([`Effects::send_durable`]) is held until every storage
//!    effect staged before it is durable, then released in order; a Prepare
//!    or Commit entry may wait for one given flush instead
//!    ([`Effects::send_prepare_after`], [`Effects::queue_commit`]).
//! 3. Commit entries collect per peer until the end of the tick (R11, R6) and
//!    CommitReply entries per peer until the end of the next tick (R27).
//!
//! The buffer holds only what is to go out. The tick, the shard's counters
//! and which peers' links are congested belong to the shard, which passes
//! them to the few methods that need them (see `replica::Context`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use cohort_messages::{CommitEntry, CommitReplyEntry, GroupId, Message, NodeId};

use crate::effect::{Effect, FlushId};
use crate::metrics::ShardMetrics;
use crate::refusal::Refusal;

/// What the buffer holds between turns, for [`crate::footprint`] (T5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Queued {
    /// Sends held for a flush, or parked for a retried superblock.
    pub held_sends: usize,
    /// Commit entries queued for the next batches.
    pub queued_commits: usize,
    /// CommitReply entries queued for the next batches.
    pub queued_replies: usize,
}

/// A send waiting for a flush.
#[derive(Clone, Debug)]
enum Held {
    Effect(Effect),
    Commit(NodeId, CommitEntry),
    Prepare(NodeId, cohort_messages::Prepare),
}

/// Output buffer. See the module docs.
#[derive(Debug, Default)]
pub struct Effects {
    effects: Vec<Effect>,
    staged: bool,
    flush_next: FlushId,
    flush_emitted: FlushId,
    flush_completed: FlushId,
    held: VecDeque<(FlushId, Held)>,
    /// Held sends of groups whose superblock stage failed (R12): they wait
    /// for the retried superblock's flush.
    parked: Vec<(GroupId, Held)>,
    touched: VecDeque<(FlushId, GroupId)>,
    commit_queue: BTreeMap<NodeId, Vec<CommitEntry>>,
    /// Where each group's entry sits in `commit_queue[to]`, so that a later
    /// entry replaces it in O(1): a search of the queue made a tick
    /// quadratic in the groups due (at 100,000 groups, a fifth of the CPU
    /// at start-up went to it and to the moves it caused). Only looked up,
    /// never iterated, so the batches keep their order.
    commit_slots: std::collections::HashMap<(NodeId, GroupId), usize>,
    reply_queue: BTreeMap<NodeId, Vec<CommitReplyEntry>>,
    /// D1, D3: what replicas counted since the shard last collected it
    /// (see [`Effects::take_counts`]).
    counts: ShardMetrics,
    /// D1: bytes of operations the backlogs of this shard's primaries hold
    /// (see `replica::backlog`). Each backlog holds a handle and gives its
    /// bytes back when dropped, with its primary's role state or its
    /// replica, so the figure cannot drift from what is held.
    backlog_ledger: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// D2: the id of the next run lent to the apply worker.
    apply_next: crate::effect::ApplyId,
}

impl Effects {
    /// A fresh buffer; flush ids start at 1.
    pub fn new() -> Effects {
        Effects { flush_next: 1, ..Effects::default() }
    }

    /// D2: lend `state` to the apply worker for `work` of `group`;
    /// returns the job's id.
    pub fn lend(
        &mut self,
        group: GroupId,
        work: crate::state_machine::Work,
        state: Box<dyn crate::StateMachine>,
    ) -> crate::effect::ApplyId {
        match &work {
            crate::state_machine::Work::Apply(ops) => {
                debug_assert!(!ops.is_empty(), "a run applies something");
                self.counts.apply_runs_lent += 1;
            }
            crate::state_machine::Work::Stage { .. } => self.counts.state_chunks_lent += 1,
        }
        self.apply_next += 1;
        let id = self.apply_next;
        let state = crate::state_machine::LentState::new(state);
        self.effects.push(Effect::Apply { group, id, work, state });
        id
    }

    /// D2: take back the state machine of `group`'s run `id` if it was
    /// lent in this turn and is still here (the group is removed before
    /// the turn ended).
    pub fn take_lent(&mut self, group: GroupId, id: crate::effect::ApplyId) -> Option<Box<dyn crate::StateMachine>> {
        let at = self.effects.iter().position(
            |effect| matches!(effect, Effect::Apply { group: owner, id: lent, .. } if *owner == group && *lent == id),
        )?;
        match self.effects.remove(at) {
            Effect::Apply { mut state, .. } => state.take(),
            _ => unreachable!("the position of an Apply"),
        }
    }

    /// D2: a request waits for its group's state machine.
    pub fn count_waited_for_state(&mut self) {
        self.counts.requests_waited_for_state += 1;
    }

    /// D1: a persistent state machine failed to take a checkpoint.
    pub fn count_checkpoint_failure(&mut self) {
        self.counts.checkpoints_failed += 1;
    }

    /// D3: a state machine failed to export, stage or install a stream.
    pub fn count_transfer_failure(&mut self) {
        self.counts.state_transfer_failures += 1;
    }

    /// D3: a state chunk of `size_bytes` went out; `again` if it starts
    /// below the end of what its stream already sent.
    pub fn count_chunk_sent(&mut self, size_bytes: u64, again: bool) {
        self.counts.state_chunks_sent += 1;
        self.counts.state_chunk_bytes_sent += size_bytes;
        if again {
            self.counts.state_chunk_bytes_resent += size_bytes;
        }
    }

    /// D3: a state chunk of `size_bytes` was taken into a transfer (the
    /// next one it needed).
    pub fn count_chunk_taken(&mut self, size_bytes: u64) {
        self.counts.state_chunk_bytes_taken += size_bytes;
    }

    /// D1: a primary sent `size_bytes` of operations from its backlog.
    pub fn count_backlog_served(&mut self, size_bytes: u64) {
        self.counts.backlog_bytes_served += size_bytes;
    }

    /// D3: a stream of a checkpoint was opened to serve a transfer.
    pub fn count_stream_opened(&mut self) {
        self.counts.state_streams_opened += 1;
    }

    /// D3: a streamed state was installed.
    pub fn count_stream_installed(&mut self) {
        self.counts.state_streams_installed += 1;
    }

    /// D1: the shard's backlog ledger, for a backlog to hold.
    pub(crate) fn backlog_ledger(&self) -> &std::sync::Arc<std::sync::atomic::AtomicU64> {
        &self.backlog_ledger
    }

    /// D1: bytes of operations every backlog of the shard holds.
    pub fn backlog_size_bytes(&self) -> u64 {
        self.backlog_ledger.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Add what was counted since the last call to `metrics`.
    pub fn take_counts(&mut self, metrics: &mut ShardMetrics) {
        metrics.add(&std::mem::take(&mut self.counts));
    }

    /// Emit a effect now.
    pub fn push(&mut self, effect: Effect) {
        debug_assert!(!Self::is_storage(&effect), "storage effects go through stage()");
        self.effects.push(effect);
    }

    fn is_storage(effect: &Effect) -> bool {
        effect.kind().is_storage()
    }

    /// Stage a storage effect for `group`; it becomes durable with the flush
    /// this turn ends with. Returns that flush's id.
    pub fn stage(&mut self, group: GroupId, effect: Effect) -> FlushId {
        debug_assert!(Self::is_storage(&effect) && !matches!(effect, Effect::Flush { .. }));
        self.staged = true;
        if self.touched.back() != Some(&(self.flush_next, group)) {
            self.touched.push_back((self.flush_next, group));
        }
        self.effects.push(effect);
        self.flush_next
    }

    /// The flush a durable send issued now must wait for, if any.
    fn barrier(&self) -> Option<FlushId> {
        if self.staged {
            Some(self.flush_next)
        } else if self.flush_emitted > self.flush_completed {
            Some(self.flush_emitted)
        } else {
            None
        }
    }

    /// Send a message immediately (no durability needed).
    pub fn send(&mut self, to: NodeId, message: Message) {
        self.effects.push(Effect::Send { to, message });
    }

    /// Send a Prepare, unless `to` is among the `congested` peers (K4): then
    /// it is held back, counted in `metrics`, and sent again with the others
    /// the member lacks once the link drains
    /// ([`crate::Shard::set_peer_congested`]).
    fn send_prepare(
        &mut self,
        to: NodeId,
        prepare: cohort_messages::Prepare,
        congested: &BTreeSet<NodeId>,
        metrics: &mut ShardMetrics,
    ) {
        if congested.contains(&to) {
            metrics.prepares_held_back += 1;
            return;
        }
        self.effects.push(Effect::Send { to, message: Message::Prepare(prepare) });
    }

    /// Send a Prepare once flush `after` is durable (0 or a completed flush:
    /// at once), unless `to`'s link is congested then (K4, see
    /// `send_prepare`). A new primary's Prepares wait this way for the flush
    /// its StartView waits for, so they reach each backup behind it: one
    /// that got them first would still be electing and drop them, and the
    /// ops would wait for a repair.
    pub fn send_prepare_after(
        &mut self,
        to: NodeId,
        prepare: cohort_messages::Prepare,
        after: FlushId,
        congested: &BTreeSet<NodeId>,
        metrics: &mut ShardMetrics,
    ) {
        if after > self.flush_completed {
            self.hold(after, Held::Prepare(to, prepare));
        } else {
            self.send_prepare(to, prepare, congested, metrics);
        }
    }

    /// Hold `held` until flush `after` (not yet completed) is durable.
    /// Held sends are released in queue order, and `after` never exceeds
    /// the open flush, so the queue stays sorted enough: a send is released
    /// no earlier than its flush, and never before one held earlier.
    fn hold(&mut self, after: FlushId, held: Held) {
        debug_assert!(
            after > self.flush_completed && after <= self.flush_next,
            "waiting for a flush that does not exist"
        );
        self.held.push_back((after.max(self.held.back().map_or(0, |(flush, _)| *flush)), held));
    }

    /// Send a message once everything staged so far is durable.
    pub fn send_durable(&mut self, to: NodeId, message: Message) {
        let effect = Effect::Send { to, message };
        match self.barrier() {
            Some(flush) => self.held.push_back((flush, Held::Effect(effect))),
            None => self.effects.push(effect),
        }
    }

    /// Queue a Commit entry for `to`'s next batch once flush `after` (the
    /// one carrying the group's latest superblock, R12) is durable; 0 or a
    /// completed flush means at once. A later entry of the same group replaces
    /// an earlier one in the same batch.
    pub fn queue_commit(&mut self, to: NodeId, entry: CommitEntry, after: FlushId) {
        if after > self.flush_completed {
            self.hold(after, Held::Commit(to, entry));
        } else {
            self.put_commit(to, entry);
        }
    }

    /// The id of the last completed flush.
    pub fn flush_completed(&self) -> FlushId {
        self.flush_completed
    }

    /// T5: what this buffer holds between turns, for [`crate::footprint`]:
    /// sends held for a flush or parked, and the Commit and CommitReply
    /// entries queued for the next batches.
    pub(crate) fn queued(&self) -> Queued {
        Queued {
            held_sends: self.held.len() + self.parked.len(),
            queued_commits: self.commit_queue.values().map(Vec::len).sum(),
            queued_replies: self.reply_queue.values().map(Vec::len).sum(),
        }
    }

    fn put_commit(&mut self, to: NodeId, entry: CommitEntry) {
        let queue = self.commit_queue.entry(to).or_default();
        match self.commit_slots.get(&(to, entry.group)).and_then(|slot| queue.get_mut(*slot)) {
            Some(queued) if (queued.view, queued.timestamp_monotonic) <= (entry.view, entry.timestamp_monotonic) => {
                debug_assert_eq!(queued.group, entry.group, "a slot names its group's entry");
                *queued = entry
            }
            Some(_) => {}
            None => {
                self.commit_slots.insert((to, entry.group), queue.len());
                queue.push(entry);
            }
        }
    }

    /// Queue a CommitReply for `to` (R27): it leaves at the end of the next
    /// tick. T5: one batch holds at most `COMMIT_REPLY_BATCH_ENTRIES_MAX`
    /// entries (R13: a batch is never split), so a reply past that, which
    /// only a flood of Commit entries from one peer within a tick can cause
    /// (a shard leads far fewer groups), is dropped: the error is the
    /// refusal for the caller to count.
    pub fn queue_reply(&mut self, to: NodeId, entry: CommitReplyEntry) -> Result<(), Refusal> {
        let queue = self.reply_queue.entry(to).or_default();
        if queue.len() >= cohort_messages::COMMIT_REPLY_BATCH_ENTRIES_MAX {
            return Err(Refusal::ReplyBatchFull);
        }
        queue.push(entry);
        Ok(())
    }

    /// The group a held send belongs to.
    fn group_of(held: &Held) -> Option<GroupId> {
        match held {
            Held::Effect(Effect::Send { message, .. }) => message.group(),
            Held::Commit(_, entry) => Some(entry.group),
            Held::Prepare(_, prepare) => Some(prepare.group),
            Held::Effect(_) => None,
        }
    }

    /// `group`'s superblock stage failed (R12): everything of the group that
    /// waits for durability (view-change messages, StartViews, Commits) waits
    /// until a retried superblock is flushed, instead of leaving with the
    /// flush that did not carry it.
    pub fn park_group(&mut self, group: GroupId) {
        let held = std::mem::take(&mut self.held);
        for (flush, item) in held {
            if Self::group_of(&item) == Some(group) {
                self.parked.push((group, item));
            } else {
                self.held.push_back((flush, item));
            }
        }
        debug_assert!(self.held.iter().all(|(_, item)| Self::group_of(item) != Some(group)), "R12: all parked");
    }

    /// The retried superblock of `group` is staged in flush `flush`: what was
    /// parked now waits for that flush.
    pub fn unpark_group(&mut self, group: GroupId, flush: FlushId) {
        assert!(flush > self.flush_completed && flush <= self.flush_next, "R12: the retry's flush is open");
        let parked = std::mem::take(&mut self.parked);
        for (owner, item) in parked {
            if owner == group {
                debug_assert!(self.held.back().is_none_or(|(last, _)| *last <= flush));
                self.held.push_back((flush, item));
            } else {
                self.parked.push((owner, item));
            }
        }
        debug_assert!(self.parked.iter().all(|(owner, _)| *owner != group), "R12: all wait for the retry");
    }

    /// `group` is no longer hosted (S4, C3): drop what the buffer still
    /// holds of it, but for answers to clients and quorum waits (their
    /// callers are owed one). Its storage effects not yet handed over go,
    /// so that none runs after the shell removes the group's storage (the
    /// removal is queued behind the jobs already handed over, not behind
    /// the open turn); its sends that wait for a flush and its queued
    /// Commit and CommitReply entries go, as they would vouch for data that
    /// is being deleted; and its role, commit and apply reports go, as no
    /// listener of this process hosts the group now (one hosted again under
    /// the same id would take them for its own). A group hosted again under
    /// the same id starts with nothing of the old replica's pending here.
    pub fn forget_group(&mut self, group: GroupId) {
        let owner_of = |effect: &Effect| match effect {
            Effect::Append { group: owner, .. }
            | Effect::Truncate { group: owner, .. }
            | Effect::StageSuperblock { group: owner, .. }
            | Effect::SaveSnapshot { group: owner, .. }
            | Effect::RoleChanged { group: owner, .. }
            | Effect::Applied { group: owner, .. }
            | Effect::Restored { group: owner, .. }
            | Effect::Apply { group: owner, .. }
            | Effect::Committed { group: owner, .. } => Some(*owner),
            _ => None,
        };
        self.effects.retain(|effect| owner_of(effect) != Some(group));
        self.held.retain(|(_, item)| Self::group_of(item) != Some(group));
        self.parked.retain(|(owner, _)| *owner != group);
        self.touched.retain(|(_, owner)| *owner != group);
        for (to, queue) in &mut self.commit_queue {
            if self.commit_slots.remove(&(*to, group)).is_some() {
                queue.retain(|entry| entry.group != group);
                for (at, entry) in queue.iter().enumerate() {
                    self.commit_slots.insert((*to, entry.group), at);
                }
            }
        }
        for queue in self.reply_queue.values_mut() {
            queue.retain(|entry| entry.group != group);
        }
    }

    /// A flush completed: release what waited for it (a Prepare only if
    /// its peer is not `congested` now, K4). Returns the groups whose staged
    /// writes are now durable, with the flush id.
    pub fn flushed(
        &mut self,
        id: FlushId,
        congested: &BTreeSet<NodeId>,
        metrics: &mut ShardMetrics,
    ) -> Vec<(FlushId, GroupId)> {
        assert!(id > self.flush_completed && id <= self.flush_emitted, "flush {id} completed out of order");
        self.flush_completed = id;
        while let Some((flush, _)) = self.held.front() {
            if *flush > id {
                break;
            }
            if let Some((_, held)) = self.held.pop_front() {
                match held {
                    Held::Effect(effect) => self.effects.push(effect),
                    Held::Commit(to, entry) => self.put_commit(to, entry),
                    Held::Prepare(to, prepare) => self.send_prepare(to, prepare, congested, metrics),
                }
            }
        }
        let mut done = Vec::new();
        while let Some((flush, group)) = self.touched.front().copied() {
            if flush > id {
                break;
            }
            self.touched.pop_front();
            done.push((flush, group));
        }
        debug_assert!(self.held.front().is_none_or(|(flush, _)| *flush > id), "every send due is released");
        done
    }

    /// End of the tick: one Commit batch per peer (R11) and one reply batch
    /// per peer (R27), counted in `metrics` (R19, R32). Replies queued
    /// before this tick's end leave now, so a reply waits at most one tick
    /// (R28).
    pub fn end_tick(&mut self, metrics: &mut ShardMetrics) {
        self.commit_slots.clear();
        for (to, entries) in std::mem::take(&mut self.commit_queue) {
            if !entries.is_empty() {
                debug_assert!(entries.len() <= cohort_messages::COMMIT_BATCH_ENTRIES_MAX, "R13");
                metrics.commit_batches_sent += 1;
                metrics.commit_entries_sent += entries.len() as u64;
                self.effects.push(Effect::SendCommitBatch { to, entries });
            }
        }
        for (to, entries) in std::mem::take(&mut self.reply_queue) {
            if !entries.is_empty() {
                metrics.reply_batches_sent += 1;
                metrics.reply_entries_sent += entries.len() as u64;
                self.effects.push(Effect::SendCommitReplyBatch { to, entries });
            }
        }
        assert!(self.commit_queue.is_empty() && self.commit_slots.is_empty(), "R11: one batch per peer per tick");
    }

    /// End of a turn: close the open flush, and hand over the effects.
    pub fn end_turn(&mut self) -> Vec<Effect> {
        if self.staged {
            self.effects.push(Effect::Flush { id: self.flush_next });
            self.flush_emitted = self.flush_next;
            self.flush_next += 1;
            self.staged = false;
        }
        assert!(
            self.flush_completed <= self.flush_emitted && self.flush_emitted < self.flush_next,
            "flush ids in order"
        );
        std::mem::take(&mut self.effects)
    }
}
