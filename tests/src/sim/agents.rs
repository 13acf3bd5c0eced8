//! The metadata scenario's shell around each node's [`MetadataAgent`]: the
//! simulator drives the agent exactly as its docs say and carries its
//! outputs over the simulated network as real frames, like any other
//! traffic, so loss, delay, partitions and pauses reach it too.
//!
//! - Every tick a running node's agent gets the applied metadata of the
//!   node's own metadata replica, whether that replica is primary, and the
//!   kv groups the node hosts.
//! - `Submit` becomes a `Request` to the voter the node's
//!   [`MetadataRoute`] names, the runtime's routing: a voter first asks
//!   itself; a `Redirect` naming a node resends there at once (a bounded
//!   number of times), and a resend by the agent (no answer in time) tries
//!   the next voter.
//!   Answers to the agent's client id are addressed to its node, and reach
//!   the agent there (the shard ignores replies and session messages).
//! - `Keepalive` goes to every node, where the agent's driver judges it;
//!   `NotifyExpired` goes to the named node.
//! - `Unload` removes the group from the shard; `Stop` takes the node down
//!   until an operator restarts it, with a fresh agent and client id.

use cohort_core::metadata::{AgentCounters, AgentOutput, Destination, HostedReplica, MetadataRoute};
use cohort_core::replica::Placement;
use cohort_messages::{ClientId, GroupId, Message, Redirect, TraceContext};

use super::Sim;
use crate::metadata::{self, STOPPED_DOWN_TICKS};
use crate::network::{Endpoint, Packet};
use crate::node::{CLUSTER, node_id, node_index};

impl Sim {
    /// A node (re)started: give it a fresh agent in the metadata scenario.
    pub(super) fn start_agent(&mut self, index: usize) {
        if self.metadata_spec.is_none() {
            return;
        }
        let node = &mut self.nodes[index];
        node.agent = Some(metadata::agent(self.config.seed, index, node.restarts, self.policy, &self.specs));
        node.agent_route = MetadataRoute::new(node_id(index));
        node.agent_last = None;
    }

    /// A node's process ends: keep its agent's counters.
    pub(super) fn retire_agent(&mut self, index: usize) {
        if let Some(agent) = self.nodes[index].agent.take() {
            add(&mut self.retired_agents, agent.counters());
        }
    }

    /// The counters of every agent of the run, past and present.
    pub(super) fn agent_counters(&self) -> AgentCounters {
        let mut total = self.retired_agents;
        for agent in self.nodes.iter().filter_map(|node| node.agent.as_ref()) {
            add(&mut total, agent.counters());
        }
        total
    }

    /// The node whose running agent uses client id `id`.
    pub(super) fn agent_of(&self, id: ClientId) -> Option<usize> {
        self.nodes.iter().position(|node| node.agent.as_ref().is_some_and(|agent| agent.config().client == id))
    }

    /// One tick of a running node's agent.
    pub(super) fn tick_agent(&mut self, index: usize) {
        let now = self.now;
        let node = &mut self.nodes[index];
        if !node.is_up() {
            return;
        }
        let metadata_primary =
            node.shard_for(GroupId::METADATA).is_some_and(|shard| shard.is_confirmed_primary(GroupId::METADATA, now));
        // The configured groups and those hosted at run time (C3, P4).
        let configured = self.specs.iter().map(|spec| spec.group).filter(|group| !node.extra_specs.contains_key(group));
        // The metadata group too, as a node's shards list it (Z6: its voters
        // change through operations like any group's).
        let metadata_group = self.metadata_spec.as_ref().map(|spec| spec.group);
        let groups: Vec<GroupId> = configured.chain(node.extra_specs.keys().copied()).chain(metadata_group).collect();
        let hosted: Vec<HostedReplica> =
            groups.into_iter().filter_map(|group| node.shard_for(group)?.hosted_replica(group, now)).collect();
        let Some(agent) = node.agent.as_mut() else { return };
        let metadata = node.metadata.borrow();
        let outputs = agent.on_tick(now, &metadata, metadata_primary, &hosted);
        drop(metadata);
        self.run_agent_outputs(index, outputs);
    }

    /// A message for node `index` that its agent takes; anything else is
    /// handed back for the shard.
    pub(super) fn deliver_to_agent(
        &mut self,
        index: usize,
        from: cohort_messages::NodeId,
        message: Message,
    ) -> Option<Message> {
        let now = self.now;
        let members = self.metadata_voters(index);
        let node = &mut self.nodes[index];
        let metadata_primary =
            node.shard_for(GroupId::METADATA).is_some_and(|shard| shard.is_confirmed_primary(GroupId::METADATA, now));
        let Some(agent) = node.agent.as_mut() else { return Some(message) };
        let outputs = match message {
            // As the runtime's agent does between two scans (Z2): the
            // balancer goes on right after an applied reply.
            Message::Reply(reply) => {
                let mut outputs = agent.on_reply(now, &reply);
                let metadata = node.metadata.borrow();
                outputs.extend(agent.between_scans(now, &metadata, metadata_primary));
                outputs
            }
            Message::Redirect(redirect) => {
                self.agent_redirected(index, from, &redirect);
                return None;
            }
            Message::SessionKeepalive(keepalive) => {
                let metadata = node.metadata.borrow();
                agent.on_keepalive(now, from, &keepalive, &metadata)
            }
            Message::SessionExpired(notice) => agent.on_session_expired(from, &members, &notice),
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
        let node = &mut self.nodes[index];
        let Some(last) = node.agent_last.clone() else { return };
        if last.client != redirect.client || last.request != redirect.request {
            return; // About an older request.
        }
        let target = match node.agent_route.redirected(&voters, from, redirect.primary) {
            Some(Destination::Local) => index,
            Some(Destination::Node(node)) if node.0 >= 1 && node_index(node) < nodes => node_index(node),
            _ => return,
        };
        self.send_from_node(index, target, Message::Request(last));
    }

    /// The metadata group's voters as node `index`'s applied metadata lists
    /// them (with a switch's next voters), or those it started with.
    fn metadata_voters(&self, index: usize) -> Vec<cohort_messages::NodeId> {
        let started_with = self.metadata_spec.as_ref().map(|spec| spec.members.clone()).unwrap_or_default();
        self.nodes[index].metadata.borrow().metadata_voters().unwrap_or(started_with)
    }

    fn run_agent_outputs(&mut self, index: usize, outputs: Vec<AgentOutput>) {
        let nodes = self.nodes.len();
        for output in outputs {
            match output {
                AgentOutput::Submit(request) => {
                    let voters = self.metadata_voters(index);
                    let now = self.now;
                    let node = &mut self.nodes[index];
                    let metadata_primary = node
                        .shard_for(GroupId::METADATA)
                        .is_some_and(|shard| shard.is_confirmed_primary(GroupId::METADATA, now));
                    let resend = node
                        .agent_last
                        .as_ref()
                        .is_some_and(|last| last.client == request.client && last.request == request.request);
                    node.agent_route.on_send(resend, &voters, metadata_primary);
                    node.agent_last = Some(request.clone());
                    let target = match node.agent_route.destination(&voters, metadata_primary) {
                        Destination::Local => index,
                        Destination::Node(voter) if voter.0 >= 1 && node_index(voter) < nodes => node_index(voter),
                        Destination::Node(_) => continue,
                    };
                    self.send_from_node(index, target, Message::Request(request));
                }
                AgentOutput::Keepalive(keepalive) => {
                    for to in 0..nodes {
                        self.send_from_node(index, to, Message::SessionKeepalive(keepalive));
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
    /// node builds it (`GroupSpec::of_node`): a learner (P4, replacing a
    /// replica of an older incarnation and its data), or a voting member of
    /// a group created at run time (C3), only where no replica is hosted.
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
        let hosted = self.nodes[index].replica(group);
        if hosted.is_some_and(|replica| voter || replica.incarnation() >= incarnation) {
            return; // Never replace a replica of this incarnation or a later one.
        }
        self.drop_replica(index, group);
        let node = &mut self.nodes[index];
        let state = node.state_machine_for(group);
        if let Some(shard) = node.shard_for_mut(group)
            && shard.create_group(spec.clone(), state).is_ok()
        {
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
