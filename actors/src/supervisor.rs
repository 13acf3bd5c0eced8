//! The node supervisor: it keeps every part of the node running.
//!
//! actix restarts a `Supervised` actor that stops itself, but not one that
//! panicked: its mailbox closes and it is gone. So the supervisor looks at
//! every child every [`CHECK_INTERVAL`] and re-creates the dead ones, built
//! exactly as at start-up ([`Parts`]): a dead peer link or outbox is started
//! again and its users get the new address; a dead shard is rebuilt from its
//! storage (crash-only: what was durable is what it had). Restarts are
//! counted and logged. Each check also logs the summaries of repeated
//! warnings whose window ended (`crate::repeats`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use actix::prelude::*;
use cohort_messages::NodeId;

use crate::directory::{Directory, Links};
use crate::outbox::{Outbox, PanicForTest, ReplaceLink};
use crate::parts::Parts;
use crate::shard::{ReplaceOutbox, StallForTest};

/// How often the supervisor looks at its children.
pub(crate) const CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// A fault to inject, for tests of supervision and of slow threads (not part
/// of the stable API).
#[doc(hidden)]
#[derive(Message, Clone, Copy, Debug)]
#[rtype(result = "()")]
pub enum InjectFault {
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
    /// Block the thread of shard `shard` for `stall_ms` milliseconds, as a
    /// long turn or a descheduled thread would.
    StallShard {
        /// Shard index.
        shard: usize,
        /// How long the thread is blocked.
        stall_ms: u64,
    },
}

/// The supervisor actor.
pub struct Supervisor {
    parts: Arc<Parts>,
    directory: Arc<Directory>,
    io: ArbiterHandle,
    shard_arbiters: Vec<ArbiterHandle>,
    links: Links,
    outboxes: Vec<HashMap<NodeId, Addr<Outbox>>>,
    restarts: Arc<AtomicU64>,
    /// Set once the node shuts down for its session (S3): nothing is restarted.
    shutting_down: bool,
}

impl Supervisor {
    /// The supervisor of a node made of `parts`: its shards run on
    /// `shard_arbiters` (with `outboxes` to each peer), its peer links on
    /// `io`; `restarts` counts what it re-created.
    pub fn new(
        parts: Arc<Parts>,
        directory: Arc<Directory>,
        io: ArbiterHandle,
        shard_arbiters: Vec<ArbiterHandle>,
        links: Links,
        outboxes: Vec<HashMap<NodeId, Addr<Outbox>>>,
        restarts: Arc<AtomicU64>,
    ) -> Supervisor {
        Supervisor { parts, directory, io, shard_arbiters, links, outboxes, restarts, shutting_down: false }
    }
}

impl Actor for Supervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(CHECK_INTERVAL, |supervisor, _ctx| {
            supervisor.check();
            crate::repeats::flush();
        });
    }
}

impl Supervisor {
    fn restarted(&self, what: String) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
        let node = self.parts.node.0;
        tracing::warn!(node, restarted = %what, "node {node}: restarted {what} (it had died)");
    }

    fn check(&mut self) {
        if self.shutting_down {
            return;
        }
        let peers: Vec<NodeId> = self.links.keys().copied().collect();
        for peer in peers {
            for shard in 0..self.shard_arbiters.len() {
                let dead =
                    self.links.get(&peer).and_then(|links| links.get(shard)).is_some_and(|link| !link.connected());
                if !dead {
                    continue;
                }
                let Some(link) = self.parts.spawn_link(peer, shard, &self.shard_arbiters[shard]) else { continue };
                if let Some(slot) = self.links.get_mut(&peer).and_then(|links| links.get_mut(shard)) {
                    *slot = link.clone();
                }
                self.directory.replace_link(peer, shard, link.clone());
                if let Some(outbox) = self.outboxes.get(shard).and_then(|outboxes| outboxes.get(&peer)) {
                    outbox.do_send(ReplaceLink(link));
                }
                self.restarted(format!("shard {shard}'s link to {peer}"));
            }
        }
        for index in 0..self.outboxes.len() {
            let dead: Vec<NodeId> =
                self.outboxes[index].iter().filter(|(_, outbox)| !outbox.connected()).map(|(peer, _)| *peer).collect();
            for peer in dead {
                let Some(link) = self.links.get(&peer).and_then(|links| links.get(index)).cloned() else { continue };
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
                        let node = self.parts.node.0;
                        tracing::error!(node, shard = index, %error, "node {node}: shard {index} cannot restart: {error}");
                        if let Ok(mut fatal) = self.parts.fatal.lock() {
                            fatal.get_or_insert(error.to_string());
                        }
                    }
                }
            }
        }
    }
}

impl Handler<crate::agent::Shutdown> for Supervisor {
    type Result = ();

    /// S3: stop the network first (no new input, peers see the node go),
    /// then the shards, whose storage threads finish their queued jobs.
    fn handle(&mut self, _: crate::agent::Shutdown, _ctx: &mut Self::Context) {
        self.shutting_down = true;
        self.io.stop();
        for arbiter in &self.shard_arbiters {
            arbiter.stop();
        }
    }
}

impl Handler<InjectFault> for Supervisor {
    type Result = ();

    fn handle(&mut self, fault: InjectFault, _ctx: &mut Self::Context) {
        match fault {
            InjectFault::Outbox { shard, peer } => {
                if let Some(outbox) = self.outboxes.get(shard).and_then(|outboxes| outboxes.get(&peer)) {
                    outbox.do_send(PanicForTest);
                }
            }
            InjectFault::Shard { shard } => {
                if let Some(addr) = self.directory.shard(shard) {
                    addr.do_send(PanicForTest);
                }
            }
            InjectFault::StallShard { shard, stall_ms } => {
                if let Some(addr) = self.directory.shard(shard) {
                    addr.do_send(StallForTest(Duration::from_millis(stall_ms)));
                }
            }
        }
    }
}
