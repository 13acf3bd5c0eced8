//! Where a frame from a peer goes on this node: to which shard, as what
//! input, or to the node's metadata agent.
//!
//! The node's connection reader and the simulator both call
//! [`route_peer_frame`] on every decoded frame past the Handshake, so the
//! rules live once:
//! - a Commit or CommitReply batch is split by owning shard, each bad entry
//!   rejected alone (R16, R17, R29), and each shard gets its entries as one
//!   input per frame;
//! - a ViewChangeBatch (Z4) hands each of its messages on as if it had come
//!   alone, each bad one rejected alone;
//! - a shard-pair heartbeat or its reply (Z3) goes to the shard index it
//!   names (the same index on every node), and one naming a shard this node
//!   does not run is refused;
//! - the frames that carry no group (`SessionKeepalive`, `SessionExpired`)
//!   and the metadata group's `Reply` and `Redirect` go to the agent;
//! - any other group message, a `Request` included (an agent's metadata
//!   request), goes to the shard [`shard_of`] names.

use cohort_messages::{CommitEntry, CommitReplyEntry, EntryError, GroupId, Message, NodeId, TraceContext};

use crate::routing::{route, shard_of};

/// Input from a peer for one shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerInput {
    /// A single-group message (a shard-pair message too).
    Message {
        /// The sending node.
        from: NodeId,
        /// The message.
        message: Message,
        /// The frame header's trace context ([`TraceContext::NONE`] if untraced).
        trace: TraceContext,
    },
    /// This shard's entries of one Commit frame (already validated).
    Commits {
        /// The sending node.
        from: NodeId,
        /// The entries.
        entries: Vec<CommitEntry>,
    },
    /// This shard's entries of one CommitReply frame (already validated).
    Replies {
        /// The sending node.
        from: NodeId,
        /// The entries.
        entries: Vec<CommitReplyEntry>,
    },
}

impl PeerInput {
    /// The sending node.
    pub fn from(&self) -> NodeId {
        match self {
            PeerInput::Message { from, .. } | PeerInput::Commits { from, .. } | PeerInput::Replies { from, .. } => {
                *from
            }
        }
    }
}

/// Why a frame was refused as a whole (counted by the caller by this name).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FrameRefusal {
    /// A shard-pair message names a shard this node does not run.
    ShardOutOfRange,
}

impl FrameRefusal {
    /// The refusal's label in metrics.
    pub fn label(self) -> &'static str {
        match self {
            FrameRefusal::ShardOutOfRange => "shard_out_of_range",
        }
    }
}

/// What one peer frame turned into. See the module docs.
#[derive(Debug, Default)]
pub struct RoutedFrame {
    /// Inputs per shard index, in frame order.
    pub inputs: Vec<(usize, PeerInput)>,
    /// A message for the node's metadata agent.
    pub agent: Option<Message>,
    /// Batch entries rejected alone (R17).
    pub rejected: Vec<EntryError>,
    /// The whole frame was refused.
    pub refused: Option<FrameRefusal>,
}

/// Route one decoded frame from the authenticated peer `from` over
/// `shard_count` shards. See the module docs.
pub fn route_peer_frame(from: NodeId, message: Message, trace: TraceContext, shard_count: usize) -> RoutedFrame {
    assert!(shard_count > 0, "a node has at least one shard");
    let mut routed = RoutedFrame::default();
    match message {
        Message::Commit(batch) => {
            let split = route(&batch, shard_count);
            routed.rejected = split.rejected;
            for (shard, entries) in split.per_shard.into_iter().enumerate() {
                if !entries.is_empty() {
                    routed.inputs.push((shard, PeerInput::Commits { from, entries }));
                }
            }
        }
        Message::CommitReply(batch) => {
            let split = route(&batch, shard_count);
            routed.rejected = split.rejected;
            for (shard, entries) in split.per_shard.into_iter().enumerate() {
                if !entries.is_empty() {
                    routed.inputs.push((shard, PeerInput::Replies { from, entries }));
                }
            }
        }
        Message::ViewChangeBatch(batch) => {
            for entry in batch.entries() {
                match entry {
                    Ok(message) => {
                        if let Some(group) = message.group() {
                            let input = PeerInput::Message { from, message, trace };
                            routed.inputs.push((shard_of(group, shard_count), input));
                        }
                    }
                    Err(error) => routed.rejected.push(error),
                }
            }
        }
        Message::PairHeartbeat(heartbeat) => match usize::from(heartbeat.shard) {
            shard if shard < shard_count => {
                let message = Message::PairHeartbeat(heartbeat);
                routed.inputs.push((shard, PeerInput::Message { from, message, trace }));
            }
            _ => routed.refused = Some(FrameRefusal::ShardOutOfRange),
        },
        Message::PairHeartbeatReply(reply) => match usize::from(reply.shard) {
            shard if shard < shard_count => {
                let message = Message::PairHeartbeatReply(reply);
                routed.inputs.push((shard, PeerInput::Message { from, message, trace }));
            }
            _ => routed.refused = Some(FrameRefusal::ShardOutOfRange),
        },
        message @ (Message::SessionKeepalive(_) | Message::SessionExpired(_)) => routed.agent = Some(message),
        Message::Reply(reply) if reply.group == GroupId::METADATA => routed.agent = Some(Message::Reply(reply)),
        Message::Redirect(redirect) if redirect.group == GroupId::METADATA => {
            routed.agent = Some(Message::Redirect(redirect))
        }
        message => {
            if let Some(group) = message.group() {
                routed.inputs.push((shard_of(group, shard_count), PeerInput::Message { from, message, trace }));
            }
        }
    }
    debug_assert!(routed.inputs.iter().all(|(shard, _)| *shard < shard_count), "routed to a shard that exists");
    debug_assert!(routed.agent.is_none() || routed.inputs.is_empty(), "a frame goes to the agent or to shards");
    routed
}
