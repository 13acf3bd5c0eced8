//! What a node is made of, and how to start each part. Used at start-up and
//! again by the supervisor when a part died, so a restarted part is built
//! exactly like the original.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use cohort_core::CoreConfig;
use cohort_messages::{ClusterId, NodeId};

use crate::kind::HostedGroup;
use crate::outbox::Outbox;
use crate::peer_link::{LinkIdentity, LinkState, LinkTiming, PeerLink};
use crate::placement_recorder::PlacementRecorder;
use crate::placements::{self, PlacementFile};
use crate::registry::Kinds;
use crate::shard::{ShardActor, ShardSetup};
use crate::storage_worker::{StartingWorker, StorageWorker};
use crate::{drops::Drops, metrics::NodeMetrics};
use cohort_wal::FileStorageConfig;

/// Why a part of the node could not start.
#[derive(Debug, thiserror::Error)]
pub enum PartError {
    /// A shard's storage could not be opened or recovered.
    #[error(transparent)]
    Storage(#[from] crate::storage_worker::StartError),
    /// A shard could not rebuild its groups.
    #[error("{0}")]
    Shard(String),
    /// The run-time placements file could not be read, or a record in it is wrong.
    #[error(transparent)]
    Placements(#[from] crate::placements::PlacementFileError),
}

/// The immutable description of a node, shared by start-up and the supervisor.
pub struct Parts {
    /// The cluster.
    pub cluster: ClusterId,
    /// This node.
    pub node: NodeId,
    /// The core's configuration.
    pub core: CoreConfig,
    /// The tick length.
    pub tick: Duration,
    /// The write-ahead log's limits.
    pub storage: FileStorageConfig,
    /// The node's data directory (one subdirectory per shard).
    pub data_dir: PathBuf,
    /// The registered group kinds.
    pub kinds: Arc<Kinds>,
    /// Drops on full or closed queues.
    pub drops: Arc<Drops>,
    /// The node's metrics.
    pub metrics: Arc<NodeMetrics>,
    /// The fatal error that stopped a shard, if any.
    pub fatal: Arc<Mutex<Option<String>>>,
    /// The peers and their addresses.
    pub peers: BTreeMap<NodeId, SocketAddr>,
    /// How links notice dead connections and redial (F1).
    pub link_timing: LinkTiming,
    /// TLS of peer links (T1); `None` only for an `insecure` (plaintext) cluster.
    pub tls: Option<crate::tls::NodeTls>,
    /// Each shard's link state towards each peer (R25, K4), by shard index.
    pub links: HashMap<NodeId, Vec<Arc<LinkState>>>,
    /// The configured groups of each shard.
    pub groups: Vec<Vec<HostedGroup>>,
    /// The groups the metadata placed here at run time; a shard merges its
    /// own with its configured ones each time it is built.
    pub recorded: Arc<PlacementFile>,
    /// Where shards record changes of the groups hosted at run time.
    pub placements: Addr<PlacementRecorder>,
    /// One lock per shard directory, held by its storage thread.
    pub storage_locks: Vec<Arc<Mutex<()>>>,
    /// Test hook: shards record their drivers' inputs and turns.
    pub record_drivers: bool,
}

impl Parts {
    /// Shards on this node.
    pub fn shard_count(&self) -> usize {
        self.groups.len()
    }

    /// Start shard `shard`'s link to `peer` on the shard's `arbiter`.
    pub fn spawn_link(&self, peer: NodeId, shard: usize, arbiter: &ArbiterHandle) -> Option<Addr<PeerLink>> {
        let address = *self.peers.get(&peer)?;
        let state = Arc::clone(self.links.get(&peer)?.get(shard)?);
        let identity = LinkIdentity {
            cluster: self.cluster,
            node: self.node,
            shard_count: self.shard_count() as u16,
            shard: shard as u16,
            peer,
            address,
        };
        let link = PeerLink::new(identity, self.link_timing, self.tls.clone(), state, Arc::clone(&self.drops));
        Some(PeerLink::start_in_arbiter(arbiter, move |_| link))
    }

    /// Shard `shard`'s view of each peer link's state.
    pub fn links_of(&self, shard: usize) -> HashMap<NodeId, Arc<LinkState>> {
        self.links.iter().filter_map(|(peer, states)| Some((*peer, Arc::clone(states.get(shard)?)))).collect()
    }

    /// Start an outbox writing to `link` on a shard's arbiter.
    pub fn spawn_outbox(&self, link: Addr<PeerLink>, arbiter: &ArbiterHandle) -> Addr<Outbox> {
        let outbox = Outbox::new(self.cluster, self.node, link, Arc::clone(&self.drops), Arc::clone(&self.metrics));
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
    ) -> Result<Addr<ShardActor>, PartError> {
        let mut started = self.spawn_shards(vec![(index, arbiter.clone(), outboxes)])?;
        started.pop().ok_or_else(|| PartError::Shard(format!("shard {index} did not start")))
    }

    /// [`Parts::spawn_shard`] for several shards at once, all in parallel
    /// (Z2: a node's start-up takes as long as its slowest shard, not the
    /// sum of them): every shard's storage worker recovers on its own
    /// thread, then every actor rebuilds its groups on its own arbiter. Blocks until
    /// all are built; the first failure is returned.
    pub fn spawn_shards(
        &self,
        shards: Vec<(usize, ArbiterHandle, HashMap<NodeId, Addr<Outbox>>)>,
    ) -> Result<Vec<Addr<ShardActor>>, PartError> {
        type Target = Arc<Mutex<Option<Addr<ShardActor>>>>;
        let targets: Vec<Target> = shards.iter().map(|_| Arc::new(Mutex::new(None))).collect();
        let mut starting = Vec::new();
        for ((index, _, _), target) in shards.iter().zip(&targets) {
            let reporter = Arc::clone(target);
            starting.push(StorageWorker::start(
                *index,
                self.data_dir.join(format!("shard-{index}")),
                self.storage.clone(),
                format!("cohort-storage-{}-{index}", self.node.0),
                Arc::clone(&self.storage_locks[*index]),
                Arc::clone(&self.metrics),
                move |event| {
                    if let Ok(target) = reporter.lock()
                        && let Some(addr) = target.as_ref()
                    {
                        ShardActor::storage_reporter(addr.clone())(event);
                    }
                },
            )?);
        }
        let recovered: Vec<_> = starting.into_iter().map(StartingWorker::recovered).collect::<Result<_, _>>()?;
        let mut pending = Vec::new();
        for (((index, arbiter, outboxes), (storage, recovered)), target) in
            shards.into_iter().zip(recovered).zip(targets)
        {
            let own = self.recorded.hosted(self.node, &self.kinds, self.shard_count(), Some(index))?;
            let setup = ShardSetup {
                index,
                node: self.node,
                config: self.core.clone(),
                tick: self.tick,
                groups: placements::merge(&self.groups[index], own),
                placements: self.placements.clone(),
                recovered,
                kinds: Arc::clone(&self.kinds),
                outboxes,
                links: self.links_of(index),
                storage,
                fatal: Arc::clone(&self.fatal),
                drops: Arc::clone(&self.drops),
                metrics: Arc::clone(&self.metrics),
                record: self.record_drivers,
            };
            let (built_tx, built_rx) = std::sync::mpsc::channel();
            let addr = ShardActor::start_in_arbiter(&arbiter, move |ctx| {
                let (actor, failure) = ShardActor::new(setup);
                if failure.is_some() {
                    ctx.stop();
                }
                let _ = built_tx.send(failure);
                actor
            });
            pending.push((index, addr, built_rx, target));
        }
        let mut started = Vec::new();
        for (index, addr, built_rx, target) in pending {
            match built_rx.recv() {
                Ok(None) => {}
                Ok(Some(error)) => return Err(PartError::Shard(error)),
                Err(_) => return Err(PartError::Shard(format!("shard {index} did not start"))),
            }
            if let Ok(mut target) = target.lock() {
                *target = Some(addr.clone());
            }
            started.push(addr);
        }
        Ok(started)
    }
}
