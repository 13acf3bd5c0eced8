//! The node driver: every decision about feeding one [`Shard`] and carrying
//! out what it asks, with no I/O, so that the node's actors and the
//! simulator run the same code.
//!
//! [`Shard`] is the protocol; [`ShardDriver`] is how a node runs it: the
//! ticks it replays after a stall, when a turn of inputs ends, which peer a
//! message goes to and which are dropped because the link is down, which
//! answers go back to a peer that asked over the network, when the core
//! hears that a link congested or drained (K4), and how a storage worker
//! takes its jobs ([`storage_jobs`]). A shell (the shard actor of a node, or
//! the simulator) does only I/O: it turns what arrives into calls below and
//! carries out each [`Turn`] the driver hands back.
//!
//! # Driving contract
//! Time comes in as arguments: ticks (the core's unit) and, for the length
//! of a turn, microseconds on the shell's monotonic clock (`at_micros`).
//! 1. On every tick timer: [`ShardDriver::on_clock`] with the clock's tick,
//!    then [`ShardDriver::end_turn`]. Ticks the shell slept through run
//!    late, in order, at most [`DriverConfig::ticks_late_max`] of them.
//! 2. For each input: [`ShardDriver::on_peer`] (frames from peers, routed by
//!    [`route_peer_frame`]), [`ShardDriver::on_submit`] (a request made in
//!    this process), [`ShardDriver::on_flushed`] and
//!    [`ShardDriver::on_superblock_failed`] (the storage worker's reports),
//!    [`ShardDriver::wait_quorum`] and [`ShardDriver::cancel_wait`] (Q1, Q2).
//!    After each message the shell took from its queue (one read of a
//!    connection, however many inputs it held; a submit; a storage report),
//!    [`ShardDriver::input_done`] answers a [`TurnDue`]: a turn just opened
//!    (end it once the messages already queued are handled), is open, or
//!    has been open [`DriverConfig::turn_open_max_micros`] and must end now.
//! 3. Changes of what the shard hosts go through the driver too
//!    ([`ShardDriver::create_group`], [`ShardDriver::recover_group`],
//!    [`ShardDriver::remove_group`], seals, switches, transfers, learners),
//!    followed by [`ShardDriver::end_turn`]. The shard itself is readable
//!    ([`ShardDriver::shard`]) but changes only through the driver, so a
//!    recording of the driver's inputs is everything that moved the shard.
//! 4. [`ShardDriver::end_turn`] with the links' present state: storage goes
//!    to the worker as one job, each [`PeerBatch`] to its peer, each [`Note`]
//!    to this process's listeners. A flush id in the storage job comes back
//!    through `on_flushed` once durable, in id order.

pub mod inbound;
mod recording;
pub mod storage_jobs;
mod turn;

use std::collections::{BTreeSet, HashMap};

use cohort_messages::{ClientId, CommitBatch, CommitReplyBatch, GroupId, Message, NodeId, Op, Request, RequestNumber};

use crate::effect::{Effect, FlushId, WaitId};
use crate::replica::{GroupSpec, Replica, SealError, TransferError};
use crate::shard::{Shard, ShardError};
use crate::state_machine::StateMachine;
use crate::storage::RecoveredGroup;

pub use inbound::{FrameRefusal, PeerInput, RoutedFrame, route_peer_frame};
pub use recording::{Input, Recorded, replay};
pub use storage_jobs::{RanJobs, SnapshotSteps, StorageJob, run_jobs};
pub use turn::{ApplyJob, ClientAnswer, Note, PeerBatch, Turn};

/// A request and the client and group it is from: how answers find their caller.
pub type RequestKey = (GroupId, ClientId, RequestNumber);

/// The driver's limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverConfig {
    /// Ticks run late, at most, after the shell slept through them; beyond
    /// that the oldest are skipped (the timeouts they held are due at the
    /// first tick that runs anyway).
    pub ticks_late_max: u64,
    /// How long a turn may stay open while inputs keep arriving: once this
    /// old, the next input ends it.
    pub turn_open_max_micros: u64,
    /// Requests from peers awaiting an answer, at most; one more is dropped
    /// and counted (the sender re-sends).
    pub remote_waiters_max: usize,
    /// A request from a peer unanswered for this many ticks is forgotten.
    pub remote_wait_ticks: u64,
    /// Quorum waits open at once, at most (Q1); one more is refused.
    pub quorum_waits_max: usize,
}

/// Ticks a shard runs late, at most, when its thread was busy past them.
pub const TICKS_LATE_MAX: u64 = 100;

/// How long a turn may stay open, at most, while inputs keep arriving.
pub const TURN_OPEN_MAX_MICROS: u64 = 10_000;

/// Requests from peer nodes awaiting an answer, at most.
pub const REMOTE_WAITERS_MAX: usize = 4096;

/// How long a request from a peer is remembered, in microseconds.
pub const REMOTE_WAIT_MICROS: u64 = 10_000_000;

/// Quorum waits open at once on one shard, at most.
pub const QUORUM_WAITS_MAX: usize = 4096;

impl DriverConfig {
    /// The defaults for a tick of `tick_micros` microseconds.
    pub fn for_tick(tick_micros: u64) -> DriverConfig {
        assert!(tick_micros > 0, "a tick has a length");
        DriverConfig {
            ticks_late_max: TICKS_LATE_MAX,
            turn_open_max_micros: TURN_OPEN_MAX_MICROS,
            remote_waiters_max: REMOTE_WAITERS_MAX,
            remote_wait_ticks: (REMOTE_WAIT_MICROS / tick_micros).max(1),
            quorum_waits_max: QUORUM_WAITS_MAX,
        }
    }
}

/// What the shell knows of its link to a peer.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LinkStatus {
    /// A connection is up (R25): a message handed over now may arrive.
    pub connected: bool,
    /// The link's unsent bytes passed its high-water mark (K4).
    pub congested: bool,
}

/// The shell's links, read at the end of each turn.
pub trait Links {
    /// The link to `peer`; `None` if the shell has none (not a peer).
    fn status(&self, peer: NodeId) -> Option<LinkStatus>;
}

/// Every link up and drained (a shell without links, and tests).
#[derive(Copy, Clone, Debug, Default)]
pub struct LinksUp;

impl Links for LinksUp {
    fn status(&self, _peer: NodeId) -> Option<LinkStatus> {
        Some(LinkStatus { connected: true, congested: false })
    }
}

/// What an input means for the open turn (see the driving contract).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TurnDue {
    /// This input opened a turn: end it once the inputs already queued
    /// behind it are handled.
    Opened,
    /// A turn is open and not yet due.
    Open,
    /// The open turn is due: end it now.
    Now,
}

/// The driver's counters, over its life.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverCounters {
    /// Ticks run late after a stall.
    pub ticks_late: u64,
    /// Messages not sent because the peer's link was down.
    pub dropped_link_down: u64,
    /// Requests from peers dropped because [`DriverConfig::remote_waiters_max`] were waiting.
    pub remote_requests_dropped: u64,
    /// Role changes of hosted replicas (Z3: with the hosting changes, the
    /// agent reads this to learn cheaply that nothing changed).
    pub role_changes: u64,
    /// Changes of what the shard hosts asked of the driver (hosted,
    /// recovered, removed, sealed, switched, transferred, learners set),
    /// whether or not the shard took them.
    pub hosting_changes: u64,
    /// Turns ended.
    pub turns: u64,
}

/// One shard as a node runs it. See the module docs.
pub struct ShardDriver {
    shard: Shard,
    config: DriverConfig,
    /// The node's peers, sorted: the order congestion is noticed in.
    peers: Vec<NodeId>,
    /// The peers the core was last told are congested (K4).
    told_congested: BTreeSet<NodeId>,
    /// When the open turn began (`None`: no turn open).
    turn_opened_micros: Option<u64>,
    /// Requests from peers (a node's agent submits to the metadata primary
    /// over the peer link): their answers go back to the sender as a frame.
    remote_waiting: HashMap<RequestKey, (NodeId, u64)>,
    /// Quorum waits not yet ended (Q1).
    open_waits: BTreeSet<WaitId>,
    counters: DriverCounters,
    recording: Option<Vec<Recorded>>,
}

impl ShardDriver {
    /// Drive `shard` of a node whose peers are `peers`.
    pub fn new(shard: Shard, config: DriverConfig, peers: impl IntoIterator<Item = NodeId>) -> ShardDriver {
        assert!(config.ticks_late_max > 0 && config.remote_waiters_max > 0, "limits allow some work");
        let mut peers: Vec<NodeId> = peers.into_iter().filter(|peer| *peer != shard.node()).collect();
        peers.sort_unstable();
        peers.dedup();
        ShardDriver {
            shard,
            config,
            peers,
            told_congested: BTreeSet::new(),
            turn_opened_micros: None,
            remote_waiting: HashMap::new(),
            open_waits: BTreeSet::new(),
            counters: DriverCounters::default(),
            recording: None,
        }
    }

    /// The shard.
    pub fn shard(&self) -> &Shard {
        &self.shard
    }

    /// A hosted group's replica.
    pub fn replica(&self, group: GroupId) -> Option<&Replica> {
        self.shard.replica(group)
    }

    /// Z3: this shard's index on its node and this process's epoch (see
    /// [`Shard::set_pair_identity`]).
    pub fn set_pair_identity(&mut self, shard_index: u16, epoch: u64) {
        self.record(Input::PairIdentity { shard_index, epoch });
        self.shard.set_pair_identity(shard_index, epoch);
    }

    /// A new process's shard starts at the clock's tick `now_tick` (no tick
    /// before it ran in this process, so none runs late).
    pub fn start_at(&mut self, now_tick: u64) {
        self.record(Input::StartAt { now_tick });
        self.shard.on_tick(now_tick);
    }

    /// Host a brand-new group ([`Shard::create_group`]).
    pub fn create_group(&mut self, spec: GroupSpec, state: Box<dyn StateMachine>) -> Result<(), ShardError> {
        self.record_with(|| Input::Create { spec: spec.clone() });
        self.counters.hosting_changes += 1;
        self.shard.create_group(spec, state)
    }

    /// H1: host a voter created without its data ([`Shard::join_group`]).
    pub fn join_group(&mut self, spec: GroupSpec, state: Box<dyn StateMachine>) -> Result<(), ShardError> {
        self.record_with(|| Input::Join { spec: spec.clone() });
        self.counters.hosting_changes += 1;
        self.shard.join_group(spec, state)
    }

    /// D1: host a replica rebuilt from the other members
    /// ([`Shard::rebuild_group`]). Returns the job that resets its storage
    /// ([`StorageJob::ResetGroup`]): the caller hands it to the storage
    /// worker before the next turn's storage job.
    pub fn rebuild_group(&mut self, spec: GroupSpec, state: Box<dyn StateMachine>) -> Result<StorageJob, ShardError> {
        // A replay joins it, as here: the reset is storage's.
        self.record_with(|| Input::Join { spec: spec.clone() });
        self.counters.hosting_changes += 1;
        let group = spec.group;
        let superblock = self.shard.rebuild_group(spec, state)?;
        Ok(StorageJob::ResetGroup(group, superblock))
    }

    /// Host a group rebuilt from storage ([`Shard::recover_group`]).
    pub fn recover_group(
        &mut self,
        spec: GroupSpec,
        state: Box<dyn StateMachine>,
        recovered: RecoveredGroup,
    ) -> Result<(), ShardError> {
        self.record_with(|| Input::Recover { spec: spec.clone(), recovered: recovered.clone() });
        self.counters.hosting_changes += 1;
        self.shard.recover_group(spec, state, recovered)
    }

    /// Stop hosting `group` (its storage is the caller's to remove, with
    /// [`StorageJob::RemoveGroup`] after the jobs queued before): the shard
    /// forgets it, and the driver forgets the requests peers sent it.
    /// False if it was not hosted.
    pub fn remove_group(&mut self, group: GroupId) -> bool {
        self.record(Input::Remove { group });
        self.counters.hosting_changes += 1;
        self.remote_waiting.retain(|key, _| key.0 != group);
        self.shard.remove_group(group)
    }

    /// Seal `group`'s log for a member change ([`Shard::propose_seal`]).
    pub fn propose_seal(&mut self, group: GroupId, seal: cohort_messages::seal::Seal) -> Result<(), SealError> {
        self.record_with(|| Input::ProposeSeal { group, seal: seal.clone() });
        self.counters.hosting_changes += 1;
        self.shard.propose_seal(group, seal)
    }

    /// C4: hand `group`'s primary role to `to` ([`Shard::transfer_primary`]).
    pub fn transfer_primary(&mut self, group: GroupId, to: NodeId) -> Result<(), TransferError> {
        self.record(Input::TransferPrimary { group, to });
        self.counters.hosting_changes += 1;
        self.shard.transfer_primary(group, to)
    }

    /// Switch a sealed group to its next incarnation ([`Shard::switch_incarnation`]).
    pub fn switch_incarnation(&mut self, group: GroupId) -> Result<(), SealError> {
        self.record(Input::Switch { group });
        self.counters.hosting_changes += 1;
        self.shard.switch_incarnation(group)
    }

    /// Z6: switch to the next incarnation as a learner
    /// ([`Shard::switch_incarnation_as_learner`]).
    pub fn switch_incarnation_as_learner(
        &mut self,
        group: GroupId,
        seal: &cohort_messages::seal::Seal,
        learners: Vec<NodeId>,
    ) -> Result<(), SealError> {
        self.record_with(|| Input::SwitchAsLearner { group, seal: seal.clone(), learners: learners.clone() });
        self.counters.hosting_changes += 1;
        self.shard.switch_incarnation_as_learner(group, seal, learners)
    }

    /// P4: replace a running group's learners ([`Shard::set_learners`]).
    pub fn set_learners(&mut self, group: GroupId, learners: Vec<NodeId>) -> Result<(), ShardError> {
        self.record_with(|| Input::SetLearners { group, learners: learners.clone() });
        self.counters.hosting_changes += 1;
        self.shard.set_learners(group, learners)
    }

    /// The driver's limits.
    pub fn config(&self) -> &DriverConfig {
        &self.config
    }

    /// The node's peers, sorted.
    pub fn peers(&self) -> &[NodeId] {
        &self.peers
    }

    /// The driver's counters.
    pub fn counters(&self) -> DriverCounters {
        self.counters
    }

    /// True while a turn is open.
    pub fn turn_open(&self) -> bool {
        self.turn_opened_micros.is_some()
    }

    /// Z3: what the shard can say cheaply, without a pass over its groups:
    /// its count of role and hosting changes, and whether it hosts the
    /// metadata group's primary, confirmed by a quorum now. The node's
    /// agent and the simulator's ask exactly this.
    pub fn hosted_changes(&self) -> crate::metadata::HostedChanges {
        let events = self.counters.role_changes.wrapping_add(self.counters.hosting_changes);
        let now = self.shard.now();
        let metadata_primary =
            self.shard.replica(GroupId::METADATA).map(|_| self.shard.is_confirmed_primary(GroupId::METADATA, now));
        crate::metadata::HostedChanges { events, metadata_primary }
    }

    /// Requests from peers awaiting an answer.
    pub fn remote_waiting(&self) -> usize {
        self.remote_waiting.len()
    }

    /// The tick timer fired and the clock reads `now_tick`: run every tick
    /// since the last one, in order (at most `ticks_late_max` late), then
    /// forget requests from peers that waited too long. Returns the ticks
    /// that ran late. End the turn afterwards.
    ///
    /// The core acts on exact ticks: a primary heartbeats on the send
    /// ticks, an idle group only on those that line up with its interval
    /// (R20). A tick jumped over would leave an idle group silent for
    /// another interval, and two such jumps its primary without replies for
    /// its whole quorum window (R24). A clock behind the core (a restarted
    /// shell counting from zero again) reruns the core's tick.
    pub fn on_clock(&mut self, now_tick: u64) -> u64 {
        self.record(Input::Clock { now_tick });
        let last = self.shard.now();
        let now = now_tick.max(last);
        let first = (last + 1).max(now.saturating_sub(self.config.ticks_late_max)).min(now);
        for tick in first..=now {
            self.shard.on_tick(tick);
        }
        debug_assert_eq!(self.shard.now(), now, "the core is at the clock's tick");
        let late = now - first;
        self.counters.ticks_late += late;
        if !self.remote_waiting.is_empty() {
            let stale = now.saturating_sub(self.config.remote_wait_ticks);
            self.remote_waiting.retain(|_, (_, since)| *since >= stale);
        }
        late
    }

    /// An input from a peer, routed here by [`route_peer_frame`].
    pub fn on_peer(&mut self, input: PeerInput) {
        self.record_with(|| Input::Peer { input: input.clone() });
        match input {
            PeerInput::Message { from, message, .. } => {
                if let Message::Request(request) = &message {
                    let key = (request.group, request.client, request.request);
                    if !self.remote_waiting.contains_key(&key)
                        && self.remote_waiting.len() >= self.config.remote_waiters_max
                    {
                        self.counters.remote_requests_dropped += 1;
                        return;
                    }
                    self.remote_waiting.insert(key, (from, self.shard.now()));
                }
                self.shard.on_message(from, message);
            }
            PeerInput::Commits { from, entries } => self.shard.on_commit_entries(from, &entries),
            PeerInput::Replies { from, entries } => self.shard.on_commit_reply_entries(from, &entries),
        }
    }

    /// A request made in this process (the host's submit, the client port):
    /// its answer comes back as a [`Note::Answer`].
    pub fn on_submit(&mut self, request: Request) {
        self.record_with(|| Input::Submit { request: request.clone() });
        self.shard.on_request(request);
    }

    /// The storage worker made everything up to flush `id` durable.
    pub fn on_flushed(&mut self, id: FlushId) {
        self.record(Input::Flushed { id });
        self.shard.on_flushed(id);
    }

    /// D2: the apply worker is done with job `id` of `group`
    /// ([`Turn::applies`]): its state machine comes back with what the
    /// work did ([`Shard::on_applied`]). End the turn afterwards.
    pub fn on_applied(
        &mut self,
        group: GroupId,
        id: crate::effect::ApplyId,
        state: Box<dyn StateMachine>,
        done: crate::state_machine::Done,
    ) {
        self.record_with(|| Input::Applied { group, id, done: done.clone() });
        self.shard.on_applied(group, id, state, done);
    }

    /// D2: true while a removed replica of `group` has its state machine
    /// on the apply worker ([`Shard::state_away`]): a shell makes no new
    /// state machine for the group until it is back (it would share the
    /// removed one's files).
    pub fn state_away(&self, group: GroupId) -> bool {
        self.shard.state_away(group)
    }

    /// The storage worker failed to stage `group`'s superblock (R12).
    pub fn on_superblock_failed(&mut self, group: GroupId) {
        self.record(Input::SuperblockFailed { group });
        self.shard.on_superblock_failed(group);
    }

    /// Q1: wait until `quorum` members of `group` durably hold `op`; the
    /// end comes back as a [`Note::WaitDone`] with the returned id. `None`
    /// if [`DriverConfig::quorum_waits_max`] waits are open (ask again later).
    pub fn wait_quorum(&mut self, group: GroupId, op: Op, quorum: usize, timeout_ticks: u64) -> Option<WaitId> {
        self.record(Input::WaitQuorum { group, op, quorum, timeout_ticks });
        if self.open_waits.len() >= self.config.quorum_waits_max {
            return None;
        }
        let wait = self.shard.wait_quorum(group, op, quorum, timeout_ticks);
        assert!(self.open_waits.insert(wait), "wait ids are never reused");
        Some(wait)
    }

    /// Quorum waits open now.
    pub fn open_waits(&self) -> usize {
        self.open_waits.len()
    }

    /// Q2: cancel a wait; its [`Note::WaitDone`] carries the cancellation.
    /// False if no such wait is open.
    pub fn cancel_wait(&mut self, wait: WaitId) -> bool {
        self.record(Input::CancelWait { wait });
        self.shard.cancel_wait(wait)
    }

    /// The shell handled one message from its queue at `at_micros` on its
    /// clock: what that means for the turn (see the driving contract).
    pub fn input_done(&mut self, at_micros: u64) -> TurnDue {
        self.record(Input::Done { at_micros });
        match self.turn_opened_micros {
            None => {
                self.turn_opened_micros = Some(at_micros);
                TurnDue::Opened
            }
            Some(opened) if at_micros.saturating_sub(opened) >= self.config.turn_open_max_micros => TurnDue::Now,
            Some(_) => TurnDue::Open,
        }
    }

    /// End the turn: tell the core which links congested or drained since
    /// the last turn (K4), then take everything the core asks for, as one
    /// [`Turn`] (its docs say what the shell does with it).
    pub fn end_turn(&mut self, links: &impl Links) -> Turn {
        if self.recording.is_some() {
            let statuses = self.peers.iter().map(|peer| (*peer, links.status(*peer))).collect();
            self.record(Input::EndTurn { links: statuses });
        }
        self.turn_opened_micros = None;
        self.note_congestion(links);
        let mut turn = Turn::default();
        loop {
            let effects = self.shard.drain_effects();
            if effects.is_empty() {
                break;
            }
            for effect in effects {
                self.place(effect, links, &mut turn);
            }
        }
        self.counters.dropped_link_down += turn.dropped_link_down;
        self.counters.turns += 1;
        debug_assert!(turn.peers.iter().all(|batch| !batch.messages.is_empty()), "no empty peer batch");
        debug_assert!(turn.peers.windows(2).all(|pair| pair[0].to < pair[1].to), "peer batches sorted");
        debug_assert!(
            turn.storage.iter().all(|effect| effect.kind().is_storage()),
            "the storage job holds storage effects only"
        );
        // Debug builds check every replica after each turn that did
        // something, as the simulator does after every step.
        #[cfg(debug_assertions)]
        if !turn.is_empty() {
            self.shard.invariants();
        }
        if let Some(recording) = &mut self.recording {
            recording.push(Recorded::Turn(turn.clone()));
        }
        turn
    }

    /// Put one of the core's effects where the turn says it goes.
    fn place(&mut self, effect: Effect, links: &impl Links, turn: &mut Turn) {
        let down = |peer: NodeId| links.status(peer).is_some_and(|link| !link.connected);
        match effect {
            Effect::Append { .. }
            | Effect::Truncate { .. }
            | Effect::StageSuperblock { .. }
            | Effect::SaveSnapshot { .. }
            | Effect::Flush { .. } => turn.storage.push(effect),
            Effect::Send { to, message } => {
                if down(to) {
                    turn.dropped_link_down += 1;
                } else {
                    turn.push_message(to, message);
                }
            }
            Effect::SendCommitBatch { to, entries } => {
                // R25: each group records whether its member's link was up.
                let connected = links.status(to).is_some_and(|link| link.connected);
                self.shard.on_commit_batch_sent(to, &entries, connected);
                if down(to) {
                    turn.dropped_link_down += 1;
                } else {
                    turn.push_message(to, Message::Commit(CommitBatch::encode(&entries)));
                }
            }
            Effect::SendCommitReplyBatch { to, entries } => {
                if down(to) {
                    turn.dropped_link_down += 1;
                } else {
                    turn.push_message(to, Message::CommitReply(CommitReplyBatch::encode(&entries)));
                }
            }
            Effect::Reply(reply) => match self.remote_waiting.remove(&(reply.group, reply.client, reply.request)) {
                Some((to, _)) => turn.push_message(to, Message::Reply(reply)),
                None => turn.notes.push(Note::Answer(ClientAnswer::Reply(reply))),
            },
            Effect::Redirect(redirect) => {
                match self.remote_waiting.remove(&(redirect.group, redirect.client, redirect.request)) {
                    Some((to, _)) => turn.push_message(to, Message::Redirect(redirect)),
                    None => turn.notes.push(Note::Answer(ClientAnswer::Redirect(redirect))),
                }
            }
            Effect::RoleChanged { group, incarnation, view, role } => {
                self.counters.role_changes += 1;
                turn.notes.push(Note::Role { group, incarnation, view, role });
            }
            Effect::Apply { group, id, work, state } => turn.applies.push(ApplyJob { group, id, work, state }),
            Effect::Committed { group, op } => turn.notes.push(Note::Committed { group, op }),
            Effect::Applied { group, ops, through } => turn.notes.push(Note::Applied { group, ops, through }),
            Effect::Restored { group, op, state } => turn.notes.push(Note::Restored { group, op, state }),
            Effect::QuorumWaitDone { wait, result } => {
                debug_assert!(self.open_waits.contains(&wait), "a wait ends once, after it began");
                self.open_waits.remove(&wait);
                turn.notes.push(Note::WaitDone { wait, result });
            }
        }
    }

    /// K4: tell the core which peers' links became congested or drained
    /// since the last turn (a drained one gets what it was not sent at once).
    fn note_congestion(&mut self, links: &impl Links) {
        for index in 0..self.peers.len() {
            let peer = self.peers[index];
            let congested = links.status(peer).is_some_and(|link| link.congested);
            if congested != self.told_congested.contains(&peer) {
                if congested {
                    self.told_congested.insert(peer);
                } else {
                    self.told_congested.remove(&peer);
                }
                self.shard.set_peer_congested(peer, congested);
            }
        }
    }

    /// Start recording every input and turn (for the test that holds the
    /// node's shell and the simulator to the same outputs).
    pub fn start_recording(&mut self) {
        self.recording = Some(Vec::new());
    }

    /// What was recorded since [`ShardDriver::start_recording`] (or the last take).
    pub fn take_recording(&mut self) -> Vec<Recorded> {
        self.recording.as_mut().map(std::mem::take).unwrap_or_default()
    }

    fn record(&mut self, input: Input) {
        if let Some(recording) = &mut self.recording {
            recording.push(Recorded::Input(input));
        }
    }

    fn record_with(&mut self, input: impl FnOnce() -> Input) {
        if let Some(recording) = &mut self.recording {
            recording.push(Recorded::Input(input()));
        }
    }
}
