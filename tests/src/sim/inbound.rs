//! What a node does with a frame that reaches it, the way a real node's
//! listener (`actors/src/listener.rs`) and client port do: a Commit or
//! CommitReply batch is split by owning shard with the production router
//! (`cohort_core::routing::route`, R16), bad entries rejected alone (R17),
//! and each shard gets its entries as one call per frame; a ViewChangeBatch
//! (Z4) hands each of its messages on as if it had come alone; a shard-pair
//! heartbeat or reply (Z3) goes to the shard index it names; any other
//! group message goes to the shard `routing::shard_of` names. A request from a
//! client is submitted (`Shard::on_request`, the client port's path), one
//! from a peer (an agent's metadata request) is an ordinary peer message.

use cohort_core::routing::route;
use cohort_messages::{Message, NodeId};

use super::Sim;

impl Sim {
    /// Hand `message` from `from` to the shards of node `index`. The caller
    /// drains the node afterwards.
    pub(super) fn route_inbound(&mut self, index: usize, from: NodeId, message: Message, from_peer: bool) {
        let node = &mut self.nodes[index];
        let shards = node.shard_count();
        match message {
            Message::Commit(batch) => {
                let routed = route(&batch, shards);
                self.entries_rejected += routed.rejected.len() as u64;
                for (shard, entries) in routed.per_shard.into_iter().enumerate() {
                    if let Some(running) = node.shards.get_mut(shard).filter(|_| !entries.is_empty()) {
                        running.core.on_commit_entries(from, &entries);
                    }
                }
            }
            Message::CommitReply(batch) => {
                let routed = route(&batch, shards);
                self.entries_rejected += routed.rejected.len() as u64;
                for (shard, entries) in routed.per_shard.into_iter().enumerate() {
                    if let Some(running) = node.shards.get_mut(shard).filter(|_| !entries.is_empty()) {
                        running.core.on_commit_reply_entries(from, &entries);
                    }
                }
            }
            Message::ViewChangeBatch(batch) => {
                // Z4: each entry as if it had come alone; bad ones rejected alone.
                for entry in batch.entries() {
                    match entry {
                        Ok(message) => {
                            if let Some(group) = message.group()
                                && let Some(shard) = node.shard_for_mut(group)
                            {
                                shard.on_message(from, message);
                            }
                        }
                        Err(_) => self.entries_rejected += 1,
                    }
                }
            }
            // Z3: a shard-pair message goes to the shard it names, as the
            // listener routes it.
            Message::PairHeartbeat(heartbeat) => {
                if let Some(running) = node.shards.get_mut(usize::from(heartbeat.shard)) {
                    running.core.on_message(from, Message::PairHeartbeat(heartbeat));
                }
            }
            Message::PairHeartbeatReply(reply) => {
                if let Some(running) = node.shards.get_mut(usize::from(reply.shard)) {
                    running.core.on_message(from, Message::PairHeartbeatReply(reply));
                }
            }
            Message::Request(request) if !from_peer => {
                if let Some(shard) = node.shard_for_mut(request.group) {
                    shard.on_request(request);
                }
            }
            other => {
                if let Some(group) = other.group()
                    && let Some(shard) = node.shard_for_mut(group)
                {
                    shard.on_message(from, other);
                }
            }
        }
    }
}
