//! The node's directory of live actors: the shard actors by index and the
//! peer links by peer and shard. The supervisor replaces an entry when it
//! rebuilds a dead part, so readers (the listener, node handles, the agent)
//! look up on each use instead of keeping an address.

use std::collections::HashMap;
use std::sync::RwLock;

use actix::prelude::*;
use cohort_messages::NodeId;

use crate::inbound::{ConnectionReader, InboundBatch, InboundRoutes, ShardTask};
use crate::peer_link::{AdoptConnection, PeerLink};
use crate::shard::ShardActor;

/// Each peer's links, one per shard of this node, by shard index.
pub type Links = HashMap<NodeId, Vec<Addr<PeerLink>>>;

/// The live shard and link addresses, replaced when one is rebuilt.
#[derive(Debug)]
pub struct Directory {
    shards: RwLock<Vec<Addr<ShardActor>>>,
    links: RwLock<Links>,
    /// Each shard's arbiter (they outlive restarts of the actors on them).
    arbiters: Vec<ArbiterHandle>,
}

impl Directory {
    /// The shards by index and the links by peer and shard, as started.
    pub fn new(shards: Vec<Addr<ShardActor>>, links: Links, arbiters: Vec<ArbiterHandle>) -> Directory {
        Directory { shards: RwLock::new(shards), links: RwLock::new(links), arbiters }
    }

    /// A link to `peer`, for what belongs to no shard (the metadata agent's
    /// frames): shard 0's.
    pub fn link(&self, peer: NodeId) -> Option<Addr<PeerLink>> {
        self.link_of(peer, 0)
    }

    /// Shard `shard`'s link to `peer`.
    pub fn link_of(&self, peer: NodeId, shard: usize) -> Option<Addr<PeerLink>> {
        self.links.read().ok()?.get(&peer)?.get(shard).cloned()
    }

    /// The supervisor re-created shard `shard`'s link to `peer`.
    pub fn replace_link(&self, peer: NodeId, shard: usize, link: Addr<PeerLink>) {
        if let Ok(mut links) = self.links.write()
            && let Some(slot) = links.get_mut(&peer).and_then(|links| links.get_mut(shard))
        {
            *slot = link;
        }
    }

    /// The shard actor at `index`.
    pub fn shard(&self, index: usize) -> Option<Addr<ShardActor>> {
        self.shards.read().ok()?.get(index).cloned()
    }

    /// Shards on this node.
    pub fn shard_count(&self) -> usize {
        self.shards.read().map(|shards| shards.len()).unwrap_or(0)
    }

    /// The supervisor rebuilt shard `index`.
    pub fn replace(&self, index: usize, addr: Addr<ShardActor>) {
        if let Ok(mut shards) = self.shards.write()
            && let Some(slot) = shards.get_mut(index)
        {
            *slot = addr;
        }
    }
}

impl InboundRoutes for Directory {
    fn shard_count(&self) -> usize {
        Directory::shard_count(self)
    }

    fn shard(&self, index: usize) -> Option<Recipient<InboundBatch>> {
        Directory::shard(self, index).map(Addr::recipient)
    }

    fn knows(&self, peer: NodeId) -> bool {
        self.links.read().is_ok_and(|links| links.contains_key(&peer))
    }

    fn spawn_on_shard(&self, shard: usize, task: ShardTask) -> bool {
        self.arbiters.get(shard).is_some_and(|arbiter| arbiter.spawn(task))
    }

    fn adopt(&self, peer: NodeId, shard: usize, reader: ConnectionReader) -> Result<(), ConnectionReader> {
        match self.link_of(peer, shard) {
            Some(link) => {
                link.do_send(AdoptConnection(reader));
                Ok(())
            }
            None => Err(reader),
        }
    }
}
