//! The `shard_inputs` target's driver: a [`Shard`] of node 1 fed a script of
//! steps decoded from the fuzz input, executed the way the runtime executes
//! the shard's effects.
//!
//! Each step is one input of the shard's driving contract (see
//! `actors/core/src/shard.rs`): a peer frame, a Commit or CommitReply batch,
//! a client request, a tick, a flush completing, a superblock stage failing,
//! a link congesting, or a crash and restart from what storage holds. Every
//! peer and client input is encoded as a frame and decoded by the real
//! `cohort_messages` decoder first; what it refuses is dropped, as the
//! listener drops it, so only validated values reach the core. After every
//! step the driver drains the shard's effects: storage effects go to a
//! [`MemoryStorage`] through the core's own executor (which panics on a
//! broken storage precondition), every outgoing message must pass
//! validation, and `Shard::invariants` runs.
//!
//! Checked beyond "no panic": the core sends only messages that pass
//! validation, keeps the storage contract and its invariants after every
//! step, and recovers every group from what it made durable.
//!
//! Deterministic: no clock, no randomness; the same input is the same run.

mod answer;
mod build;
mod input;
mod script;
mod topology;

pub use script::seeds;

use std::collections::VecDeque;

use bytes::Bytes;
use cohort_core::storage::memory::MemoryStorage;
use cohort_core::storage::{Executed, Storage, execute};
use cohort_core::{Effect, Shard, ShardError};
use cohort_messages::{
    COMMIT_BATCH_ENTRIES_MAX, Command, CommitBatch, CommitReplyBatch, EncodedFrame, Frame, Header, Message, NodeId,
    TraceContext,
};

use crate::CLUSTER;
use answer::{Answer, answer};
use build::{Hint, KnownSnapshot};
use input::Input;
use topology::{GROUPS, NODE, Tally};

/// Recent sends kept for answer steps.
const SENT_KEPT_MAX: usize = 32;
/// Recent snapshots kept for state-chunk steps.
const SNAPSHOTS_KEPT_MAX: usize = 4;
/// The most bytes of a raw frame body.
const RAW_BODY_MAX_BYTES: usize = 512;

/// A step is chosen by its first byte modulo [`STEP_KINDS`]; the bytes
/// after it are that step's fields. The values are public so the seed
/// corpus can write scripts (see `script`).
pub const STEP_KINDS: u8 = 24;
/// `STEP_MESSAGE ..STEP_RAW_FRAME`: a peer message built field by field.
pub const STEP_MESSAGE: u8 = 0;
/// A frame of any command with a body from the input.
pub const STEP_RAW_FRAME: u8 = 9;
/// A Commit batch.
pub const STEP_COMMIT_BATCH: u8 = 10;
/// A CommitReply batch.
pub const STEP_COMMIT_REPLY_BATCH: u8 = 11;
/// A request on the client port.
pub const STEP_CLIENT_REQUEST: u8 = 12;
/// The clock moves on by 0 to 15 ticks (or 1000).
pub const STEP_TICK: u8 = 13;
/// The oldest pending flush completes.
pub const STEP_FLUSH: u8 = 14;
/// Every pending flush completes.
pub const STEP_FLUSH_ALL: u8 = 15;
/// The next superblock stage of a group fails (R12).
pub const STEP_SUPERBLOCK_FAULT: u8 = 16;
/// A peer's link congests or drains (K4).
pub const STEP_CONGESTION: u8 = 17;
/// The node crashes and restarts from storage (if the next byte is 0).
pub const STEP_RESTART: u8 = 18;
/// A correct peer answers one recent send.
pub const STEP_ANSWER: u8 = 19;
/// `STEP_CLUSTER_TURN ..STEP_KINDS`: flushes complete and every peer
/// answers every recent send.
pub const STEP_CLUSTER_TURN: u8 = 20;

/// What one run reached, for judging a corpus (the target ignores it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reached {
    /// Steps run.
    pub steps: u64,
    /// Peer and client frames the decoder accepted (and the shard got).
    pub delivered: u64,
    /// Frames the decoder refused (dropped before the shard).
    pub undecodable: u64,
    /// Refusals the shard counted.
    pub refused: cohort_core::Refusals,
    /// Per hosted group: the highest applied op, and the highest view.
    pub applied: [u64; GROUPS.len()],
    pub views: [u32; GROUPS.len()],
    /// Snapshots saved, and restarts.
    pub snapshots: u64,
    pub restarts: u64,
}

/// Run one fuzz input.
pub fn run(data: &[u8]) -> Reached {
    let mut input = Input::new(data);
    let mut driver = Driver::new();
    while !input.is_empty() {
        driver.step(&mut input);
        driver.drain();
        driver.shard.invariants();
        driver.reached.steps += 1;
        for (index, hosted) in GROUPS.iter().enumerate() {
            if let Some(replica) = driver.shard.replica(hosted.group) {
                driver.reached.applied[index] = driver.reached.applied[index].max(replica.commit_min().0);
                driver.reached.views[index] = driver.reached.views[index].max(replica.view().0);
            }
        }
    }
    driver.reached.refused.add(driver.shard.refused());
    driver.reached
}

/// The shard and everything the runtime would hold beside it.
struct Driver {
    shard: Shard,
    storage: MemoryStorage,
    now: u64,
    /// Storage effects handed over but not yet run, in order: each turn's
    /// end with its `Flush`. A flush step runs them up to the next `Flush`.
    storage_queue: VecDeque<Effect>,
    sent: VecDeque<Effect>,
    snapshots: VecDeque<KnownSnapshot>,
    reached: Reached,
}

impl Driver {
    fn new() -> Driver {
        let mut driver = Driver {
            shard: Shard::new(NODE, topology::config()),
            storage: MemoryStorage::new(),
            now: 0,
            storage_queue: VecDeque::new(),
            sent: VecDeque::new(),
            snapshots: VecDeque::new(),
            reached: Reached::default(),
        };
        for hosted in &GROUPS {
            driver.shard.create_group(hosted.spec(), Box::new(Tally::of(hosted))).expect("a valid group");
        }
        driver.drain();
        driver
    }

    fn step(&mut self, input: &mut Input) {
        match input.u8() % STEP_KINDS {
            STEP_MESSAGE..STEP_RAW_FRAME => self.built_message(input),
            STEP_RAW_FRAME => {
                let from = build::node(input);
                let command = Command::ALL[input.choose(Command::ALL.len())];
                let len = input.choose(RAW_BODY_MAX_BYTES);
                let body = Bytes::copy_from_slice(input.bytes(len));
                self.deliver(from, command, body);
            }
            STEP_COMMIT_BATCH => {
                let from = build::node(input);
                let body = build::commit_batch_body(input, &self.shard);
                self.deliver(from, Command::Commit, Bytes::from(body));
            }
            STEP_COMMIT_REPLY_BATCH => {
                let from = build::node(input);
                let body = build::commit_reply_batch_body(input, &self.shard);
                self.deliver(from, Command::CommitReply, Bytes::from(body));
            }
            STEP_CLIENT_REQUEST => {
                let group = build::group(input);
                let request = Message::Request(build::request(input, group));
                self.deliver_client(request);
            }
            STEP_TICK => {
                let delta_ticks = match input.u8() {
                    0xFF => 1000,
                    byte => u64::from(byte & 0x0F),
                };
                self.now += delta_ticks;
                self.shard.on_tick(self.now);
            }
            STEP_FLUSH => self.complete_flush(),
            STEP_FLUSH_ALL => self.complete_flushes(),
            STEP_SUPERBLOCK_FAULT => self.storage.fail_next_superblock_stage(build::group(input)),
            STEP_CONGESTION => self.shard.set_peer_congested(build::node(input), input.bool()),
            STEP_RESTART => {
                if input.u8() == 0 {
                    self.restart();
                }
            }
            STEP_ANSWER => {
                let index = input.choose(self.sent.len());
                if let Some(sent) = self.sent.get(index).cloned() {
                    self.answer(&sent);
                }
            }
            _ => self.cluster_turn(),
        }
    }

    /// A single-group peer message built field by field.
    fn built_message(&mut self, input: &mut Input) {
        let from = build::node(input);
        let hint = Hint::of(&self.shard, build::group(input));
        let message = match input.choose(9) {
            0 => build::prepare(input, &hint),
            1 => build::prepare_ok(input, &hint),
            2 => build::start_view_change(input, &hint),
            3 => build::do_view_change(input, &hint),
            4 => build::start_view(input, &hint),
            5 => build::request_prepares(input, &hint),
            6 => build::request_state_transfer(input, &hint),
            7 => build::state_chunk(input, &hint, self.snapshots.make_contiguous()),
            _ => Message::Request(build::request(input, hint.group)),
        };
        self.deliver(from, message.command(), message.encode_body());
    }

    /// What a healthy cluster does in one round: storage completes every
    /// flush, then every peer answers what the shard sent it.
    fn cluster_turn(&mut self) {
        self.complete_flushes();
        self.drain();
        for sent in std::mem::take(&mut self.sent) {
            self.answer(&sent);
        }
    }

    /// The answer of a correct peer to `sent`, through the decoder.
    fn answer(&mut self, sent: &Effect) {
        match answer(&self.shard, sent, self.snapshots.make_contiguous()) {
            Some(Answer::Message(from, message)) => self.deliver(from, message.command(), message.encode_body()),
            Some(Answer::Commits(from, entries)) => {
                let batch = CommitBatch::encode(&entries);
                self.deliver(from, Command::Commit, batch.body().clone());
            }
            Some(Answer::Replies(from, entries)) => {
                let batch = CommitReplyBatch::encode(&entries);
                self.deliver(from, Command::CommitReply, batch.body().clone());
            }
            None => {}
        }
    }

    /// A frame from peer `from` through the real decoder; what it refuses
    /// is dropped, as the listener drops it.
    fn deliver(&mut self, from: NodeId, command: Command, body: Bytes) {
        let Some(message) = decode(from, command, body) else {
            self.reached.undecodable += 1;
            return;
        };
        self.reached.delivered += 1;
        match message {
            Message::Commit(batch) => self.shard.on_commit_batch(from, &batch),
            Message::CommitReply(batch) => self.shard.on_commit_reply_batch(from, &batch),
            message => self.shard.on_message(from, message),
        }
    }

    /// A frame on the client port: only requests go to the shard.
    fn deliver_client(&mut self, request: Message) {
        let client_node = NodeId(0);
        match decode(client_node, request.command(), request.encode_body()) {
            Some(Message::Request(request)) => {
                self.reached.delivered += 1;
                self.shard.on_request(request);
            }
            _ => self.reached.undecodable += 1,
        }
    }

    /// Complete every flush handed over so far.
    fn complete_flushes(&mut self) {
        while self.storage_queue.iter().any(|effect| matches!(effect, Effect::Flush { .. })) {
            self.complete_flush();
        }
    }

    /// Run the queued storage effects through the next `Flush`, then report it.
    fn complete_flush(&mut self) {
        while let Some(effect) = self.storage_queue.pop_front() {
            match execute(&mut self.storage, effect) {
                Ok(Executed::Done) => {}
                Ok(Executed::SuperblockFailed(group)) => self.shard.on_superblock_failed(group),
                Ok(Executed::Flush(id)) => {
                    self.storage.flush().expect("no flush fault is armed");
                    self.shard.on_flushed(id);
                    return;
                }
                Ok(Executed::NotStorage(effect)) => panic!("a non-storage effect was queued for storage: {effect:?}"),
                Err(error) => panic!("storage refused an effect with no fault armed: {error}"),
            }
        }
    }

    /// The node dies (everything not flushed is lost) and restarts from its
    /// storage: every group with durable state is recovered, the others
    /// are created anew.
    fn restart(&mut self) {
        self.reached.restarts += 1;
        self.reached.refused.add(self.shard.refused());
        self.storage.crash();
        self.storage_queue.clear();
        self.sent.clear();
        self.shard = Shard::new(NODE, topology::config());
        self.shard.on_tick(self.now);
        let mut recovered = self.storage.recover().expect("memory storage recovers").groups;
        for hosted in &GROUPS {
            let state = Box::new(Tally::of(hosted));
            let result = match recovered.remove(&hosted.group) {
                Some(group) => self.shard.recover_group(hosted.spec(), state, group),
                None => self.shard.create_group(hosted.spec(), state),
            };
            match result {
                Ok(()) | Err(ShardError::NotInIncarnation(_)) => {}
                Err(error) => panic!("{}: cannot recover what the core made durable: {error}", hosted.group),
            }
        }
    }

    /// End of a turn: hand storage effects to storage (in order), check
    /// and keep every send.
    fn drain(&mut self) {
        for effect in self.shard.drain_effects() {
            match &effect {
                Effect::SaveSnapshot { group, snapshot, .. } => {
                    self.reached.snapshots += 1;
                    self.keep_snapshot(KnownSnapshot {
                        group: *group,
                        op: snapshot.op,
                        view: snapshot.view,
                        data: snapshot.data.clone(),
                    });
                }
                Effect::Send { message: Message::StateChunk(chunk), .. }
                    if chunk.is_last() && chunk.offset_bytes == 0 =>
                {
                    self.keep_snapshot(KnownSnapshot {
                        group: chunk.group,
                        op: chunk.snapshot_op,
                        view: chunk.snapshot_view,
                        data: chunk.chunk.clone(),
                    });
                }
                _ => {}
            }
            if effect.kind().is_storage() {
                self.storage_queue.push_back(effect);
                continue;
            }
            check_outgoing(&effect);
            if matches!(effect, Effect::Send { .. } | Effect::SendCommitBatch { .. }) {
                if self.sent.len() == SENT_KEPT_MAX {
                    self.sent.pop_front();
                }
                self.sent.push_back(effect);
            }
        }
    }

    fn keep_snapshot(&mut self, snapshot: KnownSnapshot) {
        if self.snapshots.len() == SNAPSHOTS_KEPT_MAX {
            self.snapshots.pop_front();
        }
        self.snapshots.push_back(snapshot);
    }
}

/// Seal `body` in a frame from `from` and decode it as a listener does.
fn decode(from: NodeId, command: Command, body: Bytes) -> Option<Message> {
    let frame = EncodedFrame::new(Header::new(CLUSTER, from, command, TraceContext::NONE), body);
    let frame = Frame::decode(frame.to_bytes(), CLUSTER).ok()?;
    Message::decode(&frame).ok()
}

/// Everything the shard sends must be a valid message: the peer link's
/// encoder asserts it (`Message::encode` checks `validate` in debug
/// builds), and a peer would drop it. (Encoding itself is the
/// `frame_decoder` target's concern; checking `validate` here is as strict
/// and costs a fraction.)
fn check_outgoing(effect: &Effect) {
    let valid = match effect {
        Effect::Send { message, .. } => message.validate(),
        Effect::SendCommitBatch { entries, .. } => {
            assert!(entries.len() <= COMMIT_BATCH_ENTRIES_MAX, "R13: a Commit batch over the frame limit");
            Ok(())
        }
        Effect::Reply(reply) => reply.validate(),
        Effect::Redirect(redirect) => redirect.validate(),
        _ => Ok(()),
    };
    assert_eq!(valid, Ok(()), "the shard sent an invalid message: {effect:?}");
}
