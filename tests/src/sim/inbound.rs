//! What a node does with a frame that reaches it, the way a real node's
//! connection reader and client port do. A frame from a peer is routed by
//! the driver's own rule (`cohort_core::driver::route_peer_frame`, the
//! listener's): batches split by owning shard with bad entries rejected
//! alone (R16, R17), view-change batches unpacked (Z4), shard-pair
//! messages to the shard they name (Z3), session frames and the metadata
//! group's answers to the node's agent. A request from a client is
//! submitted, as the client port submits it. Each message a node handles
//! is one input to the shards it reached; a shard whose turn has been open
//! past the driver's limit ends it at once, the others at the end of the
//! tick, once the node has handled everything that reached it.

use cohort_core::driver::{TurnDue, route_peer_frame};
use cohort_messages::{Message, NodeId, TraceContext};

use super::Sim;

impl Sim {
    /// Hand `message` from `from` to node `index`.
    pub(super) fn route_inbound(&mut self, index: usize, from: NodeId, message: Message, from_peer: bool) {
        let shards = self.nodes[index].shard_count();
        let mut reached = Vec::new();
        if from_peer {
            let routed = route_peer_frame(from, message, TraceContext::NONE, shards);
            self.entries_rejected += routed.rejected.len() as u64;
            self.frames_rejected += u64::from(routed.refused.is_some());
            if let Some(message) = routed.agent {
                // The agent takes it (or, with no agent running, nobody does).
                let _ = self.deliver_to_agent(index, from, message);
            }
            for (shard, input) in routed.inputs {
                let Some(running) = self.nodes[index].shards.get_mut(shard) else { continue };
                running.driver.on_peer(input);
                if !reached.contains(&shard) {
                    reached.push(shard);
                }
            }
        } else {
            // The client port: a request is submitted; anything else from a
            // client is not for a node.
            let Message::Request(request) = message else { return };
            let shard = self.nodes[index].shard_index(request.group);
            let Some(running) = self.nodes[index].shards.get_mut(shard) else { return };
            running.driver.on_submit(request);
            reached.push(shard);
        }
        let now = self.now;
        for shard in reached {
            let at = self.nodes[index].input_clock_micros(now);
            let Some(running) = self.nodes[index].shards.get_mut(shard) else { continue };
            if running.driver.input_done(at) == TurnDue::Now {
                self.end_turn(index, shard);
            }
        }
    }
}
