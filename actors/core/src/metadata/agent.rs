//! A node's metadata agent: everything one node does with the metadata group,
//! in one sans-IO state machine that the runtime's node and the simulator
//! both drive, so the simulator checks the code nodes run.
//!
//! Per node it:
//! - registers the node, then keeps a session open through the
//!   [`SessionClient`] (S1) and applies the expiry policy (S3);
//! - after every new session re-owns the groups this node is primary of
//!   (S4): it reports each (group, incarnation, view) under the session, and
//!   a report with a stale view is refused by the metadata state machine;
//! - unloads a hosted group once the metadata has placed it elsewhere (or
//!   deleted it) for `unload_grace_ticks` in a row (S4);
//! - acks the configuration epochs it has applied (M1);
//! - creates the groups configured on this node that the metadata does not
//!   know yet, once their members have registered, and hosts an empty
//!   replica of a group created at run time that names it a member (C3);
//! - on the node that leads a group with a transfer asked for, hands the
//!   primary to the chosen member (C4);
//! - on the metadata primary only, runs the [`MetadataDriver`] (expiry
//!   through the log, S1/S2), drives multi-step operations one gated
//!   step at a time from their stored plans (M2, M4), and, if balancing is
//!   on, asks for one primary transfer per balance interval (C5).
//!
//! It is one client of the metadata group with at most one request in
//! flight, retried with the same request number until answered, so every
//! command applies at most once. Which command goes next is decided afresh
//! from the applied metadata each time the agent is idle, so a lost answer
//! or a refused report is simply tried again from the current state.

use std::collections::{BTreeMap, VecDeque};

use cohort_messages::metadata::{
    GroupCreation, METADATA_BATCH_ENTRIES_MAX, MetadataCommand, MetadataResult, OwnedGroup,
};
use cohort_messages::pair_heartbeat::mix64;
use cohort_messages::replication::Replication;
use cohort_messages::seal::Seal;
use cohort_messages::{
    ClientId, Epoch, GroupId, Incarnation, NodeId, Reply, Request, SessionExpired, SessionId, SessionKeepalive, View,
};

use super::{ExpiredPolicy, KeepaliveOutcome, Metadata, MetadataDriver, Ownership, SessionAction, SessionClient};
use crate::client::{self, Sequence, Verdict};

/// The agent's settings; every duration is in ticks of the node's core.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// This node.
    pub node: NodeId,
    /// Where peers reach it (registered in the metadata).
    pub address: String,
    /// The agent's client id for its requests to the metadata group; fresh
    /// on every start, because a client the group does not know must start
    /// at request 1.
    pub client: ClientId,
    /// The metadata group.
    pub metadata_group: GroupId,
    /// S3.
    pub policy: ExpiredPolicy,
    /// How often a keepalive leaves.
    pub keepalive_interval_ticks: u64,
    /// F2: the wait after the first failed reconnect attempt; it doubles
    /// after each further one.
    pub reconnect_backoff_ticks: u64,
    /// Silence after which the metadata primary expires a session (S1).
    pub session_timeout_ticks: u64,
    /// An unanswered request is sent again after this long.
    pub request_retry_ticks: u64,
    /// S4: a group placed elsewhere is unloaded after this long.
    pub unload_grace_ticks: u64,
    /// Groups configured on this node, created in the metadata once their
    /// members registered.
    pub bootstrap_groups: Vec<BootstrapGroup>,
    /// C5: on the metadata primary, at most this many primary transfers are
    /// asked for per tick; `None` turns the balancer off.
    pub balance_transfers_per_tick: Option<u32>,
}

/// A group a node is configured with, as the metadata records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootstrapGroup {
    /// The group.
    pub group: GroupId,
    /// Its kind.
    pub kind: String,
    /// Its members in member-index order.
    pub members: Vec<NodeId>,
    /// Its replication quorum and write mode.
    pub replication: Replication,
}

impl AgentConfig {
    /// Checks the settings; the error names the setting and the rule.
    pub fn validate(&self) -> Result<(), String> {
        if self.keepalive_interval_ticks == 0 || self.request_retry_ticks == 0 {
            return Err("keepalive_interval_ticks and request_retry_ticks must be at least 1".into());
        }
        if self.balance_transfers_per_tick == Some(0) {
            return Err("balance_transfers_per_tick must be at least 1 (or absent: no balancing)".into());
        }
        if self.session_timeout_ticks <= 2 * self.keepalive_interval_ticks {
            return Err(format!(
                "session_timeout_ticks ({}) must exceed two keepalive intervals ({} ticks each)",
                self.session_timeout_ticks, self.keepalive_interval_ticks
            ));
        }
        Ok(())
    }
}

/// A group this node hosts, as its replica sees itself now
/// ([`crate::Shard::hosted_replica`] fills it from the replica).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostedReplica {
    /// The group.
    pub group: GroupId,
    /// Its incarnation.
    pub incarnation: Incarnation,
    /// True if this node's replica is its primary in normal status and a
    /// quorum confirmed it within its window
    /// ([`crate::Shard::is_confirmed_primary`]): a primary that was
    /// paused neither reports ownership nor judges keepalives.
    pub primary: bool,
    /// The replica's view.
    pub view: View,
    /// The seal the replica applied, if any (its state is final).
    pub sealed: Option<Seal>,
    /// True once that seal is durable on this node.
    pub seal_durable: bool,
    /// The replica's learners (P4).
    pub learners: Vec<NodeId>,
    /// On the primary: learners that hold the log through its commit point.
    pub caught_up: Vec<NodeId>,
    /// The voters, for the metadata group only (Z6: its primary records
    /// them); empty for every other group, which the metadata places.
    pub members: Vec<NodeId>,
    /// Z6: the next incarnation ran without this replica
    /// ([`crate::Replica::outpaced`]).
    pub outpaced: bool,
}

impl HostedReplica {
    /// Z3: a hash of what [`HostedReplica::of`] would say of `replica` at
    /// `now`, without building it; equal to [`HostedReplica::digest`] of
    /// that record. A shell sums it over its groups to learn, for O(groups)
    /// hashing and no allocation, whether any changed since a scan.
    pub(crate) fn fingerprint(replica: &crate::Replica, pairs: &crate::quiesce::Pairs, now: u64) -> u64 {
        let flags = digest_flags(
            replica.is_confirmed_primary(pairs, now),
            replica.sealed().is_some(),
            replica.seal_durable().is_some(),
        ) | u64::from(replica.outpaced()) << 3;
        let mut hash = digest_start(replica.group(), replica.incarnation(), replica.view(), flags);
        for node in replica.learner_nodes() {
            hash = digest_learner(hash, *node, replica.learner_caught_up(*node));
        }
        hash
    }

    /// Z3: the hash `HostedReplica::fingerprint` gives of the replica this
    /// record was made from, at the tick it was made.
    pub fn digest(&self) -> u64 {
        let flags =
            digest_flags(self.primary, self.sealed.is_some(), self.seal_durable) | u64::from(self.outpaced) << 3;
        let mut hash = digest_start(self.group, self.incarnation, self.view, flags);
        for node in &self.learners {
            hash = digest_learner(hash, *node, self.caught_up.contains(node));
        }
        hash
    }

    /// What `replica` says of itself at tick `now`.
    pub(crate) fn of(replica: &crate::Replica, pairs: &crate::quiesce::Pairs, now: u64) -> HostedReplica {
        HostedReplica {
            group: replica.group(),
            incarnation: replica.incarnation(),
            primary: replica.is_confirmed_primary(pairs, now),
            view: replica.view(),
            sealed: replica.sealed().map(|sealed| sealed.seal.clone()),
            seal_durable: replica.seal_durable().is_some(),
            learners: replica.learner_nodes().to_vec(),
            caught_up: replica
                .learner_nodes()
                .iter()
                .copied()
                .filter(|node| replica.learner_caught_up(*node))
                .collect(),
            members: if replica.group() == GroupId::METADATA { replica.spec.members.clone() } else { Vec::new() },
            outpaced: replica.outpaced(),
        }
    }
}

fn digest_flags(primary: bool, sealed: bool, seal_durable: bool) -> u64 {
    u64::from(primary) | u64::from(sealed) << 1 | u64::from(seal_durable) << 2
}

fn digest_start(group: GroupId, incarnation: Incarnation, view: View, flags: u64) -> u64 {
    let mut hash = mix64(group.0 ^ 0x9e37_79b9_7f4a_7c15);
    for field in [incarnation.0, u64::from(view.0), flags] {
        hash = mix64(hash ^ field);
    }
    hash
}

fn digest_learner(hash: u64, node: NodeId, caught_up: bool) -> u64 {
    mix64(hash ^ node.0 ^ u64::from(caught_up) << 63)
}

/// What the shell must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentOutput {
    /// Submit this request to the metadata group's primary (following
    /// redirects); its reply goes to [`MetadataAgent::on_reply`].
    Submit(Request),
    /// Send this keepalive to every member of the metadata group; only the
    /// primary's driver acts on it.
    Keepalive(SessionKeepalive),
    /// Tell `to` that its session is over.
    NotifyExpired {
        /// The node whose session ended.
        to: NodeId,
        /// The notice.
        notice: SessionExpired,
    },
    /// A new session is open and the hosted groups are being re-owned.
    SessionOpened(SessionId),
    /// Stop and remove this group's replica and data (S4).
    Unload(GroupId),
    /// This node's replica is the group's primary and the metadata decided a
    /// member change: seal the incarnation
    /// ([`crate::Shard::propose_seal`]; a refusal is fine, it is asked
    /// again while the change is pending).
    ProposeSeal {
        /// The group.
        group: GroupId,
        /// The seal.
        seal: Seal,
    },
    /// Every next member held the seal and the metadata switched the group:
    /// switch this node's sealed replica ([`crate::Shard::switch_incarnation`]).
    /// For the metadata group (Z6) the committed seal alone says every next
    /// member holds it, so its next members switch on that.
    Switch(GroupId),
    /// Z6: this node learns the metadata group's log and is no next voter:
    /// its replica applied the seal, or heard the next incarnation run
    /// without it, so it goes on as a learner of the next incarnation (from
    /// the same state, or from its applied point by state transfer;
    /// [`crate::Shard::switch_incarnation_as_learner`]).
    SwitchLearner {
        /// The group (the metadata group).
        group: GroupId,
        /// The seal of the switch (as the pending switch names it).
        seal: Seal,
        /// The next incarnation's learners, this node among them.
        learners: Vec<NodeId>,
    },
    /// The metadata names this node a learner of a group it does not host
    /// (at this incarnation): create an empty learner replica with these
    /// members and learners (dropping an older incarnation's replica); it
    /// catches up from the primary (P4).
    HostLearner {
        /// The group.
        group: GroupId,
        /// Its kind.
        kind: String,
        /// Its incarnation.
        incarnation: Incarnation,
        /// Its voting members.
        members: Vec<NodeId>,
        /// Its learners, this node among them.
        learners: Vec<NodeId>,
        /// Its replication quorum (for `members`) and write mode.
        replication: Replication,
    },
    /// C3: the metadata names this node a voting member of a group created
    /// at run time that it hosts no replica of: create the replica empty
    /// (the group never held anything else at this incarnation).
    HostMember {
        /// The group.
        group: GroupId,
        /// Its kind.
        kind: String,
        /// Its incarnation (the one it was created at).
        incarnation: Incarnation,
        /// Its voting members, this node among them.
        members: Vec<NodeId>,
        /// Its replication quorum and write mode.
        replication: Replication,
    },
    /// C4: this node leads `group` and the metadata asks that `to` lead it:
    /// start the directed view change ([`crate::Shard::transfer_primary`];
    /// refused while `to` is behind, and asked again after a retry period).
    TransferPrimary {
        /// The group.
        group: GroupId,
        /// The member that is to lead.
        to: NodeId,
    },
    /// A hosted replica's learners differ from the metadata's: set them
    /// ([`crate::Shard::set_learners`]).
    SetLearners {
        /// The group.
        group: GroupId,
        /// The learners.
        learners: Vec<NodeId>,
    },
    /// Stop the node (S3), with the reason.
    Stop(&'static str),
}

/// A replica the agent asks the shell to host (a learner or a member of a
/// group created at run time), as [`AgentOutput::placed_replica`] reads it
/// from the output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacedReplica {
    /// The group as the metadata places it.
    pub placement: crate::replica::Placement,
    /// Its kind.
    pub kind: String,
    /// True for a voting member, false for a learner.
    pub voter: bool,
}

impl AgentOutput {
    /// The replica a `HostLearner` or `HostMember` asks for; `None` for
    /// every other output.
    pub fn placed_replica(&self) -> Option<PlacedReplica> {
        let (group, kind, incarnation, members, learners, replication, voter) = match self {
            AgentOutput::HostLearner { group, kind, incarnation, members, learners, replication } => {
                (group, kind, incarnation, members, learners.clone(), replication, false)
            }
            AgentOutput::HostMember { group, kind, incarnation, members, replication } => {
                (group, kind, incarnation, members, Vec::new(), replication, true)
            }
            _ => return None,
        };
        let placement = crate::replica::Placement {
            group: *group,
            incarnation: *incarnation,
            members: members.clone(),
            learners,
            replication_quorum: replication.quorum.map(usize::from),
            write_mode: replication.write_mode,
        };
        Some(PlacedReplica { placement, kind: kind.clone(), voter })
    }
}

/// What the request in flight is for.
#[derive(Clone, Debug)]
struct InFlight {
    request: Request,
    /// The command, or `None` for the read of the metadata group's record (Z6).
    command: Option<MetadataCommand>,
    sent_tick: u64,
}

/// Counters for tests, metrics and the simulator's report.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentCounters {
    /// Sessions opened.
    pub sessions_opened: u64,
    /// Session expiries this node learned of.
    pub sessions_expired: u64,
    /// Ownership reports accepted.
    pub reports_accepted: u64,
    /// Ownership reports refused (stale view, session or incarnation).
    pub reports_refused: u64,
    /// Expiries this node proposed as metadata primary.
    pub expiries_proposed: u64,
    /// Groups unloaded.
    pub groups_unloaded: u64,
    /// T3: session frames refused because they did not come from whom they
    /// speak for (a keepalive for another node, an expiry notice from a
    /// node outside the metadata group).
    pub frames_refused: u64,
}

/// The agent. See the module docs.
#[derive(Debug)]
pub struct MetadataAgent {
    config: AgentConfig,
    session: SessionClient,
    driver: MetadataDriver,
    /// The session this node holds, once opened.
    current: Option<SessionId>,
    requests: Sequence,
    in_flight: Option<InFlight>,
    /// An open attempt the session client asked for.
    open_wanted: bool,
    /// Expiries the driver asked for, not yet submitted.
    expiries: VecDeque<MetadataCommand>,
    /// Reports refused, by (group, view, session): not sent again.
    refused_reports: BTreeMap<GroupId, (View, SessionId)>,
    /// Hosted groups placed elsewhere, since when.
    misplaced_since: BTreeMap<GroupId, u64>,
    /// Seals proposed, by group, with when (asked again after a retry period).
    seals_proposed: BTreeMap<GroupId, u64>,
    /// Learner and member replicas asked for, by group, with when.
    replicas_asked: BTreeMap<GroupId, u64>,
    /// Primary transfers asked of the shard, by group, with when.
    transfers_asked: BTreeMap<GroupId, u64>,
    /// The tick the balancer last asked for a transfer in, and how many it
    /// asked for in it.
    balanced: (u64, u32),
    /// What [`MetadataAgent::between_scans`] may go on with: the burst the
    /// last scan chose, if nothing more urgent was waiting.
    between: Between,
    /// Z6: the metadata group's record as its primary last answered a read
    /// of it (see `record_read_wanted`).
    metadata_record_read: Option<super::GroupRecord>,
    stopped: bool,
    counters: AgentCounters,
}

/// Z2: what goes on between two scans, after each applied command, at the
/// metadata group's commit rate rather than one command per scan (a scan
/// of 100,000 hosted groups is spaced up to seconds apart). Each is the
/// command the last scan chose as the most urgent; the next scan chooses
/// afresh, so what became more urgent meanwhile waits at most until then.
#[derive(Debug)]
enum Between {
    /// Nothing: the last scan chose something that needs a scan again.
    Nothing,
    /// The next batch of configured groups the metadata lacks (C3); it needs
    /// the metadata only, and goes on only once this node's copy of it
    /// moved past `sent_epoch`, the epoch it had when the last batch left
    /// (a copy left behind would ask for the same batch again and again).
    Creations { sent_epoch: Epoch },
    /// The next batches of ownership reports (S4) the last scan found, at
    /// tick `scanned_tick`: `backlog` holds what its first batch left out.
    Reports { scanned_tick: u64, backlog: VecDeque<OwnedGroup> },
    /// The balancer's next transfer (C5), on the metadata primary.
    Balancing,
}

impl MetadataAgent {
    /// An agent that registers and opens its session from its first tick.
    pub fn new(config: AgentConfig) -> MetadataAgent {
        let session =
            SessionClient::new(config.policy, config.keepalive_interval_ticks, config.reconnect_backoff_ticks);
        let driver = MetadataDriver::new(config.session_timeout_ticks);
        let requests = Sequence::new(config.client, config.metadata_group);
        MetadataAgent {
            config,
            session,
            driver,
            current: None,
            requests,
            in_flight: None,
            open_wanted: false,
            expiries: VecDeque::new(),
            refused_reports: BTreeMap::new(),
            misplaced_since: BTreeMap::new(),
            seals_proposed: BTreeMap::new(),
            replicas_asked: BTreeMap::new(),
            transfers_asked: BTreeMap::new(),
            balanced: (0, 0),
            between: Between::Nothing,
            metadata_record_read: None,
            stopped: false,
            counters: AgentCounters::default(),
        }
    }

    /// The session this node holds.
    pub fn session(&self) -> Option<SessionId> {
        self.current
    }

    /// True once the node must stop (S3).
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// The counters.
    pub fn counters(&self) -> AgentCounters {
        self.counters
    }

    /// The settings.
    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// Every tick: the applied metadata (the local metadata replica's, or
    /// the last fetched copy), whether the local metadata replica is primary,
    /// and the groups this node hosts.
    pub fn on_tick(
        &mut self,
        now: u64,
        metadata: &Metadata,
        metadata_primary: bool,
        hosted: &[HostedReplica],
    ) -> Vec<AgentOutput> {
        let mut out = Vec::new();
        if !self.tick_session(now, metadata, metadata_primary, &mut out) {
            return out;
        }
        self.unload_misplaced(now, metadata, hosted, &mut out);
        self.carry_out_switches(now, metadata, hosted, &mut out);
        self.follow_learners(now, metadata, hosted, &mut out);
        self.carry_out_transfers(now, metadata, hosted, &mut out);
        let read_wanted = self.in_flight.is_none() && self.record_read_wanted(metadata, hosted);
        match &mut self.in_flight {
            Some(in_flight) if now >= in_flight.sent_tick.saturating_add(self.config.request_retry_ticks) => {
                in_flight.sent_tick = now;
                out.push(AgentOutput::Submit(in_flight.request.clone()));
            }
            Some(_) => {}
            // Z6: a replica left behind by a switch of the metadata group
            // learns where it went first: until then its copy says nothing.
            None if read_wanted => self.read_metadata_record(now, &mut out),
            None => {
                // The scan chooses afresh what goes on between scans
                // (`report_command` leaves its backlog there).
                self.between = Between::Nothing;
                let next = self.next_command(now, metadata, metadata_primary, hosted);
                match &next {
                    Some(MetadataCommand::CreateGroups { .. }) => {
                        self.between = Between::Creations { sent_epoch: metadata.epoch }
                    }
                    // The balancer may go on between scans if it is what this
                    // scan asked for, or if only this tick's budget held it back.
                    Some(MetadataCommand::TransferPrimary { .. }) if metadata_primary => {
                        self.between = Between::Balancing
                    }
                    None if metadata_primary && !self.balance_budget_left(now) => self.between = Between::Balancing,
                    _ => {}
                }
                if let Some(command) = next {
                    self.submit(command, now, &mut out);
                }
            }
        }
        out
    }

    /// Z3: a tick without a scan of the hosted groups, for a shell that
    /// knows neither they nor the metadata changed since the last
    /// [`MetadataAgent::on_tick`] (see [`MetadataAgent::wants_scan`]): the
    /// session (keepalives, expiry, S1–S3), the metadata primary's expiry
    /// judgements, and the retry of the request in flight. O(nodes), so an
    /// idle node with 100,000 groups ticks its agent for next to nothing.
    pub fn on_idle_tick(&mut self, now: u64, metadata: &Metadata, metadata_primary: bool) -> Vec<AgentOutput> {
        let mut out = Vec::new();
        if !self.tick_session(now, metadata, metadata_primary, &mut out) {
            return out;
        }
        if let Some(in_flight) = &mut self.in_flight
            && now >= in_flight.sent_tick.saturating_add(self.config.request_retry_ticks)
        {
            in_flight.sent_tick = now;
            out.push(AgentOutput::Submit(in_flight.request.clone()));
        }
        out
    }

    /// True if the next tick must be a full [`MetadataAgent::on_tick`]
    /// whatever the shell knows: a session to open, an expiry to propose, or
    /// no request in flight after one was answered.
    pub fn wants_scan(&self) -> bool {
        self.open_wanted || !self.expiries.is_empty()
    }

    /// True while a request to the metadata group is unanswered.
    pub fn in_flight(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Z3: true if a later [`MetadataAgent::on_tick`] may act on time alone,
    /// with nothing it looks at changed: a request in flight, a session to
    /// open or an expiry to propose, a misplaced group waiting out its
    /// grace, a transfer still wanted, the balancer going on, or a seal or
    /// replica asked for within the last two retry periods (so maybe asked
    /// again). While false, a shell whose inputs stay the same may scan
    /// rarely: the next scan would do nothing.
    pub fn timed_work(&self, now: u64) -> bool {
        let recent = now.saturating_sub(2 * self.config.request_retry_ticks);
        let asked_recently = |asked: &BTreeMap<GroupId, u64>| asked.values().any(|tick| *tick >= recent);
        self.in_flight.is_some()
            || self.wants_scan()
            || matches!(self.between, Between::Balancing)
            || !self.misplaced_since.is_empty()
            || !self.transfers_asked.is_empty()
            || asked_recently(&self.seals_proposed)
            || asked_recently(&self.replicas_asked)
    }

    /// The part of a tick that needs no hosted groups; false if the agent
    /// is (or just got) stopped and the tick ends here.
    fn tick_session(
        &mut self,
        now: u64,
        metadata: &Metadata,
        metadata_primary: bool,
        out: &mut Vec<AgentOutput>,
    ) -> bool {
        if self.stopped {
            return false;
        }
        // The applied log itself may say the session ended (the notice can be lost).
        if let Some(session) = self.current
            && metadata.last_session >= session
            && metadata.nodes.get(&self.config.node).and_then(|record| record.session) != Some(session)
        {
            self.expired(session, out);
        }
        match self.session.on_tick(now) {
            Some(SessionAction::Open { .. }) => self.open_wanted = true,
            Some(SessionAction::Keepalive(session)) => {
                out.push(AgentOutput::Keepalive(SessionKeepalive { node: self.config.node, session }))
            }
            Some(SessionAction::Stop(reason)) => {
                *out = self.stop(reason, std::mem::take(out));
                return false;
            }
            Some(SessionAction::Reown(_)) | None => {}
        }
        for command in self.driver.on_tick(now, metadata_primary, metadata) {
            self.counters.expiries_proposed += 1;
            self.expiries.push_back(command);
        }
        true
    }

    /// Between two scans (Z2: a scan of 100,000 hosted groups is too dear
    /// to run after every applied command): the next command of the burst
    /// the last scan chose (`Between`), if nothing is in flight and
    /// nothing more urgent is known to wait. The shell calls it after an
    /// applied reply when it will not scan yet, so creations and ownership
    /// reports move at the metadata group's commit rate, and the balancer
    /// keeps its rate (`balance_transfers_per_tick`), with few scans.
    pub fn between_scans(&mut self, now: u64, metadata: &Metadata, metadata_primary: bool) -> Vec<AgentOutput> {
        let mut out = Vec::new();
        if self.stopped || self.in_flight.is_some() || self.wants_scan() {
            return out;
        }
        let next = match &mut self.between {
            Between::Nothing => None,
            Between::Creations { sent_epoch } if metadata.frozen.is_none() && metadata.epoch > *sent_epoch => {
                *sent_epoch = metadata.epoch;
                self.bootstrap_command(metadata)
            }
            Between::Creations { .. } => None,
            Between::Reports { scanned_tick, backlog } => {
                // Two retry periods outlive the spacing of scans while
                // reports go on; past that the views scanned are too old.
                let fresh = now <= scanned_tick.saturating_add(2 * self.config.request_retry_ticks);
                let node = self.config.node;
                let held = |session: &SessionId| {
                    fresh && metadata.nodes.get(&node).is_some_and(|record| record.session == Some(*session))
                };
                let (config, refused) = (&self.config, &self.refused_reports);
                self.current.filter(held).and_then(|session| {
                    let reports: Vec<OwnedGroup> = std::iter::from_fn(|| backlog.pop_front())
                        .filter(|report| to_report(config, metadata, refused, session, report))
                        .take(METADATA_BATCH_ENTRIES_MAX)
                        .collect();
                    (!reports.is_empty()).then_some(MetadataCommand::ReportOwnerships { node, session, reports })
                })
            }
            Between::Balancing => {
                if !metadata_primary || !self.balance_budget_left(now) {
                    // Not now (spent for this tick, or not the metadata
                    // primary this moment); a later call may go on.
                    return out;
                }
                self.balance(now, metadata)
            }
        };
        match next {
            Some(command) => self.submit(command, now, &mut out),
            None => self.between = Between::Nothing,
        }
        out
    }

    /// How many transfers the balancer asked for in tick `now`.
    fn balanced_in(&self, now: u64) -> u32 {
        if self.balanced.0 == now { self.balanced.1 } else { 0 }
    }

    fn balance_budget_left(&self, now: u64) -> bool {
        self.config.balance_transfers_per_tick.is_some_and(|budget| self.balanced_in(now) < budget)
    }

    fn submit(&mut self, command: MetadataCommand, now: u64, out: &mut Vec<AgentOutput>) {
        let request = self.requests.write(command.encode());
        out.push(AgentOutput::Submit(request.clone()));
        self.in_flight = Some(InFlight { request, command: Some(command), sent_tick: now });
    }

    /// C5: the balancer's next transfer, within its budget of this tick.
    fn balance(&mut self, now: u64, metadata: &Metadata) -> Option<MetadataCommand> {
        if !self.balance_budget_left(now) {
            return None;
        }
        let transfer = super::next_transfer(metadata)?;
        self.balanced = (now, self.balanced_in(now) + 1);
        Some(transfer)
    }

    /// What to ask of the metadata group next, most urgent first.
    fn next_command(
        &mut self,
        now: u64,
        metadata: &Metadata,
        metadata_primary: bool,
        hosted: &[HostedReplica],
    ) -> Option<MetadataCommand> {
        let node = self.config.node;
        let Some(record) = metadata.nodes.get(&node).filter(|record| record.address == self.config.address) else {
            return Some(MetadataCommand::RegisterNode { node, address: self.config.address.clone() });
        };
        if std::mem::take(&mut self.open_wanted) {
            return Some(MetadataCommand::OpenSession { node });
        }
        if let Some(expiry) = self.expiries.pop_front() {
            return Some(expiry);
        }
        // Each node creates its own configured groups the metadata lacks; a
        // group another node created first is refused as existing, harmlessly.
        // Neither creations nor steps while frozen: they would be refused.
        let frozen = metadata.frozen.is_some();
        if !frozen && let Some(create) = self.bootstrap_command(metadata) {
            return Some(create);
        }
        // Z6: the metadata primary records its own group's voters once, so
        // operations can change them like any group's.
        if metadata_primary && let Some(record) = self.metadata_record_command(metadata, hosted) {
            return Some(record);
        }
        // M2/M4: the metadata primary drives operations from the stored plans.
        if metadata_primary
            && !frozen
            && let Some(step) = metadata.next_operation_step()
        {
            return Some(step);
        }
        if let Some(sealed) = self.sealed_report(metadata, hosted) {
            return Some(sealed);
        }
        if let Some(caught_up) = self.caught_up_report(metadata, hosted) {
            return Some(caught_up);
        }
        if let Some(session) = self.current.filter(|session| record.session == Some(*session)) {
            if let Some(report) = self.report_command(now, metadata, session, hosted) {
                return Some(report);
            }
            if record.acked < metadata.config_epoch && self.conforms(metadata, hosted) {
                return Some(MetadataCommand::AckEpoch { node, epoch: metadata.config_epoch });
            }
        }
        // C5: the balancer, least urgent of all, at a bounded rate.
        if metadata_primary {
            return self.balance(now, metadata);
        }
        None
    }

    /// Z6: whether this node's metadata replica was left behind by a switch
    /// its copy of the metadata does not know of: it learns the log, heard
    /// a later incarnation run, and applied neither a seal nor a pending
    /// switch that names it (see `switch_metadata`). Then the agent reads
    /// the metadata group's record from its primary.
    fn record_read_wanted(&self, metadata: &Metadata, hosted: &[HostedReplica]) -> bool {
        let group = self.config.metadata_group;
        let Some(here) = hosted.iter().find(|hosted| hosted.group == group) else { return false };
        let known = metadata
            .groups
            .get(&group)
            .is_some_and(|record| record.incarnation == here.incarnation && record.pending.is_some());
        let read = self.metadata_record_read.as_ref().is_some_and(|record| record.incarnation > here.incarnation);
        let left_behind = here.outpaced && here.sealed.is_none() && !known && !read;
        // A learner that recovered into an incarnation its copy does not
        // know knows no learner but itself: it needs the list too.
        let learner = !here.members.contains(&self.config.node);
        let copy = metadata.groups.get(&group);
        let current = copy.is_some_and(|record| record.incarnation == here.incarnation);
        let lost =
            learner && !current && here.learners == [self.config.node] && self.known_learners(copy, here).is_none();
        left_behind || lost
    }

    /// Ask the metadata primary for the metadata group's record (a read:
    /// request 0, which no write uses, so its answer is never mistaken for
    /// a write's).
    fn read_metadata_record(&mut self, now: u64, out: &mut Vec<AgentOutput>) {
        let query = super::record_query(self.config.metadata_group);
        let request =
            client::read(self.config.client, cohort_messages::RequestNumber(0), self.config.metadata_group, query);
        out.push(AgentOutput::Submit(request.clone()));
        self.in_flight = Some(InFlight { request, command: None, sent_tick: now });
    }

    /// Z6: the metadata group as its primary runs it, if the metadata has
    /// no record of it yet.
    fn metadata_record_command(&self, metadata: &Metadata, hosted: &[HostedReplica]) -> Option<MetadataCommand> {
        let group = self.config.metadata_group;
        if metadata.groups.contains_key(&group) {
            return None;
        }
        let here = hosted.iter().find(|hosted| hosted.group == group && hosted.primary && hosted.sealed.is_none())?;
        Some(MetadataCommand::RecordMetadataGroup {
            incarnation: here.incarnation,
            members: here.members.clone(),
            learners: here.learners.clone(),
        })
    }

    /// The bootstrap groups whose members all registered and that the
    /// metadata does not know yet, up to a batch of them in one command (Z2:
    /// a node configured with 100,000 groups creates them in a few hundred
    /// epochs, not 100,000). The groups whose first member is this node go
    /// first: nodes configured alike then create different batches at once
    /// rather than each the same one, and any node still creates the groups
    /// of a first member that is down.
    fn bootstrap_command(&self, metadata: &Metadata) -> Option<MetadataCommand> {
        let node = self.config.node;
        let missing = |bootstrap: &&BootstrapGroup| {
            !metadata.groups.contains_key(&bootstrap.group)
                && bootstrap.members.iter().all(|m| metadata.nodes.contains_key(m))
        };
        let first_here = |bootstrap: &&BootstrapGroup| bootstrap.members.first() == Some(&node);
        let bootstrap = &self.config.bootstrap_groups;
        let groups: Vec<GroupCreation> = bootstrap
            .iter()
            .filter(first_here)
            .filter(missing)
            .chain(bootstrap.iter().filter(|b| !first_here(b)).filter(missing))
            .take(METADATA_BATCH_ENTRIES_MAX)
            .map(|BootstrapGroup { group, kind, members, replication }| GroupCreation {
                group: *group,
                kind: kind.clone(),
                members: members.clone(),
                replication: *replication,
            })
            .collect();
        (!groups.is_empty()).then_some(MetadataCommand::CreateGroups { groups })
    }

    /// S4: the groups this node leads whose ownership record is not this
    /// node in this view under this session, up to a batch of them in one
    /// command (Z2: after a start or a failover a node reports thousands);
    /// the rest wait in [`Between::Reports`] for the batches after it.
    fn report_command(
        &mut self,
        now: u64,
        metadata: &Metadata,
        session: SessionId,
        hosted: &[HostedReplica],
    ) -> Option<MetadataCommand> {
        let (node, config, refused) = (self.config.node, &self.config, &self.refused_reports);
        let mut backlog: VecDeque<OwnedGroup> = hosted
            .iter()
            .filter(|hosted| hosted.primary)
            .map(|hosted| OwnedGroup { group: hosted.group, incarnation: hosted.incarnation, view: hosted.view })
            .filter(|report| to_report(config, metadata, refused, session, report))
            .collect();
        if backlog.is_empty() {
            return None;
        }
        let reports: Vec<OwnedGroup> = backlog.drain(..backlog.len().min(METADATA_BATCH_ENTRIES_MAX)).collect();
        if !backlog.is_empty() {
            self.between = Between::Reports { scanned_tick: now, backlog };
        }
        Some(MetadataCommand::ReportOwnerships { node, session, reports })
    }

    /// S4: unload hosted groups the metadata has placed elsewhere or deleted,
    /// once that has held for the grace period.
    fn unload_misplaced(
        &mut self,
        now: u64,
        metadata: &Metadata,
        hosted: &[HostedReplica],
        out: &mut Vec<AgentOutput>,
    ) {
        let node = self.config.node;
        let misplaced: Vec<GroupId> = hosted
            .iter()
            .filter(|hosted| hosted.group != self.config.metadata_group)
            .filter(|hosted| {
                metadata.groups.get(&hosted.group).is_some_and(|record| {
                    // Metadata older than the replica (a restarted node replays
                    // its metadata log from a snapshot) says nothing about it.
                    let current = record.incarnation >= hosted.incarnation;
                    let next = record.pending.as_ref().is_some_and(|pending| pending.seal.members.contains(&node));
                    let placed = record.members.contains(&node) || record.learners.contains(&node) || next;
                    !record.live || (current && !placed)
                })
            })
            .map(|hosted| hosted.group)
            .collect();
        self.misplaced_since.retain(|group, _| misplaced.contains(group));
        for group in misplaced {
            let since = *self.misplaced_since.entry(group).or_insert(now);
            if now >= since.saturating_add(self.config.unload_grace_ticks) {
                self.misplaced_since.remove(&group);
                self.counters.groups_unloaded += 1;
                out.push(AgentOutput::Unload(group));
            }
        }
    }

    /// Member changes (see `operations`): the primary seals, and a next
    /// member whose replica is sealed switches once the metadata did.
    fn carry_out_switches(
        &mut self,
        now: u64,
        metadata: &Metadata,
        hosted: &[HostedReplica],
        out: &mut Vec<AgentOutput>,
    ) {
        let node = self.config.node;
        for hosted in hosted {
            if hosted.group == self.config.metadata_group {
                self.switch_metadata(metadata.groups.get(&hosted.group), hosted, out);
            }
            let Some(record) = metadata.groups.get(&hosted.group).filter(|record| record.live) else { continue };
            if let Some(pending) = &record.pending
                && record.incarnation == hosted.incarnation
                && hosted.primary
                && hosted.sealed.is_none()
                && asked_again(&mut self.seals_proposed, hosted.group, now, self.config.request_retry_ticks)
            {
                out.push(AgentOutput::ProposeSeal { group: hosted.group, seal: pending.seal.clone() });
            }
            let switched_in_metadata = hosted.sealed.as_ref().is_some_and(|seal| {
                seal.incarnation == record.incarnation
                    && seal.members == record.members
                    && record.members.contains(&node)
            });
            if switched_in_metadata && record.incarnation > hosted.incarnation {
                self.seals_proposed.remove(&hosted.group);
                out.push(AgentOutput::Switch(hosted.group));
            }
        }
    }

    /// Z6: the metadata group's own switch. Its log is the one sealed, so
    /// no metadata command can gate it; the seal committed only once every
    /// next member held it (see `replica::seal`), so a replica that applied
    /// it durably switches at once: a next member as a voter, any other
    /// node the pending switch names as a learner.
    fn switch_metadata(
        &mut self,
        record: Option<&super::GroupRecord>,
        hosted: &HostedReplica,
        out: &mut Vec<AgentOutput>,
    ) {
        let node = self.config.node;
        // The copy speaks of this replica's incarnation (it may lag behind
        // it after a switch from the applied point, below).
        let current = record.filter(|record| record.incarnation == hosted.incarnation);
        if record.is_none() || current.is_some() {
            if let Some(seal) = hosted.sealed.as_ref().filter(|_| hosted.seal_durable)
                && seal.members.contains(&node)
            {
                self.seals_proposed.remove(&hosted.group);
                out.push(AgentOutput::Switch(hosted.group));
                return;
            }
            let pending = current.and_then(|record| record.pending.as_ref());
            if let Some(pending) = pending.filter(|pending| !pending.seal.members.contains(&node)) {
                let ready = match &hosted.sealed {
                    Some(seal) => *seal == pending.seal,
                    None => hosted.outpaced,
                };
                if ready && pending.learners.contains(&node) {
                    let (seal, learners) = (pending.seal.clone(), pending.learners.clone());
                    out.push(AgentOutput::SwitchLearner { group: hosted.group, seal, learners });
                }
                return;
            }
        }
        // A learner whose copy lags behind its replica's incarnation (it
        // switched from its applied point, or recovered into a later
        // incarnation knowing only itself as a learner): the learners as
        // the pending switch or the record read names them, so its member
        // index is the one the primary sends to.
        if let Some(learners) = self.known_learners(record, hosted)
            && *learners != hosted.learners
            && learners.contains(&node)
            && !hosted.members.contains(&node)
        {
            out.push(AgentOutput::SetLearners { group: hosted.group, learners: learners.clone() });
            return;
        }
        // A switch this node's copy never saw: the record read says where
        // the group went (see `record_read_wanted`).
        if let Some(read) = self.metadata_record_read.as_ref().filter(|read| read.incarnation > hosted.incarnation)
            && hosted.outpaced
            && hosted.sealed.is_none()
            && read.learners.contains(&node)
        {
            let majority = read.members.len() / 2 + 1;
            let seal = Seal {
                incarnation: read.incarnation,
                members: read.members.clone(),
                replication_quorum: read.replication.quorum.unwrap_or(majority as u8),
            };
            out.push(AgentOutput::SwitchLearner { group: hosted.group, seal, learners: read.learners.clone() });
        }
    }

    /// Z6: the metadata group's learners at the incarnation `hosted` runs,
    /// when this node's copy is not at that incarnation: from the pending
    /// switch into it, or from a record read of it.
    fn known_learners<'a>(
        &'a self,
        record: Option<&'a super::GroupRecord>,
        hosted: &HostedReplica,
    ) -> Option<&'a Vec<NodeId>> {
        if record.is_some_and(|record| record.incarnation == hosted.incarnation) {
            return None; // `follow_learners` keeps them.
        }
        let pending = record.and_then(|record| record.pending.as_ref());
        if let Some(pending) = pending.filter(|pending| pending.seal.incarnation == hosted.incarnation) {
            return Some(&pending.learners);
        }
        let read = self.metadata_record_read.as_ref()?;
        (read.incarnation == hosted.incarnation).then_some(&read.learners)
    }

    /// P4: host the groups this node is a learner of, and keep every hosted
    /// replica's learners as the metadata has them.
    fn follow_learners(&mut self, now: u64, metadata: &Metadata, hosted: &[HostedReplica], out: &mut Vec<AgentOutput>) {
        let node = self.config.node;
        let hosted = by_group(hosted);
        for (group, record) in metadata.groups.iter().filter(|(_, record)| record.live) {
            // The metadata group is never hosted empty: a node's copy of the
            // metadata is that replica's state (Z6).
            let placeable = *group != self.config.metadata_group;
            match hosted.get(group) {
                // Never replace a replica of this incarnation or a later one:
                // the applied metadata may be older than the replica after a
                // restart.
                Some(here) if here.incarnation > record.incarnation => {}
                Some(here) if here.incarnation == record.incarnation => {
                    let keeps_self = record.members.contains(&node) || record.learners.contains(&node);
                    if here.learners != record.learners && keeps_self {
                        out.push(AgentOutput::SetLearners { group: *group, learners: record.learners.clone() });
                    }
                }
                // (A guard that asks fails only when it was asked recently;
                // a member is never a learner, so nothing below matches it.)
                // A member of the group's first incarnation starts empty,
                // as at its creation; so does one while a switch is pending
                // if it is a member of the next incarnation too: the seal
                // commits only once every next member holds it (Z6), and a
                // node that came up too late to host the group at its
                // creation would otherwise hold the switch up for good.
                None if placeable
                    && record.members.contains(&node)
                    && record.incarnation == record.created
                    && record.pending.as_ref().is_none_or(|pending| pending.seal.members.contains(&node))
                    && asked_again(&mut self.replicas_asked, *group, now, self.config.request_retry_ticks) =>
                {
                    out.push(AgentOutput::HostMember {
                        group: *group,
                        kind: record.kind.clone(),
                        incarnation: record.incarnation,
                        members: record.members.clone(),
                        replication: record.replication,
                    });
                }
                _ if placeable
                    && record.learners.contains(&node)
                    && asked_again(&mut self.replicas_asked, *group, now, self.config.request_retry_ticks) =>
                {
                    out.push(AgentOutput::HostLearner {
                        group: *group,
                        kind: record.kind.clone(),
                        incarnation: record.incarnation,
                        members: record.members.clone(),
                        learners: record.learners.clone(),
                        replication: record.replication,
                    });
                }
                _ => {}
            }
        }
    }

    /// C4: the groups this node leads that the metadata asks to hand to
    /// another member. The shard refuses while that member is behind; it is
    /// asked again after a retry period until a report of a later view
    /// ends the transfer.
    fn carry_out_transfers(
        &mut self,
        now: u64,
        metadata: &Metadata,
        hosted: &[HostedReplica],
        out: &mut Vec<AgentOutput>,
    ) {
        let node = self.config.node;
        let wanted: Vec<(GroupId, NodeId)> = hosted
            .iter()
            .filter(|hosted| hosted.primary && hosted.sealed.is_none() && hosted.group != self.config.metadata_group)
            .filter_map(|hosted| {
                let record = metadata.groups.get(&hosted.group).filter(|record| record.live)?;
                let transfer = record.transfer?;
                let current = record.incarnation == hosted.incarnation && hosted.view >= transfer.view;
                (current && transfer.to != node).then_some((hosted.group, transfer.to))
            })
            .collect();
        self.transfers_asked.retain(|group, _| wanted.iter().any(|(wanted, _)| wanted == group));
        for (group, to) in wanted {
            if asked_again(&mut self.transfers_asked, group, now, self.config.request_retry_ticks) {
                out.push(AgentOutput::TransferPrimary { group, to });
            }
        }
    }

    /// P4: the primary reports learners that caught up.
    fn caught_up_report(&self, metadata: &Metadata, hosted: &[HostedReplica]) -> Option<MetadataCommand> {
        hosted.iter().filter(|hosted| hosted.primary).find_map(|hosted| {
            let record =
                metadata.groups.get(&hosted.group).filter(|r| r.live && r.incarnation == hosted.incarnation)?;
            // Every node past the metadata voters learns its log (Z5): only
            // the one an operation is to promote is worth an epoch.
            let wanted =
                |node: &NodeId| hosted.group != self.config.metadata_group || metadata.promotes(hosted.group, *node);
            let learner = hosted
                .caught_up
                .iter()
                .find(|node| record.learners.contains(node) && !record.caught_up.contains(node) && wanted(node))?;
            Some(MetadataCommand::ReportCaughtUp {
                group: hosted.group,
                incarnation: hosted.incarnation,
                node: *learner,
                op: cohort_messages::Op(0),
            })
        })
    }

    /// A next member whose replica holds the pending seal durably says so.
    fn sealed_report(&self, metadata: &Metadata, hosted: &[HostedReplica]) -> Option<MetadataCommand> {
        let node = self.config.node;
        hosted.iter().find_map(|hosted| {
            let record = metadata.groups.get(&hosted.group)?;
            let pending = record.pending.as_ref()?;
            let holds = hosted.seal_durable
                && hosted.sealed.as_ref() == Some(&pending.seal)
                && record.incarnation == hosted.incarnation;
            // Z6: a metadata voter reports from the next incarnation, which
            // it switched to holding the seal (the sealed log takes no more).
            let switched = hosted.group == self.config.metadata_group && hosted.incarnation == pending.seal.incarnation;
            (((holds || switched) && pending.seal.members.contains(&node)) && !pending.sealed_by.contains(&node))
                .then_some(MetadataCommand::ReportSealed { group: hosted.group, incarnation: record.incarnation, node })
        })
    }

    /// Whether this node's replicas match the metadata's placement: every
    /// group it is a member of is hosted at the metadata's incarnation. A
    /// node acks a configuration epoch only then, so a step's gate (M2)
    /// waits for the groups, not just for the log.
    fn conforms(&self, metadata: &Metadata, hosted: &[HostedReplica]) -> bool {
        let node = self.config.node;
        let hosted = by_group(hosted);
        metadata
            .groups
            .iter()
            .filter(|(_, record)| record.live && (record.members.contains(&node) || record.learners.contains(&node)))
            .all(|(group, record)| {
                hosted.get(group).is_some_and(|hosted| {
                    hosted.incarnation == record.incarnation && hosted.learners == record.learners
                })
            })
    }

    /// The answer to one of this agent's requests (others are ignored).
    pub fn on_reply(&mut self, now: u64, reply: &Reply) -> Vec<AgentOutput> {
        let mut out = Vec::new();
        let Some(in_flight) = self.in_flight.as_ref() else { return out };
        if !client::answers(&in_flight.request, reply) {
            return out;
        }
        let result = match client::verdict(reply) {
            // View change, busy, quorum window: send the same request again soon.
            Verdict::Retry { .. } => {
                if let Some(in_flight) = self.in_flight.as_mut() {
                    in_flight.sent_tick = now.saturating_sub(self.config.request_retry_ticks / 2);
                }
                return out;
            }
            // Refused for good: what to ask is decided again from the applied state.
            Verdict::Refused { .. } => {
                self.in_flight = None;
                return out;
            }
            Verdict::Done { result, .. } if in_flight.command.is_none() => {
                self.in_flight = None;
                // An answer that does not decode counts as a refused frame.
                match super::decode_record_read(result) {
                    Ok(record) => self.metadata_record_read = record,
                    Err(_) => self.counters.frames_refused += 1,
                }
                return out;
            }
            Verdict::Done { result, .. } => MetadataResult::decode(result),
        };
        let Some(InFlight { command: Some(command), .. }) = self.in_flight.take() else { return out };
        match (command, result) {
            (MetadataCommand::OpenSession { .. }, Ok(MetadataResult::SessionOpened { session, .. })) => {
                if let Some(SessionAction::Reown(session)) = self.session.on_opened(session, now) {
                    self.current = Some(session);
                    self.open_wanted = false;
                    self.refused_reports.clear();
                    self.counters.sessions_opened += 1;
                    out.push(AgentOutput::SessionOpened(session));
                }
            }
            (MetadataCommand::ReportOwnership { group, view, session, .. }, Ok(MetadataResult::Refused { .. })) => {
                self.counters.reports_refused += 1;
                self.refused_reports.insert(group, (view, session));
            }
            (MetadataCommand::ReportOwnership { .. }, Ok(MetadataResult::Done { .. })) => {
                self.counters.reports_accepted += 1;
            }
            (
                MetadataCommand::ReportOwnerships { session, reports, .. },
                Ok(MetadataResult::OwnershipsReported { refused, .. }),
            ) => {
                for report in &reports {
                    if refused.contains(&report.group) {
                        self.counters.reports_refused += 1;
                        self.refused_reports.insert(report.group, (report.view, session));
                    } else {
                        self.counters.reports_accepted += 1;
                    }
                }
            }
            // Everything else is decided again from the applied state.
            _ => {}
        }
        out
    }

    /// The metadata group says this node's session is over.
    /// `from` is the node the notice came from (this node for its own), and
    /// `members` the metadata group's voters: only they may say a session
    /// expired (T3).
    pub fn on_session_expired(
        &mut self,
        from: NodeId,
        members: &[NodeId],
        notice: &SessionExpired,
    ) -> Vec<AgentOutput> {
        let mut out = Vec::new();
        if from != self.config.node && !members.contains(&from) {
            self.counters.frames_refused += 1;
            return out;
        }
        if notice.node == self.config.node && !self.stopped {
            self.expired(notice.session, &mut out);
        }
        out
    }

    /// On a metadata member: a keepalive from `keepalive.node`, which came
    /// from node `from`. On the primary it renews the session, or answers
    /// that it is over. A keepalive naming another node than its sender is
    /// refused (T3): a node keeps only its own session alive.
    pub fn on_keepalive(
        &mut self,
        now: u64,
        from: NodeId,
        keepalive: &SessionKeepalive,
        metadata: &Metadata,
    ) -> Vec<AgentOutput> {
        if keepalive.node != from {
            self.counters.frames_refused += 1;
            return Vec::new();
        }
        match self.driver.on_keepalive(keepalive.node, keepalive.session, now, metadata) {
            KeepaliveOutcome::Expired => vec![AgentOutput::NotifyExpired {
                to: keepalive.node,
                notice: SessionExpired { node: keepalive.node, session: keepalive.session, epoch: metadata.epoch },
            }],
            KeepaliveOutcome::Renewed | KeepaliveOutcome::NotPrimary => Vec::new(),
        }
    }

    fn expired(&mut self, session: SessionId, out: &mut Vec<AgentOutput>) {
        if self.current != Some(session) {
            return; // A notice about an older session.
        }
        self.current = None;
        self.counters.sessions_expired += 1;
        if let Some(SessionAction::Stop(reason)) = self.session.on_expired(session) {
            let taken = std::mem::take(out);
            *out = self.stop(reason, taken);
        }
    }

    fn stop(&mut self, reason: &'static str, mut out: Vec<AgentOutput>) -> Vec<AgentOutput> {
        self.stopped = true;
        self.in_flight = None;
        out.push(AgentOutput::Stop(reason));
        out
    }
}

/// S4: whether `report`, of a group this node leads, is still to be
/// reported under `session`: the metadata places the group here in that
/// incarnation, does not record this node as its owner in that view under
/// that session yet, and did not refuse that report before.
fn to_report(
    config: &AgentConfig,
    metadata: &Metadata,
    refused: &BTreeMap<GroupId, (View, SessionId)>,
    session: SessionId,
    report: &OwnedGroup,
) -> bool {
    let node = config.node;
    if report.group == config.metadata_group {
        return false;
    }
    let Some(record) = metadata.groups.get(&report.group).filter(|record| record.live) else {
        return false;
    };
    let placed_here = record.incarnation == report.incarnation && record.members.contains(&node);
    let current = record.owner == Some(Ownership { node, view: report.view, session });
    let refused = refused.get(&report.group) == Some(&(report.view, session));
    placed_here && !current && !refused
}

/// Whether `group` may be asked for again at `now`, given when it last was
/// (`asked`): once, then only after `retry_ticks`. Records `now` if so.
fn asked_again(asked: &mut BTreeMap<GroupId, u64>, group: GroupId, now: u64, retry_ticks: u64) -> bool {
    let due = asked.get(&group).is_none_or(|last| now >= last.saturating_add(retry_ticks));
    if due {
        asked.insert(group, now);
    }
    due
}

/// The hosted groups by id (a node hosts at most one replica of a group), so
/// per-tick work over every group in the metadata stays linear.
fn by_group(hosted: &[HostedReplica]) -> std::collections::HashMap<GroupId, &HostedReplica> {
    hosted.iter().map(|hosted| (hosted.group, hosted)).collect()
}
