//! A whole cluster in one process, for tests, examples and trying cohort out.
//!
//! Nothing is simulated: each node is a real [`Node`] with its own loopback
//! port and its own write-ahead log in a temporary directory, and the nodes
//! talk over TCP exactly as separate processes would. What the helper saves a
//! host is the bookkeeping: picking ports (all bound before any node starts,
//! so none is lost to a race), peer lists, data directories, placing each
//! group on every node, and removing the files at the end. Timing defaults to
//! [`LocalCluster::fast_timing`], so a failover takes seconds, not tens. The
//! nodes talk mTLS with throwaway certificates made in the data directory
//! (T1), exactly as a production cluster does; [`LocalCluster::certs`] has a
//! client certificate for the client port too.
//!
//! Production hosts run one node per process and build it with
//! [`NodeBuilder`] directly.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cohort_core::{StateMachine, WriteMode};
use cohort_messages::{ClusterId, GroupId, NodeId};

use crate::client::Client;
use crate::config::ClusterConfig;
use crate::node::{GroupKind, GroupPlacement, Node, NodeBuilder, NodeError, NodeHandle};
use cohort_actors::CustomGroupActor;
use cohort_actors::KindRegistrations;

/// The cluster id of local clusters.
pub const LOCAL_CLUSTER_ID: ClusterId = ClusterId(0x10CA_1C1A_57E2);

/// Makes the state machine of a group on a given node
/// ([`LocalClusterBuilder::group_kind_per_node`]).
type NodeStateMachineFactory = std::sync::Arc<dyn Fn(NodeId, GroupId) -> Box<dyn StateMachine> + Send + Sync>;

/// Builds a [`LocalCluster`]. Kinds and groups are as on [`NodeBuilder`];
/// every node gets the same (a factory registered with
/// [`LocalClusterBuilder::group_kind_per_node`] is told the node).
///
/// ```no_run
/// use cohort_runtime::prelude::*;
///
/// # fn example() -> Result<LocalCluster, NodeError> {
/// let cluster = LocalCluster::builder(5)
///     .shards(2)
///     .group_kind("register", |_| Box::new(Register::default()))
///     .groups("register", (0..100).map(GroupId))
///     .groups_with("register", WriteMode::Async, (100..110).map(GroupId))
///     .group(GroupPlacement::new(GroupId(200), vec![NodeId(1), NodeId(2), NodeId(3)]).kind("register"))
///     .start()?;
/// # Ok(cluster)
/// # }
/// ```
pub struct LocalClusterBuilder {
    nodes: usize,
    shards: usize,
    timing: ClusterConfig,
    kinds: KindRegistrations,
    kinds_per_node: Vec<(GroupKind, NodeStateMachineFactory)>,
    groups: Vec<GroupPlacement>,
    data_dir: Option<PathBuf>,
    session: crate::config::SessionConfig,
    admin_ports: bool,
    admin_token: Option<crate::admin::AdminToken>,
    client_ports: bool,
    client_limits: crate::client_port::ClientPortLimits,
    record_drivers: bool,
}

impl LocalClusterBuilder {
    /// Test hook: every node's shards record their drivers' inputs and
    /// turns ([`NodeBuilder::record_drivers`]).
    #[doc(hidden)]
    pub fn record_drivers(mut self) -> Self {
        self.record_drivers = true;
        self
    }

    /// Give every node a client port on a free loopback port (mTLS with the
    /// cluster's throwaway certificates, [`LocalCluster::certs`]); read it
    /// with [`Node::client_address`]. A restarted node gets a new port.
    pub fn client_ports(mut self) -> Self {
        self.client_ports = true;
        self
    }

    /// The bounds of every node's client port (`[client]`; T5, H4), for
    /// [`LocalClusterBuilder::client_ports`].
    pub fn client_limits(mut self, limits: crate::client_port::ClientPortLimits) -> Self {
        self.client_limits = limits;
        self
    }

    /// Give every node an admin port on a free loopback port (`/metrics`,
    /// `/status`, the operator commands); read it with
    /// [`Node::admin_address`]. A restarted node gets a new port.
    pub fn admin_ports(mut self) -> Self {
        self.admin_ports = true;
        self
    }

    /// The token every node's admin port takes for operator commands (T4;
    /// see [`NodeBuilder::admin_token`]). Without one they refuse them.
    pub fn admin_token(mut self, token: crate::admin::AdminToken) -> Self {
        self.admin_token = Some(token);
        self
    }

    /// Every node's session settings (`[session]`; S1, S3).
    pub fn session_config(mut self, session: crate::config::SessionConfig) -> Self {
        self.session = session;
        self
    }

    /// Register a group kind (see [`NodeBuilder::group_kind`]).
    pub fn group_kind(
        mut self,
        kind: impl Into<GroupKind>,
        factory: impl Fn(GroupId) -> Box<dyn StateMachine> + Send + Sync + 'static,
    ) -> Self {
        self.kinds.state_machines.push((kind.into(), std::sync::Arc::new(factory)));
        self
    }

    /// Register a group kind whose factory is told which node it builds
    /// for. The nodes share this process, so a state machine that keeps its
    /// state on disk ([`cohort_core::Durability::Persistent`], D1) needs one
    /// directory per node: node `N` keeps its log in `node-N` under
    /// [`LocalClusterBuilder::data_dir`], and its state machines' files can
    /// go beside it (the `kv` example puts them in `node-N/kv`).
    pub fn group_kind_per_node(
        mut self,
        kind: impl Into<GroupKind>,
        factory: impl Fn(NodeId, GroupId) -> Box<dyn StateMachine> + Send + Sync + 'static,
    ) -> Self {
        self.kinds_per_node.push((kind.into(), std::sync::Arc::new(factory)));
        self
    }

    /// Give a kind a custom group actor (see [`NodeBuilder::group_actor`]).
    pub fn group_actor<A, F>(mut self, kind: impl Into<GroupKind>, make: F) -> Self
    where
        A: CustomGroupActor,
        F: Fn(&cohort_actors::GroupReplica) -> A + Send + Sync + 'static,
    {
        self.kinds.actors.push((kind.into(), cohort_actors::custom_actor_factory(make)));
        self
    }

    /// Groups `ids` of `kind` on every node, synchronous writes. Member order
    /// is rotated by the group id, so primaries spread over the nodes.
    pub fn groups(self, kind: impl Into<GroupKind>, ids: impl IntoIterator<Item = GroupId>) -> Self {
        self.groups_with(kind, WriteMode::Sync, ids)
    }

    /// Like [`LocalClusterBuilder::groups`], with the write mode (Q4).
    pub fn groups_with(
        mut self,
        kind: impl Into<GroupKind>,
        write_mode: WriteMode,
        ids: impl IntoIterator<Item = GroupId>,
    ) -> Self {
        let kind = kind.into();
        for group in ids {
            let mut members: Vec<NodeId> = (1..=self.nodes as u64).map(NodeId).collect();
            members.rotate_left((group.0 % self.nodes.max(1) as u64) as usize);
            self.groups.push(GroupPlacement::new(group, members).kind(kind.clone()).write_mode(write_mode));
        }
        self
    }

    /// A group placed exactly so (members are node ids 1..=n).
    pub fn group(mut self, placement: GroupPlacement) -> Self {
        self.groups.push(placement);
        self
    }

    /// Shards per node (default 1).
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards;
        self
    }

    /// Cluster timing (default [`LocalCluster::fast_timing`]).
    pub fn cluster_config(mut self, timing: ClusterConfig) -> Self {
        self.timing = timing;
        self
    }

    /// Keep the nodes' data here instead of a temporary directory that is
    /// removed when the cluster is dropped: node `N`'s in `node-N`, the
    /// throwaway certificates in `certs`.
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }

    /// Bind every node's port, then start every node. Call it inside an
    /// actix System.
    pub fn start(self) -> Result<LocalCluster, NodeError> {
        if self.nodes == 0 {
            return Err(NodeError::Config("a local cluster needs at least one node".into()));
        }
        let (dir, remove_dir) = match self.data_dir.clone() {
            Some(dir) => (dir, false),
            None => (temp_dir(), true),
        };
        let mut listeners = Vec::new();
        for _ in 0..self.nodes {
            let address = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
            let listener = std::net::TcpListener::bind(address)
                .map_err(|error| NodeError::Bind { address, reason: error.to_string() })?;
            listeners.push(listener);
        }
        let addresses = listeners
            .iter()
            .map(|listener| listener.local_addr())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| NodeError::Config(format!("loopback address: {error}")))?;
        let node_ids = (1..=self.nodes as u64).map(NodeId);
        let certs = cohort_actors::local_cluster(&dir.join("certs"), node_ids)
            .map_err(|error| NodeError::Config(format!("throwaway certificates: {error}")))?;
        let mut cluster = LocalCluster { template: self, addresses, dir, remove_dir, certs, nodes: Vec::new() };
        for (index, listener) in listeners.into_iter().enumerate() {
            let node = cluster.node_builder(index).bound_listener(listener).start()?;
            cluster.nodes.push(Some(node));
        }
        Ok(cluster)
    }
}

/// A cluster of real nodes in this process (see the module docs). Dropping it
/// stops every node and removes a temporary data directory.
///
/// ```
/// use cohort_runtime::prelude::*;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// actix_rt::System::new().block_on(async {
///     // One node is a cluster too: every write commits on its own fsync.
///     let cluster = LocalCluster::builder(1)
///         .group_kind("register", |_| Box::new(Register::default()))
///         .groups("register", [GroupId(0)])
///         .start()?;
///     let client = cluster.client();
///     client.write(GroupId(0), "hello").await?;
///     assert_eq!(client.read(GroupId(0), "").await?.result, "hello");
///     Ok(())
/// })
/// # }
/// ```
pub struct LocalCluster {
    template: LocalClusterBuilder,
    addresses: Vec<std::net::SocketAddr>,
    dir: PathBuf,
    remove_dir: bool,
    certs: cohort_actors::LocalCerts,
    nodes: Vec<Option<Node>>,
}

impl LocalCluster {
    /// A cluster of `nodes` nodes, ids 1..=nodes.
    pub fn builder(nodes: usize) -> LocalClusterBuilder {
        LocalClusterBuilder {
            nodes,
            shards: 1,
            timing: LocalCluster::fast_timing(),
            kinds: KindRegistrations::default(),
            kinds_per_node: Vec::new(),
            groups: Vec::new(),
            data_dir: None,
            session: crate::config::SessionConfig::default(),
            admin_ports: false,
            client_ports: false,
            client_limits: crate::client_port::ClientPortLimits::default(),
            record_drivers: false,
            admin_token: None,
        }
    }

    /// Short but valid timing (R9: the heartbeat timeout is at least 2 s):
    /// 50 ms ticks, failover in about 2–3 s.
    pub fn fast_timing() -> ClusterConfig {
        ClusterConfig {
            tick: Duration::from_millis(50),
            commit_broadcast_interval: Duration::from_millis(250),
            commit_heartbeat_timeout: Duration::from_secs(2),
            commit_idle_heartbeat_interval: Duration::from_millis(500),
            commit_idle_heartbeat_timeout: Duration::from_secs(2),
            view_change_timeout: Duration::from_millis(500),
            repair_timeout: Duration::from_millis(100),
            commit_quiesce_timeout: None,
        }
    }

    /// Link timing that fits [`LocalCluster::fast_timing`] (F1): a stall is
    /// noticed in 1 s and a healed link redialed within about 0.5 s.
    pub fn fast_links() -> cohort_actors::LinkTiming {
        cohort_actors::LinkTiming {
            stall_timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_millis(500),
            redial_backoff_max: Duration::from_millis(500),
            ..Default::default()
        }
    }

    /// A client of every running node.
    pub fn client(&self) -> Client {
        Client::new(self.handles())
    }

    /// Handles of the running nodes, in node order.
    pub fn handles(&self) -> Vec<NodeHandle> {
        self.nodes.iter().flatten().map(Node::handle).collect()
    }

    /// The handle of node `id`, if it runs.
    pub fn handle(&self, id: NodeId) -> Option<NodeHandle> {
        self.node(id).map(Node::handle)
    }

    /// Node `id`, if it runs.
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get((id.0 as usize).checked_sub(1)?)?.as_ref()
    }

    /// Where the nodes keep their data (one subdirectory per node).
    pub fn data_dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// The cluster's throwaway certificates: each node's, and a client's
    /// (`local`) for the client port.
    pub fn certs(&self) -> &cohort_actors::LocalCerts {
        &self.certs
    }

    /// The client-port addresses of the running nodes, in node order (empty
    /// without [`LocalClusterBuilder::client_ports`]).
    pub fn client_addresses(&self) -> Vec<std::net::SocketAddr> {
        self.nodes.iter().flatten().filter_map(Node::client_address).collect()
    }

    /// A network client ([`cohort_client::ClusterClient`], C1) of every
    /// running node's client port, with the `local` client certificate;
    /// the cluster needs [`LocalClusterBuilder::client_ports`].
    ///
    /// ```no_run
    /// # use cohort_runtime::prelude::*;
    /// # async fn example(cluster: LocalCluster) -> Result<(), cohort_client::ClientError> {
    /// let client = cluster.network_client()?;
    /// client.write(GroupId(0), "over TLS, through any node").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn network_client(&self) -> Result<cohort_client::ClusterClient, cohort_client::ClientError> {
        let files = &self.certs.client;
        let files = cohort_client::TlsFiles { ca: files.ca.clone(), cert: files.cert.clone(), key: files.key.clone() };
        let addresses = self.client_addresses().into_iter().map(|address| address.to_string());
        cohort_client::ClusterClient::builder(LOCAL_CLUSTER_ID, addresses).tls(files).build()
    }

    /// Wait until every running node is connected to every other running
    /// node; false if that takes longer than `timeout`.
    pub async fn wait_connected(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let handles = self.handles();
            if handles.iter().all(|handle| handle.connected_peers() + 1 >= handles.len()) {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stop node `id` like a crash ([`Node::stop`]); its data stays.
    pub fn stop_node(&mut self, id: NodeId) {
        if let Some(node) = self.slot(id).and_then(Option::take) {
            node.stop();
        }
    }

    /// Start node `id` again from its data directory, on its old port.
    ///
    /// ```no_run
    /// # use cohort_runtime::prelude::*;
    /// # async fn example(mut cluster: LocalCluster) -> Result<(), Box<dyn std::error::Error>> {
    /// cluster.stop_node(NodeId(1)); // a crash: the others fail over
    /// cluster.client().write(GroupId(0), "while node 1 is down").await?;
    /// cluster.restart_node(NodeId(1))?; // recovers from its log and catches up
    /// # Ok(())
    /// # }
    /// ```
    pub fn restart_node(&mut self, id: NodeId) -> Result<(), NodeError> {
        let index = (id.0 as usize).checked_sub(1).filter(|index| *index < self.addresses.len());
        let index = index.ok_or_else(|| NodeError::Config(format!("{id} is not a node of this cluster")))?;
        self.stop_node(id);
        let node = self.node_builder(index).listen(self.addresses[index]).start()?;
        self.nodes[index] = Some(node);
        Ok(())
    }

    /// Stop every node (also done on drop).
    pub fn stop(mut self) {
        self.stop_all();
    }

    fn stop_all(&mut self) {
        for node in self.nodes.iter_mut().filter_map(Option::take) {
            node.stop();
        }
    }

    fn slot(&mut self, id: NodeId) -> Option<&mut Option<Node>> {
        self.nodes.get_mut((id.0 as usize).checked_sub(1)?)
    }

    /// Node `index`'s builder, without its listen address.
    fn node_builder(&self, index: usize) -> NodeBuilder {
        let template = &self.template;
        let node = NodeId(index as u64 + 1);
        let mut kinds = template.kinds.clone();
        for (kind, factory) in &template.kinds_per_node {
            let factory = std::sync::Arc::clone(factory);
            kinds.state_machines.push((kind.clone(), std::sync::Arc::new(move |group| factory(node, group))));
        }
        let mut builder = NodeBuilder::new(LOCAL_CLUSTER_ID, node)
            .data_dir(self.dir.join(format!("node-{}", node.0)))
            .shards(template.shards)
            .cluster_config(template.timing.clone())
            .link_timing(LocalCluster::fast_links())
            .security(match self.certs.node(node) {
                Some(files) => crate::node::Security::Tls(files.clone()),
                None => crate::node::Security::Unset,
            })
            .session_config(template.session.clone())
            .kinds(kinds);
        if template.client_ports {
            builder = builder
                .client_port(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
                .client_limits(template.client_limits);
        }
        if template.record_drivers {
            builder = builder.record_drivers();
        }
        if template.admin_ports {
            builder = builder.admin(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
        }
        if let Some(token) = &template.admin_token {
            builder = builder.admin_token(token.clone());
        }
        for (peer, address) in self.addresses.iter().enumerate() {
            if peer != index {
                builder = builder.peer(NodeId(peer as u64 + 1), *address);
            }
        }
        for placement in template.groups.iter().filter(|placement| placement.members.contains(&node)) {
            builder = builder.group(placement.clone());
        }
        builder
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop_all();
        if self.remove_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A directory of its own under the system's temporary directory.
fn temp_dir() -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("cohort-local-{}-{nanos}-{count}", std::process::id()))
}
