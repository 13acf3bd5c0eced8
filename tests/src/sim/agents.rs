//! The metadata scenario's shell around each node's [`MetadataAgent`]: the
//! simulator drives the agent as the runtime's agent actor does, through
//! the same [`ScanSchedule`] and [`RequestRoute`], and carries its outputs
//! over the simulated network as real frames, like any other traffic, so
//! loss, delay, partitions and pauses reach it too.
//!
//! - Every tick a running node's timer fires: the schedule says whether to
//!   tick the agent idle, ask the shards their cheap answer (role and
//!   hosting changes, the metadata replica's primary flag), their
//!   fingerprint, or scan them; the shards answer at once. A scan takes a
//!   modelled duration ([`crate::metadata::SCAN_COST_PER_GROUP`]) that
//!   spaces the next (Z2). The agent gets the applied metadata of the
//!   node's own metadata replica and the primary flag the last scan saw.
//! - `Submit` becomes a `Request` to the voter the node's [`RequestRoute`]
//!   names: a voter first asks itself; a `Redirect` naming a node resends
//!   there at once (a bounded number of times), and a resend by the agent
//!   (no answer in time) tries the next voter. Answers to the agent's
//!   client id are addressed to its node, and reach the agent there (the
//!   shard ignores replies and session messages). After an applied reply
//!   the schedule says whether to scan now or go on with the burst between
//!   scans. Frames reach the agent in the middle of a tick
//!   ([`crate::metadata::delivery_clock`]).
//! - `Keepalive` goes to every voter of the metadata group as the node's
//!   applied metadata lists them (its own agent directly), where the
//!   agent's driver judges it (unless its schedule says a stall left its
//!   view stale); `NotifyExpired` goes to the named node (its own agent
//!   directly).
//! - `Unload` removes the group from the shard; `Stop` takes the node down
//!   until an operator restarts it, with a fresh agent and client id.

use cohort_core::metadata::{AgentCounters, AgentOutput, Destination, HostedChanges, HostedReplica, Poll};
use cohort_core::replica::Placement;
use cohort_messages::{ClientId, GroupId, Message, Redirect, TraceContext};

use super::Sim;
use crate::metadata::{self, SCAN_COST_PER_GROUP, STOPPED_DOWN_TICKS, delivery_clock, timer_clock};
use crate::network::{Endpoint, Packet};
use crate::node::{CLUSTER, node_id, node_index};

impl Sim {
    /// A node (re)started: give it a fresh agent in the metadata scenario.
    pub(super) fn start_agent(&mut self, index: usize) {
        if self.metadata_spec.is_none() {
            return;
        }
        let (seed, now) = (self.config.seed, self.now);
        let node = &mut self.nodes[index];
        node.agent = Some(metadata::agent_shell(seed, index, node.restarts, self.policy, &self.specs, now));
    }

    /// A node's process ends: keep its agent's counters.
    pub(super) fn retire_agent(&mut self, index: usize) {
        if let Some(shell) = self.nodes[index].agent.take() {
            add(&mut self.retired_agents, shell.agent.counters());
        }
    }

    /// The counters of every agent of the run, past and present.
    pub(super) fn agent_counters(&self) -> AgentCounters {
        let mut total = self.retired_agents;
        for shell in self.nodes.iter().filter_map(|node| node.agent.as_ref()) {
            add(&mut total, shell.agent.counters());
        }
        total
    }

    /// The node whose running agent uses client id `id`.
    pub(super) fn agent_of(&self, id: ClientId) -> Option<usize> {
        self.nodes.iter().position(|node| node.agent.as_ref().is_some_and(|shell| shell.agent.config().client == id))
    }

    /// The timer of a running node's agent fires.
    pub(super) fn tick_agent(&mut self, index: usize) {
        let clock = timer_clock(self.now);
        let node = &mut self.nodes[index];
        if !node.is_up() {
            return;
        }
        let Some(shell) = node.agent.as_mut() else { return };
        shell.schedule.on_timer(clock);
        let poll = shell.schedule.poll(clock, &shell.agent);
        self.follow_schedule(index, clock, poll);
    }

    /// Do what node `index`'s schedule said at `clock`, the shards answering
    /// at once, until it says to tick the agent or to wait.
    fn follow_schedule(&mut self, index: usize, clock: std::time::Duration, mut poll: Poll) {
        let now = self.now;
        loop {
            let epoch = self.nodes[index].metadata.borrow().epoch;
            poll = match poll {
                Poll::Wait => return,
                Poll::AskChanges => {
                    let changes = self.hosted_changes(index);
                    let Some(shell) = self.nodes[index].agent.as_mut() else { return };
                    shell.schedule.on_changes(clock, Some(changes), &shell.agent, epoch)
                }
                Poll::AskFingerprint => {
                    let node = &mut self.nodes[index];
                    let sum = node
                        .shards
                        .iter()
                        .fold(0u64, |sum, shard| sum.wrapping_add(shard.core().hosted_fingerprint(now)));
                    let Some(shell) = node.agent.as_mut() else { return };
                    shell.schedule.on_fingerprint(clock, Some(sum), &shell.agent, epoch)
                }
                Poll::Idle => {
                    let node = &mut self.nodes[index];
                    let Some(shell) = node.agent.as_mut() else { return };
                    let primary = shell.schedule.metadata_primary();
                    let outputs = shell.agent.on_idle_tick(now, &node.metadata.borrow(), primary);
                    self.run_agent_outputs(index, outputs);
                    return self.after_agent_tick(index);
                }
                Poll::Scan => {
                    let hosted = self.hosted(index);
                    let node = &mut self.nodes[index];
                    let Some(shell) = node.agent.as_mut() else { return };
                    shell.schedule.on_scanned(clock, &hosted, epoch, shell.agent.in_flight());
                    let primary = shell.schedule.metadata_primary();
                    let outputs = shell.agent.on_tick(now, &node.metadata.borrow(), primary, &hosted);
                    self.run_agent_outputs(index, outputs);
                    if let Some(shell) = self.nodes[index].agent.as_mut() {
                        let groups = u32::try_from(hosted.len()).unwrap_or(u32::MAX);
                        shell.schedule.scan_took(SCAN_COST_PER_GROUP * groups);
                    }
                    return self.after_agent_tick(index);
                }
                Poll::BetweenScans => {
                    let node = &mut self.nodes[index];
                    let Some(shell) = node.agent.as_mut() else { return };
                    let primary = shell.schedule.metadata_primary();
                    let outputs = shell.agent.between_scans(now, &node.metadata.borrow(), primary);
                    return self.run_agent_outputs(index, outputs);
                }
            };
        }
    }

    /// Z3: node `index`'s cheap answer: each shard's driver's, summed, as
    /// a node's agent sums its shards' answers.
    fn hosted_changes(&self, index: usize) -> HostedChanges {
        let mut changes = HostedChanges::default();
        for shard in &self.nodes[index].shards {
            let answer = shard.driver.hosted_changes();
            changes.events = changes.events.wrapping_add(answer.events);
            changes.metadata_primary = changes.metadata_primary.or(answer.metadata_primary);
        }
        changes
    }

    /// What node `index` hosts, as a scan of its shards says: the
    /// configured groups, those hosted at run time (C3, P4), and the
    /// metadata group (Z6: its voters change through operations like any
    /// group's).
    fn hosted(&self, index: usize) -> Vec<HostedReplica> {
        let node = &self.nodes[index];
        let configured = self.specs.iter().map(|spec| spec.group).filter(|group| !node.extra_specs.contains_key(group));
        let metadata_group = self.metadata_spec.as_ref().map(|spec| spec.group);
        let groups: Vec<GroupId> = configured.chain(node.extra_specs.keys().copied()).chain(metadata_group).collect();
        groups.into_iter().filter_map(|group| node.shard_for(group)?.hosted_replica(group, self.now)).collect()
    }

    /// What follows every tick of an agent: the runtime's agent reads the
    /// whole metadata state when its node hosts no metadata replica (Z5).
    /// Every simulated node starts as a voter or a learner of the metadata
    /// group, so the schedule never says to here.
    fn after_agent_tick(&mut self, index: usize) {
        let now = self.now;
        let Some(shell) = self.nodes[index].agent.as_mut() else { return };
        let due = shell.schedule.fetch_due(now, true);
        debug_assert!(!due, "a node that follows the metadata log never reads the whole state");
    }

    /// A message for node `index` that its agent takes; anything else is
    /// handed back for the shard.
    pub(super) fn deliver_to_agent(
        &mut self,
        index: usize,
        from: cohort_messages::NodeId,
        message: Message,
    ) -> Option<Message> {
        let (now, clock) = (self.now, delivery_clock(self.now));
        let members = self.metadata_voters(index);
        let node = &mut self.nodes[index];
        let Some(shell) = node.agent.as_mut() else { return Some(message) };
        let outputs = match message {
            Message::Reply(reply) => {
                let outputs = shell.agent.on_reply(now, &reply);
                self.run_agent_outputs(index, outputs);
                // As the runtime's agent does: an applied reply lets the
                // agent go on at once (a scan if due, else its burst).
                let shell = self.nodes[index].agent.as_mut()?;
                let poll = shell.schedule.after_reply(clock, &reply, &shell.agent);
                self.follow_schedule(index, clock, poll);
                return None;
            }
            Message::Redirect(redirect) => {
                self.agent_redirected(index, from, &redirect);
                return None;
            }
            Message::SessionKeepalive(keepalive) => {
                // After a stall, one fresh tick first (see `ScanSchedule`).
                if !shell.schedule.judges_keepalives(clock) {
                    return None;
                }
                shell.agent.on_keepalive(now, from, &keepalive, &node.metadata.borrow())
            }
            Message::SessionExpired(notice) => shell.agent.on_session_expired(from, &members, &notice),
            other => return Some(other),
        };
        self.run_agent_outputs(index, outputs);
        None
    }

    /// A node that is not the metadata primary redirected the agent's
    /// request: resend it now where the route says, as the runtime's agent
    /// does.
    fn agent_redirected(&mut self, index: usize, from: cohort_messages::NodeId, redirect: &Redirect) {
        let nodes = self.nodes.len();
        let voters = self.metadata_voters(index);
        let Some(shell) = self.nodes[index].agent.as_mut() else { return };
        let Some((destination, request)) = shell.route.on_redirect(&voters, from, redirect) else { return };
        let target = match destination {
            Destination::Local => index,
            Destination::Node(node) if node.0 >= 1 && node_index(node) < nodes => node_index(node),
            Destination::Node(_) => return,
        };
        self.send_from_node(index, target, Message::Request(request));
    }

    /// The metadata group's voters as node `index`'s applied metadata lists
    /// them (with a switch's next voters), or those it started with.
    fn metadata_voters(&self, index: usize) -> Vec<cohort_messages::NodeId> {
        let started_with = self.metadata_spec.as_ref().map(|spec| spec.members.clone()).unwrap_or_default();
        self.nodes[index].metadata.borrow().metadata_voters().unwrap_or(started_with)
    }

    fn run_agent_outputs(&mut self, index: usize, outputs: Vec<AgentOutput>) {
        if let Some(shell) = self.nodes[index].agent.as_ref() {
            shell.agent.invariants();
        }
        let nodes = self.nodes.len();
        for output in outputs {
            match output {
                AgentOutput::Submit(request) => {
                    let voters = self.metadata_voters(index);
                    let Some(shell) = self.nodes[index].agent.as_mut() else { return };
                    let primary = shell.schedule.metadata_primary();
                    let target = match shell.route.on_submit(&request, &voters, primary) {
                        Destination::Local => index,
                        Destination::Node(voter) if voter.0 >= 1 && node_index(voter) < nodes => node_index(voter),
                        Destination::Node(_) => continue,
                    };
                    self.send_from_node(index, target, Message::Request(request));
                }
                // As the runtime's agent does: to the metadata group's
                // voters as this node's metadata lists them, its own agent
                // directly (no frame, no keepalive gate).
                AgentOutput::Keepalive(keepalive) => {
                    for voter in self.metadata_voters(index) {
                        if voter == node_id(index) {
                            let now = self.now;
                            let node = &mut self.nodes[index];
                            let Some(shell) = node.agent.as_mut() else { return };
                            let more = shell.agent.on_keepalive(now, voter, &keepalive, &node.metadata.borrow());
                            self.run_agent_outputs(index, more);
                            if self.nodes[index].agent.is_none() {
                                return; // Stopped (S3).
                            }
                        } else if voter.0 >= 1 && node_index(voter) < nodes {
                            self.send_from_node(index, node_index(voter), Message::SessionKeepalive(keepalive));
                        }
                    }
                }
                AgentOutput::NotifyExpired { to, notice } if to == node_id(index) => {
                    let voters = self.metadata_voters(index);
                    let Some(shell) = self.nodes[index].agent.as_mut() else { return };
                    let more = shell.agent.on_session_expired(to, &voters, &notice);
                    self.run_agent_outputs(index, more);
                    if self.nodes[index].agent.is_none() {
                        return; // Stopped (S3).
                    }
                }
                AgentOutput::NotifyExpired { to, notice } => {
                    if to.0 >= 1 && node_index(to) < nodes {
                        self.send_from_node(index, node_index(to), Message::SessionExpired(notice));
                    }
                }
                AgentOutput::SessionOpened(_) => {}
                AgentOutput::Unload(group) => {
                    self.drop_replica(index, group);
                    let node = &mut self.nodes[index];
                    node.unloaded.insert(group);
                    node.extra_specs.remove(&group);
                }
                AgentOutput::ProposeSeal { group, seal } => {
                    if let Some(shard) = self.nodes[index].shard_for_mut(group) {
                        let _ = shard.propose_seal(group, seal);
                    }
                    self.drain(index);
                }
                output @ (AgentOutput::HostLearner { .. } | AgentOutput::HostMember { .. }) => {
                    if let Some(placed) = output.placed_replica() {
                        self.host_placed(index, &placed.placement, placed.voter);
                    }
                }
                AgentOutput::TransferPrimary { group, to } => {
                    if let Some(shard) = self.nodes[index].shard_for_mut(group)
                        && shard.transfer_primary(group, to).is_ok()
                    {
                        self.operator.transfers_started += 1;
                    }
                    self.drain(index);
                }
                AgentOutput::SetLearners { group, learners } => {
                    let node = &mut self.nodes[index];
                    if let Some(shard) = node.shard_for_mut(group)
                        && shard.set_learners(group, learners.clone()).is_ok()
                        && let Some(spec) = node.extra_specs.get_mut(&group)
                    {
                        let previous = std::mem::replace(&mut spec.learners, learners);
                        match spec.index_of(node_id(index)) {
                            Some(me) => spec.me = me,
                            None => spec.learners = previous,
                        }
                    }
                    self.drain(index);
                }
                AgentOutput::Switch(group) => {
                    if let Some(shard) = self.nodes[index].shard_for_mut(group) {
                        let _ = shard.switch_incarnation(group);
                    }
                    self.drain(index);
                }
                AgentOutput::SwitchLearner { group, seal, learners } => {
                    if let Some(shard) = self.nodes[index].shard_for_mut(group) {
                        let _ = shard.switch_incarnation_as_learner(group, &seal, learners);
                    }
                    self.drain(index);
                }
                AgentOutput::Stop(_reason) => {
                    // S3: the node stops; an operator restarts it much later.
                    self.node_stops += 1;
                    self.take_down(index, self.now + STOPPED_DOWN_TICKS, false);
                    return;
                }
            }
        }
    }

    /// Host node `index`'s empty replica of `placement`, built the way a
    /// node builds it (`GroupSpec::of_node`): a learner (P4), or a voting
    /// member of a group created at run time (C3), in place of a replica of
    /// an older incarnation and its data (H3 for a member: an earlier life
    /// of the group id).
    fn host_placed(&mut self, index: usize, placement: &Placement, voter: bool) {
        let (group, incarnation) = (placement.group, placement.incarnation);
        let Ok(mut spec) = cohort_core::GroupSpec::of_node(placement, node_id(index)) else { return };
        if spec.is_voter(spec.me) != voter {
            return;
        }
        spec.report_applied = true;
        if !self.nodes[index].is_up() {
            return;
        }
        let hosted = self.nodes[index].replica(group).map(cohort_core::Replica::incarnation);
        if !cohort_core::metadata::placed_replaces(incarnation, hosted) {
            return; // Never replace a replica of this incarnation or a later one.
        }
        self.drop_replica(index, group);
        let node = &mut self.nodes[index];
        let state = node.state_machine_for(group);
        if node.host_empty(spec.clone(), state).is_ok() {
            node.unloaded.remove(&group);
            node.extra_specs.insert(group, spec);
        }
        self.drain(index);
    }

    /// Node `index` stops hosting `group`: its replica, its data, and the
    /// stream of applies the checkers follow.
    pub(super) fn drop_replica(&mut self, index: usize, group: GroupId) {
        self.collect_applies(index);
        match self.nodes[index].remove_group(group, self.now) {
            Ok(true) => self.checkers.unloaded(index, group),
            Ok(false) => {}
            Err(error) => self.kill(index, &format!("storage failed: {error}")),
        }
    }

    fn send_from_node(&mut self, from: usize, to: usize, message: Message) {
        let bytes = message.encode(CLUSTER, node_id(from), TraceContext::NONE).to_bytes();
        self.network.send(
            self.now,
            Packet { from: Endpoint::Node(from), to: Endpoint::Node(to), bytes },
            &mut self.rng,
        );
    }
}

fn add(total: &mut AgentCounters, counters: AgentCounters) {
    total.sessions_opened += counters.sessions_opened;
    total.sessions_expired += counters.sessions_expired;
    total.reports_accepted += counters.reports_accepted;
    total.reports_refused += counters.reports_refused;
    total.expiries_proposed += counters.expiries_proposed;
    total.groups_unloaded += counters.groups_unloaded;
}
