//! The node supervisor: it keeps every part of the node running.
//!
//! actix restarts a `Supervised` actor that stops itself, but not one that
//! panicked: its mailbox closes and it is gone. So the supervisor looks at
//! every child every [`CHECK_INTERVAL`] and re-creates the dead ones, built
//! exactly as at start-up ([`Parts`]): a dead peer link or outbox is started
//! again and its users get the new address; a dead shard is rebuilt from its
//! storage (crash-only: what was durable is what it had). Restarts are
//! counted and logged.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use actix::prelude::*;
use cohort_messages::NodeId;

use super::parts::Parts;
use crate::shard::{Outbox, ReplaceLink, ReplaceOutbox, ShardActor};
use crate::transport::PeerLink;

/// How often the supervisor looks at its children.
pub const CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// The live shard addresses, replaced when a shard is rebuilt. Readers (the
/// listener, node handles) look up on each use.
#[derive(Debug)]
pub struct Directory {
    shards: RwLock<Vec<Addr<ShardActor>>>,
    links: RwLock<HashMap<NodeId, Addr<PeerLink>>>,
}

impl Directory {
    pub(crate) fn new(shards: Vec<Addr<ShardActor>>, links: HashMap<NodeId, Addr<PeerLink>>) -> Directory {
        Directory { shards: RwLock::new(shards), links: RwLock::new(links) }
    }

    /// The peer link to `peer`.
    pub fn link(&self, peer: NodeId) -> Option<Addr<PeerLink>> {
        self.links.read().ok()?.get(&peer).cloned()
    }

    fn replace_link(&self, peer: NodeId, link: Addr<PeerLink>) {
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

    fn replace(&self, index: usize, addr: Addr<ShardActor>) {
        if let Ok(mut shards) = self.shards.write()
            && let Some(slot) = shards.get_mut(index)
        {
            *slot = addr;
        }
    }
}

/// A fault to inject, for tests of supervision (not part of the stable API).
#[doc(hidden)]
#[derive(Message, Clone, Copy, Debug)]
#[rtype(result = "()")]
pub enum InjectPanic {
    /// Make the outbox of `shard` towards `peer` panic.
    Outbox {
        /// Shard index.
        shard: usize,
        /// Peer node.
        peer: NodeId,
    },
    /// Make shard `shard` panic.
    Shard {
        /// Shard index.
        shard: usize,
    },
}

/// The supervisor actor.
pub(crate) struct Supervisor {
    pub parts: Arc<Parts>,
    pub directory: Arc<Directory>,
    pub io: ArbiterHandle,
    pub shard_arbiters: Vec<ArbiterHandle>,
    pub links: HashMap<NodeId, Addr<PeerLink>>,
    pub outboxes: Vec<HashMap<NodeId, Addr<Outbox>>>,
    pub restarts: Arc<AtomicU64>,
    /// Set once the node shuts down for its session (S3): nothing is restarted.
    pub shutting_down: bool,
}

impl Actor for Supervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(CHECK_INTERVAL, |supervisor, _ctx| supervisor.check());
    }
}

impl Supervisor {
    fn restarted(&self, what: String) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
        eprintln!("cohort: node {}: restarted {what}", self.parts.node.0);
    }

    fn check(&mut self) {
        if self.shutting_down {
            return;
        }
        let peers: Vec<NodeId> = self.links.keys().copied().collect();
        for peer in peers {
            if self.links.get(&peer).is_some_and(|link| !link.connected())
                && let Some(link) = self.parts.spawn_link(peer, &self.io)
            {
                self.links.insert(peer, link.clone());
                self.directory.replace_link(peer, link.clone());
                for outboxes in &self.outboxes {
                    if let Some(outbox) = outboxes.get(&peer) {
                        outbox.do_send(ReplaceLink(link.clone()));
                    }
                }
                self.restarted(format!("the peer link to {peer}"));
            }
        }
        for index in 0..self.outboxes.len() {
            let dead: Vec<NodeId> =
                self.outboxes[index].iter().filter(|(_, outbox)| !outbox.connected()).map(|(peer, _)| *peer).collect();
            for peer in dead {
                let Some(link) = self.links.get(&peer).cloned() else { continue };
                let outbox = self.parts.spawn_outbox(link, &self.shard_arbiters[index]);
                self.outboxes[index].insert(peer, outbox.clone());
                if let Some(shard) = self.directory.shard(index) {
                    shard.do_send(ReplaceOutbox { peer, outbox });
                }
                self.restarted(format!("the outbox of shard {index} to {peer}"));
            }
            if self.directory.shard(index).is_some_and(|shard| !shard.connected()) {
                match self.parts.spawn_shard(index, &self.shard_arbiters[index], self.outboxes[index].clone()) {
                    Ok(shard) => {
                        self.directory.replace(index, shard);
                        self.restarted(format!("shard {index} from its storage"));
                    }
                    Err(error) => {
                        eprintln!("cohort: node {}: shard {index} cannot restart: {error}", self.parts.node.0);
                        if let Ok(mut fatal) = self.parts.fatal.lock() {
                            fatal.get_or_insert(error.to_string());
                        }
                    }
                }
            }
        }
    }
}

impl Handler<super::metadata::agent_actor::Shutdown> for Supervisor {
    type Result = ();

    /// S3: stop the network first (no new input, peers see the node go),
    /// then the shards, whose storage threads finish their queued jobs.
    fn handle(&mut self, _: super::metadata::agent_actor::Shutdown, _ctx: &mut Self::Context) {
        self.shutting_down = true;
        self.io.stop();
        for arbiter in &self.shard_arbiters {
            arbiter.stop();
        }
    }
}

impl Handler<InjectPanic> for Supervisor {
    type Result = ();

    fn handle(&mut self, fault: InjectPanic, _ctx: &mut Self::Context) {
        match fault {
            InjectPanic::Outbox { shard, peer } => {
                if let Some(outbox) = self.outboxes.get(shard).and_then(|outboxes| outboxes.get(&peer)) {
                    outbox.do_send(crate::shard::PanicForTest);
                }
            }
            InjectPanic::Shard { shard } => {
                if let Some(addr) = self.directory.shard(shard) {
                    addr.do_send(crate::shard::PanicForTest);
                }
            }
        }
    }
}
