//! The metadata agent actor: the actix shell of the sans-IO
//! [`MetadataAgent`], one per node, on the node's I/O arbiter.
//!
//! It follows the agent's driving contract:
//! - **Ticks**: every tick of the node's tick length the timer asks the
//!   agent's [`ScanSchedule`] what to do, and does it: tick the agent
//!   without a scan (`on_idle_tick`), ask each shard for its cheap answer
//!   (`GetHostedChanges`) or its fingerprint (`GetHostedFingerprint`), or
//!   scan: ask each shard for the groups it hosts (`GetHostedReplicas`:
//!   group, incarnation, primary?, view, ...) and call `on_tick` with the
//!   node's [`SharedMetadata`]. The schedule holds every timing rule (scan
//!   spacing by the last scan's measured duration, Z2; the cheap check,
//!   fingerprint and full-scan intervals, Z3; the keepalive gate after a
//!   stall; the whole-state reads past the replicas, Z5) and is the one the
//!   simulator runs; this actor only measures the time (a monotonic clock,
//!   so after a stall the agent sees the true time) and asks the shards.
//! - **Submit**: the agent's requests go where its [`RequestRoute`] says
//!   (a [`MetadataRoute`] with the last request sent, the one the simulator
//!   routes through too): the local shard if this node votes in the
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
//!   [`cohort_core::metadata::FETCH_INTERVAL_TICKS`] ticks (the schedule
//!   says when), which costs O(state) per read.
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
    AgentConfig, AgentOutput, Destination, HostedChanges, HostedReplica, Metadata, MetadataAgent, MetadataRoute,
    PlacedReplica, Poll, RequestRoute, ScanSchedule,
};
use cohort_core::routing::shard_of;
use cohort_messages::metadata::MetadataCommand;
use cohort_messages::{
    ClientId, ClusterId, Epoch, GroupId, Message, NodeId, Outcome, Redirect, Reply, Request, RequestKind, RequestNumber,
};
use tokio::sync::{oneshot, watch};

use crate::directory::Directory;
use crate::inbound::AgentInbound;
use crate::metrics::{NodeMetrics, ScanKind};
use crate::operator_client::{OperatorAnswer, OperatorClient};
use crate::peer_link::SendFrames;
use crate::shard::{
    ClientAnswer, GetHostedReplicas, HostPlaced, ProposeSeal, SetLearners, Submit, SwitchIncarnation,
    SwitchIncarnationAsLearner, TransferPrimary, UnloadGroup,
};
use crate::shared_metadata::SharedMetadata;
use crate::status::{AgentStatus, StatusBoard};

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
    /// When the agent looks at the shards, and when it trusts what it saw
    /// (the timing rules, shared with the simulator).
    schedule: ScanSchedule,
    /// Where the agent's next request goes (a metadata voter), with the
    /// request last sent. Operator commands and reads of the whole state
    /// each have their own route, so one stream's sends never reset
    /// another's redirect budget.
    route: RequestRoute,
    operator_route: MetadataRoute,
    read_route: MetadataRoute,
    /// Nodes that host no metadata replica: the read client, its next
    /// number and the read still unanswered.
    reader: ClientId,
    next_read: u64,
    read_in_flight: Option<Request>,
    /// Operator commands from the admin port.
    operator: OperatorClient,
    /// The agent's counters as the log last saw them (O1: what changed is
    /// logged once, in `publish`).
    logged: cohort_core::metadata::AgentCounters,
    /// The operations as the log last saw them (O1).
    operations: crate::operation_log::OperationLog,
}

impl MetadataAgentActor {
    /// The agent of a node, from `setup`.
    pub fn new(setup: AgentSetup) -> MetadataAgentActor {
        let agent = MetadataAgent::new(setup.config.clone());
        let reader = crate::client_id::fresh_client_id();
        let now = Instant::now();
        let route = RequestRoute::new(setup.config.node);
        let read_route = MetadataRoute::new(setup.config.node);
        let schedule = ScanSchedule::new(Duration::ZERO, setup.tick);
        MetadataAgentActor {
            setup,
            agent,
            started: now,
            schedule,
            route,
            operator_route: read_route.clone(),
            read_route,
            reader,
            next_read: 1,
            read_in_flight: None,
            operator: OperatorClient::new(),
            logged: Default::default(),
            operations: Default::default(),
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

    /// The time since the agent started, from the monotonic clock.
    fn clock(&self) -> Duration {
        self.started.elapsed()
    }

    fn now_tick(&self) -> u64 {
        self.schedule.tick_of(self.clock())
    }

    fn epoch(&self) -> Epoch {
        self.setup.metadata.with(|state| state.epoch)
    }

    /// The timer fired: do what the schedule says.
    fn on_timer(&mut self, ctx: &mut Context<Self>) {
        let now = self.clock();
        self.schedule.on_timer(now);
        let poll = self.schedule.poll(now, &self.agent);
        self.follow(poll, ctx);
    }

    /// Do what the schedule said (Z2, Z3; see [`ScanSchedule`]): the
    /// shards' answers go back to it, until it says to tick the agent.
    fn follow(&mut self, poll: Poll, ctx: &mut Context<Self>) {
        match poll {
            Poll::Wait => {}
            Poll::Idle => self.idle_tick(ctx),
            Poll::AskChanges => self.ask_changes(ctx),
            Poll::AskFingerprint => self.ask_fingerprint(ctx),
            Poll::Scan => self.scan(ctx),
            Poll::BetweenScans => {
                let now = self.now_tick();
                let primary = self.schedule.metadata_primary();
                let metadata = self.setup.metadata.clone();
                let outputs = metadata.with(|state| self.agent.between_scans(now, state, primary));
                self.execute(outputs, ctx);
            }
        }
    }

    /// The shards, in index order.
    fn shards(&self) -> Vec<Addr<crate::shard::ShardActor>> {
        (0..self.setup.directory.shard_count()).filter_map(|index| self.setup.directory.shard(index)).collect()
    }

    /// Z3: ask every shard what is cheap to read (its count of role and
    /// hosting changes, the metadata replica's primary flag).
    fn ask_changes(&mut self, ctx: &mut Context<Self>) {
        self.setup.metrics.inc_agent_scans(ScanKind::Changes);
        let shards = self.shards();
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
            let (now, epoch) = (actor.clock(), actor.epoch());
            let poll = actor.schedule.on_changes(now, changes, &actor.agent, epoch);
            actor.follow(poll, ctx);
        }));
    }

    /// Z3: ask every shard for its fingerprint sum.
    fn ask_fingerprint(&mut self, ctx: &mut Context<Self>) {
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
            let (now, epoch) = (actor.clock(), actor.epoch());
            let poll = actor.schedule.on_fingerprint(now, hosted, &actor.agent, epoch);
            actor.follow(poll, ctx);
        }));
    }

    /// A tick without a scan.
    fn idle_tick(&mut self, ctx: &mut Context<Self>) {
        let now = self.now_tick();
        let primary = self.schedule.metadata_primary();
        let metadata = self.setup.metadata.clone();
        let outputs = metadata.with(|state| self.agent.on_idle_tick(now, state, primary));
        self.execute(outputs, ctx);
        self.after_tick(now, ctx);
    }

    /// Ask every shard for its hosted groups, then tick the agent; the
    /// scan's duration, measured here, spaces the next one (Z2).
    fn scan(&mut self, ctx: &mut Context<Self>) {
        self.setup.metrics.inc_agent_scans(ScanKind::Full);
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
            actor.on_hosted(hosted, ctx);
            actor.schedule.scan_took(asked_at.elapsed());
        }));
    }

    fn on_hosted(&mut self, hosted: Vec<HostedReplica>, ctx: &mut Context<Self>) {
        let now = self.now_tick();
        let (clock, epoch) = (self.clock(), self.epoch());
        self.schedule.on_scanned(clock, &hosted, epoch, self.agent.in_flight());
        let primary = self.schedule.metadata_primary();
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
        if self.schedule.fetch_due(now, self.follows()) {
            self.fetch();
        }
        self.publish();
    }

    /// Log what the agent's counters say happened since the last look:
    /// this node's session expiring (a warning: it re-owns its groups or
    /// stops, by `session_expired_policy`), ownership reports the metadata
    /// refused (at `debug`: a stale view is routine after a view change),
    /// session frames refused (T3; once per window).
    fn log_counters(&mut self, counters: &cohort_core::metadata::AgentCounters) {
        let (before, node) = (self.logged, self.node().0);
        if counters.sessions_expired > before.sessions_expired {
            tracing::warn!(
                node,
                "node {node}'s session expired: the metadata group heard no keepalive from it for the session \
                 timeout (a pause, or a partition from the metadata voters); it follows session_expired_policy"
            );
        }
        if counters.reports_refused > before.reports_refused {
            let refused = counters.reports_refused - before.reports_refused;
            tracing::debug!(node, refused, "the metadata refused {refused} ownership reports (stale view or session)");
        }
        if counters.frames_refused > before.frames_refused && crate::repeats::admit("session frames refused", &node) {
            tracing::warn!(node, "refused a session frame that did not come from the node it speaks for (T3)");
        }
        self.logged = *counters;
    }

    fn publish(&mut self) {
        let counters = self.agent.counters();
        self.log_counters(&counters);
        let node = self.node();
        let operations = &mut self.operations;
        self.setup.metadata.with(|metadata| operations.observe(node, metadata));
        self.setup.metrics.set_sessions(&counters);
        self.setup.board.set_agent(AgentStatus {
            session: self.agent.session(),
            metadata_primary: self.schedule.metadata_primary(),
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
                    let voters = self.voters();
                    let destination = self.route.on_submit(&request, &voters, self.schedule.metadata_primary());
                    self.send_to(destination, request, ctx);
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
                        let (node, session) = (self.node().0, notice.session.0);
                        tracing::info!(
                            node,
                            expired = to.0,
                            session,
                            "the session of node {} expired (no keepalive for the session timeout); telling it",
                            to.0
                        );
                        self.send(to, Message::SessionExpired(notice));
                    }
                }
                AgentOutput::SessionOpened(session) => {
                    let node = self.node().0;
                    tracing::info!(node, session = session.0, "node {node} opened session {}", session.0);
                }
                AgentOutput::Unload(group) => {
                    self.to_shard_of(group, UnloadGroup(group));
                    let node = self.node().0;
                    tracing::info!(
                        node,
                        group = group.0,
                        "unloading {group}: the metadata deleted it (H3) or placed it elsewhere (S4)"
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
        if cfg!(debug_assertions) {
            self.agent.invariants();
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
        let node = self.node().0;
        tracing::error!(node, %reason, "node {node} is stopping: {reason}");
        self.setup.stop.stop(reason);
        let _ = self.setup.shutdown.try_send(Shutdown);
    }

    /// Send an operator's request: new, or `resend` when it had no answer
    /// in time, which moves its route on to the next voter.
    fn send_operator(&mut self, request: Request, resend: bool, ctx: &mut Context<Self>) {
        let voters = self.voters();
        let primary = self.schedule.metadata_primary();
        self.operator_route.on_send(resend, &voters, primary);
        let destination = self.operator_route.destination(&voters, primary);
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
            if let Some(request) = self.operator.on_reply(&reply) {
                // H5: the registration was answered; the command goes now.
                self.send_operator(request, false, ctx);
            }
            return;
        }
        if reply.client == self.reader {
            if self.read_in_flight.as_ref().is_some_and(|read| client::answers(read, &reply)) {
                self.read_in_flight = None;
            }
            if let Outcome::Ok(state) = &reply.outcome
                && let Err(error) = self.setup.metadata.replace_encoded(state)
            {
                let node = self.node().0;
                if crate::repeats::admit("fetched metadata does not decode", &node) {
                    tracing::warn!(node, %error, "the metadata fetched from its primary does not decode: {error}");
                }
            }
            return;
        }
        let now = self.now_tick();
        let outputs = self.agent.on_reply(now, &reply);
        self.execute(outputs, ctx);
        // Applied: the agent sends its next command now rather than at the
        // next tick (a scan if one is due, else the burst between scans;
        // see `ScanSchedule::after_reply`).
        let poll = self.schedule.after_reply(self.clock(), &reply, &self.agent);
        self.follow(poll, ctx);
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
        } else if let Some((destination, request)) = self.route.on_redirect(&voters, from, &redirect) {
            self.send_to(destination, request, ctx);
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
        ctx.run_interval(self.setup.tick, |actor, ctx| actor.on_timer(ctx));
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
                if !self.schedule.judges_keepalives(self.clock()) {
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
