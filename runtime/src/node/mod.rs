//! A cohort node, built from code and embedded in a host's actix System.
//!
//! [`NodeBuilder`] takes the node's identity, addresses, data directory,
//! shard count, cluster timing, group kinds ([`kind`]: a state machine and
//! perhaps a custom actor each) and group placements; [`NodeBuilder::start`]
//! recovers every shard's storage, starts one Arbiter per shard (shard actor
//! and outboxes), the peer links and the listener, and returns a [`Node`].
//! [`NodeHandle::submit`] sends a request to the shard that owns its group and
//! awaits the answer; [`crate::client::Client`] adds redirects, retries and
//! exactly-once request numbering on top.
//!
//! A node of one process, with the peers of a three-node cluster:
//!
//! ```no_run
//! use cohort_runtime::prelude::*;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let system = actix_rt::System::new();
//! system.block_on(async {
//!     let members = vec![NodeId(1), NodeId(2), NodeId(3)];
//!     let node = NodeBuilder::new(ClusterId(7), NodeId(1))
//!         .listen("10.0.0.1:7100".parse()?)
//!         .peer(NodeId(2), "10.0.0.2:7100".parse()?)
//!         .peer(NodeId(3), "10.0.0.3:7100".parse()?)
//!         .data_dir("/var/lib/myapp/cohort")
//!         .group_kind("register", |_| Box::new(Register::default()))
//!         .group(GroupPlacement::new(GroupId(0), members).kind("register"))
//!         .start()?;
//!     let client = Client::new([node.handle()]);
//!     client.write(GroupId(0), "hello").await?;
//!     node.stop();
//!     Ok(())
//! })
//! # }
//! ```

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use std::time::Instant;

use actix::prelude::*;
use bytes::Bytes;
use cohort_actors::core::routing::shard_of;
use cohort_actors::core::{CoreConfig, StateMachine, WriteMode};
use cohort_messages::{ClientId, ClusterId, GroupId, Incarnation, NodeId, Request, RequestKind, RequestNumber};
use tokio::sync::oneshot;
use tracing::Instrument as _;

use crate::config::ClusterConfig;
use crate::shard::{ClientAnswer, Outbox, Submit};
use crate::storage::FileStorageConfig;
use crate::telemetry::{Drops, NodeMetrics};
use crate::transport::listener::{self, InboundStats, Router};

mod detached;
pub mod kind;
pub mod metadata;
mod parts;
mod placement;
pub(crate) mod recorded;
mod register;
mod supervisor;

pub use detached::DetachedNode;
pub use kind::{GroupKind, GroupKindError};
pub use placement::GroupPlacement;
pub use recorded::{PLACEMENTS_FILE, PlacementFileError};
pub use register::Register;

use parts::Parts;
use supervisor::Supervisor;
pub use supervisor::{CHECK_INTERVAL, Directory, InjectPanic};

/// Makes the state machine of a group; called on the shard's thread.
pub type StateMachineFactory = Arc<dyn Fn(GroupId) -> Box<dyn StateMachine> + Send + Sync>;

/// Why a node could not start or a request failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A setting is wrong; the message names it.
    #[error("node config: {0}")]
    Config(String),
    /// The listen address could not be bound.
    #[error("binding {address}: {reason}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// The OS error.
        reason: String,
    },
    /// A shard's storage could not be opened or recovered.
    #[error(transparent)]
    Storage(#[from] crate::shard::storage_worker::StartError),
    /// A shard could not rebuild its groups.
    #[error("{0}")]
    Shard(String),
    /// The group kinds and placements do not fit together; the message says what to fix.
    #[error(transparent)]
    Kind(#[from] GroupKindError),
    /// The run-time placements file could not be read, or a record in it is
    /// wrong; the message names the file and what is wrong.
    #[error(transparent)]
    Placements(#[from] PlacementFileError),
}

/// Why a submitted request got no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// This node is not the group's primary; the primary it knows, if any (V5).
    #[error("{group}: not the primary here; primary is {primary:?}")]
    NotPrimary {
        /// The group.
        group: GroupId,
        /// The primary this node knows.
        primary: Option<NodeId>,
    },
    /// The group refused the request, with its reason.
    #[error("{group}: {code:?}: {detail}")]
    Refused {
        /// The group.
        group: GroupId,
        /// The code.
        code: cohort_messages::ReplyError,
        /// Why.
        detail: String,
    },
    /// No answer in time (the request may still commit; retrying is safe only
    /// with the same client and request number).
    #[error("{group}: no answer within {waited:?}")]
    Timeout {
        /// The group.
        group: GroupId,
        /// How long we waited.
        waited: Duration,
    },
    /// The shard is gone (the node is stopping).
    #[error("{group}: the node is stopping")]
    Stopped {
        /// The group.
        group: GroupId,
    },
}

/// A committed (or read) result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    /// The op it committed at. For a read, the applied point the read saw
    /// (every synchronous write acknowledged before the read is at or below it).
    pub op: cohort_messages::Op,
    /// The state machine's result.
    pub result: Bytes,
}

impl NodeBuilder {
    /// A builder from a configuration file's `[cluster]`, `[node]` and
    /// `[groups]` tables, with the built-in [`Register`] state machine. Group
    /// `g` has every node of the cluster as a member, in id order rotated by `g`.
    pub fn from_config(config: &crate::config::Config) -> Result<NodeBuilder, NodeError> {
        let node = config.node.as_ref().ok_or_else(|| NodeError::Config("[node] table is missing".into()))?;
        let mut builder = NodeBuilder::new(ClusterId(u128::from(node.cluster_id)), NodeId(node.id))
            .listen(node.listen)
            .data_dir(node.data_dir.clone())
            .shards(node.shards)
            .cluster_config(config.cluster.clone())
            .session_config(config.session.clone())
            .state_machine(|_| Box::new(Register::default()));
        if let Some(admin) = node.admin {
            builder = builder.admin(admin);
        }
        if let Some(client) = node.client {
            builder = builder.client_port(client);
        }
        let mut members: Vec<NodeId> = vec![NodeId(node.id)];
        for peer in &node.peers {
            builder = builder.peer(NodeId(peer.id), peer.address);
            members.push(NodeId(peer.id));
        }
        members.sort();
        let write_mode = match config.groups.write_mode {
            crate::config::WriteModeName::Sync => WriteMode::Sync,
            crate::config::WriteModeName::Async => WriteMode::Async,
        };
        for g in 0..config.groups.partitions {
            let mut rotated = members.clone();
            rotated.rotate_left((g as usize) % members.len());
            builder = builder.group(GroupPlacement {
                group: GroupId(g),
                incarnation: Incarnation(1),
                members: rotated,
                replication_quorum: config.groups.replication_quorum,
                write_mode,
                kind: GroupKind::default(),
            });
        }
        Ok(builder)
    }
}

/// Builds a node. See the module docs.
pub struct NodeBuilder {
    cluster: ClusterId,
    node: NodeId,
    listen: Option<SocketAddr>,
    /// A listener bound beforehand (a local cluster binds every node's port
    /// before any node starts, so no port is lost to a race).
    bound: Option<std::net::TcpListener>,
    peers: BTreeMap<NodeId, SocketAddr>,
    data_dir: Option<PathBuf>,
    shards: usize,
    timing: ClusterConfig,
    core: CoreConfig,
    storage: FileStorageConfig,
    groups: Vec<GroupPlacement>,
    kinds: kind::KindRegistrations,
    admin: Option<SocketAddr>,
    client_port: Option<SocketAddr>,
    session: crate::config::SessionConfig,
}

impl NodeBuilder {
    /// A node `node` of cluster `cluster`, with defaults for everything else.
    pub fn new(cluster: ClusterId, node: NodeId) -> NodeBuilder {
        NodeBuilder {
            cluster,
            node,
            listen: None,
            bound: None,
            peers: BTreeMap::new(),
            data_dir: None,
            shards: 1,
            timing: ClusterConfig::default(),
            core: CoreConfig::default(),
            storage: FileStorageConfig::default(),
            groups: Vec::new(),
            kinds: kind::KindRegistrations::default(),
            admin: None,
            client_port: None,
            session: crate::config::SessionConfig::default(),
        }
    }

    /// The node's session with the metadata group (`[session]`; S1, S3).
    pub fn session_config(mut self, session: crate::config::SessionConfig) -> Self {
        self.session = session;
        self
    }

    /// Accept client Request frames on this address (V5: non-primaries redirect).
    pub fn client_port(mut self, address: SocketAddr) -> Self {
        self.client_port = Some(address);
        self
    }

    /// Serve `/metrics` (Prometheus text), `/health`, `/status` and the
    /// operator commands under `/admin/` on this address.
    pub fn admin(mut self, address: SocketAddr) -> Self {
        self.admin = Some(address);
        self
    }

    /// The address peers dial.
    pub fn listen(mut self, address: SocketAddr) -> Self {
        self.listen = Some(address);
        self
    }

    /// Listen on an already bound listener (its address is the listen address).
    pub(crate) fn bound_listener(mut self, listener: std::net::TcpListener) -> Self {
        self.listen = listener.local_addr().ok();
        self.bound = Some(listener);
        self
    }

    /// Replace the registered kinds (a local cluster builds every node alike).
    pub(crate) fn kinds(mut self, kinds: kind::KindRegistrations) -> Self {
        self.kinds = kinds;
        self
    }

    /// A peer node and its address.
    pub fn peer(mut self, node: NodeId, address: SocketAddr) -> Self {
        self.peers.insert(node, address);
        self
    }

    /// Where the shards keep their logs (one subdirectory per shard), and
    /// the node keeps the groups placed on it at run time ([`PLACEMENTS_FILE`]).
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }

    /// Number of shards (Arbiters), default 1.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards;
        self
    }

    /// Cluster timing (`[cluster]`).
    pub fn cluster_config(mut self, timing: ClusterConfig) -> Self {
        self.timing = timing;
        self
    }

    /// Core limits other than timing (pipeline, snapshots, client table).
    pub fn core_config(mut self, core: CoreConfig) -> Self {
        self.core = core;
        self
    }

    /// A group this node is a member of.
    pub fn group(mut self, placement: GroupPlacement) -> Self {
        self.groups.push(placement);
        self
    }

    /// The state machine of the default kind ([`GroupKind::DEFAULT_NAME`]),
    /// which placements run unless they name another kind. Same as
    /// `group_kind(GroupKind::default(), factory)`.
    ///
    /// ```
    /// use cohort_runtime::prelude::*;
    /// let builder = NodeBuilder::new(ClusterId(1), NodeId(1))
    ///     .state_machine(|_group| Box::new(Register::default()))
    ///     .group(GroupPlacement::new(GroupId(0), vec![NodeId(1)])); // the default kind
    /// # let _ = builder;
    /// ```
    pub fn state_machine(self, factory: impl Fn(GroupId) -> Box<dyn StateMachine> + Send + Sync + 'static) -> Self {
        self.group_kind(GroupKind::default(), factory)
    }

    /// Register a group kind: its name and the factory of its groups' state
    /// machines (called on the shard's thread, at start, at a shard's restart
    /// and never more than once per group and shard life). Placements name
    /// their kind ([`GroupPlacement::kind`]). Registering a name twice, or
    /// placing a group as a kind that is not registered, makes
    /// [`NodeBuilder::start`] fail with a [`GroupKindError`].
    ///
    /// ```
    /// use cohort_runtime::prelude::*;
    ///
    /// let builder = NodeBuilder::new(ClusterId(1), NodeId(1))
    ///     .group_kind("register", |_| Box::new(Register::default()))
    ///     .group(GroupPlacement::new(GroupId(0), vec![NodeId(1)]).kind("register"));
    /// # let _ = builder;
    /// ```
    pub fn group_kind(
        mut self,
        kind: impl Into<GroupKind>,
        factory: impl Fn(GroupId) -> Box<dyn StateMachine> + Send + Sync + 'static,
    ) -> Self {
        self.kinds.state_machines.push((kind.into(), Arc::new(factory)));
        self
    }

    /// Give `kind` a custom group actor: for each group of the kind, `make`
    /// builds one on the group's shard thread (told which node, group and
    /// kind it is for), and cohort feeds it role
    /// changes and the applied ops (see [`crate::shard::custom`] for what it
    /// is guaranteed). Reach it with [`NodeHandle::group_actor`].
    ///
    /// ```
    /// use actix::prelude::*;
    /// use cohort_runtime::prelude::*;
    ///
    /// /// Remembers the latest role of its group.
    /// struct RoleWatch(Option<GroupRole>);
    /// impl Actor for RoleWatch { type Context = Context<Self>; }
    /// impl Handler<Applied> for RoleWatch {
    ///     type Result = ();
    ///     fn handle(&mut self, _: Applied, _: &mut Context<Self>) {}
    /// }
    /// impl Handler<Restored> for RoleWatch {
    ///     type Result = ();
    ///     fn handle(&mut self, _: Restored, _: &mut Context<Self>) {}
    /// }
    /// impl Handler<RoleChanged> for RoleWatch {
    ///     type Result = ();
    ///     fn handle(&mut self, changed: RoleChanged, _: &mut Context<Self>) {
    ///         self.0 = Some(changed.role);
    ///     }
    /// }
    ///
    /// let builder = NodeBuilder::new(ClusterId(1), NodeId(1))
    ///     .group_kind("register", |_| Box::new(Register::default()))
    ///     .group_actor("register", |_replica: &GroupReplica| RoleWatch(None));
    /// # let _ = builder;
    /// ```
    pub fn group_actor<A, F>(mut self, kind: impl Into<GroupKind>, make: F) -> Self
    where
        A: crate::shard::CustomGroupActor,
        F: Fn(&crate::shard::custom::GroupReplica) -> A + Send + Sync + 'static,
    {
        self.kinds.actors.push((kind.into(), crate::shard::custom::factory(make)));
        self
    }

    /// Start the node on a thread of its own, in an actix System cohort
    /// starts, for hosts that do not run actix (see [`DetachedNode`]).
    pub fn start_detached(self) -> Result<DetachedNode, NodeError> {
        detached::start(self)
    }

    /// Start the node inside the current actix System.
    pub fn start(self) -> Result<Node, NodeError> {
        let listen = self.listen.ok_or_else(|| NodeError::Config("listen address is not set".into()))?;
        let data_dir = self.data_dir.ok_or_else(|| NodeError::Config("data_dir is not set".into()))?;
        if self.kinds.state_machines.is_empty() {
            return Err(NodeError::Config(
                "no state machine: register one with `state_machine(..)` or `group_kind(..)`".into(),
            ));
        }
        // The metadata group (see `metadata`): reserved id and kind, members
        // the first METADATA_MEMBERS_MAX nodes of the cluster by id.
        if self.groups.iter().any(|placement| placement.group == GroupId::METADATA) {
            return Err(NodeError::Config(format!(
                "{} is the metadata group's reserved id: place partition groups under other ids",
                GroupId::METADATA
            )));
        }
        if self.kinds.state_machines.iter().any(|(kind, _)| kind.as_str() == metadata::METADATA_KIND) {
            return Err(NodeError::Config(format!(
                "group kind {:?} is reserved for the metadata group: name your kind otherwise",
                metadata::METADATA_KIND
            )));
        }
        let session = self.session.ticks(self.timing.tick).map_err(|error| NodeError::Config(error.to_string()))?;
        let metadata_members = metadata::metadata_members(std::iter::once(self.node).chain(self.peers.keys().copied()));
        let shared_metadata = metadata::SharedMetadata::default();
        let bootstrap_groups: Vec<(GroupId, String, Vec<NodeId>)> = self
            .groups
            .iter()
            .map(|placement| (placement.group, placement.kind.as_str().to_string(), placement.members.clone()))
            .collect();
        let mut kinds = self.kinds.clone();
        let factory_metadata = shared_metadata.clone();
        kinds
            .state_machines
            .push((GroupKind::new(metadata::METADATA_KIND), Arc::new(move |_| factory_metadata.state_machine())));
        let mut placements = self.groups.clone();
        if metadata_members.contains(&self.node) {
            placements
                .push(GroupPlacement::new(GroupId::METADATA, metadata_members.clone()).kind(metadata::METADATA_KIND));
        }
        let kinds = Arc::new(kinds.resolve()?);
        if self.shards == 0 || self.shards > cohort_messages::SHARD_COUNT_MAX as usize {
            return Err(NodeError::Config(format!("shards must be in 1..={}", cohort_messages::SHARD_COUNT_MAX)));
        }
        let timing = self.timing.timing().map_err(|error| NodeError::Config(error.to_string()))?;
        let core = CoreConfig { timing, ..self.core };
        core.validate().map_err(|error| NodeError::Config(error.to_string()))?;
        let hosted = placement::to_hosted(self.node, &placements, &kinds)?;
        // Groups the metadata placed here at run time (see `recorded`): each
        // shard merges its own at every start; checked here first, so a bad
        // record stops the node before anything runs.
        let recorded = Arc::new(recorded::PlacementFile::open(&data_dir)?);
        recorded.hosted(self.node, &kinds, self.shards, None)?;

        let std_listener = match self.bound {
            Some(listener) => {
                listener
                    .set_nonblocking(true)
                    .map_err(|error| NodeError::Bind { address: listen, reason: error.to_string() })?;
                listener
            }
            None => bind_nonblocking(listen)?,
        };
        let listen = std_listener.local_addr().unwrap_or(listen);

        let metrics = Arc::new(NodeMetrics::new());
        let drops = Arc::new(Drops::new(Arc::clone(&metrics)));
        let admin = self.admin.map(bind_nonblocking).transpose()?;
        let admin_address = admin.as_ref().and_then(|listener| listener.local_addr().ok());
        let client = self.client_port.map(bind_nonblocking).transpose()?;
        let client_address = client.as_ref().and_then(|listener| listener.local_addr().ok());
        let mut groups: Vec<Vec<kind::HostedGroup>> = (0..self.shards).map(|_| Vec::new()).collect();
        for group in hosted {
            groups[shard_of(group.spec.group, self.shards)].push(group);
        }
        let parts = Arc::new(Parts {
            cluster: self.cluster,
            node: self.node,
            core,
            tick: self.timing.tick,
            storage: self.storage,
            data_dir,
            kinds,
            drops: Arc::clone(&drops),
            metrics: Arc::clone(&metrics),
            fatal: Arc::new(std::sync::Mutex::new(None)),
            connected: self.peers.keys().map(|peer| (*peer, Arc::new(AtomicBool::new(false)))).collect(),
            peers: self.peers,
            storage_locks: (0..self.shards).map(|_| Arc::new(std::sync::Mutex::new(()))).collect(),
            groups,
            recorded,
        });

        let io = Arbiter::new();
        let mut links = HashMap::new();
        for &peer in parts.peers.keys() {
            if let Some(link) = parts.spawn_link(peer, &io.handle()) {
                links.insert(peer, link);
            }
        }
        let mut arbiters = Vec::new();
        let mut shards = Vec::new();
        let mut outboxes_per_shard = Vec::new();
        for index in 0..parts.shard_count() {
            let arbiter = Arbiter::new();
            let outboxes: HashMap<NodeId, Addr<Outbox>> =
                links.iter().map(|(&peer, link)| (peer, parts.spawn_outbox(link.clone(), &arbiter.handle()))).collect();
            shards.push(parts.spawn_shard(index, &arbiter.handle(), outboxes.clone())?);
            outboxes_per_shard.push(outboxes);
            arbiters.push(arbiter);
        }
        let directory = Arc::new(Directory::new(shards, links.clone()));
        let restarts = Arc::new(AtomicU64::new(0));
        let supervisor_arbiter = Arbiter::new();
        let supervisor = Supervisor {
            parts: Arc::clone(&parts),
            directory: Arc::clone(&directory),
            io: io.handle(),
            shard_arbiters: arbiters.iter().map(Arbiter::handle).collect(),
            links,
            outboxes: outboxes_per_shard,
            restarts: Arc::clone(&restarts),
            shutting_down: false,
        };
        let supervisor = Supervisor::start_in_arbiter(&supervisor_arbiter.handle(), move |_| supervisor);
        let board = Arc::new(metadata::StatusBoard::new(self.node, metadata_members.clone(), shared_metadata.clone()));
        let session_stop = Arc::new(metadata::SessionStop::default());
        let agent_config = cohort_actors::core::metadata::AgentConfig {
            node: self.node,
            address: listen.to_string(),
            client: crate::client::fresh_client_id(),
            metadata_group: GroupId::METADATA,
            policy: session.policy,
            keepalive_interval_ticks: session.keepalive_interval_ticks,
            session_timeout_ticks: session.timeout_ticks,
            request_retry_ticks: session.keepalive_interval_ticks,
            unload_grace_ticks: session.timeout_ticks,
            bootstrap_groups,
        };
        agent_config.validate().map_err(|error| NodeError::Config(format!("session: {error}")))?;
        let agent = metadata::agent_actor::AgentSetup {
            cluster: self.cluster,
            config: agent_config,
            tick: self.timing.tick,
            members: metadata_members,
            directory: Arc::clone(&directory),
            metadata: shared_metadata,
            board: Arc::clone(&board),
            metrics: Arc::clone(&metrics),
            stop: Arc::clone(&session_stop),
            shutdown: supervisor.clone().recipient(),
        };
        let agent = metadata::agent_actor::MetadataAgentActor::new(agent);
        let agent = metadata::agent_actor::MetadataAgentActor::start_in_arbiter(&io.handle(), move |_| agent);
        let operator = metadata::operator::OperatorPort::new(Arc::clone(&board), agent.clone().recipient());
        let stats = Arc::new(InboundStats::default());
        let router = Router {
            agent: Some(agent.recipient()),
            cluster: self.cluster,
            shards: Arc::clone(&directory),
            stats: Arc::clone(&stats),
            metrics: Arc::clone(&metrics),
            drops: Arc::clone(&drops),
            next_connection: Arc::new(AtomicU64::new(1)),
        };
        if let Some(client) = client {
            let (cluster, node, directory) = (self.cluster, self.node, Arc::clone(&directory));
            io.spawn(async move {
                match tokio::net::TcpListener::from_std(client) {
                    Ok(listener) => crate::transport::client_port::serve(listener, cluster, node, directory).await,
                    Err(error) => eprintln!("cohort: cannot serve clients: {error}"),
                }
            });
        }
        if let Some(admin) = admin {
            let metrics = Arc::clone(&metrics);
            let board = Arc::clone(&board);
            io.spawn(async move {
                match tokio::net::TcpListener::from_std(admin) {
                    Ok(listener) => crate::telemetry::admin::serve_node(listener, metrics, board, operator).await,
                    Err(error) => eprintln!("cohort: cannot serve metrics: {error}"),
                }
            });
        }
        io.spawn(async move {
            match tokio::net::TcpListener::from_std(std_listener) {
                Ok(listener) => listener::serve(listener, router).await,
                Err(error) => eprintln!("cohort: cannot listen: {error}"),
            }
        });
        let handle = NodeHandle {
            node: self.node,
            shards: directory,
            next_client: Arc::new(AtomicU64::new(1)),
            connected: Arc::new(parts.connected.clone()),
            drops,
            stats,
            fatal: Arc::clone(&parts.fatal),
            metrics,
            supervisor,
            restarts,
            board,
            session_stop,
        };
        Ok(Node {
            handle,
            listen,
            admin: admin_address,
            client: client_address,
            supervisor: Some(supervisor_arbiter),
            arbiters,
            io: Some(io),
        })
    }
}

/// Bind a listener for tokio to adopt later; errors name the address.
fn bind_nonblocking(address: SocketAddr) -> Result<std::net::TcpListener, NodeError> {
    let bind_error = |error: std::io::Error| NodeError::Bind { address, reason: error.to_string() };
    let listener = std::net::TcpListener::bind(address).map_err(bind_error)?;
    listener.set_nonblocking(true).map_err(bind_error)?;
    Ok(listener)
}

/// A running node.
pub struct Node {
    handle: NodeHandle,
    listen: SocketAddr,
    admin: Option<SocketAddr>,
    client: Option<SocketAddr>,
    supervisor: Option<Arbiter>,
    arbiters: Vec<Arbiter>,
    io: Option<Arbiter>,
}

impl Node {
    /// A handle for submitting requests.
    pub fn handle(&self) -> NodeHandle {
        self.handle.clone()
    }

    /// The bound listen address (useful with port 0).
    pub fn listen_address(&self) -> SocketAddr {
        self.listen
    }

    /// The bound client port, if configured.
    pub fn client_address(&self) -> Option<SocketAddr> {
        self.client
    }

    /// The bound admin address serving `/metrics`, if configured.
    pub fn admin_address(&self) -> Option<SocketAddr> {
        self.admin
    }

    /// Stop every actor and thread of the node. Nothing new is accepted or
    /// acknowledged once this starts; what the shards had already handed to
    /// storage is written out. The demo and the tests use it as a crash of
    /// the node: peers see its connections drop at once.
    ///
    /// Order: the supervisor first (so it does not restart what is being
    /// stopped), then the network (no new input), then the shards, each of
    /// whose storage thread finishes the jobs already queued before it exits.
    pub fn stop(mut self) {
        let stop = |arbiter: Arbiter| {
            arbiter.stop();
            let _ = arbiter.join();
        };
        if let Some(supervisor) = self.supervisor.take() {
            stop(supervisor);
        }
        if let Some(io) = self.io.take() {
            stop(io);
        }
        for arbiter in self.arbiters.drain(..) {
            stop(arbiter);
        }
    }
}

/// Submits requests to a node. Cheap to clone.
#[derive(Clone)]
pub struct NodeHandle {
    node: NodeId,
    shards: Arc<Directory>,
    supervisor: Addr<Supervisor>,
    restarts: Arc<AtomicU64>,
    next_client: Arc<AtomicU64>,
    connected: Arc<HashMap<NodeId, Arc<AtomicBool>>>,
    drops: Arc<Drops>,
    stats: Arc<InboundStats>,
    fatal: Arc<std::sync::Mutex<Option<String>>>,
    metrics: Arc<NodeMetrics>,
    board: Arc<metadata::StatusBoard>,
    session_stop: Arc<metadata::SessionStop>,
}

impl NodeHandle {
    /// The session this node holds with the metadata group now (S1).
    pub fn session(&self) -> Option<cohort_messages::SessionId> {
        self.board.agent().session
    }

    /// This node's copy of the applied cluster metadata (M1).
    pub fn metadata(&self) -> cohort_actors::core::metadata::Metadata {
        self.board.metadata().snapshot()
    }

    /// What `/status` serves: the session, the agent's counters, nodes and
    /// groups as the metadata has them (see `docs/embedding.md`).
    pub fn status(&self) -> serde_json::Value {
        self.board.json()
    }

    /// Why the node stopped after its session expired (S3), if it did.
    pub fn session_stopped(&self) -> Option<String> {
        self.session_stop.reason()
    }

    /// Wait until the node stops because its session expired (S3); returns why.
    /// A host that embeds a node should then call [`Node::stop`].
    pub async fn wait_session_stopped(&self) -> String {
        self.session_stop.wait().await
    }

    /// This node.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// Submit `operation` to `group` and wait up to `timeout` for its result.
    ///
    /// Each call is its own client (request number 1), so concurrent calls
    /// never supersede each other; a retry of the same write must reuse the
    /// returned client and request (see [`NodeHandle::submit_as`]).
    pub async fn submit(
        &self,
        group: GroupId,
        kind: RequestKind,
        operation: Bytes,
        timeout: Duration,
    ) -> Result<Committed, SubmitError> {
        let client =
            ClientId((u128::from(self.node.0) << 64) | u128::from(self.next_client.fetch_add(1, Ordering::Relaxed)));
        let request = Request { client, request: RequestNumber(1), group, kind, operation };
        self.submit_as(request, timeout).await
    }

    /// Submit a request with an explicit client and request number (retries).
    pub async fn submit_as(&self, request: Request, timeout: Duration) -> Result<Committed, SubmitError> {
        let group = request.group;
        let Some(shard) = self.shards.shard(shard_of(group, self.shards.shard_count())) else {
            return Err(SubmitError::Stopped { group });
        };
        let (answer, answered) = oneshot::channel();
        let started = Instant::now();
        let span = crate::shard::traces::submit_span(self.node, &request);
        if shard.try_send(Submit { request, answer, span: span.clone() }).is_err() {
            return Err(SubmitError::Stopped { group });
        }
        match tokio::time::timeout(timeout, answered).instrument(span).await {
            Err(_) => Err(SubmitError::Timeout { group, waited: timeout }),
            Ok(Err(_)) => Err(SubmitError::Stopped { group }),
            Ok(Ok(ClientAnswer::Redirect(redirect))) => {
                Err(SubmitError::NotPrimary { group, primary: redirect.primary })
            }
            Ok(Ok(ClientAnswer::Reply(reply))) => match reply.outcome {
                cohort_messages::Outcome::Ok(result) => {
                    self.metrics.observe_commit_latency(started.elapsed());
                    Ok(Committed { op: reply.op, result })
                }
                cohort_messages::Outcome::Error { code, detail } => Err(SubmitError::Refused { group, code, detail }),
            },
        }
    }

    /// Whether this node's link to `peer` is connected now.
    ///
    /// ```no_run
    /// # use cohort_runtime::prelude::*;
    /// # fn example(node: NodeHandle) {
    /// if !node.is_connected(NodeId(2)) {
    ///     eprintln!("node 2 is unreachable from {}", node.node());
    /// }
    /// # }
    /// ```
    pub fn is_connected(&self, peer: NodeId) -> bool {
        self.connected.get(&peer).is_some_and(|flag| flag.load(Ordering::Relaxed))
    }

    /// Peers whose links are connected.
    pub fn connected_peers(&self) -> usize {
        self.connected.values().filter(|flag| flag.load(Ordering::Relaxed)).count()
    }

    /// Frames and messages dropped on full or disconnected queues.
    pub fn dropped(&self) -> u64 {
        self.drops.total()
    }

    /// The node's metrics (what `/metrics` serves).
    pub fn metrics(&self) -> &NodeMetrics {
        &self.metrics
    }

    /// Inbound counters (refused handshakes, rejected frames and entries).
    pub fn inbound_stats(&self) -> &InboundStats {
        &self.stats
    }

    /// Counters and gauges summed over the node's shards, and the groups it leads.
    pub async fn report(&self) -> crate::shard::ShardReport {
        let mut total = crate::shard::ShardReport::default();
        for index in 0..self.shards.shard_count() {
            let Some(shard) = self.shards.shard(index) else { continue };
            if let Ok(report) = shard.send(crate::shard::GetReport).await {
                total.metrics.add(&report.metrics);
                total.gauges.add(&report.gauges);
                total.primaries.extend(report.primaries);
            }
        }
        total
    }

    /// Subscribe to `group`'s role changes and commit points on this node (the
    /// current role comes first). `None` if the group is not hosted here.
    /// A subscriber that falls more than [`crate::shard::group::SUBSCRIBER_EVENTS_MAX`]
    /// events behind misses events.
    pub async fn subscribe(&self, group: GroupId) -> Option<tokio::sync::mpsc::Receiver<crate::shard::GroupEvent>> {
        let shard = self.shards.shard(shard_of(group, self.shards.shard_count()))?;
        let (events, receiver) = tokio::sync::mpsc::channel(crate::shard::group::SUBSCRIBER_EVENTS_MAX);
        match shard.send(crate::shard::SubscribeGroup { group, events }).await {
            Ok(true) => Some(receiver),
            _ => None,
        }
    }

    /// The custom actor of `group` on this node, if its kind has one of type
    /// `A` (see [`NodeBuilder::group_actor`]). After a shard restart this is
    /// the new instance. `None` if the group is not hosted here, its kind has
    /// no actor or it is not an `A`.
    ///
    /// ```no_run
    /// # use actix::prelude::*;
    /// # use cohort_runtime::prelude::*;
    /// # struct Index;
    /// # impl Actor for Index { type Context = Context<Self>; }
    /// # impl Handler<Applied> for Index { type Result = (); fn handle(&mut self, _: Applied, _: &mut Context<Self>) {} }
    /// # impl Handler<Restored> for Index { type Result = (); fn handle(&mut self, _: Restored, _: &mut Context<Self>) {} }
    /// # impl Handler<RoleChanged> for Index { type Result = (); fn handle(&mut self, _: RoleChanged, _: &mut Context<Self>) {} }
    /// # async fn example(node: NodeHandle) {
    /// let index: Option<Addr<Index>> = node.group_actor::<Index>(GroupId(3)).await;
    /// # }
    /// ```
    pub async fn group_actor<A: crate::shard::CustomGroupActor>(&self, group: GroupId) -> Option<Addr<A>> {
        let shard = self.shards.shard(shard_of(group, self.shards.shard_count()))?;
        let erased = shard.send(crate::shard::GetCustomActor(group)).await.ok()??;
        erased.downcast_ref::<Addr<A>>().cloned()
    }

    /// Actors the supervisor re-created since start.
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// Make an actor of this node panic, to test supervision.
    #[doc(hidden)]
    pub fn inject_panic(&self, fault: InjectPanic) {
        self.supervisor.do_send(fault);
    }

    /// The fatal error that stopped a shard, if any.
    pub fn fatal(&self) -> Option<String> {
        self.fatal.lock().ok().and_then(|fatal| fatal.clone())
    }
}
