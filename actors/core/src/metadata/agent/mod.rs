//! A node's metadata agent: everything one node does with the metadata group,
//! in one sans-IO state machine that the runtime's node and the simulator
//! both drive, so the simulator checks the code nodes run.
//!
//! It does one job per module, each with its own state:
//! - [`session`]: register, open a session and keep it alive (S1), apply
//!   the expiry policy (S3); on the metadata primary, expire silent
//!   sessions through the log ([`super::MetadataDriver`], S1/S2);
//! - [`ownership`]: after every new session, report the groups this node
//!   leads (S4; a report with a stale view is refused by the metadata state
//!   machine), and unload a hosted group once the metadata has placed it
//!   elsewhere or deleted it for `unload_grace_ticks` in a row;
//! - [`creation`]: create the groups configured on this node that the
//!   metadata does not know yet, once their members registered (C3);
//! - [`hosting`]: host the replicas the metadata places here, a learner
//!   (P4) or a member of a group created at run time (C3), and keep every
//!   replica's learners as the metadata has them;
//! - [`operations`]: seal and switch for member changes, report seals and
//!   caught-up learners, and ack configuration epochs (M1, M2, M4);
//! - [`metadata_group`]: the metadata group's own voters (Z6);
//! - [`balance`]: hand a group's primary to the chosen member (C4), and on
//!   the metadata primary ask for a bounded number of transfers (C5);
//! - [`requests`]: one client of the metadata group with at most one
//!   request in flight, retried with the same request number until
//!   answered, so every command applies at most once;
//! - [`between`]: the burst that goes on between scans (Z2).
//!
//! Which command goes next is decided afresh from the applied metadata each
//! time the agent is idle ([`MetadataAgent::on_tick`], most urgent first),
//! so a lost answer or a refused report is simply tried again from the
//! current state.
//!
//! # Driving contract
//!
//! Time is the node's core tick, passed in. A shell calls:
//! - [`MetadataAgent::on_tick`] with the applied metadata, the metadata
//!   replica's primary flag and a scan of the hosted groups, or
//!   [`MetadataAgent::on_idle_tick`] when it knows nothing a scan reads
//!   changed (Z3; [`MetadataAgent::wants_scan`] and
//!   [`MetadataAgent::timed_work`] say when it may);
//! - [`MetadataAgent::on_reply`] with every reply to the agent's client id,
//!   then [`MetadataAgent::between_scans`] if the reply applied and no scan
//!   is due;
//! - [`MetadataAgent::on_keepalive`] and
//!   [`MetadataAgent::on_session_expired`] with the session frames it
//!   receives.
//!
//! It executes every [`AgentOutput`] of a call in order, before the next call.

mod asked;
mod balance;
mod between;
mod config;
mod creation;
#[cfg(test)]
mod fixture;
mod hosted;
mod hosting;
mod metadata_group;
mod operations;
mod output;
mod ownership;
mod requests;
mod schedule;
mod session;

use cohort_messages::metadata::{MetadataCommand, MetadataResult};
use cohort_messages::{NodeId, Reply, SessionExpired, SessionId, SessionKeepalive};

pub use config::{AgentConfig, BootstrapGroup};
pub use hosted::HostedReplica;
pub use output::{AgentCounters, AgentOutput, PlacedReplica, placed_replaces};
pub use schedule::{
    FETCH_INTERVAL_TICKS, FINGERPRINT_SPACING_MAX, FINGERPRINT_SPACING_MAX_QUIET, FULL_SCAN_INTERVAL,
    FULL_SCAN_INTERVAL_QUIET, HostedChanges, Poll, SCAN_SPACING_FACTOR, SCAN_SPACING_MAX, STALL_TICKS_MAX, ScanInputs,
    ScanSchedule,
};

use super::Metadata;
use balance::Balance;
use between::Between;
use hosting::Hosting;
use metadata_group::RecordRead;
use operations::Switches;
use ownership::Ownership;
use requests::{Answered, Requests};
use session::SessionUpkeep;

/// The agent. See the module docs.
#[derive(Debug)]
pub struct MetadataAgent {
    config: AgentConfig,
    session: SessionUpkeep,
    requests: Requests,
    ownership: Ownership,
    switches: Switches,
    hosting: Hosting,
    balance: Balance,
    /// Z6: the metadata group's record as its primary last answered a read.
    record_read: RecordRead,
    /// What [`MetadataAgent::between_scans`] may go on with.
    between: Between,
    stopped: bool,
    counters: AgentCounters,
}

impl MetadataAgent {
    /// An agent that registers and opens its session from its first tick.
    pub fn new(config: AgentConfig) -> MetadataAgent {
        let session = SessionUpkeep::new(&config);
        let requests = Requests::new(config.client, config.metadata_group, config.request_retry_ticks);
        MetadataAgent {
            config,
            session,
            requests,
            ownership: Ownership::default(),
            switches: Switches::default(),
            hosting: Hosting::default(),
            balance: Balance::default(),
            record_read: RecordRead::default(),
            between: Between::Nothing,
            stopped: false,
            counters: AgentCounters::default(),
        }
    }

    /// The session this node holds.
    pub fn session(&self) -> Option<SessionId> {
        self.session.current()
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
        let config = &self.config;
        self.ownership.unload_misplaced(now, config, metadata, hosted, &mut self.counters, &mut out);
        self.switches.carry_out(now, config, metadata, hosted, &self.record_read, &mut out);
        self.hosting.follow(now, config, metadata, hosted, &mut out);
        self.balance.carry_out_transfers(now, config, metadata, hosted, &mut out);
        let read_wanted =
            !self.requests.busy() && self.record_read.read_wanted(config.node, config.metadata_group, metadata, hosted);
        if self.requests.retry(now, &mut out) {
            // The request in flight goes first; the next is chosen once it is answered.
        } else if read_wanted {
            // Z6: a replica left behind by a switch of the metadata group
            // learns where it went first: until then its copy says nothing.
            self.requests.read_metadata_record(now, &mut out);
        } else {
            // The scan chooses afresh what goes on between scans
            // (`next_command` leaves a report backlog there).
            self.between = Between::Nothing;
            let next = self.next_command(now, metadata, metadata_primary, hosted);
            match &next {
                Some(MetadataCommand::CreateGroups { .. }) => {
                    self.between = Between::Creations { sent_epoch: metadata.epoch }
                }
                // The balancer may go on between scans if it is what this
                // scan asked for, or if only this tick's budget held it back.
                Some(MetadataCommand::TransferPrimaries { .. }) if metadata_primary => {
                    self.between = Between::Balancing
                }
                None if metadata_primary
                    && self.config.balance_transfers_per_tick.is_some()
                    && !self.balance.budget_left(now, &self.config) =>
                {
                    self.between = Between::Balancing
                }
                _ => {}
            }
            if let Some(command) = next {
                self.requests.submit(command, now, &mut out);
            }
        }
        debug_assert!(submits(&out) <= 1, "one request at a time: {out:?}");
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
        self.requests.retry(now, &mut out);
        debug_assert!(submits(&out) <= 1, "one request at a time: {out:?}");
        out
    }

    /// True if the next tick must be a full [`MetadataAgent::on_tick`]
    /// whatever the shell knows: a session to open, an expiry to propose, or
    /// no request in flight after one was answered.
    pub fn wants_scan(&self) -> bool {
        self.session.wants_scan()
    }

    /// True while a request to the metadata group is unanswered.
    pub fn in_flight(&self) -> bool {
        self.requests.busy()
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
        self.requests.busy()
            || self.wants_scan()
            || matches!(self.between, Between::Balancing)
            || self.ownership.unload_waiting()
            || self.balance.transfers_wanted()
            || self.switches.proposed_since(recent)
            || self.hosting.asked_since(recent)
    }

    /// The answer to one of this agent's requests (others are ignored).
    pub fn on_reply(&mut self, now: u64, reply: &Reply) -> Vec<AgentOutput> {
        let mut out = Vec::new();
        match self.requests.on_reply(now, reply, &mut out) {
            None => {}
            Some(Answered::RecordRead(read)) => self.record_read.on_read(read, &mut self.counters),
            Some(Answered::Command(
                MetadataCommand::OpenSession { .. },
                Ok(MetadataResult::SessionOpened { session, .. }),
            )) => self.opened(session, now, &mut out),
            // Everything else is decided again from the applied state.
            Some(Answered::Command(command, Ok(result))) => {
                self.ownership.on_reported(&command, &result, &mut self.counters)
            }
            Some(Answered::Command(_, Err(_))) => {}
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
        let out: Vec<AgentOutput> = self.session.on_keepalive(now, keepalive, metadata).into_iter().collect();
        debug_assert!(out.iter().all(|o| matches!(o, AgentOutput::NotifyExpired { to, .. } if *to == from)));
        out
    }

    /// Checks what holds between any two calls; panics naming the rule
    /// broken. Drivers call it after each call in debug builds and in the
    /// simulator.
    pub fn invariants(&self) {
        assert!(!(self.stopped && self.requests.busy()), "a stopped agent holds no request");
        assert!(!(self.stopped && self.session.current().is_some()), "a stopped agent holds no session");
        assert!(
            !matches!(self.between, Between::Balancing) || self.config.balance_transfers_per_tick.is_some(),
            "the balancer goes on between scans only when it is on"
        );
        self.session.invariants();
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
        let node = self.config.node;
        // The applied log itself may say the session ended (the notice can be lost).
        if let Some(session) = self.session.ended_in_log(node, metadata) {
            self.expired(session, out);
            if self.stopped {
                return false; // Nothing more of this tick: the node stops.
            }
        }
        if let Err(reason) = self.session.on_tick(now, node, metadata, metadata_primary, &mut self.counters, out) {
            self.stop(reason, out);
            return false;
        }
        true
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
        if let Some(command) = self.session.next_command(node) {
            return Some(command);
        }
        // Neither creations nor steps while frozen: they would be refused.
        let frozen = metadata.frozen.is_some();
        if !frozen && let Some(create) = creation::bootstrap_command(&self.config, metadata) {
            return Some(create);
        }
        // Z6: the metadata primary records its own group's voters once, so
        // operations can change them like any group's.
        if metadata_primary
            && let Some(record) = metadata_group::record_command(self.config.metadata_group, metadata, hosted)
        {
            return Some(record);
        }
        // M2/M4: the metadata primary drives operations from the stored plans.
        if metadata_primary
            && !frozen
            && let Some(step) = metadata.next_operation_step()
        {
            return Some(step);
        }
        if let Some(sealed) = operations::sealed_report(&self.config, metadata, hosted) {
            return Some(sealed);
        }
        if let Some(caught_up) = operations::caught_up_report(&self.config, metadata, hosted) {
            return Some(caught_up);
        }
        if let Some(session) = self.session.current().filter(|session| record.session == Some(*session)) {
            if let Some((report, backlog)) = self.ownership.report_command(&self.config, metadata, session, hosted) {
                if !backlog.is_empty() {
                    self.between = Between::Reports { scanned_tick: now, backlog };
                }
                return Some(report);
            }
            if record.acked < metadata.config_epoch && operations::conforms(node, metadata, hosted) {
                return Some(MetadataCommand::AckEpoch { node, epoch: metadata.config_epoch });
            }
        }
        // C5: the balancer, least urgent of all, at a bounded rate.
        if metadata_primary {
            return self.balance.next_transfer(now, &self.config, metadata);
        }
        None
    }

    /// `OpenSession` committed: a new session, under which every report may
    /// be sent again.
    fn opened(&mut self, session: SessionId, now: u64, out: &mut Vec<AgentOutput>) {
        if self.session.on_opened(session, now, &mut self.counters, out) {
            self.ownership.on_session_opened();
        }
    }

    /// `session` is over: drop it, and stop if the policy says so.
    fn expired(&mut self, session: SessionId, out: &mut Vec<AgentOutput>) {
        if let Some(reason) = self.session.expired(session, &mut self.counters) {
            self.stop(reason, out);
        }
    }

    fn stop(&mut self, reason: &'static str, out: &mut Vec<AgentOutput>) {
        self.stopped = true;
        self.requests.abandon();
        out.push(AgentOutput::Stop(reason));
        assert!(!self.requests.busy(), "a stopped agent has no request in flight");
    }
}

/// How many requests `out` sends.
fn submits(out: &[AgentOutput]) -> usize {
    out.iter().filter(|output| matches!(output, AgentOutput::Submit(_))).count()
}

#[cfg(test)]
mod tests {
    use cohort_messages::metadata::OwnedGroup;
    use cohort_messages::{GroupId, Incarnation, View};

    use super::fixture::{self, NODE, hosted};
    use super::*;

    /// Tick as the metadata primary hosting groups 0 (led, view 2), 1 and
    /// the metadata group; apply and answer what the tick submits.
    fn step(agent: &mut MetadataAgent, now: u64, metadata: &mut Metadata) -> (Vec<AgentOutput>, Vec<AgentOutput>) {
        let hosted = [hosted(0, true, 2), hosted(1, false, 0), fixture::metadata_replica(true, &[1], &[])];
        let out = agent.on_tick(now, metadata, true, &hosted);
        let out = fixture::past_registration(agent, now, out);
        let mut answered = Vec::new();
        for output in &out {
            if let AgentOutput::Submit(request) = output {
                let command = MetadataCommand::decode(&request.operation).expect("a valid command");
                let result = fixture::apply(metadata, command);
                answered.extend(agent.on_reply(now, &fixture::reply(request, &result)));
            }
        }
        (out, answered)
    }

    #[test]
    fn s4_after_a_start_the_agent_asks_for_the_most_urgent_command_first() {
        let mut agent = MetadataAgent::new(fixture::config());
        let mut metadata = Metadata::default();
        let steps: Vec<(Vec<AgentOutput>, Vec<AgentOutput>)> =
            (1..=7).map(|now| step(&mut agent, now, &mut metadata)).collect();
        let session = fixture::session(&metadata, 1);
        let created = |group: u64| cohort_messages::metadata::GroupCreation {
            group: GroupId(group),
            kind: "kv".into(),
            members: vec![NODE],
            replication: Default::default(),
        };
        let commands = [
            MetadataCommand::RegisterNode { node: NODE, address: "n1".into() },
            MetadataCommand::OpenSession { node: NODE },
            MetadataCommand::CreateGroups { groups: vec![created(0), created(1)] },
            MetadataCommand::RecordMetadataGroup { incarnation: Incarnation(1), members: vec![NODE], learners: vec![] },
            MetadataCommand::ReportOwnerships {
                node: NODE,
                session,
                reports: vec![OwnedGroup { group: GroupId(0), incarnation: Incarnation(1), view: View(2) }],
            },
            MetadataCommand::AckEpoch { node: NODE, epoch: metadata.config_epoch },
        ];
        let mut expected: Vec<(Vec<AgentOutput>, Vec<AgentOutput>)> =
            commands.iter().zip(1..).map(|(command, number)| (vec![fixture::write(number, command)], vec![])).collect();
        expected[1].1 = vec![AgentOutput::SessionOpened(session)];
        // Tick 7: a keepalive, and nothing left to ask (no balancer).
        expected.push((vec![AgentOutput::Keepalive(SessionKeepalive { node: NODE, session })], vec![]));
        assert_eq!(steps, expected);
        // With the balancer off, nothing it could do keeps the agent busy.
        assert!(!agent.timed_work(7) && !agent.wants_scan());
        let counted = AgentCounters { sessions_opened: 1, reports_accepted: 1, ..AgentCounters::default() };
        assert_eq!(agent.counters(), counted);
    }

    #[test]
    fn z3_an_idle_tick_keeps_the_session_and_resends_what_is_in_flight() {
        let mut agent = MetadataAgent::new(fixture::config());
        let metadata = Metadata::default();
        let register = MetadataCommand::RegisterNode { node: NODE, address: "n1".into() };
        assert_eq!(agent.on_tick(1, &metadata, false, &[]), vec![fixture::registration()]);
        assert!(agent.in_flight() && agent.timed_work(1) && agent.wants_scan());
        let idle: Vec<Vec<AgentOutput>> = (2..=5).map(|now| agent.on_idle_tick(now, &metadata, false)).collect();
        assert_eq!(idle, vec![vec![], vec![], vec![], vec![fixture::registration()]]);
        let sent = fixture::past_registration(&mut agent, 5, vec![fixture::registration()]);
        assert_eq!(sent, vec![fixture::write(1, &register)], "H5: the command the registration held back");
    }
}
