//! The operator of the metadata scenario: starts and cancels multi-step
//! operations (M2–M5; on the metadata group's own voters too, Z6), creates and deletes groups (C3), asks for primary
//! transfers (C4) and freezes and unfreezes the metadata at random during
//! the fault phase, the way `cohort admin` does: a client of the metadata
//! group with one request in flight, sent to some node and following
//! redirects, retried with the same request number until answered. The
//! nodes' agents then carry the changes out under the faults. Once the
//! faults are healed it unfreezes a frozen metadata, as an operator does
//! after an upgrade, so every operation can finish.
//!
//! H3: every group it deletes it creates again under the same id soon
//! after, and it writes to and reads from the groups it created (one
//! request at a time, with its other requests), values tagged with the
//! life they are written in ([`crate::check::incarnations`]); a delete
//! waits until none of its frames is in flight, so no write of a life can
//! arrive after it ended.

use std::collections::BTreeMap;

use cohort_core::client::{self, Sequence};
use cohort_messages::metadata::{MetadataCommand, MetadataResult, OperationSpec};
use cohort_messages::{
    ClientId, GroupId, Incarnation, Message, NodeId, Op, OperationId, Outcome, Redirect, Reply, ReplyError, Request,
    RequestNumber, TraceContext,
};

use super::Sim;
use crate::kv::KvOp;
use crate::network::{Endpoint, Packet};
use crate::node::{CLUSTER, node_id, node_index};

/// Chance per tick (per mille) that the operator asks for something.
const ASK_PER_MILLE: u64 = 6;
/// H3: chance per tick (per mille, when it asks nothing else) that the
/// operator probes, deletes or creates one of its groups.
const LIVES_ASK_PER_MILLE: u64 = 8;
/// An unanswered request is sent again, to another node, after this long.
const RETRY_TICKS: u64 = 40;
/// Groups the operator creates get ids from here up; clients never write
/// to them (a deleted group's data goes with it, which a register checker
/// would call a lost write), only the operator's probes do.
pub(crate) const CREATED_GROUPS_FROM: u64 = 1 << 40;
/// The most groups one run creates.
const CREATED_GROUPS_MAX: u64 = 16;
/// H3: a deleted group is created again under its id this long after the
/// delete was answered (about a second of a node's ticks, as in the
/// delete/re-create the issue found).
const RECREATE_AFTER_TICKS: u64 = 20;
/// H3: the most times one probe is sent (its group may have no quorum for
/// a while); then it is given up, and the operator goes on.
const PROBE_SENDS_MAX: u32 = 6;
/// The key the probes write and read.
const PROBE_KEY: u64 = 7;

/// The node id the operator's frames carry (no node has it), and the one
/// its freezes name.
fn operator_node() -> NodeId {
    node_id(usize::MAX >> 2)
}

/// The operator's state and counts.
#[derive(Clone, Debug)]
pub(crate) struct Operator {
    /// Its client id (distinct from every simulated client and agent).
    pub client: ClientId,
    /// Its commands to the metadata group, after its registration (H5).
    requests: Sequence,
    outstanding: Option<(Request, u64, usize)>,
    /// How many times the outstanding request was sent.
    sends: u32,
    /// H3: the group to create again under its id, and when it was deleted.
    recreate: Option<(GroupId, u64)>,
    /// H3: the groups it created, with the incarnation of their current
    /// life as its creation answered; probed while listed.
    probed: BTreeMap<GroupId, Incarnation>,
    /// H3: probe writes sent so far (each value is distinct).
    probe_writes: u32,
    /// H3: the client id the probes of each life of a group use, with its
    /// writes (a new life knows no client: each registers first).
    probe_clients: BTreeMap<(GroupId, Incarnation), Sequence>,
    /// H3: probe reads sent so far (reads take no number of a sequence;
    /// theirs only tell their answers apart).
    probe_reads: u64,
    /// H3: groups created again under the id of a deleted one.
    pub groups_recreated: u64,
    /// H3: probes answered.
    pub probes_answered: u64,
    /// H3: probes given up after `PROBE_SENDS_MAX` sends.
    pub probes_given_up: u64,
    /// Operations started.
    pub started: u64,
    /// Starts and cancels the metadata refused (M3 overlaps among them).
    pub refused: u64,
    /// Cancels accepted.
    pub cancelled: u64,
    /// C3: groups created and deleted.
    pub groups_created: u64,
    /// C3: groups deleted.
    pub groups_deleted: u64,
    /// C4: transfers the metadata accepted (the operator's and the balancer's
    /// are told apart by the agents' count below).
    pub transfers_asked: u64,
    /// C4: directed view changes the shards started for the agents.
    pub transfers_started: u64,
    /// Freezes accepted.
    pub freezes: u64,
    /// Changes refused because the metadata was frozen.
    pub refused_frozen: u64,
}

impl Operator {
    /// The operator of a run with `seed`.
    pub(crate) fn new(seed: u64) -> Operator {
        // Top two bits set: apart from clients (small) and agents (bit 63).
        let client = ClientId((u128::from(seed) << 64) | (3 << 62) | 1);
        Operator {
            client,
            requests: Sequence::new(client, GroupId::METADATA),
            outstanding: None,
            sends: 0,
            recreate: None,
            probed: BTreeMap::new(),
            probe_writes: 0,
            probe_clients: BTreeMap::new(),
            probe_reads: 0,
            groups_recreated: 0,
            probes_answered: 0,
            probes_given_up: 0,
            started: 0,
            refused: 0,
            cancelled: 0,
            groups_created: 0,
            groups_deleted: 0,
            transfers_asked: 0,
            transfers_started: 0,
            freezes: 0,
            refused_frozen: 0,
        }
    }
}

impl Operator {
    /// True if `id` is the operator's, or one of its probes'.
    pub(crate) fn owns(&self, id: ClientId) -> bool {
        id == self.client || self.probe_clients.values().any(|probe| probe.client() == id)
    }

    /// The writes of the probes of `group` in the life created at `life`.
    fn probe_client(&mut self, group: GroupId, life: Incarnation) -> &mut Sequence {
        let count = self.probe_clients.len() as u128;
        let base = self.client.0;
        self.probe_clients
            .entry((group, life))
            .or_insert_with(|| Sequence::new(ClientId(base + ((count + 1) << 16)), group))
    }

    /// H5: a registration answered at `op`: the sequence it belongs to
    /// numbers its writes after it.
    fn registered(&mut self, request: &Request, op: Op) {
        let sequence = if request.group == GroupId::METADATA {
            Some(&mut self.requests)
        } else {
            self.probe_clients.values_mut().find(|probe| probe.client() == request.client)
        };
        if let Some(sequence) = sequence.filter(|sequence| sequence.registration().as_ref() == Some(request)) {
            sequence.registered(op);
        }
    }
}

impl Sim {
    /// One tick of the operator (metadata scenario).
    pub(super) fn drive_operator(&mut self, faults: bool) {
        let now = self.now;
        let nodes = self.nodes.len();
        if let Some((request, sent, target)) = self.operator.outstanding.clone() {
            if now >= sent + RETRY_TICKS {
                if request.group != GroupId::METADATA && self.operator.sends >= PROBE_SENDS_MAX {
                    self.operator.outstanding = None;
                    self.operator.probes_given_up += 1;
                    return;
                }
                self.operator.sends += 1;
                let target = (target + 1) % nodes;
                self.operator.outstanding = Some((request.clone(), now, target));
                self.send_operator(target, request);
            }
            return;
        }
        if let Some(registration) = self.operator.requests.registration() {
            // H5: the operator's client id registers before its first command.
            return self.send_outstanding(registration);
        }
        let command = if faults {
            if let Some((group, deleted)) = self.operator.recreate
                && now >= deleted + RECREATE_AFTER_TICKS
            {
                self.operator.recreate = None;
                self.create_command(group)
            } else if self.rng.chance(ASK_PER_MILLE) {
                let Some(command) = self.choose_operation() else { return };
                command
            } else if self.rng.chance(LIVES_ASK_PER_MILLE) {
                let Some(command) = self.choose_for_lives() else { return };
                command
            } else {
                return;
            }
        } else {
            // Healed: the upgrade is over, unfreeze.
            let frozen = self.nodes.iter().any(|node| node.is_up() && node.metadata.borrow().frozen.is_some());
            if !frozen || !self.rng.chance(ASK_PER_MILLE * 10) {
                return;
            }
            MetadataCommand::Unfreeze { by: operator_node() }
        };
        if let MetadataCommand::DeleteGroup { .. } = command
            && self.network.any_from(Endpoint::Operator)
        {
            return; // H3: not while a probe (or any frame of it) may still arrive.
        }
        let request = self.operator.requests.write(command.encode());
        self.send_outstanding(request);
    }

    /// H3: the lives of the groups it creates: a first group, a probe of
    /// one (sent here), or a delete (re-created later under the same id).
    fn choose_for_lives(&mut self) -> Option<MetadataCommand> {
        if self.operator.probed.is_empty() {
            let next = GroupId(CREATED_GROUPS_FROM + self.operator.groups_created);
            return (self.operator.groups_created < CREATED_GROUPS_MAX && self.operator.recreate.is_none())
                .then(|| self.create_command(next));
        }
        if self.operator.recreate.is_none() && self.rng.chance(200) {
            let groups: Vec<GroupId> = self.operator.probed.keys().copied().collect();
            let group = groups[self.rng.below(groups.len() as u64) as usize];
            return Some(MetadataCommand::DeleteGroup { group });
        }
        let probe = self.probe();
        self.send_outstanding(probe);
        None
    }

    /// Send `request` as the outstanding one, to a random node.
    fn send_outstanding(&mut self, request: Request) {
        self.operator.sends = 1;
        let target = self.rng.below(self.nodes.len() as u64) as usize;
        self.operator.outstanding = Some((request.clone(), self.now, target));
        self.send_operator(target, request);
    }

    /// H3: a write of a fresh value tagged with the group's life, or a read
    /// of it, to one of the groups the operator created.
    fn probe(&mut self) -> Request {
        let groups: Vec<(GroupId, Incarnation)> = self.operator.probed.iter().map(|(g, i)| (*g, *i)).collect();
        let (group, life) = groups[self.rng.below(groups.len() as u64) as usize];
        if let Some(registration) = self.operator.probe_client(group, life).registration() {
            // H5: a life's probe client registers with it first.
            return registration;
        }
        if self.rng.chance(500) {
            self.operator.probe_writes += 1;
            let value = crate::check::incarnations::tag(life, self.operator.probe_writes);
            self.operator.probe_client(group, life).write(KvOp::Put { key: PROBE_KEY, value }.encode())
        } else {
            // Numbered apart from the writes (from 2^62), so that a late
            // answer to a write is never taken for a read's.
            self.operator.probe_reads += 1;
            let number = RequestNumber((1 << 62) + self.operator.probe_reads);
            let client = self.operator.probe_client(group, life).client();
            client::read(client, number, group, KvOp::Get { key: PROBE_KEY }.encode())
        }
    }

    /// A creation of `group` on up to three random registered nodes.
    fn create_command(&mut self, group: GroupId) -> MetadataCommand {
        let mut members: Vec<NodeId> = (0..self.nodes.len())
            .find(|index| self.nodes[*index].is_up())
            .map(|index| self.nodes[index].metadata.borrow().nodes.keys().copied().collect())
            .unwrap_or_default();
        if members.is_empty() {
            members = (0..self.nodes.len()).map(node_id).collect();
        }
        while members.len() > 3 {
            members.remove(self.rng.below(members.len() as u64) as usize);
        }
        let replication = cohort_messages::replication::Replication::default();
        let kind = crate::metadata::KV_KIND.to_string();
        MetadataCommand::CreateGroup { group, kind, members, replication }
    }

    /// Something to ask for, from what a running node's metadata shows.
    fn choose_operation(&mut self) -> Option<MetadataCommand> {
        let metadata = (0..self.nodes.len())
            .find(|index| self.nodes[*index].is_up())
            .map(|index| self.nodes[index].metadata.borrow().clone())?;
        let groups: Vec<GroupId> =
            metadata.groups.iter().filter(|(_, record)| record.live).map(|(group, _)| *group).collect();
        let nodes: Vec<NodeId> = metadata.nodes.keys().copied().collect();
        if groups.is_empty() || nodes.is_empty() {
            return None;
        }
        let group = groups[self.rng.below(groups.len() as u64) as usize];
        let record = &metadata.groups[&group];
        let member = record.members[self.rng.below(record.members.len() as u64) as usize];
        // Z6: every node past the metadata group's voters learns its log
        // already, so its voters are taken from its learners.
        let of_metadata = group == GroupId::METADATA;
        let outside: Vec<NodeId> = nodes
            .iter()
            .copied()
            .filter(|node| !record.members.contains(node) && (of_metadata || !record.learners.contains(node)))
            .filter(|node| !of_metadata || record.learners.contains(node))
            .collect();
        let pick = self.rng.below(100);
        let created: Vec<GroupId> = groups.iter().copied().filter(|group| group.0 >= CREATED_GROUPS_FROM).collect();
        match pick {
            78..81 if metadata.frozen.is_none() => return Some(MetadataCommand::Freeze { by: operator_node() }),
            81..84 if metadata.frozen.is_some() => return Some(MetadataCommand::Unfreeze { by: operator_node() }),
            84..88 if self.operator.groups_created < CREATED_GROUPS_MAX => {
                let group = GroupId(CREATED_GROUPS_FROM + self.operator.groups_created);
                return Some(self.create_command(group));
            }
            88..92 if !created.is_empty() && self.operator.recreate.is_none() => {
                let group = created[self.rng.below(created.len() as u64) as usize];
                return Some(MetadataCommand::DeleteGroup { group });
            }
            92..100 => {
                let to = record.members[self.rng.below(record.members.len() as u64) as usize];
                return Some(MetadataCommand::TransferPrimary { group, to });
            }
            _ => {}
        }
        let spec = match pick {
            0..50 if !outside.is_empty() => {
                let to = outside[self.rng.below(outside.len() as u64) as usize];
                OperationSpec::Move { group, from: member, to }
            }
            50..60 if !outside.is_empty() => {
                let with = outside[self.rng.below(outside.len() as u64) as usize];
                OperationSpec::Replace { group, dead: member, with }
            }
            60..70 if !outside.is_empty() => {
                let node = outside[self.rng.below(outside.len() as u64) as usize];
                OperationSpec::Join { node, groups: vec![group] }
            }
            70..78 if of_metadata => OperationSpec::Shrink { group, node: member },
            70..78 => OperationSpec::Decommission { node: nodes[self.rng.below(nodes.len() as u64) as usize] },
            _ => {
                let ids: Vec<OperationId> = metadata.operations.keys().copied().collect();
                let id = *ids.get(self.rng.below(ids.len().max(1) as u64) as usize)?;
                return Some(MetadataCommand::CancelOperation { operation: id });
            }
        };
        Some(MetadataCommand::StartOperation { spec })
    }

    fn send_operator(&mut self, to: usize, request: Request) {
        let bytes = Message::Request(request).encode(CLUSTER, operator_node(), TraceContext::NONE).to_bytes();
        self.network.send(self.now, Packet { from: Endpoint::Operator, to: Endpoint::Node(to), bytes }, &mut self.rng);
    }

    /// A reply or redirect for the operator. Only the node the request is
    /// outstanding at is followed: a duplicated or late redirect from a node
    /// asked earlier would start a second chase of the same request, and two
    /// nodes that each name the other (stale views) would multiply those
    /// chases without end.
    pub(super) fn deliver_to_operator(&mut self, sender: NodeId, message: Message) {
        let Some((request, _, target)) = self.operator.outstanding.clone() else { return };
        if sender.0 == 0 || node_index(sender) != target {
            return;
        }
        match message {
            Message::Reply(Reply { request: number, outcome, op, .. }) if number == request.request => match outcome {
                // H5: a registration answered: writes follow, numbered after its op.
                Outcome::Ok(_) if cohort_core::client_table::is_registration(request.request) => {
                    self.operator.outstanding = None;
                    self.operator.registered(&request, op);
                    if request.group != GroupId::METADATA {
                        self.operator.probes_answered += 1;
                    }
                }
                // H3: a probe's answer was judged when its replica gave it.
                Outcome::Ok(_) if request.group != GroupId::METADATA => {
                    self.operator.outstanding = None;
                    self.operator.probes_answered += 1;
                }
                Outcome::Ok(bytes) => {
                    self.operator.outstanding = None;
                    let command = MetadataCommand::decode(&request.operation);
                    match (command, MetadataResult::decode(&bytes)) {
                        (_, Ok(MetadataResult::OperationStarted { .. })) => self.operator.started += 1,
                        (command, Ok(MetadataResult::Refused { reason })) => {
                            self.operator.refused += 1;
                            if reason.contains("frozen since") {
                                self.operator.refused_frozen += 1;
                                // H3: a re-creation refused while frozen is asked again later.
                                if let Ok(MetadataCommand::CreateGroup { group, .. }) = command
                                    && self.operator.recreate.is_none()
                                    && group.0 < CREATED_GROUPS_FROM + self.operator.groups_created
                                {
                                    self.operator.recreate = Some((group, self.now));
                                }
                            }
                        }
                        (Ok(MetadataCommand::CancelOperation { .. }), Ok(MetadataResult::Done { .. })) => {
                            self.operator.cancelled += 1
                        }
                        (
                            Ok(MetadataCommand::CreateGroup { group, .. }),
                            Ok(MetadataResult::GroupCreated { incarnation, .. }),
                        ) => {
                            if incarnation.0 > 1 {
                                self.operator.groups_recreated += 1;
                            } else {
                                self.operator.groups_created += 1;
                            }
                            self.checkers.lives.created(group, incarnation);
                            self.operator.probed.insert(group, incarnation);
                        }
                        (Ok(MetadataCommand::DeleteGroup { group }), Ok(MetadataResult::Done { .. })) => {
                            self.operator.groups_deleted += 1;
                            self.operator.probed.remove(&group);
                            self.operator.recreate = Some((group, self.now));
                        }
                        (Ok(MetadataCommand::TransferPrimary { .. }), Ok(MetadataResult::Done { .. })) => {
                            self.operator.transfers_asked += 1
                        }
                        (Ok(MetadataCommand::Freeze { .. }), Ok(MetadataResult::Done { .. })) => {
                            self.operator.freezes += 1
                        }
                        _ => {}
                    }
                }
                // Not allowed where it was sent: asking again changes nothing.
                Outcome::Error { code: ReplyError::Forbidden, .. } => {
                    self.operator.outstanding = None;
                    self.operator.refused += 1;
                }
                // Retryable: the retry timer sends it again.
                Outcome::Error { .. } => {}
            },
            Message::Redirect(Redirect { request: number, primary, .. }) if number == request.request => {
                let nodes = self.nodes.len();
                let next = match primary {
                    Some(node) if node.0 >= 1 && node_index(node) < nodes => node_index(node),
                    _ => (target + 1) % nodes,
                };
                if next != target {
                    self.operator.outstanding = Some((request.clone(), self.now, next));
                    self.send_operator(next, request);
                }
            }
            _ => {}
        }
    }
}

impl Sim {
    /// C3, after healing: every group created at run time is hosted by each
    /// running member at the metadata's incarnation, and a deleted one by
    /// none, within the liveness budget.
    pub(super) fn settle_created_groups(&mut self) {
        let deadline = self.now + self.config.liveness_ticks;
        loop {
            let misplaced = self.misplaced_created_groups();
            if misplaced.is_empty() {
                return;
            }
            if self.now >= deadline {
                for line in misplaced {
                    self.checkers
                        .violations
                        .push(format!("liveness: {line} {} ticks after healing", self.config.liveness_ticks));
                }
                return;
            }
            self.step(false);
        }
    }

    /// What is not yet where the metadata of the most advanced node puts it.
    fn misplaced_created_groups(&self) -> Vec<String> {
        let Some(metadata) = self
            .nodes
            .iter()
            .filter(|node| node.is_up())
            .map(|node| node.metadata.borrow().clone())
            .max_by_key(|metadata| metadata.epoch)
        else {
            return Vec::new();
        };
        let mut misplaced = Vec::new();
        for (group, record) in metadata.groups.range(GroupId(CREATED_GROUPS_FROM)..) {
            for (index, node) in self.nodes.iter().enumerate().filter(|(_, node)| node.is_up()) {
                let id = node_id(index);
                let placed = record.live && (record.members.contains(&id) || record.learners.contains(&id));
                let hosted = node.replica(*group).map(|replica| replica.incarnation());
                match (placed, hosted) {
                    (true, Some(incarnation)) if incarnation == record.incarnation => {}
                    (true, hosted) => misplaced.push(format!(
                        "{group} (incarnation {}) not hosted by its member {id} (hosts {hosted:?})",
                        record.incarnation.0
                    )),
                    (false, Some(_)) if !record.live => misplaced.push(format!("deleted {group} still hosted by {id}")),
                    (false, _) => {}
                }
            }
        }
        misplaced
    }
}
