//! What the listener hands on, and where: a peer's frames for a shard
//! ([`Inbound`]) or for the node's agent ([`AgentInbound`]), through routes
//! it is given ([`InboundRoutes`]). The listener knows no actor type; the
//! node's [`crate::directory::Directory`] is its routes.

use std::future::Future;
use std::pin::Pin;

use actix::prelude::*;
use cohort_messages::{Message, NodeId};

/// Input from a peer, routed to the shard that owns the groups (R16), by
/// the driver's rule ([`cohort_core::driver::route_peer_frame`]).
pub(crate) use cohort_core::driver::PeerInput as Inbound;

/// What one read of a peer's connection brought for one shard, in the
/// order the frames came: one message per read and shard, however many
/// frames the read held.
#[derive(Message)]
#[rtype(result = "()")]
pub struct InboundBatch(pub Vec<Inbound>);

/// A frame for the node's metadata agent, from a peer: the frames that carry
/// no group (`SessionKeepalive`, `SessionExpired`) and the metadata group's
/// `Reply` or `Redirect` to a request the agent forwarded.
#[derive(Message)]
#[rtype(result = "()")]
pub struct AgentInbound {
    /// The sending node.
    pub from: NodeId,
    /// `SessionKeepalive`, `SessionExpired`, or the metadata group's `Reply` or `Redirect`.
    pub message: Message,
}

/// The reading of one inbound connection, past its Handshake: made on the
/// thread of the link that adopts it (the connection was accepted there, so
/// the socket is driven by that thread's runtime), and run in the link's
/// context, so the link owns both directions of its peer's traffic and a
/// restarted link starts from a fresh connection.
pub(crate) type ConnectionReader = Box<dyn FnOnce() -> Option<Pin<Box<dyn Future<Output = ()>>>> + Send>;

/// Work the listener hands to a shard's thread: the TLS handshake and the
/// Handshake/LinkShard checks of one new connection.
pub(crate) type ShardTask = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Where the listener sends what it reads. Lookups happen on every use: the
/// supervisor replaces dead shards and links while connections are open.
pub trait InboundRoutes: Send + Sync {
    /// Shards on this node (the router splits batches by [`cohort_core::routing::shard_of`]).
    fn shard_count(&self) -> usize;

    /// Shard `index`'s inbox, if it runs.
    fn shard(&self, index: usize) -> Option<Recipient<InboundBatch>>;

    /// True if `peer` is a peer of this node.
    fn knows(&self, peer: NodeId) -> bool;

    /// Run `task` on shard `shard`'s thread; false if there is no such shard.
    fn spawn_on_shard(&self, shard: usize, task: ShardTask) -> bool;

    /// Hand `reader` to the link of `shard` to `peer`; the reader back if
    /// `peer` is not a peer of this node or there is no such shard (the
    /// caller counts the refusal, then drops it, which closes the connection).
    fn adopt(&self, peer: NodeId, shard: usize, reader: ConnectionReader) -> Result<(), ConnectionReader>;
}
