//! The shard actor: the actix shell of the sans-IO [`Shard`].
//!
//! It follows the driving contract written on [`Shard`]: ticks from a
//! monotonic clock (so a stalled thread catches up to the present before it
//! judges a lease), inputs from peers and clients, and at the end of every
//! handler one drain of the core's effects: storage effects go to the
//! storage worker as one job, messages go to each peer's outbox as one
//! message, and what the turn produced for a group's listeners goes to its
//! group actor as one message ([`crate::group::GroupTurn`]), only if
//! someone listens.
//!
//! Alongside, it reports each submit, inbound message and effect to its
//! [`ShardTraces`], which makes the spans of the message flows and gives the
//! trace context each outgoing message carries in its frame header.
//!
//! Handlers for the host's and the agent's requests are in [`hosting`]
//! (hosting, unloading and switching groups) and [`queries`] (reports,
//! subscriptions, lookups).

mod group_links;
mod hosting;
mod queries;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use actix::prelude::*;
use cohort_core::storage::Recovered;
use cohort_core::{CoreConfig, Effect, Shard};
use cohort_messages::{
    ClientId, CommitBatch, CommitReplyBatch, GroupId, Message, NodeId, Redirect, Reply, Request, RequestNumber,
    TraceContext,
};
use tokio::sync::oneshot;

pub use hosting::{
    HostPlaced, ProposeSeal, SetLearners, SwitchIncarnation, SwitchIncarnationAsLearner, TransferPrimary, UnloadGroup,
};
pub use queries::{
    GetGroupActor, GetHostedChanges, GetHostedFingerprint, GetHostedReplicas, GetReport, HostedChanges, ReplaceOutbox,
    ShardReport, StallForTest, SubscribeGroup,
};

use crate::group::{GroupNote, GroupRole, GroupTurn, NeedsResync, Wait};
use crate::inbound::{Inbound, InboundBatch};
use crate::kind::{GroupKind, HostedGroup};
use crate::outbox::{Outbox, Outgoing};
use crate::peer_link::LinkState;
use crate::placement_recorder::PlacementRecorder;
use crate::registry::Kinds;
use crate::storage_worker::{StorageEvent, StorageWorker};
use crate::traces::ShardTraces;
use crate::{
    drops::Drops,
    metrics::{DropReason, Mailbox, NodeMetrics},
};

/// Requests from peer nodes awaiting an answer, at most (see `ShardActor::remote_waiting`).
pub const REMOTE_WAITERS_MAX: usize = 4096;

/// Ticks a shard runs late, at most, when its thread was busy past them
/// (see [`ShardActor::catch_up`]); beyond that the oldest are skipped.
pub const TICKS_LATE_MAX: u64 = 100;

/// How long a turn may stay open, at most, while inputs keep arriving: once
/// this old, the next input ends it (see [`ShardActor::end_turn_soon`]).
pub const TURN_OPEN_MAX: Duration = Duration::from_millis(10);

/// A request and the client and group it is from: how answers find their caller.
type RequestKey = (GroupId, ClientId, RequestNumber);

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

/// The end of a turn of inputs (see `ShardActor::end_turn_soon`).
#[derive(Message)]
#[rtype(result = "()")]
struct EndTurn;

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
    pub groups: Vec<HostedGroup>,
    /// Where changes of the groups hosted at run time are recorded.
    pub placements: Addr<PlacementRecorder>,
    /// What storage recovered.
    pub recovered: Recovered,
    /// The node's group kinds: each group's state machine and custom actor.
    pub kinds: Arc<Kinds>,
    /// Outboxes per peer node.
    pub outboxes: HashMap<NodeId, Addr<Outbox>>,
    /// This shard's link state towards each peer: connected (R25), congested (K4).
    pub links: HashMap<NodeId, Arc<LinkState>>,
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
    node: NodeId,
    core: Shard,
    started: Instant,
    tick: Duration,
    storage: StorageWorker,
    outboxes: HashMap<NodeId, Addr<Outbox>>,
    links: HashMap<NodeId, Arc<LinkState>>,
    /// The peers the core was last told are congested (K4).
    congested: BTreeSet<NodeId>,
    /// Local callers of requests to groups this shard does not host: the
    /// core refuses those in the same turn, so they never wait long.
    unhosted: HashMap<RequestKey, oneshot::Sender<ClientAnswer>>,
    /// Requests that came from peer nodes (a node's metadata agent submits
    /// to the metadata primary over the peer link): the answer goes back to
    /// the sender as a Reply or Redirect frame. Bounded by
    /// [`REMOTE_WAITERS_MAX`]; entries older than a few seconds are forgotten.
    remote_waiting: HashMap<RequestKey, (NodeId, u64)>,
    fatal: Arc<std::sync::Mutex<Option<String>>>,
    drops: Arc<Drops>,
    metrics: Arc<NodeMetrics>,
    published_tick: u64,
    /// Z3: role changes and hosting changes (placed, unloaded, switched,
    /// sealed, learners set) so far; the metadata agent reads it to learn
    /// cheaply that nothing changed ([`GetHostedChanges`]).
    hosted_events: u64,
    /// The group gauges last counted (with the group actors alive), and when.
    gauges: Option<(u64, cohort_core::HeartbeatGauges, usize)>,
    /// Z1: the sweep for idle group actors, a slice of the groups a second
    /// ([`group_links`]).
    actor_sweep: group_links::Sweep,
    groups: HashMap<GroupId, GroupLink>,
    traces: Rc<ShardTraces>,
    /// Groups built before the actor started, whose actors start with it.
    built: Vec<(GroupId, GroupKind)>,
    /// Groups whose custom actor waits for a resync (its mailbox overflowed).
    resync_pending: Vec<GroupId>,
    /// True while draining what the core emitted while building the groups:
    /// the actors were told the resulting role already.
    draining_build: bool,
    /// When the open turn began; while one is open, an `EndTurn` is queued
    /// behind the mailbox (`None`: no turn open).
    turn_opened: Option<Instant>,
    /// The node's group kinds, for groups hosted while running (P4 learners).
    kinds: Arc<Kinds>,
    /// Where the groups hosted while running are recorded, so that the next
    /// start hosts them again (see [`crate::placements`]).
    placements: Addr<PlacementRecorder>,
}

/// A shard with at most this many groups counts its group gauges every
/// second; one with more, every [`GAUGES_INTERVAL_SECS_MANY`] seconds.
const GAUGES_EVERY_SECOND_GROUPS_MAX: usize = 10_000;

/// How often, in seconds, a shard with many groups counts its group gauges.
const GAUGES_INTERVAL_SECS_MANY: u64 = 5;

/// Ticks of length `tick` in a second, at least 1.
fn second_ticks(tick: Duration) -> u64 {
    (1_000_000_000 / tick.as_nanos().max(1)).max(1) as u64
}

/// One group replica's actor, and whether anyone follows the group.
struct GroupLink {
    /// Started when first needed (Z1): by a caller's request, a subscriber
    /// or an actor lookup, or at once for a kind with a custom actor; and
    /// retired once idle ([`group_links`]). An idle group has none: an
    /// actor's task and mailbox are about 1 KB, a fifth of what a group
    /// replica costs.
    actor: Option<group_links::ActorLink>,
    /// A subscriber or a custom actor follows the group: its role changes
    /// and commit points (and, with a custom actor, applied ops) go to the
    /// group actor. Without one, only answers to waiting callers do.
    followed: bool,
}

impl ShardActor {
    /// Build the core and its groups from `setup`. Runs on the shard's
    /// thread. With an error, the actor must be stopped at once.
    pub fn new(setup: ShardSetup) -> (ShardActor, Option<String>) {
        let mut actor = ShardActor {
            index: setup.index,
            node: setup.node,
            core: Shard::new(setup.node, setup.config.clone()),
            started: Instant::now(),
            tick: setup.tick,
            storage: setup.storage,
            outboxes: setup.outboxes,
            links: setup.links,
            congested: BTreeSet::new(),
            unhosted: HashMap::new(),
            remote_waiting: HashMap::new(),
            fatal: setup.fatal,
            drops: setup.drops,
            metrics: setup.metrics,
            published_tick: 0,
            hosted_events: 0,
            gauges: None,
            actor_sweep: group_links::Sweep::new(setup.config.timing.idle_timeout_effective_ticks(), setup.tick),
            groups: HashMap::new(),
            traces: Rc::new(ShardTraces::new(setup.node)),
            built: Vec::new(),
            resync_pending: Vec::new(),
            draining_build: false,
            turn_opened: None,
            kinds: setup.kinds,
            placements: setup.placements,
        };
        // Z3: this process's epoch on the shard pairs: peers drop what they
        // believed of an earlier process of this node.
        let epoch = crate::client_id::fresh_client_id().0 as u64;
        actor.core.set_pair_identity(setup.index as u16, epoch);
        let failure = actor.build(setup.groups, setup.recovered).err();
        (actor, failure)
    }

    /// A callback for the storage worker that reports to this actor.
    pub fn storage_reporter(addr: Addr<ShardActor>) -> impl Fn(StorageEvent) + Send + 'static {
        move |event| addr.do_send(StorageDone(event))
    }

    fn now_tick(&self) -> u64 {
        (self.started.elapsed().as_nanos() / self.tick.as_nanos().max(1)) as u64
    }

    /// End the turn once every message already in the mailbox is handled:
    /// under load, one drain (one storage job, one message per peer) covers
    /// many inputs. actix handles the whole mailbox before it runs what
    /// `notify` queued.
    ///
    /// Under a burst (thousands of groups failing over at once) the mailbox
    /// can hold a second's worth of inputs, and what the first of them
    /// released (a StartView, a Prepare, a PrepareOk) would wait for all of
    /// them: every hop of a view change and of the write after it waited so.
    /// A turn open for [`TURN_OPEN_MAX`] ends at the next input instead.
    fn end_turn_soon(&mut self, ctx: &mut Context<Self>) {
        match self.turn_opened {
            None => {
                self.turn_opened = Some(Instant::now());
                ctx.notify(EndTurn);
            }
            Some(opened) if opened.elapsed() >= TURN_OPEN_MAX => self.run(),
            Some(_) => {}
        }
    }

    /// Drain the core and execute its effects (the end of every turn).
    fn run(&mut self) {
        self.turn_opened = None;
        self.note_congestion();
        loop {
            let effects = self.core.drain_effects();
            if effects.is_empty() {
                break;
            }
            self.execute(effects);
        }
        // Debug builds check every replica's invariants after each turn,
        // as the simulator does after every step.
        #[cfg(debug_assertions)]
        self.core.invariants();
    }

    /// Run every tick up to the clock's, in order, and return the clock's.
    ///
    /// The core acts on exact ticks: a primary heartbeats on the send ticks,
    /// an idle group only on those that line up with its interval (R20). A
    /// thread busy past a tick used to jump over it, and an idle group whose
    /// send tick was jumped over sent nothing for another interval: two such
    /// jumps in a row left its primary without replies for its whole quorum
    /// window (R24), so it stepped down with a healthy backup. Ticks run late
    /// instead, as the simulator runs them, at most [`TICKS_LATE_MAX`] of
    /// them (after a longer stall, the oldest are skipped: the timeouts they
    /// held are due at the first tick that runs anyway).
    fn catch_up(&mut self) -> u64 {
        let now = self.now_tick().max(self.core.now());
        let first = (self.core.now() + 1).max(now.saturating_sub(TICKS_LATE_MAX)).min(now);
        for tick in first..=now {
            self.core.on_tick(tick);
        }
        self.metrics.add_ticks_late(now - first);
        now
    }

    /// Resend the state to custom actors whose mailbox overflowed, through
    /// their group actors. Runs after the tick's effects, so the snapshot
    /// covers every op already reported.
    fn resync_custom_actors(&mut self) {
        for group in std::mem::take(&mut self.resync_pending) {
            if let (Some(replica), Some(actor)) =
                (self.core.replica(group), self.groups.get_mut(&group).and_then(|link| link.actor.as_mut()))
            {
                let (op, state) = (replica.commit_min(), replica.state_machine().snapshot());
                actor.send(GroupTurn(vec![GroupNote::Resync { op, state }]));
            }
        }
    }

    fn execute(&mut self, effects: Vec<Effect>) {
        let mut storage = Vec::new();
        let mut outgoing: BTreeMap<NodeId, Vec<(Message, TraceContext)>> = BTreeMap::new();
        let mut notes: BTreeMap<GroupId, Vec<GroupNote>> = BTreeMap::new();
        for effect in effects {
            match effect {
                Effect::Append { group, ref entry } => {
                    self.traces.on_append(group, entry);
                    storage.push(effect);
                }
                Effect::Truncate { .. }
                | Effect::StageSuperblock { .. }
                | Effect::SaveSnapshot { .. }
                | Effect::Flush { .. } => storage.push(effect),
                Effect::Send { to, message } => {
                    if self.dropped_for_link_down(to) {
                        continue;
                    }
                    let trace = self.traces.on_send(to, &message);
                    outgoing.entry(to).or_default().push((message, trace));
                }
                Effect::SendCommitBatch { to, entries } => {
                    let connected = self.links.get(&to).is_some_and(|link| link.connected.load(Ordering::Relaxed));
                    self.core.on_commit_batch_sent(to, &entries, connected);
                    if self.dropped_for_link_down(to) {
                        continue;
                    }
                    self.traces.on_send_batch(to, false, entries.len());
                    let batch = Message::Commit(CommitBatch::encode(&entries));
                    outgoing.entry(to).or_default().push((batch, TraceContext::NONE));
                }
                Effect::SendCommitReplyBatch { to, entries } => {
                    if self.dropped_for_link_down(to) {
                        continue;
                    }
                    self.traces.on_send_batch(to, true, entries.len());
                    let batch = Message::CommitReply(CommitReplyBatch::encode(&entries));
                    outgoing.entry(to).or_default().push((batch, TraceContext::NONE));
                }
                Effect::Reply(reply) => {
                    let outcome = match reply.outcome {
                        cohort_messages::Outcome::Ok(_) => "ok",
                        cohort_messages::Outcome::Error { .. } => "error",
                    };
                    self.traces.on_answer(reply.group, reply.client, reply.request, reply.op, outcome);
                    let key = (reply.group, reply.client, reply.request);
                    match self.remote_waiting.remove(&key) {
                        Some((to, _)) => {
                            outgoing.entry(to).or_default().push((Message::Reply(reply), TraceContext::NONE))
                        }
                        None => self.answer(key, ClientAnswer::Reply(reply), &mut notes),
                    }
                }
                Effect::Redirect(redirect) => {
                    let op = cohort_messages::Op(0);
                    self.traces.on_answer(redirect.group, redirect.client, redirect.request, op, "redirect");
                    let key = (redirect.group, redirect.client, redirect.request);
                    match self.remote_waiting.remove(&key) {
                        Some((to, _)) => {
                            outgoing.entry(to).or_default().push((Message::Redirect(redirect), TraceContext::NONE))
                        }
                        None => self.answer(key, ClientAnswer::Redirect(redirect), &mut notes),
                    }
                }
                Effect::RoleChanged { group, view, role, .. } => {
                    self.hosted_events += 1;
                    self.traces.on_role_changed(group, view, role);
                    // The group actors were told the role the build ended in.
                    if !self.draining_build && self.followed(group) {
                        notes.entry(group).or_default().push(GroupNote::Role(GroupRole::from_core(role, view)));
                    }
                }
                Effect::Committed { group, op } => {
                    self.traces.on_committed(group, op);
                    if self.followed(group) {
                        notes.entry(group).or_default().push(GroupNote::Committed(op));
                    }
                }
                Effect::Applied { group, ops, through } => {
                    notes.entry(group).or_default().push(GroupNote::Applied { ops, through });
                }
                Effect::Restored { group, op, state } => {
                    notes.entry(group).or_default().push(GroupNote::Restored { op, state });
                }
                Effect::QuorumWaitDone { .. } => {}
            }
        }
        if !storage.is_empty() && !self.storage.run(storage) {
            self.fail("the storage worker stopped".into());
        }
        for (to, messages) in outgoing {
            let count = messages.len() as u64;
            match self.outboxes.get(&to).map(|outbox| outbox.try_send(Outgoing { messages })) {
                Some(Ok(())) => {}
                Some(Err(SendError::Full(_))) => self.drops.add(Mailbox::Outbox, DropReason::MailboxFull, count),
                Some(Err(SendError::Closed(_))) | None => {
                    self.drops.add(Mailbox::Outbox, DropReason::MailboxClosed, count)
                }
            }
        }
        for (group, notes) in notes {
            // At most one message per group and turn, to an actor on this
            // thread that runs between the shard's turns: `do_send` cannot
            // pile up, and an answer or a role change is never dropped. A
            // group without an actor has no caller and no follower: its
            // actor, once started, begins from the replica's state then.
            if let Some(actor) = self.groups.get_mut(&group).and_then(|link| link.actor.as_mut()) {
                actor.send(GroupTurn(notes));
            }
        }
    }

    /// If the link to `peer` is known and not connected, count one message
    /// for it as dropped and say so: the link would only drop it, so it is
    /// dropped here, before the outbox spends time encoding it (after a node
    /// dies, its peers' primaries re-send it StartViews and Commit batches
    /// every broadcast interval until it is back).
    fn dropped_for_link_down(&self, peer: NodeId) -> bool {
        let down = self.links.get(&peer).is_some_and(|link| !link.connected.load(Ordering::Relaxed));
        if down {
            self.drops.add(Mailbox::PeerLink, DropReason::PeerDisconnected, 1);
        }
        down
    }

    /// K4: tell the core which peers' links became congested or drained
    /// since the last turn (a drained one gets what it was not sent at once).
    fn note_congestion(&mut self) {
        for (peer, link) in &self.links {
            let congested = link.congested.load(Ordering::Relaxed);
            if congested != self.congested.contains(peer) {
                if congested {
                    self.congested.insert(*peer);
                } else {
                    self.congested.remove(peer);
                }
                self.core.set_peer_congested(*peer, congested);
            }
        }
    }

    /// True if someone follows `group`'s role changes and commit points.
    fn followed(&self, group: GroupId) -> bool {
        self.groups.get(&group).is_some_and(|link| link.followed)
    }

    /// Answer a caller in this process: through the group's actor, or at
    /// once if the group is not hosted here.
    fn answer(&mut self, key: RequestKey, answer: ClientAnswer, notes: &mut BTreeMap<GroupId, Vec<GroupNote>>) {
        if let Some(caller) = self.unhosted.remove(&key) {
            let _ = caller.send(answer);
        } else if self.groups.contains_key(&key.0) {
            let (group, client, request) = key;
            notes.entry(group).or_default().push(GroupNote::Answer { client, request, answer });
        }
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

    /// Once a second: publish counters (R19, R32) and forget what callers
    /// and peers gave up on.
    fn every_second(&mut self, now: u64, second_ticks: u64) {
        self.published_tick = now;
        // The group gauges take a pass over every group: with many groups
        // they are counted again only every GAUGES_INTERVAL_SECS_MANY (Z3:
        // an idle node's CPU), the counters still every second.
        let many = self.core.group_count() > GAUGES_EVERY_SECOND_GROUPS_MAX;
        let interval_ticks = if many { GAUGES_INTERVAL_SECS_MANY * second_ticks } else { second_ticks };
        let (gauges, group_actors) = match self.gauges {
            Some((tick, gauges, group_actors)) if now < tick + interval_ticks => (gauges, group_actors),
            _ => {
                let (gauges, group_actors) = (self.core.heartbeat_gauges(), self.group_actor_count());
                self.gauges = Some((now, gauges, group_actors));
                (gauges, group_actors)
            }
        };
        self.metrics.update_shard(self.index, self.core.metrics(), &gauges);
        self.metrics.set_group_actors(self.index, group_actors);
        self.sweep_group_actors();
        self.metrics.update_core_refusals(self.index, self.core.refused());
        if self.index == 0 {
            let peers = self.links.values().filter(|link| link.connected.load(Ordering::Relaxed)).count();
            self.metrics.set_peers_connected(peers);
        }
        self.unhosted.retain(|_, caller| !caller.is_closed());
        let stale = now.saturating_sub(10 * second_ticks);
        self.remote_waiting.retain(|_, (_, since)| *since >= stale);
        self.traces.forget_submits_before(stale);
    }
}

impl Actor for ShardActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(4096);
        // One actor per group replica, on this shard's thread, with the
        // custom actor of its kind if it has one; both first hear the
        // current role. Then what the core emitted while building the groups
        // is drained: restores and replayed ops reach the custom actors, the
        // roles it passed through on the way do not (they were told where it
        // ended).
        for (group, kind) in std::mem::take(&mut self.built) {
            self.start_group_actors(group, &kind, ctx);
        }
        self.draining_build = true;
        self.run();
        self.draining_build = false;
        self.core.on_tick(self.now_tick());
        self.run();
        ctx.run_interval(self.tick, |actor, _ctx| {
            let now = actor.catch_up();
            actor.run();
            actor.resync_custom_actors();
            let second_ticks = second_ticks(actor.tick);
            if now >= actor.published_tick + second_ticks {
                actor.every_second(now, second_ticks);
            }
        });
    }
}

impl Handler<InboundBatch> for ShardActor {
    type Result = ();

    fn handle(&mut self, InboundBatch(items): InboundBatch, ctx: &mut Self::Context) {
        for inbound in items {
            self.on_inbound(inbound);
        }
        self.end_turn_soon(ctx);
    }
}

impl ShardActor {
    /// One peer input, to the core, under its span.
    fn on_inbound(&mut self, inbound: Inbound) {
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
                        self.drops.add(Mailbox::Shard, DropReason::MailboxFull, 1);
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
    }
}

impl Handler<Submit> for ShardActor {
    type Result = ();

    fn handle(&mut self, submit: Submit, ctx: &mut Self::Context) {
        let Request { group, client, request, .. } = submit.request;
        self.traces.on_submit(client, request, group, &submit.span, self.core.now());
        match self.group_actor(group, ctx) {
            // The group actor holds the caller; it hears the answer after
            // this registration, on the same mailbox.
            Some(actor) => actor.send(Wait { client, request, answer: submit.answer }),
            None => {
                self.unhosted.insert((group, client, request), submit.answer);
            }
        }
        self.core.on_request(submit.request);
        self.end_turn_soon(ctx);
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
        self.end_turn_soon(ctx);
    }
}

impl Handler<EndTurn> for ShardActor {
    type Result = ();

    fn handle(&mut self, _: EndTurn, _ctx: &mut Self::Context) {
        if self.turn_opened.is_some() {
            self.run();
        }
    }
}

impl Handler<NeedsResync> for ShardActor {
    type Result = ();

    fn handle(&mut self, NeedsResync(group): NeedsResync, _ctx: &mut Self::Context) {
        if !self.resync_pending.contains(&group) {
            self.resync_pending.push(group);
        }
    }
}
