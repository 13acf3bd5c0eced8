//! The shard actor: the actix shell of the sans-IO [`ShardDriver`].
//!
//! Every decision about running the shard is the driver's (the one the
//! simulator runs too): which ticks run after a stall, when a turn of
//! inputs ends, which messages are dropped for a link that is down, which
//! answers go back to a peer. This actor only does the I/O around it, as
//! the driving contract on [`ShardDriver`] says: ticks from a monotonic
//! clock, inputs from peers and clients, and at the end of every turn it
//! carries out the driver's [`Turn`]: the storage job goes to the storage
//! worker, each peer's batch to that peer's outbox, and what the turn
//! produced for a group's listeners to its group actor as one message
//! ([`crate::group::GroupTurn`]), only if someone listens.
//!
//! Alongside, it reports each submit, inbound message and effect to its
//! [`ShardTraces`], which makes the spans of the message flows and gives the
//! trace context each outgoing message carries in its frame header.
//!
//! Handlers for the host's and the agent's requests are in `hosting`
//! (hosting, unloading and switching groups) and `queries` (reports,
//! subscriptions, lookups); the log's account of role changes (one line
//! each at `debug`, a rate at `info`) in `role_changes`.

mod group_links;
mod hosting;
mod queries;
mod role_changes;
mod waits;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use actix::prelude::*;
use cohort_core::driver::{
    DriverConfig, LinkStatus, Links, Note, PeerInput, RequestKey, ShardDriver, StorageJob, Turn, TurnDue,
};
use cohort_core::storage::Recovered;
use cohort_core::{CoreConfig, Shard};
use cohort_messages::{GroupId, Message, NodeId, Request, TraceContext};
use tokio::sync::oneshot;

pub(crate) use hosting::{
    HostPlaced, ProposeSeal, SetLearners, SwitchIncarnation, SwitchIncarnationAsLearner, TransferPrimary, UnloadGroup,
};
pub use queries::{DriverRecording, GetGroupActor, GetReport, ShardReport, SubscribeGroup, TakeDriverRecording};
pub(crate) use queries::{GetHostedChanges, GetHostedFingerprint, GetHostedReplicas, ReplaceOutbox, StallForTest};
pub use waits::{CancelQuorumWait, StartQuorumWait};

use crate::apply_worker::{ApplyEvent, ApplyWorker};
use crate::group::{GroupNote, GroupRole, GroupTurn, NeedsResync, Wait};
use crate::inbound::InboundBatch;
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

pub use cohort_core::driver::ClientAnswer;

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

/// D2: the apply worker finished a run (or its state machine panicked).
#[derive(Message)]
#[rtype(result = "()")]
struct ApplyDone(ApplyEvent);

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
    /// Record the driver's inputs and turns from the start (test hook:
    /// `ShardActor::take_recording`).
    pub record: bool,
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
    driver: ShardDriver,
    /// H1: this process's storage recovery created the shard's storage (a
    /// first start, a new disk, an emptied directory): a voter hosted
    /// empty recovers before it votes or acknowledges (`join_group`).
    storage_formatted: bool,
    started: Instant,
    tick: Duration,
    storage: StorageWorker,
    outboxes: HashMap<NodeId, Addr<Outbox>>,
    links: ShardLinks,
    /// Local callers of requests to groups this shard does not host: the
    /// core refuses those in the same turn, so they never wait long.
    unhosted: HashMap<RequestKey, oneshot::Sender<ClientAnswer>>,
    /// The driver's counters as last published to the node's metrics.
    published_counters: cohort_core::driver::DriverCounters,
    /// Q1: the callers of this shard's open quorum waits.
    quorum_waits: HashMap<cohort_core::WaitId, oneshot::Sender<Result<(), cohort_core::QuorumWaitError>>>,
    fatal: Arc<std::sync::Mutex<Option<String>>>,
    drops: Arc<Drops>,
    metrics: Arc<NodeMetrics>,
    published_tick: u64,
    /// Role changes since the last summary in the log (O1).
    role_changes: role_changes::RoleChanges,
    /// The group gauges last counted (with the group actors alive), and when.
    gauges: Option<(u64, cohort_core::HeartbeatGauges, usize)>,
    /// Z1: the sweep for idle group actors, a slice of the groups a second
    /// ([`group_links`]).
    actor_sweep: group_links::Sweep,
    groups: HashMap<GroupId, GroupLink>,
    traces: std::sync::Arc<ShardTraces>,
    /// Groups built before the actor started, whose actors start with it.
    built: Vec<(GroupId, GroupKind)>,
    /// Groups whose custom actor waits for a resync (its mailbox overflowed).
    resync_pending: Vec<GroupId>,
    /// True while draining what the core emitted while building the groups:
    /// the actors were told the resulting role already.
    draining_build: bool,
    /// The node's group kinds, for groups hosted while running (P4 learners).
    kinds: Arc<Kinds>,
    /// Where the groups hosted while running are recorded, so that the next
    /// start hosts them again (see [`crate::placements`]).
    placements: Addr<PlacementRecorder>,
    /// D2: the apply worker, started with the first run lent.
    apply_worker: Option<ApplyWorker>,
    /// This actor's address (once started), for the apply worker's reports.
    addr: Option<Addr<ShardActor>>,
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

/// This shard's links as the driver reads them at the end of a turn.
struct ShardLinks(HashMap<NodeId, Arc<LinkState>>);

impl Links for ShardLinks {
    fn status(&self, peer: NodeId) -> Option<LinkStatus> {
        self.0.get(&peer).map(|link| LinkStatus {
            connected: link.connected.load(Ordering::Relaxed),
            congested: link.congested.load(Ordering::Relaxed),
        })
    }
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
        let peers: Vec<NodeId> = setup.links.keys().copied().collect();
        let tick_micros = (setup.tick.as_micros() as u64).max(1);
        let mut driver =
            ShardDriver::new(Shard::new(setup.node, setup.config.clone()), DriverConfig::for_tick(tick_micros), peers);
        if setup.record {
            driver.start_recording();
        }
        let mut actor = ShardActor {
            index: setup.index,
            node: setup.node,
            driver,
            started: Instant::now(),
            tick: setup.tick,
            storage: setup.storage,
            outboxes: setup.outboxes,
            links: ShardLinks(setup.links),
            unhosted: HashMap::new(),
            published_counters: Default::default(),
            quorum_waits: HashMap::new(),
            fatal: setup.fatal,
            drops: setup.drops,
            metrics: setup.metrics,
            published_tick: 0,
            role_changes: Default::default(),
            gauges: None,
            actor_sweep: group_links::Sweep::new(setup.config.timing.idle_timeout_effective_ticks(), setup.tick),
            groups: HashMap::new(),
            traces: std::sync::Arc::new(ShardTraces::new(setup.node)),
            built: Vec::new(),
            resync_pending: Vec::new(),
            draining_build: false,
            kinds: setup.kinds,
            placements: setup.placements,
            apply_worker: None,
            addr: None,
            storage_formatted: setup.recovered.may_have_lost_data(),
        };
        // Z3: this process's epoch on the shard pairs: peers drop what they
        // believed of an earlier process of this node.
        let epoch = crate::client_id::fresh_client_id().0 as u64;
        actor.driver.set_pair_identity(setup.index as u16, epoch);
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

    /// Now on the shard's monotonic clock, for the driver's turn length.
    fn now_micros(&self) -> u64 {
        self.started.elapsed().as_micros() as u64
    }

    /// Carry out what a handled message means for the turn: end it once every
    /// message already in the mailbox is handled (actix handles the whole
    /// mailbox before what `notify` queued), so that under load one turn
    /// (one storage job, one message per peer) covers many inputs; or at
    /// once, when the driver says it has been open too long (under a burst
    /// of thousands of failovers, what the first input released would
    /// otherwise wait for the whole mailbox behind it).
    fn input_done(&mut self, ctx: &mut Context<Self>) {
        let at = self.now_micros();
        match self.driver.input_done(at) {
            TurnDue::Opened => ctx.notify(EndTurn),
            TurnDue::Open => {}
            TurnDue::Now => self.run(),
        }
    }

    /// End the turn and carry out what the driver asks (the end of every turn).
    fn run(&mut self) {
        let turn = self.driver.end_turn(&self.links);
        self.execute(turn);
    }

    /// Run every tick up to the clock's, as the driver says, and return the clock's.
    fn catch_up(&mut self) -> u64 {
        let late = self.driver.on_clock(self.now_tick());
        self.metrics.add_ticks_late(late);
        self.driver.shard().now()
    }

    /// Resend the state to custom actors whose mailbox overflowed, through
    /// their group actors. Runs after the tick's effects, so the snapshot
    /// covers every op already reported.
    fn resync_custom_actors(&mut self) {
        for group in std::mem::take(&mut self.resync_pending) {
            if let (Some(replica), Some(actor)) =
                (self.driver.shard().replica(group), self.groups.get_mut(&group).and_then(|link| link.actor.as_mut()))
            {
                // D2: a state machine on the apply worker is read once back.
                let Some(state) = replica.state_machine() else {
                    self.resync_pending.push(group);
                    continue;
                };
                let (op, state) = (replica.commit_min(), state.snapshot());
                actor.send(GroupTurn(vec![GroupNote::Resync { op, state }]));
            }
        }
    }

    /// Carry out one turn: the storage job, one message per peer's outbox,
    /// one `GroupTurn` per group actor that listens.
    fn execute(&mut self, turn: Turn) {
        if !turn.storage.is_empty() {
            for effect in &turn.storage {
                if let cohort_core::Effect::Append { group, entry } = effect {
                    self.traces.on_append(*group, entry);
                }
            }
            if !self.storage.run(StorageJob::Run(turn.storage)) {
                self.fail("the storage worker stopped".into());
            }
        }
        if turn.dropped_link_down > 0 {
            self.drops.add(Mailbox::PeerLink, DropReason::PeerDisconnected, turn.dropped_link_down);
        }
        for job in turn.applies {
            if !self.lend(job) {
                self.fail(format!("shard {}: the apply worker stopped", self.index));
            }
        }
        for batch in turn.peers {
            let to = batch.to;
            let messages: Vec<(Message, TraceContext)> = batch
                .messages
                .into_iter()
                .map(|message| {
                    let trace = self.trace_send(to, &message);
                    (message, trace)
                })
                .collect();
            let count = messages.len() as u64;
            match self.outboxes.get(&to).map(|outbox| outbox.try_send(Outgoing { messages })) {
                Some(Ok(())) => {}
                Some(Err(SendError::Full(_))) => self.drops.add(Mailbox::Outbox, DropReason::MailboxFull, count),
                Some(Err(SendError::Closed(_))) | None => {
                    self.drops.add(Mailbox::Outbox, DropReason::MailboxClosed, count)
                }
            }
        }
        let mut notes: BTreeMap<GroupId, Vec<GroupNote>> = BTreeMap::new();
        for note in turn.notes {
            self.deliver_note(note, &mut notes);
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
        self.publish_driver_counters();
    }

    /// D2: hand a run to the apply worker, starting it first if need be.
    /// False if it cannot take it (it stopped, or could not start).
    fn lend(&mut self, job: cohort_core::driver::ApplyJob) -> bool {
        if self.apply_worker.is_none() {
            let Some(addr) = self.addr.clone() else { return false };
            let name = format!("cohort-apply-{}-{}", self.node.0, self.index);
            match ApplyWorker::start(name, move |event| addr.do_send(ApplyDone(event))) {
                Ok(worker) => self.apply_worker = Some(worker),
                Err(error) => {
                    tracing::error!(node = self.node.0, shard = self.index, %error, "cannot start the apply worker: {error}");
                    return false;
                }
            }
        }
        self.apply_worker.as_ref().is_some_and(|worker| worker.lend(job))
    }

    /// The trace context a message to `to` carries (the send's span).
    fn trace_send(&self, to: NodeId, message: &Message) -> TraceContext {
        match message {
            Message::Commit(batch) => {
                self.traces.on_send_batch(to, false, batch.len());
                TraceContext::NONE
            }
            Message::CommitReply(batch) => {
                self.traces.on_send_batch(to, true, batch.len());
                TraceContext::NONE
            }
            // An answer to a request a peer sent (a node's agent).
            Message::Reply(reply) => {
                let outcome = match reply.outcome {
                    cohort_messages::Outcome::Ok(_) => "ok",
                    cohort_messages::Outcome::Error { .. } => "error",
                };
                self.traces.on_answer(reply.group, reply.client, reply.request, reply.op, outcome);
                TraceContext::NONE
            }
            Message::Redirect(redirect) => {
                let op = cohort_messages::Op(0);
                self.traces.on_answer(redirect.group, redirect.client, redirect.request, op, "redirect");
                TraceContext::NONE
            }
            message => self.traces.on_send(to, message),
        }
    }

    /// Hand one note of the turn to whoever listens in this process.
    fn deliver_note(&mut self, note: Note, notes: &mut BTreeMap<GroupId, Vec<GroupNote>>) {
        match note {
            Note::Answer(answer) => {
                let key = answer.key();
                match &answer {
                    ClientAnswer::Reply(reply) => {
                        let outcome = match reply.outcome {
                            cohort_messages::Outcome::Ok(_) => "ok",
                            cohort_messages::Outcome::Error { .. } => "error",
                        };
                        self.traces.on_answer(reply.group, reply.client, reply.request, reply.op, outcome);
                    }
                    ClientAnswer::Redirect(redirect) => {
                        let op = cohort_messages::Op(0);
                        self.traces.on_answer(redirect.group, redirect.client, redirect.request, op, "redirect");
                    }
                }
                self.answer(key, answer, notes);
            }
            Note::Role { group, view, role, .. } => {
                self.traces.on_role_changed(group, view, role);
                let now = self.driver.shard().now();
                self.role_changes.on_role(self.node, self.index, group, view, role, now);
                // The group actors were told the role the build ended in.
                if !self.draining_build && self.followed(group) {
                    notes.entry(group).or_default().push(GroupNote::Role(GroupRole::from_core(role, view)));
                }
            }
            Note::Committed { group, op } => {
                self.traces.on_committed(group, op);
                if self.followed(group) {
                    notes.entry(group).or_default().push(GroupNote::Committed(op));
                }
            }
            Note::Applied { group, ops, through } => {
                notes.entry(group).or_default().push(GroupNote::Applied { ops, through });
            }
            Note::Restored { group, op, state } => {
                notes.entry(group).or_default().push(GroupNote::Restored { op, state });
            }
            Note::WaitDone { wait, result } => self.wait_done(wait, result),
        }
    }

    /// Publish what the driver counted since the last turn.
    fn publish_driver_counters(&mut self) {
        let now = self.driver.counters();
        let dropped = now.remote_requests_dropped - self.published_counters.remote_requests_dropped;
        if dropped > 0 {
            self.drops.add(Mailbox::Shard, DropReason::MailboxFull, dropped);
        }
        self.published_counters = now;
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
        self.driver.shard()
    }

    /// Test hook: what the driver recorded since the shard started (with
    /// [`ShardSetup::record`]) or since the last take.
    pub fn take_recording(&mut self) -> Vec<cohort_core::driver::Recorded> {
        self.driver.take_recording()
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
        let many = self.driver.shard().group_count() > GAUGES_EVERY_SECOND_GROUPS_MAX;
        let interval_ticks = if many { GAUGES_INTERVAL_SECS_MANY * second_ticks } else { second_ticks };
        let (gauges, group_actors) = match self.gauges {
            Some((tick, gauges, group_actors)) if now < tick + interval_ticks => (gauges, group_actors),
            _ => {
                let (gauges, group_actors) = (self.driver.shard().heartbeat_gauges(), self.group_actor_count());
                self.gauges = Some((now, gauges, group_actors));
                (gauges, group_actors)
            }
        };
        self.metrics.update_shard(self.index, self.driver.shard().metrics(), &gauges);
        self.metrics.set_group_actors(self.index, group_actors);
        self.sweep_group_actors();
        self.metrics.update_core_refusals(self.index, self.driver.shard().refused());
        if self.index == 0 {
            let peers = self.links.0.values().filter(|link| link.connected.load(Ordering::Relaxed)).count();
            self.metrics.set_peers_connected(peers);
        }
        self.unhosted.retain(|_, caller| !caller.is_closed());
        self.role_changes.summarise(self.node, self.index, now, second_ticks);
        let stale = now.saturating_sub(10 * second_ticks);
        self.traces.forget_submits_before(stale);
    }
}

impl Actor for ShardActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(4096);
        self.addr = Some(ctx.address());
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
        self.catch_up();
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
        for input in items {
            self.on_peer(input);
        }
        self.input_done(ctx);
    }
}

impl ShardActor {
    /// One peer input, to the driver, under its span.
    fn on_peer(&mut self, input: PeerInput) {
        let span = match &input {
            PeerInput::Message { from, message, trace } => self.traces.on_message(*from, message, *trace),
            PeerInput::Commits { from, entries } => self.traces.on_batch(*from, false, entries.len()),
            PeerInput::Replies { from, entries } => self.traces.on_batch(*from, true, entries.len()),
        };
        let _entered = span.enter();
        self.driver.on_peer(input);
    }
}

impl Handler<Submit> for ShardActor {
    type Result = ();

    fn handle(&mut self, submit: Submit, ctx: &mut Self::Context) {
        let Request { group, client, request, .. } = submit.request;
        self.traces.on_submit(client, request, group, &submit.span, self.driver.shard().now());
        match self.group_actor(group, ctx) {
            // The group actor holds the caller; it hears the answer after
            // this registration, on the same mailbox.
            Some(actor) => actor.send(Wait { client, request, answer: submit.answer }),
            None => {
                self.unhosted.insert((group, client, request), submit.answer);
            }
        }
        self.driver.on_submit(submit.request);
        self.input_done(ctx);
    }
}

impl Handler<StorageDone> for ShardActor {
    type Result = ();

    fn handle(&mut self, done: StorageDone, ctx: &mut Self::Context) {
        match done.0 {
            StorageEvent::Flushed(id) => self.driver.on_flushed(id),
            StorageEvent::SuperblockFailed(group) => self.driver.on_superblock_failed(group),
            StorageEvent::Fatal(error) => {
                // A dead disk stops the shard loudly; nothing more is acknowledged.
                let (node, shard) = (self.node.0, self.index);
                tracing::error!(node, shard, %error, "shard {shard}'s storage failed, stopping the node: {error}");
                self.fail(format!("shard {}: {error}", self.index));
                ctx.stop();
                return;
            }
        }
        self.input_done(ctx);
    }
}

impl Handler<ApplyDone> for ShardActor {
    type Result = ();

    fn handle(&mut self, done: ApplyDone, ctx: &mut Self::Context) {
        match done.0 {
            ApplyEvent::Applied { group, id, state, done } => self.driver.on_applied(group, id, state, done),
            ApplyEvent::Panicked { group, reason } => {
                let (node, shard) = (self.node.0, self.index);
                tracing::error!(node, shard, group = group.0, %reason, "{group}'s state machine panicked in its apply, stopping the shard: {reason}");
                self.fail(format!("shard {shard}: {group}'s state machine panicked in its apply: {reason}"));
                ctx.stop();
                return;
            }
        }
        self.input_done(ctx);
    }
}

impl Handler<EndTurn> for ShardActor {
    type Result = ();

    fn handle(&mut self, _: EndTurn, _ctx: &mut Self::Context) {
        if self.driver.turn_open() {
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
