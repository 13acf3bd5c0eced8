//! T5, T6: a forging peer (`--forger non-member|replay`).
//!
//! Why two modes, and what each may break: a node certificate is full
//! membership (docs/security.md), so a member that invents messages can
//! break safety by design (it can acknowledge a Prepare it never wrote).
//! What the protocol must survive is everything short of that:
//! - [`ForgerMode::NonMember`]: a node with a certificate of the cluster but
//!   outside every group (its id follows every simulated node's), reachable
//!   by every node, sends seeded random but well-formed messages of every
//!   command: plausible group ids and incarnations, views and ops near the
//!   group's and far from them, member indexes in and out of range, logs,
//!   chunks, batches. None of it may reach past a replica's door (a
//!   Request is a client's operation and is served as any client's; its
//!   writes carry operations the kv store does not decode, so they apply as
//!   no-ops and the history stays checkable).
//! - [`ForgerMode::Replay`]: one member, otherwise honest, records frames it
//!   sent and received (a uniform sample of the whole run) and sends them
//!   again later, as itself, to any node. The bodies are genuine: a network
//!   that duplicates and delays delivers the same, and a frame another
//!   member wrote now names a sender that is not that member, which the door
//!   refuses.
//!
//! Both modes send through the same path as honest frames: the real codec
//! (only a message that passes validation is encoded, as a production
//! receiver's decoder would refuse anything else), the simulated network
//! with its faults, and the receiving node's routing. The run's checkers
//! stay on for every node; the footprint checker (`check/footprint.rs`)
//! bounds what input can grow; a panic anywhere fails the seed.

use std::collections::VecDeque;

use bytes::Bytes;
use cohort_messages::{
    ClientId, Command, CommitBatch, CommitEntry, CommitReplyBatch, CommitReplyEntry, DoViewChange, Epoch, Frame,
    GroupId, Handshake, HeartbeatState, Incarnation, LinkShard, LogEntry, MemberIndex, Message, NodeId, Op, Outcome,
    PairHeartbeat, PairHeartbeatReply, Prepare, PrepareOk, QuietDigest, QuietGroup, RecoveryAnswer, RecoveryQuery,
    Redirect, Reply, ReplyError, Request, RequestKind, RequestNumber, RequestPrepares, RequestStateTransfer, Route,
    RouteQuery, Routes, SessionExpired, SessionId, SessionKeepalive, SessionOpen, SessionOpened, StartView,
    StartViewChange, StateChunk, Timestamp, TraceContext, View, ViewChangeBatch, WIRE_REVISION,
};

use super::Sim;
use crate::kv::KvOp;
use crate::network::{Endpoint, Packet};
use crate::node::{CLUSTER, node_id};
use crate::rng::Rng;

/// Which forging peer a run has.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ForgerMode {
    /// A node outside every group sends invented, well-formed messages.
    NonMember,
    /// A member resends genuine frames it saw earlier in the run.
    Replay,
}

impl ForgerMode {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ForgerMode::NonMember => "non-member",
            ForgerMode::Replay => "replay",
        }
    }

    /// The mode a command-line name stands for.
    pub fn from_name(name: &str) -> Option<ForgerMode> {
        [ForgerMode::NonMember, ForgerMode::Replay].into_iter().find(|mode| mode.name() == name)
    }
}

/// Frames the replaying member keeps (a uniform sample of all it saw).
const RECORDED_FRAMES_MAX: usize = 1024;

/// The most frames the forger sends in one tick.
const FRAMES_PER_TICK_MAX: u64 = 3;

/// Client ids of the non-member's Requests: few, so that together with the
/// simulated clients they stay inside the client table (no honest client is
/// ever evicted, which a checker relies on).
const FORGED_CLIENTS: u128 = 4;

/// The first forged client id (far from the simulated clients' ids).
const FORGED_CLIENT_BASE: u128 = 0xF0_0000_0000;

/// A first byte no kv operation starts with: a forged write applies as a no-op.
const OPAQUE_OPERATION_TAG: u8 = 0xF0;

/// The forging peer of a run.
#[derive(Clone, Debug)]
pub(super) struct Forger {
    mode: ForgerMode,
    rng: Rng,
    /// NonMember: its node index, past every simulated node. Replay: the
    /// member that replays.
    pub(super) node: usize,
    /// Frames sent per tick this run (drawn per seed).
    frames_per_tick: u64,
    /// Replay: the sample of frames seen, and how many were seen.
    recorded: VecDeque<Bytes>,
    seen: u64,
    /// Frames it sent.
    pub(super) sent: u64,
}

/// What a forged message is built from: one group as the cluster runs it.
#[derive(Clone, Copy, Debug)]
struct Near {
    group: GroupId,
    incarnation: Incarnation,
    view: View,
    op: Op,
    /// Voters plus learners.
    members: u8,
}

impl Forger {
    /// The forger of a run of `seed` with `nodes` simulated nodes (voters
    /// and learners).
    pub(super) fn new(mode: ForgerMode, seed: u64, nodes: usize) -> Forger {
        let mut rng = Rng::new(seed ^ 0xF0_F0_F0_F0);
        let node = match mode {
            ForgerMode::NonMember => nodes,
            ForgerMode::Replay => rng.below(nodes as u64) as usize,
        };
        let frames_per_tick = rng.range(1, FRAMES_PER_TICK_MAX);
        Forger { mode, rng, node, frames_per_tick, recorded: VecDeque::new(), seen: 0, sent: 0 }
    }

    /// Replay: node `index` sent or received `bytes`; keep a uniform sample.
    pub(super) fn observe(&mut self, index: usize, bytes: &Bytes) {
        if self.mode != ForgerMode::Replay || index != self.node {
            return;
        }
        self.seen += 1;
        if self.recorded.len() < RECORDED_FRAMES_MAX {
            self.recorded.push_back(bytes.clone());
        } else {
            let slot = self.rng.below(self.seen);
            if let Some(kept) = self.recorded.get_mut(slot as usize) {
                *kept = bytes.clone();
            }
        }
    }

    /// Replay: a recorded frame, decoded, re-encoded as sent by the
    /// replaying member (a peer link only carries frames of the node its
    /// certificate names).
    fn replayed_frame(&mut self) -> Option<Bytes> {
        if self.recorded.is_empty() {
            return None;
        }
        let slot = self.rng.below(self.recorded.len() as u64) as usize;
        let frame = Frame::decode(self.recorded[slot].clone(), CLUSTER).ok()?;
        let message = frame.message().ok()?;
        Some(message.encode(CLUSTER, node_id(self.node), TraceContext::NONE).to_bytes())
    }

    /// NonMember: a freshly invented, valid message, as a frame from the forger.
    fn forged_frame(&mut self, near: &[Near]) -> Option<Bytes> {
        let message = self.forge(near);
        // Only what a receiver's decoder accepts can be sent (the codec's
        // encoder asserts it in debug builds).
        message.validate().ok()?;
        Some(message.encode(CLUSTER, node_id(self.node), TraceContext::NONE).to_bytes())
    }

    /// One message of a command drawn uniformly from every command.
    fn forge(&mut self, near: &[Near]) -> Message {
        let command = Command::ALL[self.rng.below(Command::ALL.len() as u64) as usize];
        let n = self.near(near);
        self.message_of(command, n)
    }

    fn message_of(&mut self, command: Command, n: Near) -> Message {
        let (group, incarnation) = (self.group(n), self.incarnation(n));
        match command {
            Command::Handshake => Message::Handshake(Handshake {
                revision: if self.rng.chance(900) { WIRE_REVISION } else { self.rng.below(8) as u16 },
                cluster: CLUSTER,
                node: self.node_field(),
                shard_count: self.rng.range(1, 1024) as u16,
            }),
            Command::Request => Message::Request(self.request(group)),
            Command::Reply => Message::Reply(Reply {
                client: ClientId(u128::from(self.rng.next_u64())),
                request: RequestNumber(self.rng.below(1000)),
                group,
                view: self.view(n),
                op: self.op(n),
                outcome: if self.rng.chance(500) {
                    Outcome::Ok(self.bytes(32))
                } else {
                    Outcome::Error { code: ReplyError::Busy, detail: "forged".into() }
                },
            }),
            Command::Prepare => {
                let view = self.view(n);
                let (op, entry_view) = (self.op(n), self.view_at_most(view));
                let entry = self.entry(op.0, entry_view);
                Message::Prepare(Prepare {
                    group,
                    incarnation,
                    view,
                    commit: self.op(n),
                    replica: self.replica(n),
                    entry,
                })
            }
            Command::PrepareOk => Message::PrepareOk(PrepareOk {
                group,
                incarnation,
                view: self.view(n),
                op: Op(self.op(n).0.max(1)),
                replica: self.replica(n),
            }),
            Command::StartViewChange => Message::StartViewChange(StartViewChange {
                group,
                incarnation,
                view: View(self.view(n).0.max(1)),
                replica: self.replica(n),
            }),
            Command::DoViewChange => {
                let view = View(self.view(n).0.max(1));
                let log_view = View(self.view_at_most(View(view.0 - 1)).0);
                let op = self.op(n);
                let log = self.log(op, log_view);
                Message::DoViewChange(DoViewChange {
                    group,
                    incarnation,
                    view,
                    log_view,
                    op,
                    commit: Op(self.rng.below(op.0.saturating_add(1).max(1)).min(op.0)),
                    replica: self.replica(n),
                    log,
                })
            }
            Command::StartView => {
                let view = self.view(n);
                let op = self.op(n);
                let log = self.log(op, view);
                Message::StartView(StartView {
                    group,
                    incarnation,
                    view,
                    op,
                    commit: Op(self.rng.below(op.0.saturating_add(1).max(1)).min(op.0)),
                    replica: self.replica(n),
                    log,
                })
            }
            Command::ViewChangeBatch => {
                // Z4: a run of forged view-change messages, some invalid
                // (each is then rejected alone at the receiver).
                let count = self.rng.range(1, 6);
                let commands = [Command::StartViewChange, Command::DoViewChange, Command::StartView];
                let messages: Vec<Message> = (0..count)
                    .map(|_| {
                        let command = commands[self.rng.below(3) as usize];
                        self.message_of(command, n)
                    })
                    .collect();
                match ViewChangeBatch::pack(messages).into_iter().next() {
                    Some(Ok(batch)) => Message::ViewChangeBatch(batch),
                    Some(Err(alone)) => alone,
                    None => self.message_of(Command::StartViewChange, n),
                }
            }
            Command::Commit => {
                let count = self.rng.range(1, 8);
                let entries: Vec<CommitEntry> = (0..count)
                    .map(|_| CommitEntry {
                        group: self.group(n),
                        partition_incarnation: self.incarnation(n),
                        view: self.view(n),
                        commit: self.op(n),
                        timestamp_monotonic: Timestamp(self.rng.next_u64() >> self.rng.below(64)),
                        heartbeat_state: self.heartbeat_state(),
                        replica: self.replica(n),
                    })
                    .collect();
                Message::Commit(CommitBatch::encode(&entries))
            }
            Command::CommitReply => {
                let count = self.rng.range(1, 8);
                let entries: Vec<CommitReplyEntry> = (0..count)
                    .map(|_| CommitReplyEntry {
                        group: self.group(n),
                        partition_incarnation: self.incarnation(n),
                        view: self.view(n),
                        timestamp_monotonic: Timestamp(self.rng.next_u64() >> self.rng.below(64)),
                        replica: self.replica(n),
                    })
                    .collect();
                Message::CommitReply(CommitReplyBatch::encode(&entries))
            }
            Command::RequestPrepares => {
                let op_min = self.op(n).0.max(1);
                let span = self.rng.below(cohort_messages::REPAIR_OPS_MAX);
                Message::RequestPrepares(RequestPrepares {
                    group,
                    incarnation,
                    view: self.view(n),
                    replica: self.replica(n),
                    op_min: Op(op_min),
                    op_max: Op(op_min.saturating_add(span)),
                })
            }
            Command::RecoveryQuery => Message::RecoveryQuery(RecoveryQuery {
                group,
                incarnation,
                replica: self.replica(n),
                nonce: self.rng.next_u64(),
            }),
            Command::RecoveryAnswer => {
                let view = self.view(n);
                let op = self.op(n);
                Message::RecoveryAnswer(RecoveryAnswer {
                    group,
                    incarnation,
                    replica: self.replica(n),
                    nonce: self.rng.next_u64(),
                    view,
                    log_view: self.view_at_most(view),
                    op,
                    commit: Op(self.rng.below(op.0.saturating_add(1))),
                    recovering: false,
                    primary: self.rng.chance(500),
                })
            }
            Command::RequestStateTransfer => Message::RequestStateTransfer(RequestStateTransfer {
                group,
                incarnation,
                view: self.view(n),
                replica: self.replica(n),
                snapshot_op: self.op(n),
                offset_bytes: self.size_bytes(),
            }),
            Command::StateChunk => {
                let chunk = self.bytes(256);
                let total = self.size_bytes().max(chunk.len() as u64);
                let offset = self.rng.below(total - chunk.len() as u64 + 1);
                let view = self.view(n);
                Message::StateChunk(StateChunk {
                    group,
                    incarnation,
                    view,
                    replica: self.replica(n),
                    snapshot_op: self.op(n),
                    snapshot_view: self.view(n),
                    offset_bytes: offset,
                    total_size_bytes: total,
                    chunk,
                })
            }
            Command::Redirect => Message::Redirect(Redirect {
                group,
                client: ClientId(u128::from(self.rng.next_u64())),
                request: RequestNumber(self.rng.below(1000)),
                view: self.view(n),
                primary: self.rng.chance(500).then(|| self.node_field()),
            }),
            Command::SessionOpen => {
                Message::SessionOpen(SessionOpen { node: self.node_field(), attempt: self.rng.below(8) as u32 })
            }
            Command::SessionKeepalive => Message::SessionKeepalive(SessionKeepalive {
                node: self.node_field(),
                session: SessionId(self.rng.range(1, 64)),
            }),
            Command::SessionExpired => Message::SessionExpired(SessionExpired {
                node: self.node_field(),
                session: SessionId(self.rng.below(64)),
                epoch: Epoch(self.rng.below(1000)),
            }),
            Command::SessionOpened => Message::SessionOpened(SessionOpened {
                node: self.node_field(),
                session: SessionId(self.rng.range(1, 64)),
                epoch: Epoch(self.rng.below(1000)),
            }),
            Command::LinkShard => Message::LinkShard(LinkShard { shard: self.rng.below(1024) as u16 }),
            Command::RouteQuery => {
                let groups = (0..self.rng.range(1, 8)).map(|_| self.group(n)).collect();
                Message::RouteQuery(RouteQuery { groups })
            }
            Command::Routes => {
                let routes = (0..self.rng.below(8))
                    .map(|_| Route {
                        group: self.group(n),
                        view: self.view(n),
                        primary: self.rng.chance(500).then(|| NodeId(self.rng.range(1, 16))),
                    })
                    .collect();
                Message::Routes(Routes { routes })
            }
            Command::PairHeartbeat => {
                let proposals = (0..self.rng.below(4)).map(|_| self.quiet_group(n)).collect();
                let leaves = (0..self.rng.below(3)).map(|_| self.quiet_group(n)).collect();
                Message::PairHeartbeat(PairHeartbeat {
                    shard: self.rng.below(3) as u16,
                    epoch: self.rng.below(4),
                    tick: self.rng.next_u64() >> self.rng.below(64),
                    digest: QuietDigest { count: self.rng.below(4) as u32, sum: self.rng.next_u64() },
                    proposals,
                    leaves,
                })
            }
            Command::PairHeartbeatReply => {
                let accepted = (0..self.rng.below(4)).map(|_| self.quiet_group(n)).collect();
                Message::PairHeartbeatReply(PairHeartbeatReply {
                    shard: self.rng.below(3) as u16,
                    epoch: self.rng.below(4),
                    tick: self.rng.next_u64() >> self.rng.below(64),
                    matched: self.rng.chance(500),
                    accepted,
                })
            }
        }
    }

    /// Z3: a quiet group near the group's state.
    fn quiet_group(&mut self, n: Near) -> QuietGroup {
        QuietGroup { group: self.group(n), incarnation: self.incarnation(n), view: self.view(n), commit: self.op(n) }
    }

    fn near(&mut self, near: &[Near]) -> Near {
        match near.len() {
            0 => Near { group: GroupId(0), incarnation: Incarnation(1), view: View(0), op: Op(0), members: 3 },
            len => near[self.rng.below(len as u64) as usize],
        }
    }

    /// Mostly the group's id; sometimes one no node hosts, or the metadata group.
    fn group(&mut self, n: Near) -> GroupId {
        match self.rng.below(20) {
            0 => GroupId(self.rng.next_u64()),
            1 => GroupId::METADATA,
            _ => n.group,
        }
    }

    fn incarnation(&mut self, n: Near) -> Incarnation {
        match self.rng.below(10) {
            0 => Incarnation(n.incarnation.0.saturating_add(1)),
            1 => Incarnation(self.rng.next_u64()),
            _ => n.incarnation,
        }
    }

    /// Views near the group's, far above it, and at the ends of the space.
    fn view(&mut self, n: Near) -> View {
        let near = u64::from(n.view.0);
        let view = match self.rng.below(20) {
            0..=11 => (near + self.rng.below(4)).saturating_sub(self.rng.below(3)),
            12..=14 => near + self.rng.range(2, 1 << 20),
            15..=16 => self.rng.next_u64() & u64::from(u32::MAX),
            17 => u64::from(u32::MAX),
            18 => u64::from(u32::MAX / 2) + self.rng.below(2),
            _ => 0,
        };
        View(view.min(u64::from(u32::MAX)) as u32)
    }

    /// A view at most `max`, usually close to it.
    fn view_at_most(&mut self, max: View) -> View {
        View(max.0.saturating_sub(self.rng.below(3) as u32))
    }

    /// Ops near the group's, far above it, and at the ends of the space.
    fn op(&mut self, n: Near) -> Op {
        let near = n.op.0;
        Op(match self.rng.below(20) {
            0..=11 => (near + self.rng.below(6)).saturating_sub(self.rng.below(6)),
            12..=14 => near.saturating_add(self.rng.range(2, 1 << 16)),
            15..=16 => self.rng.next_u64(),
            17 => u64::MAX,
            18 => u64::MAX / 2 + self.rng.below(2),
            _ => 0,
        })
    }

    /// A member index of the group, or one past it, or far out.
    fn replica(&mut self, n: Near) -> MemberIndex {
        match self.rng.below(10) {
            0 => MemberIndex(self.rng.below(cohort_messages::GROUP_MEMBERS_MAX as u64) as u8),
            // The group's indexes and the first one past them.
            _ => MemberIndex(self.rng.below(u64::from(n.members) + 1).min(63) as u8),
        }
    }

    /// A node id field: the forger's own, a simulated node's, or any.
    fn node_field(&mut self) -> NodeId {
        match self.rng.below(3) {
            0 => node_id(self.node),
            1 => NodeId(self.rng.range(1, 8)),
            _ => NodeId(self.rng.next_u64()),
        }
    }

    fn heartbeat_state(&mut self) -> HeartbeatState {
        match self.rng.below(3) {
            0 => HeartbeatState::Busy,
            1 => HeartbeatState::Idle,
            _ => HeartbeatState::Eager,
        }
    }

    /// Sizes small and huge.
    fn size_bytes(&mut self) -> u64 {
        match self.rng.below(4) {
            0 => self.rng.below(1 << 12),
            1 => self.rng.below(1 << 24),
            2 => 1 << self.rng.range(30, 62),
            _ => self.rng.next_u64(),
        }
    }

    fn bytes(&mut self, max: u64) -> Bytes {
        let len = self.rng.below(max + 1);
        Bytes::from((0..len).map(|_| self.rng.next_u64() as u8).collect::<Vec<u8>>())
    }

    /// An operation the kv store does not decode (its writes apply as no-ops).
    fn opaque_operation(&mut self) -> Bytes {
        let mut bytes = vec![OPAQUE_OPERATION_TAG];
        bytes.extend(self.bytes(32));
        Bytes::from(bytes)
    }

    /// A client's operation: a read of any key, or an opaque write.
    fn request(&mut self, group: GroupId) -> Request {
        let client = ClientId(FORGED_CLIENT_BASE + u128::from(self.rng.below(FORGED_CLIENTS as u64)));
        let read = self.rng.chance(500);
        Request {
            client,
            request: RequestNumber(self.rng.range(1, 64)),
            group,
            kind: if read { RequestKind::Read } else { RequestKind::Write },
            operation: if read { KvOp::Get { key: self.rng.below(4) }.encode() } else { self.opaque_operation() },
        }
    }

    /// One log entry at `op` of `view`, from a forged client.
    fn entry(&mut self, op: u64, view: View) -> LogEntry {
        LogEntry {
            op: Op(op.max(1)),
            view,
            client: ClientId(FORGED_CLIENT_BASE + u128::from(self.rng.below(FORGED_CLIENTS as u64))),
            request: RequestNumber(self.rng.range(1, 64)),
            operation: self.opaque_operation(),
        }
    }

    /// A log suffix ending at `op`: contiguous, views non-decreasing and at
    /// most `view_max` (what validation asks), a few entries long.
    fn log(&mut self, op: Op, view_max: View) -> Vec<LogEntry> {
        let count = self.rng.below(6).min(op.0);
        let mut view = View(view_max.0.saturating_sub(self.rng.below(4) as u32));
        let mut log = Vec::with_capacity(count as usize);
        for offset in (0..count).rev() {
            log.push(self.entry(op.0 - offset, view));
            if self.rng.chance(300) {
                view = View(view.0.saturating_add(1).min(view_max.0));
            }
        }
        log
    }
}

impl Sim {
    /// The forger's turn of this tick: send its frames (the caller runs it
    /// once per step, after the clients).
    pub(super) fn run_forger(&mut self) {
        let Some(mut forger) = self.forger.take() else { return };
        let nodes = self.nodes.len();
        let from = forger.node;
        let running = from >= nodes || self.nodes[from].is_running(self.now);
        if running && forger.rng.chance(500) {
            let near = self.near_groups();
            for _ in 0..forger.frames_per_tick {
                let bytes = match forger.mode {
                    ForgerMode::NonMember => forger.forged_frame(&near),
                    ForgerMode::Replay => forger.replayed_frame(),
                };
                let Some(bytes) = bytes else { continue };
                let to = forger.rng.below(nodes as u64) as usize;
                if to == from {
                    continue;
                }
                forger.sent += 1;
                let packet = Packet { from: Endpoint::Node(from), to: Endpoint::Node(to), bytes };
                self.network.send(self.now, packet, &mut self.rng);
            }
        }
        self.forger = Some(forger);
    }

    /// Replay: node `index` sent or received `bytes`.
    pub(super) fn forger_observe(&mut self, index: usize, bytes: &Bytes) {
        if let Some(forger) = self.forger.as_mut() {
            forger.observe(index, bytes);
        }
    }

    /// Every kv group as the running nodes see it: the highest view and op
    /// any replica of it holds.
    fn near_groups(&self) -> Vec<Near> {
        self.specs
            .iter()
            .map(|spec| {
                let mut near = Near {
                    group: spec.group,
                    incarnation: spec.incarnation,
                    view: View(0),
                    op: Op(0),
                    members: spec.total() as u8,
                };
                for replica in self.nodes.iter().filter_map(|node| node.replica(spec.group)) {
                    near.incarnation = near.incarnation.max(replica.incarnation());
                    near.view = near.view.max(replica.view());
                    near.op = near.op.max(replica.op());
                }
                near
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t6_every_forged_message_is_valid_and_every_command_is_forged() {
        let mut forger = Forger::new(ForgerMode::NonMember, 7, 3);
        let near = [Near { group: GroupId(1), incarnation: Incarnation(1), view: View(4), op: Op(9), members: 3 }];
        let mut commands = std::collections::BTreeSet::new();
        for _ in 0..20_000 {
            let message = forger.forge(&near);
            assert_eq!(message.validate(), Ok(()), "{message:?}");
            let bytes = message.encode(CLUSTER, node_id(3), TraceContext::NONE).to_bytes();
            let frame = Frame::decode(bytes, CLUSTER).expect("a forged frame decodes");
            assert_eq!(frame.message().expect("and validates"), message);
            commands.insert(message.command());
        }
        assert_eq!(commands.len(), Command::ALL.len(), "{commands:?}");
    }
}
