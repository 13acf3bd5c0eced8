//! [`NodeBuilder::start`], in the order a node comes up: validate every
//! setting, bind every port, start the shards (recovering their storage),
//! start the metadata agent, then serve the network. Each step is a function
//! of its own; a failure in any of them stops the start with an error that
//! names what to fix, before anything later has run.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use actix::prelude::*;
use cohort_actors::Drops;
use cohort_actors::HostedGroup;
use cohort_actors::Kinds;
use cohort_actors::LinkState;
use cohort_actors::NodeMetrics;
use cohort_actors::Outbox;
use cohort_actors::Parts;
use cohort_actors::PlacementFile;
use cohort_actors::PlacementRecorder;
use cohort_actors::SharedMetadata;
use cohort_actors::StatusBoard;
use cohort_actors::{AgentSetup, MetadataAgentActor, SessionStop};
use cohort_actors::{Directory, Links};
use cohort_actors::{InboundStats, Router, serve_listener};

use cohort_core::CoreConfig;
use cohort_core::metadata::{AgentConfig, BootstrapGroup};
use cohort_core::metadata::{METADATA_KIND, metadata_learners, metadata_members};
use cohort_core::routing::shard_of;
use cohort_messages::{GroupId, NodeId};

use super::{GroupKind, Node, NodeBuilder, NodeError, NodeHandle, placement};
use crate::admin::operator::OperatorPort;

/// A builder whose settings passed every check.
struct Validated {
    builder: NodeBuilder,
    listen: SocketAddr,
    data_dir: PathBuf,
    session: crate::config::SessionTicks,
    metadata_members: Vec<NodeId>,
    metadata_learners: Vec<NodeId>,
    metadata: SharedMetadata,
    bootstrap_groups: Vec<BootstrapGroup>,
    kinds: Arc<Kinds>,
    core: CoreConfig,
    hosted: Vec<HostedGroup>,
    recorded: Arc<PlacementFile>,
    tls: Option<cohort_actors::NodeTls>,
    /// The agent's client id: the first id the node draws, so that a failed
    /// random source stops the start before anything runs (T2).
    agent_client: cohort_messages::ClientId,
}

/// The node's ports, bound.
struct Bound {
    peers: std::net::TcpListener,
    listen: SocketAddr,
    admin: Option<std::net::TcpListener>,
    /// The admin port's listener for `/metrics` and `/health` only.
    metrics: Option<std::net::TcpListener>,
    client: Option<std::net::TcpListener>,
}

/// The shards and what runs beside them.
struct Started {
    parts: Arc<Parts>,
    io: Arbiter,
    arbiters: Vec<Arbiter>,
    directory: Arc<Directory>,
    supervisor: Addr<cohort_actors::Supervisor>,
    supervisor_arbiter: Arbiter,
    restarts: Arc<AtomicU64>,
}

/// The node's agent of the metadata group.
struct Agent {
    board: Arc<StatusBoard>,
    session_stop: Arc<SessionStop>,
    addr: Addr<MetadataAgentActor>,
}

impl NodeBuilder {
    /// Start the node inside the current actix System.
    pub fn start(self) -> Result<Node, NodeError> {
        let mut validated = self.validate()?;
        let bound = validated.bind()?;
        let metrics = Arc::new(NodeMetrics::new());
        let drops = Arc::new(Drops::new(Arc::clone(&metrics)));
        let started = validated.start_shards(&metrics, &drops)?;
        let agent = validated.start_agent(&started, &metrics, bound.listen)?;
        metrics.watch_node(Arc::clone(&agent.board), validated.data_dir.clone());
        Ok(validated.serve(bound, started, agent, metrics, drops))
    }

    /// Check every setting; nothing runs yet.
    fn validate(self) -> Result<Validated, NodeError> {
        let listen = self.listen.ok_or_else(|| NodeError::Config("listen address is not set".into()))?;
        let data_dir = self.data_dir.clone().ok_or_else(|| NodeError::Config("data_dir is not set".into()))?;
        if self.kinds.state_machines.is_empty() {
            return Err(NodeError::Config(
                "no state machine: register one with `state_machine(..)` or `group_kind(..)`".into(),
            ));
        }
        // The metadata group: reserved id and kind, voters the first
        // METADATA_MEMBERS_MAX nodes of the cluster by id, the next ones its
        // learners, as many as a group may have replicas (Z5).
        if self.groups.iter().any(|placement| placement.group == GroupId::METADATA) {
            return Err(NodeError::Config(format!(
                "{} is the metadata group's reserved id: place partition groups under other ids",
                GroupId::METADATA
            )));
        }
        if self.kinds.state_machines.iter().any(|(kind, _)| kind.as_str() == METADATA_KIND) {
            return Err(NodeError::Config(format!(
                "group kind {METADATA_KIND:?} is reserved for the metadata group: name your kind otherwise"
            )));
        }
        let session = self.session.ticks(self.timing.tick).map_err(|error| NodeError::Config(error.to_string()))?;
        let cluster_nodes = || std::iter::once(self.node).chain(self.peers.keys().copied());
        let metadata_members = metadata_members(cluster_nodes());
        let metadata_learners = metadata_learners(cluster_nodes());
        let metadata = SharedMetadata::default();
        let bootstrap_groups: Vec<BootstrapGroup> = self
            .groups
            .iter()
            .map(|placement| BootstrapGroup {
                group: placement.group,
                kind: placement.kind.as_str().to_string(),
                members: placement.members.clone(),
                replication: placement.replication(),
            })
            .collect();
        let mut kinds = self.kinds.clone();
        let factory_metadata = metadata.clone();
        kinds.state_machines.push((GroupKind::new(METADATA_KIND), Arc::new(move |_| factory_metadata.state_machine())));
        let kinds = Arc::new(kinds.resolve()?);
        if self.shards == 0 || self.shards > cohort_messages::SHARD_COUNT_MAX as usize {
            return Err(NodeError::Config(format!("shards must be in 1..={}", cohort_messages::SHARD_COUNT_MAX)));
        }
        let timing = self.timing.timing().map_err(|error| NodeError::Config(error.to_string()))?;
        let core = CoreConfig { timing, ..self.core.clone() };
        core.validate().map_err(|error| NodeError::Config(error.to_string()))?;
        let mut hosted = placement::to_hosted(self.node, &self.groups, &kinds)?;
        if metadata_members.contains(&self.node) || metadata_learners.contains(&self.node) {
            hosted.push(placement::metadata_replica(self.node, &metadata_members, &metadata_learners)?);
        }
        // Groups the metadata placed here at run time: each shard merges its
        // own at every start; checked here first, so a bad record stops the
        // node before anything runs.
        let recorded = Arc::new(PlacementFile::open(&data_dir)?);
        recorded.hosted(self.node, &kinds, self.shards, None)?;
        let tls = self.node_tls()?;
        let agent_client = cohort_client::fresh_client_id()?;
        Ok(Validated {
            builder: self,
            listen,
            data_dir,
            session,
            metadata_members,
            metadata_learners,
            metadata,
            bootstrap_groups,
            kinds,
            core,
            hosted,
            recorded,
            tls,
            agent_client,
        })
    }

    /// T1, T2: load the certificates, or accept plaintext only when asked
    /// for by name.
    fn node_tls(&self) -> Result<Option<cohort_actors::NodeTls>, NodeError> {
        use cohort_actors::{Credentials, NodeTls};
        let tls_error = |error: cohort_actors::TlsError| NodeError::Config(format!("tls: {error}"));
        let credentials = match &self.security {
            super::Security::Unset => {
                return Err(NodeError::Config(
                    "no TLS configured: give the node its certificates ([tls] ca, cert, key, or NodeBuilder::tls;                      `cohort certs init` makes them), or choose plaintext explicitly ([tls] insecure = true, or                      NodeBuilder::insecure)"
                        .into(),
                ));
            }
            super::Security::Insecure => {
                let node = self.node.0;
                tracing::warn!(
                    node,
                    "node {node} runs without TLS ([tls] insecure = true): anyone who reaches its ports can join the \
                     cluster, forge peer traffic and send requests"
                );
                return Ok(None);
            }
            super::Security::Tls(files) => Credentials::load(files).map_err(tls_error)?,
            super::Security::Credentials(credentials) => credentials.clone(),
        };
        if !cohort_actors::certifies_node(credentials.leaf(), self.node) {
            return Err(NodeError::Config(format!(
                "tls: the certificate does not name node {} (it must carry {}; make it with `cohort certs node --id {}`)",
                self.node.0,
                cohort_actors::node_name(self.node),
                self.node.0
            )));
        }
        NodeTls::new(&credentials).map(Some).map_err(tls_error)
    }
}

impl Validated {
    /// Bind the peer port, then the admin and client ports; errors name the address.
    fn bind(&mut self) -> Result<Bound, NodeError> {
        let listen = self.listen;
        let peers = match self.builder.bound.take() {
            Some(listener) => {
                listener
                    .set_nonblocking(true)
                    .map_err(|error| NodeError::Bind { address: listen, reason: error.to_string() })?;
                listener
            }
            None => bind_nonblocking(listen)?,
        };
        let listen = peers.local_addr().unwrap_or(listen);
        let admin = self.builder.admin.map(bind_nonblocking).transpose()?;
        let metrics = self.builder.admin_options.metrics_listen.map(bind_nonblocking).transpose()?;
        let client = self.builder.client_port.map(bind_nonblocking).transpose()?;
        Ok(Bound { peers, listen, admin, metrics, client })
    }

    /// Start the peer links, then each shard on an Arbiter of its own with
    /// its outboxes (recovering its storage first), then the supervisor.
    fn start_shards(&self, metrics: &Arc<NodeMetrics>, drops: &Arc<Drops>) -> Result<Started, NodeError> {
        let builder = &self.builder;
        let mut groups: Vec<Vec<HostedGroup>> = (0..builder.shards).map(|_| Vec::new()).collect();
        for group in self.hosted.iter().cloned() {
            groups[shard_of(group.spec.group, builder.shards)].push(group);
        }
        let io = Arbiter::new();
        let (file, recorder_metrics) = (Arc::clone(&self.recorded), Arc::clone(metrics));
        let placements =
            PlacementRecorder::start_in_arbiter(&io.handle(), move |_| PlacementRecorder::new(file, recorder_metrics));
        let parts = Arc::new(Parts {
            cluster: builder.cluster,
            node: builder.node,
            core: self.core.clone(),
            tick: builder.timing.tick,
            storage: builder.storage.clone(),
            data_dir: self.data_dir.clone(),
            kinds: Arc::clone(&self.kinds),
            drops: Arc::clone(drops),
            metrics: Arc::clone(metrics),
            fatal: Arc::new(std::sync::Mutex::new(None)),
            link_timing: builder.link_timing,
            tls: self.tls.clone(),
            links: builder
                .peers
                .keys()
                .map(|peer| (*peer, (0..builder.shards).map(|_| Arc::new(LinkState::default())).collect()))
                .collect(),
            peers: builder.peers.clone(),
            storage_locks: (0..builder.shards).map(|_| Arc::new(std::sync::Mutex::new(()))).collect(),
            groups,
            recorded: Arc::clone(&self.recorded),
            placements,
            record_drivers: builder.record_drivers,
        });
        // Each shard's links, outboxes and actor on the shard's own arbiter.
        let mut links: Links = parts.peers.keys().map(|peer| (*peer, Vec::new())).collect();
        let mut arbiters = Vec::new();
        let mut shards = Vec::new();
        let mut outboxes_per_shard = Vec::new();
        for index in 0..parts.shard_count() {
            let arbiter = Arbiter::new();
            let mut outboxes: HashMap<NodeId, Addr<Outbox>> = HashMap::new();
            for (&peer, peer_links) in links.iter_mut() {
                if let Some(link) = parts.spawn_link(peer, index, &arbiter.handle()) {
                    outboxes.insert(peer, parts.spawn_outbox(link.clone(), &arbiter.handle()));
                    peer_links.push(link);
                }
            }
            shards.push((index, arbiter.handle(), outboxes.clone()));
            outboxes_per_shard.push(outboxes);
            arbiters.push(arbiter);
        }
        let shards = parts.spawn_shards(shards)?;
        let directory = Arc::new(Directory::new(shards, links.clone(), arbiters.iter().map(Arbiter::handle).collect()));
        let restarts = Arc::new(AtomicU64::new(0));
        let supervisor_arbiter = Arbiter::new();
        let supervisor = cohort_actors::Supervisor::new(
            Arc::clone(&parts),
            Arc::clone(&directory),
            io.handle(),
            arbiters.iter().map(Arbiter::handle).collect(),
            links,
            outboxes_per_shard,
            Arc::clone(&restarts),
        );
        let supervisor = cohort_actors::Supervisor::start_in_arbiter(&supervisor_arbiter.handle(), move |_| supervisor);
        Ok(Started { parts, io, arbiters, directory, supervisor, supervisor_arbiter, restarts })
    }

    /// Start the node's metadata agent on the I/O arbiter.
    /// `listen` is the bound peer address, which other nodes learn from the metadata.
    fn start_agent(
        &self,
        started: &Started,
        metrics: &Arc<NodeMetrics>,
        listen: SocketAddr,
    ) -> Result<Agent, NodeError> {
        let builder = &self.builder;
        let board = Arc::new(StatusBoard::new(
            builder.node,
            self.metadata_members.clone(),
            self.metadata_learners.clone(),
            self.metadata.clone(),
        ));
        let session_stop = Arc::new(SessionStop::default());
        let config = AgentConfig {
            node: builder.node,
            address: listen.to_string(),
            client: self.agent_client,
            metadata_group: GroupId::METADATA,
            policy: self.session.policy,
            keepalive_interval_ticks: self.session.keepalive_interval_ticks,
            reconnect_backoff_ticks: self.session.reconnect_backoff_ticks,
            session_timeout_ticks: self.session.timeout_ticks,
            request_retry_ticks: self.session.keepalive_interval_ticks,
            unload_grace_ticks: self.session.timeout_ticks,
            bootstrap_groups: self.bootstrap_groups.clone(),
            balance_transfers_per_tick: builder.balance.transfers_per_tick(builder.timing.tick),
        };
        config.validate().map_err(|error| NodeError::Config(format!("session: {error}")))?;
        let setup = AgentSetup {
            cluster: builder.cluster,
            config,
            tick: builder.timing.tick,
            members: self.metadata_members.clone(),
            learners: self.metadata_learners.clone(),
            directory: Arc::clone(&started.directory),
            metadata: self.metadata.clone(),
            board: Arc::clone(&board),
            metrics: Arc::clone(metrics),
            stop: Arc::clone(&session_stop),
            shutdown: started.supervisor.clone().recipient(),
        };
        let agent = MetadataAgentActor::new(setup);
        let addr = MetadataAgentActor::start_in_arbiter(&started.io.handle(), move |_| agent);
        Ok(Agent { board, session_stop, addr })
    }

    /// Serve clients, the admin port and peers, and hand back the node.
    fn serve(self, bound: Bound, started: Started, agent: Agent, metrics: Arc<NodeMetrics>, drops: Arc<Drops>) -> Node {
        let builder = &self.builder;
        let node = builder.node;
        let admin_address = bound.admin.as_ref().and_then(|listener| listener.local_addr().ok());
        let metrics_address = bound.metrics.as_ref().and_then(|listener| listener.local_addr().ok());
        let client_address = bound.client.as_ref().and_then(|listener| listener.local_addr().ok());
        let kinds =
            self.kinds.keys().map(|kind| kind.as_str().to_string()).filter(|kind| kind != METADATA_KIND).collect();
        let operator = OperatorPort::new(
            Arc::clone(&agent.board),
            agent.addr.clone().recipient(),
            Arc::new(started.parts.links.clone()),
            kinds,
        );
        let operator_handle = operator.clone();
        let stats = Arc::new(InboundStats::default());
        let router = Router {
            agent: Some(agent.addr.recipient()),
            cluster: builder.cluster,
            node: builder.node,
            routes: Arc::clone(&started.directory) as Arc<dyn cohort_actors::InboundRoutes>,
            stats: Arc::clone(&stats),
            metrics: Arc::clone(&metrics),
            drops: Arc::clone(&drops),
            next_connection: Arc::new(AtomicU64::new(1)),
            link_timing: builder.link_timing,
            tls: self.tls.clone(),
            greeting: Arc::default(),
        };
        let io = &started.io;
        if let Some(client) = bound.client {
            let port = Arc::new(crate::client_port::ClientPort {
                cluster: builder.cluster,
                node: builder.node,
                shards: Arc::clone(&started.directory),
                metrics: Arc::clone(&metrics),
                tls: self.tls.clone(),
                limits: builder.client_limits,
                metadata: self.metadata.clone(),
                configured: Arc::new(self.bootstrap_groups.iter().map(|bootstrap| bootstrap.group).collect()),
            });
            io.spawn(async move {
                match tokio::net::TcpListener::from_std(client) {
                    Ok(listener) => crate::client_port::serve(listener, port).await,
                    Err(error) => tracing::error!(node = node.0, %error, "cannot serve clients: {error}"),
                }
            });
        }
        let options = &builder.admin_options;
        let admin = bound.admin.map(|admin| {
            crate::admin::serve_node(admin, Arc::clone(&metrics), Arc::new(operator), options)
                .map_err(|error| ("the admin port", error))
        });
        let metrics_only = bound.metrics.map(|listener| {
            crate::admin::serve_metrics(listener, Arc::clone(&metrics), options.limits)
                .map_err(|error| ("the metrics listener", error))
        });
        // Each server runs its own worker thread; polling it on the I/O
        // arbiter drives it, and stopping that arbiter drops and stops it.
        for server in admin.into_iter().chain(metrics_only) {
            match server {
                Ok(server) => {
                    io.spawn(async move {
                        if let Err(error) = server.await {
                            tracing::error!(node = node.0, %error, "the admin port stopped: {error}");
                        }
                    });
                }
                Err((what, error)) => tracing::error!(node = node.0, %error, "cannot serve {what}: {error}"),
            }
        }
        let peers = bound.peers;
        io.spawn(async move {
            match tokio::net::TcpListener::from_std(peers) {
                Ok(listener) => serve_listener(listener, router).await,
                Err(error) => tracing::error!(node = node.0, %error, "cannot listen for peers: {error}"),
            }
        });
        let handle = NodeHandle {
            node: builder.node,
            tick: started.parts.tick,
            shards: started.directory,
            links: Arc::new(started.parts.links.clone()),
            drops,
            stats,
            fatal: Arc::clone(&started.parts.fatal),
            metrics,
            supervisor: started.supervisor,
            restarts: started.restarts,
            board: agent.board,
            session_stop: agent.session_stop,
            operator: operator_handle,
        };
        Node {
            handle,
            listen: bound.listen,
            admin: admin_address,
            metrics: metrics_address,
            client: client_address,
            supervisor: Some(started.supervisor_arbiter),
            arbiters: started.arbiters,
            io: Some(started.io),
        }
    }
}

/// Bind a listener for tokio to adopt later; errors name the address.
fn bind_nonblocking(address: SocketAddr) -> Result<std::net::TcpListener, NodeError> {
    let bind_error = |error: std::io::Error| NodeError::Bind { address, reason: error.to_string() };
    let listener = std::net::TcpListener::bind(address).map_err(bind_error)?;
    listener.set_nonblocking(true).map_err(bind_error)?;
    Ok(listener)
}
