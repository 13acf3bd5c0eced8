//! The metadata agent actor: the actix shell of the sans-IO
//! [`MetadataAgent`], one per node, on the node's I/O arbiter.
//!
//! It follows the agent's driving contract:
//! - **Ticks**: every tick of the node's tick length it asks each shard for
//!   the groups it hosts (group, incarnation, primary?, view), takes the
//!   metadata replica's primary flag from the same answer, and calls
//!   `on_tick` with the node's [`SharedMetadata`]. Ticks come from a
//!   monotonic clock, so after a stall the agent sees the true time. Such a
//!   scan costs O(groups), so with many groups scans are spaced out to keep
//!   the agent's share of its thread small ([`SCAN_SPACING_FACTOR`], Z2).
//!   And once two scans in a row saw the same inputs (a sum of hashes of
//!   the records, the metadata's epoch, the request in flight), a due scan
//!   first asks the shards what is cheap to read: their count of role and
//!   hosting changes, and the metadata replica's primary flag. If those,
//!   the epoch and the request in flight are as before, the agent ticks
//!   without a scan (`on_idle_tick`: session, expiries, retries). The
//!   shards' sum of hashes, an O(groups) pass, is asked only when the cheap
//!   answer moved or its own spacing is up; the spacing doubles each time
//!   it matches, up to [`FINGERPRINT_SPACING_MAX`], or up to
//!   [`FINGERPRINT_SPACING_MAX_QUIET`] while the agent has no timed work.
//!   A full scan still runs
//!   every [`FULL_SCAN_INTERVAL`], or every [`FULL_SCAN_INTERVAL_QUIET`]
//!   while the agent has no timed work (`MetadataAgent::timed_work`).
//!   While things change, a due scan runs at once, as before. Every tick
//!   between due scans is such a tick too, so keepalives leave on time. An
//!   idle node thus costs little however many groups it hosts (Z3).
//! - **Submit**: the agent's requests go where its
//!   [`MetadataRoute`] says: the local shard if this node votes in the
//!   metadata group and leads it, else another node over the peer link as
//!   a `Request` frame (that node's shard answers with a `Reply` or
//!   `Redirect` frame). A redirect about the request in flight that names
//!   a node sends it there again at once (at most `REDIRECTS_FOLLOWED_MAX`
//!   times per send); one that names nobody, or a resend, moves on to the
//!   next voter. The agent itself re-sends an unanswered request with the
//!   same request number, so it applies at most once. Operator commands
//!   and reads of the whole state each follow a route of their own.
//! - **Keepalive**: a `SessionKeepalive` frame to every metadata member over
//!   the real peer links (the local member's agent gets it directly); the
//!   receiving agent calls `on_keepalive`, whose driver acts only on the
//!   metadata primary.
//! - **NotifyExpired**: a `SessionExpired` frame to the node; its agent calls
//!   `on_session_expired`.
//! - **Unload**: the owning shard stops the group's actors and removes its
//!   data from the WAL (`Storage::remove_group`).
//! - **Stop** (S3): the reason is published on [`SessionStop`], the node's
//!   shards and network stop, and `cohort node` exits non-zero with it.
//! - **Learners** (Z5): a node past the metadata group's voters hosts a
//!   learner replica of it, which follows the metadata log and applies it
//!   into the node's [`SharedMetadata`] as a voter's does; its agent sends
//!   its requests to a voter like any other. So what such a node receives
//!   grows with the rate of metadata changes, not with the state's size.
//! - **Past the group's replicas**: a group has at most
//!   [`cohort_messages::REPLICAS_MAX`] replicas, so in a cluster of more
//!   nodes than that the rest host none. They read the whole metadata
//!   state linearizably from the metadata primary every
//!   [`FETCH_INTERVAL_TICKS`] ticks, which costs O(state) per read.
//!
//! - **Operator commands** ([`OperatorSubmit`], from the admin port) take the
//!   same way to the metadata primary under their own client id; see
//!   [`super::operator_client`].
//!
//! The listener routes the frames that carry no group (`SessionKeepalive`,
//! `SessionExpired`) and the metadata group's `Reply`/`Redirect` frames here
//! as [`AgentInbound`].

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use cohort_core::client;
use cohort_core::metadata::{
    AgentConfig, AgentOutput, Destination, HostedReplica, Metadata, MetadataAgent, MetadataRoute, PlacedReplica,
};
use cohort_core::routing::shard_of;
use cohort_messages::metadata::{MetadataCommand, MetadataResult};
use cohort_messages::{
    ClientId, ClusterId, GroupId, Message, NodeId, Outcome, Redirect, Reply, Request, RequestKind, RequestNumber,
};
use tokio::sync::{oneshot, watch};

use crate::directory::Directory;
use crate::inbound::AgentInbound;
use crate::metrics::{NodeMetrics, ScanKind};
use crate::operator_client::{OperatorAnswer, OperatorClient};
use crate::peer_link::SendFrames;
use crate::shard::{
    ClientAnswer, GetHostedReplicas, HostPlaced, HostedChanges, ProposeSeal, SetLearners, Submit, SwitchIncarnation,
    SwitchIncarnationAsLearner, TransferPrimary, UnloadGroup,
};
use crate::shared_metadata::SharedMetadata;
use crate::status::{AgentStatus, StatusBoard};

/// Z2: a scan (asking every shard for its hosted replicas and running the
/// agent's passes over them) costs O(groups): about 17 ms on this machine
/// with 10,000 groups a node. The next scan starts no sooner than this many
/// times the last one's duration after it began, so a scan takes at most
/// about 1/20 of the time whatever the group count; with a few thousand
/// groups or fewer it still scans every tick, as before. The duration runs
/// from the question to the shards to the end of the agent's passes: the
/// shards' part (one record per replica, on their threads) is the larger
/// one, and a scan that waited behind busy shards spaces the next further.
const SCAN_SPACING_FACTOR: u32 = 20;

/// The longest wait between two scans, however slow the last one was. The
/// session keepalives leave from the ticks between scans too (Z3), so this
/// only bounds how stale what the agent acts on may get: at 100,000 groups
/// a node a scan takes a few hundred milliseconds, and scans every 500 ms
/// there took a third of the machine in the middle of a failover.
const SCAN_SPACING_MAX: Duration = Duration::from_secs(2);

/// Z3: a full scan runs at least this often even if nothing it looks at
/// changed (the balancer's budget and the agent's retries are timed).
const FULL_SCAN_INTERVAL: Duration = Duration::from_secs(5);

/// Z3: a full scan runs at least this often while the agent has no timed
/// work ([`MetadataAgent::timed_work`]) and nothing it looks at changed: the
/// next scan would do nothing.
const FULL_SCAN_INTERVAL_QUIET: Duration = Duration::from_secs(60);

/// Z3: the longest wait between two fingerprints while nothing changed. The
/// shards' cheap answer (role and hosting changes, the metadata primary's
/// flag) is read at every due scan between them; what it does not show (a
/// primary's quorum window running out, a learner catching up) the next
/// fingerprint does.
const FINGERPRINT_SPACING_MAX: Duration = Duration::from_secs(5);

/// Z3: the longest wait between two fingerprints while nothing changed and
/// the agent has no timed work ([`MetadataAgent::timed_work`]). What only a
/// fingerprint shows then is a group's state moving with no role or
/// hosting change (a learner caught up after its request's retries ended,
/// a primary's quorum window lapsing on a stalled shard), which this delays
/// by at most this much; a fingerprint at 100,000 groups a node is about a
/// fifth of an idle node's CPU at the 5 s spacing.
const FINGERPRINT_SPACING_MAX_QUIET: Duration = Duration::from_secs(20);

/// What a scan's outcome depends on besides the time (Z3): the shards'
/// fingerprint sum, the metadata's epoch, and whether a request is in flight.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct ScanInputs {
    hosted: u64,
    epoch: cohort_messages::Epoch,
    in_flight: bool,
}

/// A node that hosts no metadata replica fetches the metadata this often,
/// in ticks.
pub const FETCH_INTERVAL_TICKS: u64 = 5;

/// How long a local submit to the metadata replica waits before the agent's
/// own retry takes over.
const LOCAL_SUBMIT_TIMEOUT: Duration = Duration::from_secs(2);

/// Why the node stopped after its session expired (S3); `None` while it runs.
#[derive(Debug)]
pub struct SessionStop {
    reason: watch::Sender<Option<String>>,
}

impl Default for SessionStop {
    fn default() -> Self {
        SessionStop { reason: watch::channel(None).0 }
    }
}

impl SessionStop {
    /// The reason, once the node stopped.
    pub fn reason(&self) -> Option<String> {
        self.reason.borrow().clone()
    }

    /// Wait until the node stops for its session, and return why.
    pub async fn wait(&self) -> String {
        let mut receiver = self.reason.subscribe();
        loop {
            if let Some(reason) = receiver.borrow_and_update().clone() {
                return reason;
            }
            if receiver.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    fn stop(&self, reason: String) {
        self.reason.send_replace(Some(reason));
    }
}

/// An operator's command for the metadata group (from the admin port). The
/// answer is the committed result, or why there is none by `deadline`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct OperatorSubmit {
    /// The command, validated.
    pub command: MetadataCommand,
    /// When to give up.
    pub deadline: Instant,
    /// Where the result goes.
    pub answer: OperatorAnswer,
}

/// Stop the node's shards and network (S3); sent to the supervisor.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Shutdown;

/// What the agent actor is built from.
pub struct AgentSetup {
    /// The cluster.
    pub cluster: ClusterId,
    /// The sans-IO agent's settings.
    pub config: AgentConfig,
    /// The tick length.
    pub tick: Duration,
    /// The metadata group's members (its voters).
    pub members: Vec<NodeId>,
    /// Its learners (Z5).
    pub learners: Vec<NodeId>,
    /// The node's shards and peer links.
    pub directory: Arc<Directory>,
    /// The node's copy of the metadata.
    pub metadata: SharedMetadata,
    /// Where the agent publishes its status.
    pub board: Arc<StatusBoard>,
    /// The node's metrics (session counters).
    pub metrics: Arc<NodeMetrics>,
    /// Where the reason of an S3 stop is published.
    pub stop: Arc<SessionStop>,
    /// The supervisor, which stops the node (S3).
    pub shutdown: Recipient<Shutdown>,
}

/// The agent actor. See the module docs.
pub struct MetadataAgentActor {
    setup: AgentSetup,
    agent: MetadataAgent,
    started: Instant,
    /// When the last scan ran, and when the tick timer last fired (a stall
    /// shows as a gap in either).
    last_tick: Instant,
    last_timer: Instant,
    /// Where the agent's next request goes (a metadata voter). Operator
    /// commands and reads of the whole state each have their own route, so
    /// one stream's sends never reset another's redirect budget.
    route: MetadataRoute,
    operator_route: MetadataRoute,
    read_route: MetadataRoute,
    /// The request the agent last submitted, to re-send on a redirect.
    submitted: Option<Request>,
    metadata_primary: bool,
    polling: bool,
    /// When the last scan began, and how long its passes took (Z2).
    scanned_at: Option<Instant>,
    scan_duration: Duration,
    /// Z3: the inputs of the last full scan, when it ran, and whether they
    /// were those of the scan before it (only then does a due scan ask the
    /// shards for their fingerprint first; while things change, it scans
    /// at once, as before).
    scan_inputs: Option<ScanInputs>,
    full_scan_at: Option<Instant>,
    scans_stable: bool,
    /// Z3, while stable: when the fingerprint last matched, how long until
    /// the next one, and what the shards' cheap answer said then.
    fingerprinted_at: Option<Instant>,
    fingerprint_spacing: Duration,
    changes: Option<HostedChanges>,
    /// Nodes that host no metadata replica: the read client, its next
    /// number, the last fetch and the read still unanswered.
    reader: ClientId,
    next_read: u64,
    fetched_tick: u64,
    read_in_flight: Option<Request>,
    /// Operator commands from the admin port.
    operator: OperatorClient,
}

impl MetadataAgentActor {
    /// The agent of a node, from `setup`.
    pub fn new(setup: AgentSetup) -> MetadataAgentActor {
        let agent = MetadataAgent::new(setup.config.clone());
        let reader = crate::client_id::fresh_client_id();
        let now = Instant::now();
        let route = MetadataRoute::new(setup.config.node);
        let (operator_route, read_route) = (route.clone(), route.clone());
        MetadataAgentActor {
            setup,
            agent,
            started: now,
            last_tick: now,
            last_timer: now,
            route,
            operator_route,
            read_route,
            submitted: None,
            metadata_primary: false,
            polling: false,
            scanned_at: None,
            scan_duration: Duration::ZERO,
            scan_inputs: None,
            full_scan_at: None,
            scans_stable: false,
            fingerprinted_at: None,
            fingerprint_spacing: Duration::ZERO,
            changes: None,
            reader,
            next_read: 1,
            fetched_tick: 0,
            read_in_flight: None,
            operator: OperatorClient::new(),
        }
    }

    fn node(&self) -> NodeId {
        self.setup.config.node
    }

    fn member(&self) -> bool {
        self.voters().contains(&self.node())
    }

    /// The metadata group's voters (Z6): as its record says, with the
    /// voters of a switch in progress, or the ones it started with until
    /// it is recorded. Keepalives go to them, requests are routed to them,
    /// and only they may say a session expired (T3).
    fn voters(&self) -> Vec<NodeId> {
        let recorded = self.setup.metadata.with(Metadata::metadata_voters);
        recorded.unwrap_or_else(|| self.setup.members.clone())
    }

    /// True if this node hosts a replica of the metadata group, a voter or
    /// a learner (Z5): the replica keeps the node's copy current.
    fn follows(&self) -> bool {
        let node = self.node();
        self.setup.members.contains(&node) || self.setup.learners.contains(&node) || self.member()
    }

    fn now_tick(&self) -> u64 {
        (self.started.elapsed().as_nanos() / self.setup.tick.as_nanos().max(1)) as u64
    }

    /// Whether the last scan is far enough behind for the next (Z2).
    fn scan_due(&self) -> bool {
        let spacing = (self.scan_duration * SCAN_SPACING_FACTOR).min(SCAN_SPACING_MAX);
        !self.polling && self.scanned_at.is_none_or(|at| at.elapsed() >= spacing)
    }

    /// Tick the agent: with a scan of the hosted groups if one is due and
    /// something it looks at changed, else without (Z3).
    fn poll(&mut self, ctx: &mut Context<Self>) {
        if self.agent.stopped() || self.polling {
            return;
        }
        if !self.scan_due() {
            return self.idle_tick(false, ctx);
        }
        self.scanned_at = Some(Instant::now());
        self.polling = true;
        if !self.scans_stable {
            return self.scan(ctx);
        }
        // Z3: while stable, first what is cheap to read (each shard's count of
        // role and hosting changes, the metadata replica's primary flag); the
        // fingerprint only when that moved or its own spacing, which grows
        // while it keeps matching, is up.
        self.setup.metrics.inc_agent_scans(ScanKind::Changes);
        let shards = self.shards();
        let spacing_max = if self.agent.timed_work(self.now_tick()) {
            FINGERPRINT_SPACING_MAX
        } else {
            FINGERPRINT_SPACING_MAX_QUIET
        };
        let spacing = self.fingerprint_spacing.min(spacing_max);
        let fingerprint_due = self.fingerprinted_at.is_none_or(|at| at.elapsed() >= spacing);
        let asked = async move {
            let mut changes = HostedChanges::default();
            for shard in shards {
                let answer = shard.send(crate::shard::GetHostedChanges).await.ok()?;
                changes.events = changes.events.wrapping_add(answer.events);
                changes.metadata_primary = changes.metadata_primary.or(answer.metadata_primary);
            }
            Some(changes)
        };
        ctx.spawn(asked.into_actor(self).map(move |changes, actor, ctx| {
            let unchanged = changes.is_some() && changes == actor.changes && actor.inputs_hold();
            if unchanged && !fingerprint_due {
                actor.polling = false;
                return actor.idle_tick(true, ctx);
            }
            actor.fingerprint(changes, ctx);
        }));
    }

    /// The shards, in index order.
    fn shards(&self) -> Vec<Addr<crate::shard::ShardActor>> {
        (0..self.setup.directory.shard_count()).filter_map(|index| self.setup.directory.shard(index)).collect()
    }

    /// Whether what a scan depends on besides the hosted groups is as the
    /// last full scan saw it, and that scan is recent enough (Z3).
    fn inputs_hold(&self) -> bool {
        let now = self.now_tick();
        let interval = if self.agent.timed_work(now) { FULL_SCAN_INTERVAL } else { FULL_SCAN_INTERVAL_QUIET };
        let recent = self.full_scan_at.is_some_and(|at| at.elapsed() < interval);
        let inputs = self.scan_inputs.is_some_and(|inputs| {
            inputs.epoch == self.setup.metadata.with(|state| state.epoch) && inputs.in_flight == self.agent.in_flight()
        });
        recent && inputs && !self.agent.wants_scan()
    }

    /// Z3: ask the shards for their fingerprint sum; if it and the other
    /// inputs are the last full scan's, tick without a scan (and space the
    /// next fingerprint out further), else scan. `changes` is what the
    /// shards' cheap answer said just before.
    fn fingerprint(&mut self, changes: Option<HostedChanges>, ctx: &mut Context<Self>) {
        self.setup.metrics.inc_agent_scans(ScanKind::Fingerprint);
        let shards = self.shards();
        let asked = async move {
            let mut sum = 0u64;
            for shard in shards {
                sum = sum.wrapping_add(shard.send(crate::shard::GetHostedFingerprint).await.ok()?);
            }
            Some(sum)
        };
        ctx.spawn(asked.into_actor(self).map(move |hosted, actor, ctx| {
            let same = hosted.is_some_and(|hosted| actor.scan_inputs.is_some_and(|inputs| inputs.hosted == hosted));
            if same && actor.inputs_hold() {
                actor.polling = false;
                actor.changes = changes;
                actor.fingerprinted_at = Some(Instant::now());
                let base = (actor.scan_duration * SCAN_SPACING_FACTOR).min(SCAN_SPACING_MAX);
                actor.fingerprint_spacing = (actor.fingerprint_spacing * 2).clamp(base, FINGERPRINT_SPACING_MAX_QUIET);
                return actor.idle_tick(true, ctx);
            }
            actor.scan(ctx);
        }));
    }

    /// A tick without a scan; `verified`: the shards just said nothing
    /// changed, so the agent's view of them is as fresh as a scan's.
    fn idle_tick(&mut self, verified: bool, ctx: &mut Context<Self>) {
        let now = self.now_tick();
        if verified {
            self.last_tick = Instant::now();
        }
        let primary = self.metadata_primary;
        let metadata = self.setup.metadata.clone();
        let outputs = metadata.with(|state| self.agent.on_idle_tick(now, state, primary));
        self.execute(outputs, ctx);
        self.after_tick(now, ctx);
    }

    /// Ask every shard for its hosted groups, then tick the agent.
    fn scan(&mut self, ctx: &mut Context<Self>) {
        self.setup.metrics.inc_agent_scans(ScanKind::Full);
        self.full_scan_at = Some(Instant::now());
        self.fingerprint_spacing = Duration::ZERO;
        let shards = self.shards();
        let asked = async move {
            let mut hosted = Vec::new();
            for shard in shards {
                if let Ok(groups) = shard.send(GetHostedReplicas).await {
                    hosted.extend(groups);
                }
            }
            hosted
        };
        let asked_at = Instant::now();
        ctx.spawn(asked.into_actor(self).map(move |hosted, actor, ctx| {
            actor.polling = false;
            actor.on_hosted(hosted, ctx);
            actor.scan_duration = asked_at.elapsed();
        }));
    }

    fn on_hosted(&mut self, hosted: Vec<HostedReplica>, ctx: &mut Context<Self>) {
        let now = self.now_tick();
        self.last_tick = Instant::now();
        let inputs = ScanInputs {
            hosted: hosted.iter().fold(0u64, |sum, record| sum.wrapping_add(record.digest())),
            epoch: self.setup.metadata.with(|state| state.epoch),
            in_flight: self.agent.in_flight(),
        };
        self.scans_stable = self.scan_inputs == Some(inputs);
        self.scan_inputs = Some(inputs);
        self.metadata_primary = hosted.iter().any(|h| h.group == GroupId::METADATA && h.primary);
        let primary = self.metadata_primary;
        let metadata = self.setup.metadata.clone();
        let outputs = metadata.with(|state| self.agent.on_tick(now, state, primary, &hosted));
        self.execute(outputs, ctx);
        self.after_tick(now, ctx);
    }

    /// What follows every tick of the agent, with a scan or without.
    fn after_tick(&mut self, now: u64, ctx: &mut Context<Self>) {
        if let Some(request) = self.operator.on_tick(Instant::now()) {
            self.send_operator(request, true, ctx);
        }
        if !self.follows() && now >= self.fetched_tick + FETCH_INTERVAL_TICKS {
            self.fetched_tick = now;
            self.fetch();
        }
        self.publish();
    }

    fn publish(&self) {
        let counters = self.agent.counters();
        self.setup.metrics.set_sessions(&counters);
        self.setup.board.set_agent(AgentStatus {
            session: self.agent.session(),
            metadata_primary: self.metadata_primary,
            counters,
            stopped: self.setup.stop.reason(),
        });
    }

    /// Execute the agent's outputs (and what handling them produced), in order.
    fn execute(&mut self, outputs: Vec<AgentOutput>, ctx: &mut Context<Self>) {
        let mut queue: VecDeque<AgentOutput> = outputs.into();
        while let Some(output) = queue.pop_front() {
            match output {
                AgentOutput::Submit(request) => {
                    // The agent resends what had no answer in time: the
                    // target may be down, so the next voter gets it (a dead
                    // metadata primary would hold this node's requests
                    // forever otherwise; a redirect names the live one).
                    let resend = self
                        .submitted
                        .as_ref()
                        .is_some_and(|last| last.client == request.client && last.request == request.request);
                    let voters = self.voters();
                    self.route.on_send(resend, &voters, self.metadata_primary);
                    self.submit(request, ctx)
                }
                AgentOutput::Keepalive(keepalive) => {
                    for member in self.voters() {
                        if member == self.node() {
                            let now = self.now_tick();
                            let metadata = self.setup.metadata.clone();
                            let node = self.node();
                            queue.extend(metadata.with(|state| self.agent.on_keepalive(now, node, &keepalive, state)));
                        } else {
                            self.send(member, Message::SessionKeepalive(keepalive));
                        }
                    }
                }
                AgentOutput::NotifyExpired { to, notice } => {
                    if to == self.node() {
                        let (node, members) = (self.node(), self.voters());
                        queue.extend(self.agent.on_session_expired(node, &members, &notice));
                    } else {
                        self.send(to, Message::SessionExpired(notice));
                    }
                }
                AgentOutput::SessionOpened(session) => {
                    tracing::info!(node = self.node().0, session = session.0, "session opened");
                }
                AgentOutput::Unload(group) => {
                    self.to_shard_of(group, UnloadGroup(group));
                    eprintln!(
                        "cohort: node {}: unloading {group}: the metadata placed it elsewhere (S4)",
                        self.node().0
                    );
                }
                AgentOutput::Stop(reason) => self.stop(reason.to_string()),
                AgentOutput::ProposeSeal { group, seal } => {
                    self.to_shard_of(group, ProposeSeal { group, seal });
                }
                output @ (AgentOutput::HostLearner { .. } | AgentOutput::HostMember { .. }) => {
                    if let Some(PlacedReplica { placement, kind, voter }) = output.placed_replica() {
                        let (group, kind) = (placement.group, crate::kind::GroupKind::new(kind));
                        self.to_shard_of(group, HostPlaced { placement, kind, voter });
                    }
                }
                AgentOutput::TransferPrimary { group, to } => self.to_shard_of(group, TransferPrimary { group, to }),
                AgentOutput::SetLearners { group, learners } => {
                    self.to_shard_of(group, SetLearners { group, learners });
                }
                AgentOutput::Switch(group) => self.to_shard_of(group, SwitchIncarnation(group)),
                AgentOutput::SwitchLearner { group, seal, learners } => {
                    self.to_shard_of(group, SwitchIncarnationAsLearner { group, seal, learners });
                }
            }
        }
        self.publish();
    }

    /// Hand `message` to the shard that hosts `group` (a stopped shard drops it).
    fn to_shard_of<M>(&self, group: GroupId, message: M)
    where
        M: actix::Message + Send + 'static,
        M::Result: Send,
        crate::shard::ShardActor: actix::Handler<M>,
    {
        let shards = self.setup.directory.shard_count();
        if let Some(shard) = self.setup.directory.shard(shard_of(group, shards)) {
            shard.do_send(message);
        }
    }

    fn stop(&mut self, reason: String) {
        let reason = format!("session expired with session_expired_policy: {reason}");
        eprintln!("cohort: node {}: stopping: {reason}", self.node().0);
        self.setup.stop.stop(reason);
        let _ = self.setup.shutdown.try_send(Shutdown);
    }

    /// Send `request` to the metadata primary as the agent knows it.
    fn submit(&mut self, request: Request, ctx: &mut Context<Self>) {
        self.submitted = Some(request.clone());
        let voters = self.voters();
        let destination = self.route.destination(&voters, self.metadata_primary);
        self.send_to(destination, request, ctx);
    }

    /// Send an operator's request: new, or `resend` when it had no answer
    /// in time, which moves its route on to the next voter.
    fn send_operator(&mut self, request: Request, resend: bool, ctx: &mut Context<Self>) {
        let voters = self.voters();
        self.operator_route.on_send(resend, &voters, self.metadata_primary);
        let destination = self.operator_route.destination(&voters, self.metadata_primary);
        self.send_to(destination, request, ctx);
    }

    /// Send `request` to the local metadata replica or to another node.
    fn send_to(&mut self, destination: Destination, request: Request, ctx: &mut Context<Self>) {
        let operator = self.operator.owns(request.client);
        match destination {
            Destination::Local => {
                if operator {
                    self.operator.sent(self.node(), true, Instant::now());
                }
                self.submit_locally(request, ctx);
            }
            Destination::Node(target) => {
                if operator {
                    self.operator.sent(target, false, Instant::now());
                }
                self.send(target, Message::Request(request));
            }
        }
    }

    fn submit_locally(&mut self, request: Request, ctx: &mut Context<Self>) {
        let shards = self.setup.directory.shard_count();
        let Some(shard) = self.setup.directory.shard(shard_of(GroupId::METADATA, shards)) else { return };
        let (answer, answered) = oneshot::channel();
        let span = tracing::Span::none();
        if shard.try_send(Submit { request, answer, span }).is_err() {
            return;
        }
        let node = self.node();
        let waited = async move { tokio::time::timeout(LOCAL_SUBMIT_TIMEOUT, answered).await };
        ctx.spawn(waited.into_actor(self).map(move |answer, actor, ctx| match answer {
            Ok(Ok(ClientAnswer::Reply(reply))) => actor.on_reply(reply, ctx),
            Ok(Ok(ClientAnswer::Redirect(redirect))) => actor.on_redirect(node, redirect, ctx),
            _ => {}
        }));
    }

    fn on_reply(&mut self, reply: Reply, ctx: &mut Context<Self>) {
        if self.operator.owns(reply.client) {
            self.operator.on_reply(&reply);
            return;
        }
        if reply.client == self.reader {
            if self.read_in_flight.as_ref().is_some_and(|read| client::answers(read, &reply)) {
                self.read_in_flight = None;
            }
            if let Outcome::Ok(state) = &reply.outcome
                && let Err(error) = self.setup.metadata.replace_encoded(state)
            {
                eprintln!("cohort: node {}: fetched metadata does not decode: {error}", self.node().0);
            }
            return;
        }
        let now = self.now_tick();
        let outputs = self.agent.on_reply(now, &reply);
        self.execute(outputs, ctx);
        // Applied: let the agent send its next command now rather than at
        // the next tick, so a burst (ownership reports after a failover, the
        // balancer's transfers) moves at the metadata group's commit rate,
        // not at one command per tick. After a refusal it waits for the
        // tick: its copy of the metadata may be behind the one that refused.
        let applied = match &reply.outcome {
            Outcome::Ok(result) => {
                !matches!(MetadataResult::decode(result), Ok(MetadataResult::Refused { .. }) | Err(_))
            }
            Outcome::Error { .. } => false,
        };
        if applied {
            if self.scan_due() {
                self.poll(ctx);
            } else {
                // Not yet time for a scan (Z2): the balancer goes on without one.
                let now = self.now_tick();
                let primary = self.metadata_primary;
                let metadata = self.setup.metadata.clone();
                let outputs = metadata.with(|state| self.agent.between_scans(now, state, primary));
                self.execute(outputs, ctx);
            }
        }
    }

    /// A redirect moves the route of the request it is about, if that
    /// request is still in flight, and resends it at once where the route
    /// says; one about an older request changes nothing.
    fn on_redirect(&mut self, from: NodeId, redirect: Redirect, ctx: &mut Context<Self>) {
        let voters = self.voters();
        if self.operator.owns(redirect.client) {
            let Some(request) = self.operator.on_redirect(from, &redirect) else { return };
            if let Some(destination) = self.operator_route.redirected(&voters, from, redirect.primary) {
                self.send_to(destination, request, ctx);
            }
        } else if redirect.client == self.reader {
            let Some(read) = self.read_in_flight.clone().filter(|read| client::redirects(read, &redirect)) else {
                return;
            };
            // Not a voter, so never its own replica.
            if let Some(Destination::Node(target)) = self.read_route.redirected(&voters, from, redirect.primary) {
                self.send(target, Message::Request(read));
            }
        } else {
            let Some(request) = self.submitted.clone().filter(|request| client::redirects(request, &redirect)) else {
                return;
            };
            if let Some(destination) = self.route.redirected(&voters, from, redirect.primary) {
                self.send_to(destination, request, ctx);
            }
        }
    }

    /// Nodes that host no metadata replica: a linearizable read of the
    /// whole metadata state.
    fn fetch(&mut self) {
        let request = Request {
            client: self.reader,
            request: RequestNumber(self.next_read),
            group: GroupId::METADATA,
            kind: RequestKind::Read,
            operation: bytes::Bytes::new(),
        };
        self.next_read += 1;
        let voters = self.voters();
        // The read before had no answer: its target may be down, so this
        // one goes to the next voter. Not a voter, so never its own replica.
        self.read_route.on_send(self.read_in_flight.is_some(), &voters, false);
        self.read_in_flight = Some(request.clone());
        if let Destination::Node(target) = self.read_route.destination(&voters, false) {
            self.send(target, Message::Request(request));
        }
    }

    /// One frame to `peer` over its peer link (dropped if it is down: the
    /// agent re-sends what matters).
    fn send(&self, peer: NodeId, message: Message) {
        let Some(link) = self.setup.directory.link(peer) else { return };
        let _ = link.try_send(SendFrames::one(&message, self.setup.cluster, self.node()));
    }
}

impl Actor for MetadataAgentActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(1024);
        ctx.run_interval(self.setup.tick, |actor, ctx| {
            actor.last_timer = Instant::now();
            actor.poll(ctx)
        });
    }
}

impl Handler<OperatorSubmit> for MetadataAgentActor {
    type Result = ();

    fn handle(&mut self, submit: OperatorSubmit, ctx: &mut Self::Context) {
        if self.agent.stopped() {
            let _ = submit.answer.send(Err(crate::operator_client::OperatorFailure::Stopped));
            return;
        }
        if let Some(request) = self.operator.start(&submit.command, submit.deadline, submit.answer, Instant::now()) {
            self.send_operator(request, false, ctx);
        }
    }
}

impl Handler<AgentInbound> for MetadataAgentActor {
    type Result = ();

    fn handle(&mut self, inbound: AgentInbound, ctx: &mut Self::Context) {
        if self.agent.stopped() {
            return;
        }
        match inbound.message {
            Message::SessionKeepalive(keepalive) => {
                // After a stall, wait for one fresh tick before judging
                // keepalives: the applied state and the primary flag may be stale.
                // (Scans may be spaced out, Z2: up to SCAN_SPACING_MAX.)
                if self.last_timer.elapsed() > self.setup.tick * 3
                    || self.last_tick.elapsed() > self.setup.tick * 3 + SCAN_SPACING_MAX
                {
                    return;
                }
                let now = self.now_tick();
                let metadata = self.setup.metadata.clone();
                let from = inbound.from;
                let outputs = metadata.with(|state| self.agent.on_keepalive(now, from, &keepalive, state));
                self.execute(outputs, ctx);
            }
            Message::SessionExpired(notice) => {
                let members = self.voters();
                let outputs = self.agent.on_session_expired(inbound.from, &members, &notice);
                self.execute(outputs, ctx);
            }
            Message::Reply(reply) if reply.group == GroupId::METADATA => self.on_reply(reply, ctx),
            Message::Redirect(redirect) if redirect.group == GroupId::METADATA => {
                self.on_redirect(inbound.from, redirect, ctx)
            }
            _ => {}
        }
    }
}
