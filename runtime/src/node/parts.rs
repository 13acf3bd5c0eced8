//! What a node is made of, and how to start each part. Used at start-up and
//! again by the supervisor when a part died, so a restarted part is built
//! exactly like the original.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use cohort_actors::core::CoreConfig;
use cohort_messages::{ClusterId, NodeId};

use super::NodeError;
use super::kind::{HostedGroup, Kinds};
use super::recorded::{self, PlacementFile};
use crate::shard::storage_worker::StorageWorker;
use crate::shard::{Outbox, ShardActor, ShardSetup};
use crate::storage::FileStorageConfig;
use crate::telemetry::{Drops, NodeMetrics};
use crate::transport::PeerLink;

/// The immutable description of a node, shared by start-up and the supervisor.
pub(crate) struct Parts {
    pub cluster: ClusterId,
    pub node: NodeId,
    pub core: CoreConfig,
    pub tick: Duration,
    pub storage: FileStorageConfig,
    pub data_dir: PathBuf,
    pub kinds: Arc<Kinds>,
    pub drops: Arc<Drops>,
    pub metrics: Arc<NodeMetrics>,
    pub fatal: Arc<Mutex<Option<String>>>,
    pub peers: BTreeMap<NodeId, SocketAddr>,
    pub connected: HashMap<NodeId, Arc<AtomicBool>>,
    /// The configured groups of each shard.
    pub groups: Vec<Vec<HostedGroup>>,
    /// The groups the metadata placed here at run time; a shard merges its
    /// own with its configured ones each time it is built.
    pub recorded: Arc<PlacementFile>,
    /// One lock per shard directory, held by its storage thread.
    pub storage_locks: Vec<Arc<Mutex<()>>>,
}

impl Parts {
    /// Shards on this node.
    pub fn shard_count(&self) -> usize {
        self.groups.len()
    }

    /// Start the peer link to `peer` on `io`.
    pub fn spawn_link(&self, peer: NodeId, io: &ArbiterHandle) -> Option<Addr<PeerLink>> {
        let address = *self.peers.get(&peer)?;
        let flag = Arc::clone(self.connected.get(&peer)?);
        let link = PeerLink::new(
            self.cluster,
            self.node,
            self.shard_count() as u16,
            peer,
            address,
            flag,
            Arc::clone(&self.drops),
        );
        Some(PeerLink::start_in_arbiter(io, move |_| link))
    }

    /// Start an outbox writing to `link` on a shard's arbiter.
    pub fn spawn_outbox(&self, link: Addr<PeerLink>, arbiter: &ArbiterHandle) -> Addr<Outbox> {
        let outbox = Outbox::new(self.cluster, self.node, link, Arc::clone(&self.drops));
        Outbox::start_in_arbiter(arbiter, move |_| outbox)
    }

    /// Recover shard `index`'s storage and start its actor on `arbiter`.
    /// Blocks until the actor has rebuilt its groups: the configured ones and
    /// those recorded at run time (a recorded group replaces a configured one).
    pub fn spawn_shard(
        &self,
        index: usize,
        arbiter: &ArbiterHandle,
        outboxes: HashMap<NodeId, Addr<Outbox>>,
    ) -> Result<Addr<ShardActor>, NodeError> {
        let own = self.recorded.hosted(self.node, &self.kinds, self.shard_count(), Some(index))?;
        let target: Arc<Mutex<Option<Addr<ShardActor>>>> = Arc::new(Mutex::new(None));
        let reporter = Arc::clone(&target);
        let (storage, recovered) = StorageWorker::start(
            self.data_dir.join(format!("shard-{index}")),
            self.storage.clone(),
            format!("cohort-storage-{}-{index}", self.node.0),
            Arc::clone(&self.storage_locks[index]),
            move |event| {
                if let Ok(target) = reporter.lock()
                    && let Some(addr) = target.as_ref()
                {
                    ShardActor::storage_reporter(addr.clone())(event);
                }
            },
        )?;
        let setup = ShardSetup {
            index,
            node: self.node,
            config: self.core.clone(),
            tick: self.tick,
            groups: recorded::merge(&self.groups[index], own),
            recorded: Arc::clone(&self.recorded),
            recovered,
            kinds: Arc::clone(&self.kinds),
            outboxes,
            connected: self.connected.clone(),
            storage,
            fatal: Arc::clone(&self.fatal),
            drops: Arc::clone(&self.drops),
            metrics: Arc::clone(&self.metrics),
        };
        let (built_tx, built_rx) = std::sync::mpsc::channel();
        let addr = ShardActor::start_in_arbiter(arbiter, move |ctx| {
            let (actor, failure) = ShardActor::new(setup);
            if failure.is_some() {
                ctx.stop();
            }
            let _ = built_tx.send(failure);
            actor
        });
        match built_rx.recv() {
            Ok(None) => {}
            Ok(Some(error)) => return Err(NodeError::Shard(error)),
            Err(_) => return Err(NodeError::Shard(format!("shard {index} did not start"))),
        }
        if let Ok(mut target) = target.lock() {
            *target = Some(addr.clone());
        }
        Ok(addr)
    }
}
