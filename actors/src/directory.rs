//! The node's directory of live actors: the shard actors by index and the
//! peer links by node. The supervisor replaces an entry when it rebuilds a
//! dead part, so readers (the listener, node handles, the agent) look up on
//! each use instead of keeping an address.

use std::collections::HashMap;
use std::sync::RwLock;

use actix::prelude::*;
use cohort_messages::NodeId;

use crate::inbound::{ConnectionReader, Inbound, InboundRoutes};
use crate::peer_link::{Adopt, PeerLink};
use crate::shard::ShardActor;

/// The live shard addresses, replaced when a shard is rebuilt. Readers (the
/// listener, node handles) look up on each use.
#[derive(Debug)]
pub struct Directory {
    shards: RwLock<Vec<Addr<ShardActor>>>,
    links: RwLock<HashMap<NodeId, Addr<PeerLink>>>,
}

impl Directory {
    /// The shards by index and the links by peer, as started.
    pub fn new(shards: Vec<Addr<ShardActor>>, links: HashMap<NodeId, Addr<PeerLink>>) -> Directory {
        Directory { shards: RwLock::new(shards), links: RwLock::new(links) }
    }

    /// The peer link to `peer`.
    pub fn link(&self, peer: NodeId) -> Option<Addr<PeerLink>> {
        self.links.read().ok()?.get(&peer).cloned()
    }

    /// The supervisor re-created the link to `peer`.
    pub fn replace_link(&self, peer: NodeId, link: Addr<PeerLink>) {
        if let Ok(mut links) = self.links.write() {
            links.insert(peer, link);
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

    fn shard(&self, index: usize) -> Option<Recipient<Inbound>> {
        Directory::shard(self, index).map(Addr::recipient)
    }

    fn adopt(&self, peer: NodeId, reader: ConnectionReader) -> Result<(), ConnectionReader> {
        match self.link(peer) {
            Some(link) => {
                link.do_send(Adopt(reader));
                Ok(())
            }
            None => Err(reader),
        }
    }
}
