//! The operator of the metadata scenario: starts and cancels multi-step
//! operations (M2–M5) at random during the fault phase, the way
//! `cohort admin` does: a client of the metadata group with one request in
//! flight, sent to some node and following redirects, retried with the same
//! request number until answered. The nodes' agents then carry the
//! operations out under the faults.

use cohort_messages::metadata::{MetadataCommand, MetadataResult, OperationSpec};
use cohort_messages::{
    ClientId, GroupId, Message, NodeId, OperationId, Outcome, Redirect, Reply, Request, RequestKind, RequestNumber,
    TraceContext,
};

use super::Sim;
use crate::network::{Endpoint, Packet};
use crate::node::{CLUSTER, node_id, node_index};

/// Chance per tick (per mille) that the operator asks for something.
const ASK_PER_MILLE: u64 = 6;
/// An unanswered request is sent again, to another node, after this long.
const RETRY_TICKS: u64 = 40;

/// The operator's state and counts.
#[derive(Clone, Debug)]
pub(crate) struct Operator {
    /// Its client id (distinct from every simulated client and agent).
    pub client: ClientId,
    next: u64,
    outstanding: Option<(Request, u64, usize)>,
    /// Operations started.
    pub started: u64,
    /// Starts and cancels the metadata refused (M3 overlaps among them).
    pub refused: u64,
    /// Cancels accepted.
    pub cancelled: u64,
}

impl Operator {
    /// The operator of a run with `seed`.
    pub(crate) fn new(seed: u64) -> Operator {
        // Top two bits set: apart from clients (small) and agents (bit 63).
        let client = ClientId((u128::from(seed) << 64) | (3 << 62) | 1);
        Operator { client, next: 1, outstanding: None, started: 0, refused: 0, cancelled: 0 }
    }
}

impl Sim {
    /// One tick of the operator (metadata scenario).
    pub(super) fn drive_operator(&mut self, faults: bool) {
        let now = self.now;
        let nodes = self.nodes.len();
        if let Some((request, sent, target)) = self.operator.outstanding.clone() {
            if now >= sent + RETRY_TICKS {
                let target = (target + 1) % nodes;
                self.operator.outstanding = Some((request.clone(), now, target));
                self.send_operator(target, request);
            }
            return;
        }
        if !faults || !self.rng.chance(ASK_PER_MILLE) {
            return;
        }
        let Some(command) = self.choose_operation() else { return };
        let request = Request {
            client: self.operator.client,
            request: RequestNumber(self.operator.next),
            group: GroupId::METADATA,
            kind: RequestKind::Write,
            operation: command.encode(),
        };
        self.operator.next += 1;
        let target = self.rng.below(nodes as u64) as usize;
        self.operator.outstanding = Some((request.clone(), now, target));
        self.send_operator(target, request);
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
        let outside: Vec<NodeId> = nodes
            .iter()
            .copied()
            .filter(|node| !record.members.contains(node) && !record.learners.contains(node))
            .collect();
        let pick = self.rng.below(100);
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
        let bytes = Message::Request(request).encode(CLUSTER, node_id(usize::MAX >> 2), TraceContext::NONE).to_bytes();
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
            Message::Reply(Reply { request: number, outcome, .. }) if number == request.request => match outcome {
                Outcome::Ok(bytes) => {
                    self.operator.outstanding = None;
                    let command = MetadataCommand::decode(&request.operation);
                    match (command, MetadataResult::decode(&bytes)) {
                        (_, Ok(MetadataResult::OperationStarted { .. })) => self.operator.started += 1,
                        (_, Ok(MetadataResult::Refused { .. })) => self.operator.refused += 1,
                        (Ok(MetadataCommand::CancelOperation { .. }), Ok(MetadataResult::Done { .. })) => {
                            self.operator.cancelled += 1
                        }
                        _ => {}
                    }
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
