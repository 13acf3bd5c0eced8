//! The shard actor: the actix shell of the sans-IO [`Shard`].
//!
//! It follows the driving contract written on [`Shard`]: ticks from a
//! monotonic clock (so a stalled thread catches up to the present before it
//! judges a lease), inputs from peer links and clients, and at the end of
//! every handler one drain of the core's commands: storage commands go to the
//! storage worker as one job, messages go to the peer's outbox as one
//! message, answers go to the waiting client.
//!
//! Alongside, it reports each submit, inbound message and command to its
//! [`ShardTraces`], which makes the spans of the message flows and gives the
//! trace context each outgoing message carries in its frame header.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use actix::prelude::*;
use cohort_actors::core::storage::Recovered;
use cohort_actors::core::{Command, CoreConfig, Shard, ShardError};
use cohort_messages::{
    ClientId, CommitBatch, CommitEntry, CommitReplyBatch, CommitReplyEntry, Message, NodeId, Redirect, Reply, Request,
    RequestNumber, TraceContext,
};
use tokio::sync::oneshot;

use super::custom::{CustomActorFactory, CustomActorLink, GroupReplica};
use super::group::{GroupActor, GroupRole, RoleChanged};
use super::observed::ObservedStateMachine;
use super::outbox::{Outbox, Outgoing};
use super::storage_worker::{StorageEvent, StorageWorker};
use super::traces::ShardTraces;
use crate::node::kind::{HostedGroup, Kinds};
use crate::node::recorded::{PlacementFile, RecordedPlacement};
use crate::telemetry::{DropReason, Drops, NodeMetrics};

/// Requests from peer nodes awaiting an answer, at most (see `ShardActor::remote_waiting`).
pub const REMOTE_WAITERS_MAX: usize = 4096;

/// Input from a peer link, routed to the shard that owns the groups (R16).
#[derive(Message)]
#[rtype(result = "()")]
pub enum Inbound {
    /// A single-group message.
    Message {
        /// The sending node.
        from: NodeId,
        /// The message.
        message: Message,
        /// The frame header's trace context ([`TraceContext::NONE`] if untraced).
        trace: TraceContext,
    },
    /// This shard's entries of one Commit frame.
    Commits {
        /// The sending node.
        from: NodeId,
        /// Validated entries (bad ones were rejected alone by the router).
        entries: Vec<CommitEntry>,
    },
    /// This shard's entries of one CommitReply frame.
    Replies {
        /// The sending node.
        from: NodeId,
        /// Validated entries.
        entries: Vec<CommitReplyEntry>,
    },
}

/// The answer to a client request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientAnswer {
    /// Applied (or read), or refused with a reason.
    Reply(Reply),
    /// Not the primary: go there (V5).
    Redirect(Redirect),
}

/// A client request from this process (the host's submit path).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Submit {
    /// The request.
    pub request: Request,
    /// Where the answer goes.
    pub answer: oneshot::Sender<ClientAnswer>,
    /// The caller's span (`submit`); the shard's `write` span is its child.
    /// [`tracing::Span::none`] when the caller does not trace.
    pub span: tracing::Span,
}

#[derive(Message)]
#[rtype(result = "()")]
struct StorageDone(StorageEvent);

/// Ask a shard for its counters and gauges (R19, R32).
#[derive(Message)]
#[rtype(result = "ShardReport")]
pub struct GetReport;

/// A shard's counters and gauges, and the groups it leads.
#[derive(Clone, Debug, Default, MessageResponse)]
pub struct ShardReport {
    /// Counters.
    pub metrics: cohort_actors::core::ShardMetrics,
    /// Groups per heartbeat state.
    pub gauges: cohort_actors::core::HeartbeatGauges,
    /// The host's groups this shard's members lead now (the metadata group is not listed).
    pub primaries: Vec<cohort_messages::GroupId>,
}

/// Everything a shard actor is built from (all `Send`, so it can be moved to
/// the shard's thread, where the core itself is built).
pub struct ShardSetup {
    /// Shard index on this node.
    pub index: usize,
    /// This node.
    pub node: NodeId,
    /// Core configuration.
    pub config: CoreConfig,
    /// Tick length.
    pub tick: Duration,
    /// The groups this shard hosts, with their kinds: the configured ones
    /// and those recorded at run time.
    pub(crate) groups: Vec<HostedGroup>,
    /// The node's run-time placements (shared by its shards).
    pub(crate) recorded: Arc<PlacementFile>,
    /// What storage recovered.
    pub recovered: Recovered,
    /// The node's group kinds: each group's state machine and custom actor.
    pub(crate) kinds: Arc<Kinds>,
    /// Outboxes per peer node.
    pub outboxes: HashMap<NodeId, Addr<Outbox>>,
    /// Whether each peer's link is connected (R25).
    pub connected: HashMap<NodeId, Arc<AtomicBool>>,
    /// The storage worker.
    pub storage: StorageWorker,
    /// Set when the storage failed fatally; the node stops.
    pub fatal: Arc<std::sync::Mutex<Option<String>>>,
    /// Drops on full mailboxes.
    pub drops: Arc<Drops>,
    /// Where this shard publishes its counters.
    pub metrics: Arc<NodeMetrics>,
}

/// The shard actor.
pub struct ShardActor {
    index: usize,
    core: Shard,
    started: Instant,
    tick: Duration,
    storage: StorageWorker,
    outboxes: HashMap<NodeId, Addr<Outbox>>,
    connected: HashMap<NodeId, Arc<AtomicBool>>,
    /// Local submitters by (group, client, request): one client may have a
    /// request of the same number in flight in each of its groups.
    waiting: HashMap<(cohort_messages::GroupId, ClientId, RequestNumber), oneshot::Sender<ClientAnswer>>,
    /// Requests that came from peer nodes (a node's metadata agent submits
    /// to the metadata primary over the peer link): the answer goes back to
    /// the sender as a Reply or Redirect frame. Bounded by
    /// [`REMOTE_WAITERS_MAX`]; entries older than a few seconds are forgotten.
    remote_waiting: HashMap<(cohort_messages::GroupId, ClientId, RequestNumber), (NodeId, u64)>,
    /// Each hosted group's incarnation, as placed.
    incarnations: HashMap<cohort_messages::GroupId, cohort_messages::Incarnation>,
    fatal: Arc<std::sync::Mutex<Option<String>>>,
    drops: Arc<Drops>,
    metrics: Arc<NodeMetrics>,
    published_tick: u64,
    groups: HashMap<cohort_messages::GroupId, GroupLink>,
    traces: Rc<ShardTraces>,
    /// Custom actors to start with the shard (kinds that have one).
    custom_factories: Vec<(GroupReplica, CustomActorFactory)>,
    /// Groups whose custom actor waits for a resync (its mailbox overflowed).
    resync_pending: Vec<cohort_messages::GroupId>,
    /// True while draining what the core emitted while building the groups:
    /// the actors were told the resulting role already.
    draining_build: bool,
    /// The node's group kinds, for groups created while running (P4 candidates).
    kinds: Arc<crate::node::kind::Kinds>,
    /// Where the groups created while running are recorded, so that the
    /// next start hosts them again (see `node::recorded`).
    recorded: Arc<PlacementFile>,
}

/// The actors that follow one group replica on this shard.
struct GroupLink {
    actor: Addr<GroupActor>,
    custom: Option<CustomActorLink>,
}

impl ShardActor {
    /// Build the core and its groups from `setup`. Runs on the shard's
    /// thread. With an error, the actor must be stopped at once.
    pub fn new(setup: ShardSetup) -> (ShardActor, Option<String>) {
        let mut core = Shard::new(setup.node, setup.config.clone());
        let mut recovered = setup.recovered;
        let mut failure = None;
        let traces = Rc::new(ShardTraces::new(setup.node));
        let mut custom_factories = Vec::new();
        let mut incarnations = HashMap::new();
        for HostedGroup { spec, kind } in setup.groups.iter().cloned() {
            let Some(kind_spec) = setup.kinds.get(&kind) else {
                failure = Some(format!("shard {}: {}: group kind {kind} is not registered", setup.index, spec.group));
                break;
            };
            let group = spec.group;
            let label = setup.metrics.group_kind(&kind.to_string());
            let state = (kind_spec.state_machines)(group);
            let state = Box::new(ObservedStateMachine::new(state, group, label, Rc::clone(&traces)));
            let result = match recovered.groups.remove(&group) {
                Some(data) => core.recover_group(spec, state, data),
                None => core.create_group(spec, state),
            };
            match result {
                Ok(()) => {}
                Err(ShardError::NotInIncarnation(error)) => {
                    // Removed from the group before the restart: what is
                    // left here is not this node's any more (S4).
                    eprintln!("cohort: shard {}: dropping {group} and its data: {error}", setup.index);
                    if !setup.storage.remove_group(group) {
                        failure = Some(format!("shard {}: the storage worker stopped", setup.index));
                        break;
                    }
                    if let Err(error) = setup.recorded.remove(group) {
                        tracing::warn!(group = group.0, %error, "dropped group's record not removed");
                    }
                    continue;
                }
                Err(error) => {
                    failure = Some(format!("shard {}: {error}", setup.index));
                    break;
                }
            }
            if let Some(replica) = core.replica(group) {
                incarnations.insert(group, replica.incarnation());
            }
            if let Some(factory) = &kind_spec.actor {
                let replica = GroupReplica { node: setup.node, group, kind: kind.clone() };
                custom_factories.push((replica, Arc::clone(factory)));
            }
        }
        let actor = ShardActor {
            index: setup.index,
            core,
            started: Instant::now(),
            tick: setup.tick,
            storage: setup.storage,
            outboxes: setup.outboxes,
            connected: setup.connected,
            waiting: HashMap::new(),
            remote_waiting: HashMap::new(),
            incarnations,
            fatal: setup.fatal,
            drops: setup.drops,
            metrics: setup.metrics,
            published_tick: 0,
            groups: HashMap::new(),
            traces,
            custom_factories,
            resync_pending: Vec::new(),
            draining_build: false,
            kinds: setup.kinds,
            recorded: setup.recorded,
        };
        (actor, failure)
    }

    /// A callback for the storage worker that reports to this actor.
    pub fn storage_reporter(addr: Addr<ShardActor>) -> impl Fn(StorageEvent) + Send + 'static {
        move |event| addr.do_send(StorageDone(event))
    }

    fn now_tick(&self) -> u64 {
        (self.started.elapsed().as_nanos() / self.tick.as_nanos().max(1)) as u64
    }

    /// Drain the core and execute its commands (the end of every turn).
    fn run(&mut self) {
        loop {
            let commands = self.core.drain_commands();
            if commands.is_empty() {
                break;
            }
            self.execute(commands);
        }
        self.resync_custom_actors();
    }

    /// Resend the state to custom actors whose mailbox overflowed. Runs after
    /// the turn's commands, so the snapshot covers every op already reported.
    fn resync_custom_actors(&mut self) {
        if self.resync_pending.is_empty() {
            return;
        }
        let (core, groups, drops) = (&self.core, &mut self.groups, &self.drops);
        self.resync_pending.retain(|group| {
            match (core.replica(*group), groups.get_mut(group).and_then(|link| link.custom.as_mut())) {
                (Some(replica), Some(custom)) => !custom.resync(replica, drops),
                _ => false,
            }
        });
    }

    fn execute(&mut self, commands: Vec<Command>) {
        let mut storage = Vec::new();
        let mut outgoing: BTreeMap<NodeId, Vec<(Message, TraceContext)>> = BTreeMap::new();
        for command in commands {
            match command {
                Command::Append { group, ref entry } => {
                    self.traces.on_append(group, entry);
                    storage.push(command);
                }
                Command::Truncate { .. }
                | Command::StageSuperblock { .. }
                | Command::SaveSnapshot { .. }
                | Command::Flush { .. } => storage.push(command),
                Command::Send { to, message } => {
                    let trace = self.traces.on_send(to, &message);
                    outgoing.entry(to).or_default().push((message, trace));
                }
                Command::SendCommitBatch { to, entries } => {
                    let connected = self.connected.get(&to).is_some_and(|flag| flag.load(Ordering::Relaxed));
                    self.core.on_commit_batch_sent(to, &entries, connected);
                    self.traces.on_send_batch(to, false, entries.len());
                    let batch = Message::Commit(CommitBatch::encode(&entries));
                    outgoing.entry(to).or_default().push((batch, TraceContext::NONE));
                }
                Command::SendCommitReplyBatch { to, entries } => {
                    self.traces.on_send_batch(to, true, entries.len());
                    let batch = Message::CommitReply(CommitReplyBatch::encode(&entries));
                    outgoing.entry(to).or_default().push((batch, TraceContext::NONE));
                }
                Command::Reply(reply) => {
                    let outcome = match reply.outcome {
                        cohort_messages::Outcome::Ok(_) => "ok",
                        cohort_messages::Outcome::Error { .. } => "error",
                    };
                    self.traces.on_answer(reply.group, reply.client, reply.request, reply.op, outcome);
                    let key = (reply.group, reply.client, reply.request);
                    if let Some(to) = self.remote_answer(key) {
                        outgoing.entry(to).or_default().push((Message::Reply(reply), TraceContext::NONE));
                    } else {
                        self.answer(key, ClientAnswer::Reply(reply))
                    }
                }
                Command::Redirect(redirect) => {
                    let op = cohort_messages::Op(0);
                    self.traces.on_answer(redirect.group, redirect.client, redirect.request, op, "redirect");
                    let key = (redirect.group, redirect.client, redirect.request);
                    if let Some(to) = self.remote_answer(key) {
                        outgoing.entry(to).or_default().push((Message::Redirect(redirect), TraceContext::NONE));
                    } else {
                        self.answer(key, ClientAnswer::Redirect(redirect))
                    }
                }
                Command::RoleChanged { group, view, role, .. } => {
                    self.traces.on_role_changed(group, view, role);
                    if let Some(link) = self.groups.get_mut(&group) {
                        let role = GroupRole::from_core(role, view);
                        link.actor.do_send(RoleChanged { group, role });
                        if let Some(custom) = link.custom.as_mut().filter(|_| !self.draining_build) {
                            custom.role(role);
                        }
                    }
                }
                Command::Committed { group, op } => {
                    self.traces.on_committed(group, op);
                    if let Some(link) = self.groups.get(&group)
                        && link.actor.try_send(super::group::CommitMoved(op)).is_err()
                    {
                        self.drops.add(DropReason::MailboxFull, 1);
                    }
                }
                Command::Applied { group, ops, through } => {
                    if let Some(custom) = self.groups.get_mut(&group).and_then(|link| link.custom.as_mut()) {
                        custom.applied(ops, through, &self.drops);
                        note_resync(&mut self.resync_pending, group, custom);
                    }
                }
                Command::Restored { group, op, state } => {
                    if let Some(custom) = self.groups.get_mut(&group).and_then(|link| link.custom.as_mut()) {
                        custom.restored(op, state, &self.drops);
                        note_resync(&mut self.resync_pending, group, custom);
                    }
                }
                Command::QuorumWaitDone { .. } => {}
            }
        }
        if !storage.is_empty() && !self.storage.run(storage) {
            self.fail("the storage worker stopped".into());
        }
        for (to, messages) in outgoing {
            let count = messages.len() as u64;
            match self.outboxes.get(&to).map(|outbox| outbox.try_send(Outgoing { messages })) {
                Some(Ok(())) => {}
                Some(Err(SendError::Full(_))) => self.drops.add(DropReason::MailboxFull, count),
                Some(Err(SendError::Closed(_))) | None => self.drops.add(DropReason::MailboxClosed, count),
            }
        }
    }

    /// The peer waiting for the answer to `key`, if it came from one.
    fn remote_answer(&mut self, key: (cohort_messages::GroupId, ClientId, RequestNumber)) -> Option<NodeId> {
        if self.waiting.contains_key(&key) {
            return None;
        }
        self.remote_waiting.remove(&key).map(|(from, _)| from)
    }

    fn answer(&mut self, key: (cohort_messages::GroupId, ClientId, RequestNumber), answer: ClientAnswer) {
        if let Some(waiter) = self.waiting.remove(&key) {
            let _ = waiter.send(answer);
        }
    }

    /// Stop hosting `group` here: its replica, its actors (dropping the
    /// links drops their last addresses), its waiting callers and its data.
    /// `Ok(false)` if it was not hosted; `Err` if the storage worker stopped
    /// (the shard has failed).
    fn forget_group(&mut self, group: cohort_messages::GroupId) -> Result<bool, ()> {
        if !self.core.remove_group(group) {
            return Ok(false);
        }
        self.groups.remove(&group);
        self.incarnations.remove(&group);
        self.waiting.retain(|key, _| key.0 != group);
        self.remote_waiting.retain(|key, _| key.0 != group);
        self.resync_pending.retain(|pending| *pending != group);
        if !self.storage.remove_group(group) {
            self.fail("the storage worker stopped".into());
            return Err(());
        }
        Ok(true)
    }

    fn fail(&mut self, reason: String) {
        if let Ok(mut fatal) = self.fatal.lock() {
            fatal.get_or_insert(reason);
        }
    }

    /// The core, for tests and metrics.
    pub fn core(&self) -> &Shard {
        &self.core
    }

    /// This shard's index.
    pub fn index(&self) -> usize {
        self.index
    }
}

/// After a send to a custom actor: queue its resync if it overflowed.
fn note_resync(pending: &mut Vec<cohort_messages::GroupId>, group: cohort_messages::GroupId, custom: &CustomActorLink) {
    if custom.needs_resync() && !pending.contains(&group) {
        pending.push(group);
    }
}

impl Actor for ShardActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(4096);
        // One actor per group replica, on this shard's thread, and the custom
        // actor of its kind if it has one; both first hear the current role.
        // Then what the core emitted while building the groups is drained:
        // restores and replayed ops reach the custom actors, the roles it
        // passed through on the way do not (they were told where it ended).
        let mut factories: HashMap<_, _> =
            std::mem::take(&mut self.custom_factories).into_iter().map(|(r, f)| (r.group, (r, f))).collect();
        for replica in self.core.replicas() {
            let group = replica.group();
            let role = GroupRole::from_core(replica.role(), replica.view());
            let actor = GroupActor::new(group).start();
            actor.do_send(RoleChanged { group, role });
            let mut custom = factories.remove(&group).map(|(replica, factory)| factory(&replica));
            if let Some(custom) = custom.as_mut() {
                custom.role(role);
            }
            self.groups.insert(group, GroupLink { actor, custom });
        }
        self.draining_build = true;
        self.run();
        self.draining_build = false;
        self.core.on_tick(self.now_tick());
        self.run();
        ctx.run_interval(self.tick, |actor, _ctx| {
            let now = actor.now_tick().max(actor.core.now());
            actor.core.on_tick(now);
            actor.run();
            // About once a second: publish counters (R19, R32) and forget
            // waiters whose caller gave up.
            let second_ticks = (1_000_000_000 / actor.tick.as_nanos().max(1)).max(1) as u64;
            if now >= actor.published_tick + second_ticks {
                actor.published_tick = now;
                actor.metrics.update_shard(actor.index, actor.core.metrics(), &actor.core.heartbeat_gauges());
                if actor.index == 0 {
                    let peers = actor.connected.values().filter(|flag| flag.load(Ordering::Relaxed)).count();
                    actor.metrics.set_peers_connected(peers);
                }
                actor.waiting.retain(|_, waiter| !waiter.is_closed());
                let stale = now.saturating_sub(10 * second_ticks);
                actor.remote_waiting.retain(|_, (_, since)| *since >= stale);
                actor.traces.retain_submits(|key| actor.waiting.contains_key(key));
            }
        });
    }
}

impl Handler<Inbound> for ShardActor {
    type Result = ();

    fn handle(&mut self, inbound: Inbound, _ctx: &mut Self::Context) {
        let span = match &inbound {
            Inbound::Message { from, message, trace } => self.traces.on_message(*from, message, *trace),
            Inbound::Commits { from, entries } => self.traces.on_batch(*from, false, entries.len()),
            Inbound::Replies { from, entries } => self.traces.on_batch(*from, true, entries.len()),
        };
        let _entered = span.enter();
        match inbound {
            Inbound::Message { from, message, .. } => {
                if let Message::Request(request) = &message {
                    if self.remote_waiting.len() >= REMOTE_WAITERS_MAX {
                        self.drops.add(DropReason::MailboxFull, 1);
                        return;
                    }
                    let key = (request.group, request.client, request.request);
                    self.remote_waiting.insert(key, (from, self.core.now()));
                }
                self.core.on_message(from, message)
            }
            Inbound::Commits { from, entries } => self.core.on_commit_entries(from, &entries),
            Inbound::Replies { from, entries } => self.core.on_commit_reply_entries(from, &entries),
        }
        self.run();
    }
}

impl Handler<Submit> for ShardActor {
    type Result = ();

    fn handle(&mut self, submit: Submit, _ctx: &mut Self::Context) {
        let key = (submit.request.group, submit.request.client, submit.request.request);
        self.traces.on_submit(key.1, key.2, submit.request.group, &submit.span);
        self.waiting.insert(key, submit.answer);
        self.core.on_request(submit.request);
        self.run();
    }
}

impl Handler<StorageDone> for ShardActor {
    type Result = ();

    fn handle(&mut self, done: StorageDone, ctx: &mut Self::Context) {
        match done.0 {
            StorageEvent::Flushed(id) => self.core.on_flushed(id),
            StorageEvent::SuperblockFailed(group) => self.core.on_superblock_failed(group),
            StorageEvent::Fatal(error) => {
                // A dead disk stops the shard loudly; nothing more is acknowledged.
                eprintln!("cohort: shard {} storage failed, stopping: {error}", self.index);
                self.fail(format!("shard {}: {error}", self.index));
                ctx.stop();
                return;
            }
        }
        self.run();
    }
}

impl Handler<GetReport> for ShardActor {
    type Result = ShardReport;

    fn handle(&mut self, _: GetReport, _ctx: &mut Self::Context) -> ShardReport {
        ShardReport {
            metrics: self.core.metrics().clone(),
            gauges: self.core.heartbeat_gauges(),
            primaries: self
                .core
                .replicas()
                .filter(|r| r.is_primary() && r.group() != cohort_messages::GroupId::METADATA)
                .map(|r| r.group())
                .collect(),
        }
    }
}

/// Ask a shard what its groups' replicas are now (for the metadata agent:
/// which groups this node hosts, leads, and in which view).
#[derive(Message)]
#[rtype(result = "Vec<cohort_actors::core::metadata::HostedGroup>")]
pub struct GetHostedGroups;

impl Handler<GetHostedGroups> for ShardActor {
    type Result = MessageResult<GetHostedGroups>;

    fn handle(&mut self, _: GetHostedGroups, _ctx: &mut Self::Context) -> Self::Result {
        let now = self.core.now();
        MessageResult(
            self.core.replicas().map(|replica| cohort_actors::core::metadata::HostedGroup::of(replica, now)).collect(),
        )
    }
}

/// Stop hosting a group: its actors stop, waiting callers are dropped, and
/// its data is removed from the shard's storage (S4, the metadata placed it
/// elsewhere).
#[derive(Message)]
#[rtype(result = "()")]
pub struct UnloadGroup(pub cohort_messages::GroupId);

impl Handler<UnloadGroup> for ShardActor {
    type Result = ();

    fn handle(&mut self, UnloadGroup(group): UnloadGroup, _ctx: &mut Self::Context) {
        if self.forget_group(group) != Ok(true) {
            return;
        }
        // Without its record the next start does not host it again (if it is
        // not configured); a record left by a failed write only re-creates
        // an empty candidate, which the agent unloads again.
        if let Err(error) = self.recorded.remove(group) {
            tracing::warn!(group = group.0, %error, "unloaded group's record not removed");
        }
    }
}

/// The metadata decided a member change of a group this shard leads: seal
/// its incarnation (refused quietly if it is not the primary, or already
/// sealed; the agent asks again while the change is pending).
#[derive(Message)]
#[rtype(result = "()")]
pub struct ProposeSeal {
    /// The group.
    pub group: cohort_messages::GroupId,
    /// The seal.
    pub seal: cohort_messages::seal::Seal,
}

impl Handler<ProposeSeal> for ShardActor {
    type Result = ();

    fn handle(&mut self, ProposeSeal { group, seal }: ProposeSeal, _ctx: &mut Self::Context) {
        if let Err(error) = self.core.propose_seal(group, seal) {
            tracing::debug!(group = group.0, %error, "seal not proposed");
        }
        self.run();
    }
}

/// The metadata names this node a candidate of a group (P4): host an empty
/// candidate replica of it (replacing the replica of an older incarnation
/// and its data); it catches up from the primary. The placement is recorded
/// durably first (`node::recorded`), so the next start hosts the group
/// again; if it cannot be recorded the candidate is not hosted (the agent
/// asks again).
#[derive(Message)]
#[rtype(result = "()")]
pub struct HostCandidate {
    /// The replica to create: `me` is this node's candidate index.
    pub spec: cohort_actors::core::GroupSpec,
    /// Its kind.
    pub kind: crate::node::GroupKind,
}

impl Handler<HostCandidate> for ShardActor {
    type Result = ();

    fn handle(&mut self, HostCandidate { spec, kind }: HostCandidate, _ctx: &mut Self::Context) {
        let group = spec.group;
        let Some(state_machines) = self.kinds.get(&kind).map(|spec| Arc::clone(&spec.state_machines)) else {
            tracing::warn!(group = group.0, %kind, "candidate of an unregistered kind: not hosted");
            return;
        };
        if self.core.replica(group).is_some_and(|replica| replica.incarnation() >= spec.incarnation) {
            // Never replace a replica of this incarnation or a later one (the
            // agent's metadata may be older than the replica after a restart).
            return;
        }
        if let Err(error) = self.recorded.record(RecordedPlacement::of(&spec, &kind)) {
            eprintln!("cohort: {group}: candidate not hosted: {error}");
            return;
        }
        if self.forget_group(group).is_err() {
            return;
        }
        let label = self.metrics.group_kind(&kind.to_string());
        let state = state_machines(group);
        let state = Box::new(ObservedStateMachine::new(state, group, label, Rc::clone(&self.traces)));
        let incarnation = spec.incarnation;
        if let Err(error) = self.core.create_group(spec, state) {
            tracing::warn!(group = group.0, %error, "candidate not hosted");
            if let Err(error) = self.recorded.remove(group) {
                tracing::warn!(group = group.0, %error, "record of a candidate not hosted not removed");
            }
            return;
        }
        self.incarnations.insert(group, incarnation);
        let actor = GroupActor::new(group).start();
        if let Some(replica) = self.core.replica(group) {
            actor.do_send(RoleChanged { group, role: GroupRole::from_core(replica.role(), replica.view()) });
        }
        self.groups.insert(group, GroupLink { actor, custom: None });
        eprintln!("cohort: hosting {group} (incarnation {}) as a candidate", incarnation.0);
        self.run();
    }
}

/// The metadata's candidates of a hosted group changed (P4).
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetCandidates {
    /// The group.
    pub group: cohort_messages::GroupId,
    /// Its candidates.
    pub candidates: Vec<NodeId>,
}

impl Handler<SetCandidates> for ShardActor {
    type Result = ();

    fn handle(&mut self, SetCandidates { group, candidates }: SetCandidates, _ctx: &mut Self::Context) {
        match self.core.set_candidates(group, candidates.clone()) {
            // A recorded candidate's index follows the list: keep the record's
            // in step (a record of an older incarnation keeps its own).
            Ok(()) => {
                let incarnation = self.core.replica(group).map(|replica| replica.incarnation());
                if let Some(incarnation) = incarnation
                    && let Err(error) = self.recorded.set_candidates(group, incarnation, &candidates)
                {
                    tracing::warn!(group = group.0, %error, "recorded candidates not updated");
                }
            }
            Err(error) => tracing::warn!(group = group.0, %error, "candidates not set"),
        }
        self.run();
    }
}

/// Every next member held the seal and the metadata switched the group:
/// switch this shard's sealed replica to the next incarnation.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SwitchIncarnation(pub cohort_messages::GroupId);

impl Handler<SwitchIncarnation> for ShardActor {
    type Result = ();

    fn handle(&mut self, SwitchIncarnation(group): SwitchIncarnation, _ctx: &mut Self::Context) {
        match self.core.switch_incarnation(group) {
            Ok(()) => {
                if let Some(replica) = self.core.replica(group) {
                    self.incarnations.insert(group, replica.incarnation());
                    eprintln!(
                        "cohort: {group} switched to incarnation {} with members {:?}",
                        replica.incarnation().0,
                        replica.members()
                    );
                }
            }
            Err(error) => tracing::warn!(group = group.0, %error, "switch refused"),
        }
        self.run();
    }
}

/// The supervisor re-created the outbox to `peer`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ReplaceOutbox {
    /// The peer.
    pub peer: NodeId,
    /// The new outbox.
    pub outbox: Addr<Outbox>,
}

impl Handler<ReplaceOutbox> for ShardActor {
    type Result = ();

    fn handle(&mut self, replace: ReplaceOutbox, _ctx: &mut Self::Context) {
        self.outboxes.insert(replace.peer, replace.outbox);
    }
}

impl Handler<super::outbox::PanicForTest> for ShardActor {
    type Result = ();

    fn handle(&mut self, _: super::outbox::PanicForTest, _ctx: &mut Self::Context) {
        panic!("shard {} panicked on request (PanicForTest)", self.index);
    }
}

/// Subscribe to a group's role changes and commits (see [`super::group`]).
#[derive(Message)]
#[rtype(result = "bool")]
pub struct SubscribeGroup {
    /// The group.
    pub group: cohort_messages::GroupId,
    /// Where events go.
    pub events: tokio::sync::mpsc::Sender<super::group::GroupEvent>,
}

impl Handler<SubscribeGroup> for ShardActor {
    type Result = bool;

    fn handle(&mut self, subscribe: SubscribeGroup, _ctx: &mut Self::Context) -> bool {
        match self.groups.get(&subscribe.group) {
            Some(link) => link.actor.try_send(super::group::Subscribe(subscribe.events)).is_ok(),
            None => false,
        }
    }
}

/// Ask for the custom actor of a group (type-erased `Addr<A>`); what
/// [`crate::node::NodeHandle::group_actor`] sends.
#[derive(Message)]
#[rtype(result = "Option<Arc<dyn std::any::Any + Send + Sync>>")]
pub(crate) struct GetCustomActor(pub cohort_messages::GroupId);

impl Handler<GetCustomActor> for ShardActor {
    type Result = Option<Arc<dyn std::any::Any + Send + Sync>>;

    fn handle(&mut self, get: GetCustomActor, _ctx: &mut Self::Context) -> Self::Result {
        self.groups.get(&get.0)?.custom.as_ref().map(CustomActorLink::addr)
    }
}
