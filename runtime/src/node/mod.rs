//! A cohort node, built from code and embedded in a host's actix System.
//!
//! [`NodeBuilder`] takes the node's identity, addresses, data directory,
//! shard count, cluster timing, group kinds ([`GroupKind`]: a state machine and
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
//!         // The cluster CA and this node's certificate, from `cohort certs`.
//!         .tls(TlsFiles {
//!             ca: "/etc/myapp/cohort/ca.pem".into(),
//!             cert: "/etc/myapp/cohort/node-1.pem".into(),
//!             key: "/etc/myapp/cohort/node-1.key".into(),
//!         })
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

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cohort_actors::KindRegistrations;
use cohort_core::{StateMachine, WriteMode};
use cohort_messages::{ClusterId, GroupId, Incarnation, NodeId};
use cohort_wal::FileStorageConfig;

use crate::config::ClusterConfig;

mod changes;
mod detached;
mod handle;
mod placement;
mod quorum_wait;
mod register;
mod start;

pub use changes::MetadataChangeError;
/// Test support: make an actor of a node panic or stall
/// ([`NodeHandle::inject_fault`]). Not part of the API.
#[doc(hidden)]
pub use cohort_actors::InjectFault;
pub use cohort_actors::LinkTiming;
pub use cohort_actors::StartError;
pub use cohort_actors::{GroupKind, GroupKindError};
pub use cohort_actors::{PLACEMENTS_FILE, PlacementFileError};
pub use cohort_core::CoreConfig;
pub use cohort_core::metadata::Metadata;
pub use detached::DetachedNode;
pub use handle::{Node, NodeHandle};
pub use placement::GroupPlacement;
pub use quorum_wait::{QuorumWait, WaitQuorumError};
pub use register::Register;

pub use crate::client_port::{
    ANSWER_BUDGET_MAX_BYTES, ANSWER_BUDGET_MIN_BYTES, ANSWER_RESERVE_BYTES, ClientPortLimits,
};

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
    Storage(#[from] cohort_actors::StartError),
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
    /// The operating system's random source failed: the node cannot draw
    /// the unguessable client ids its agent and its handles use (T2).
    #[error("{0}")]
    NoRandomness(#[from] cohort_client::NoRandomness),
}

impl From<cohort_actors::PartError> for NodeError {
    fn from(error: cohort_actors::PartError) -> NodeError {
        match error {
            cohort_actors::PartError::Storage(error) => NodeError::Storage(error),
            cohort_actors::PartError::Shard(reason) => NodeError::Shard(reason),
            cohort_actors::PartError::Placements(error) => NodeError::Placements(error),
        }
    }
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
    /// The shard's mailbox is full: the node is at its limit. Retrying the
    /// same request later is safe (K4: backpressure, not a silent drop).
    #[error("{group}: the node is busy (its shard's queue is full); retry later")]
    Busy {
        /// The group.
        group: GroupId,
    },
    /// T3: `group` is reserved for the cluster's own control plane (the
    /// metadata group); no request from a host or client reaches it.
    #[error("{group} is reserved for the cluster's metadata group: hosts and clients cannot send it requests")]
    Reserved {
        /// The group.
        group: GroupId,
    },
    /// The shard is gone (the node is stopping).
    #[error("{group}: the node is stopping")]
    Stopped {
        /// The group.
        group: GroupId,
    },
    /// The operating system's random source failed, so no unguessable
    /// client id could be drawn (T2); nothing was sent.
    #[error("{group}: {source}")]
    NoRandomness {
        /// The group.
        group: GroupId,
        /// The failure.
        source: cohort_client::NoRandomness,
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
        let cluster = node.cluster().map_err(|error| NodeError::Config(error.to_string()))?;
        let mut builder = NodeBuilder::new(cluster, NodeId(node.id))
            .listen(node.listen)
            .data_dir(node.data_dir.clone())
            .shards(node.shards)
            .cluster_config(config.cluster.clone())
            .session_config(config.session.clone())
            .balance(config.balance.clone())
            .link_timing(config.links.timing())
            .security(config.tls.security())
            .client_limits(config.client.limits())
            .core_config(config.limits.apply(CoreConfig::default()))
            .state_machine(|_| Box::new(Register::default()));
        let admin_options = config.admin.options(node.admin).map_err(|error| NodeError::Config(error.to_string()))?;
        builder = builder.admin_options(admin_options);
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
    kinds: KindRegistrations,
    admin: Option<SocketAddr>,
    admin_options: crate::admin::AdminOptions,
    client_port: Option<SocketAddr>,
    session: crate::config::SessionConfig,
    balance: crate::config::BalanceSection,
    link_timing: cohort_actors::LinkTiming,
    security: Security,
    client_limits: crate::client_port::ClientPortLimits,
    record_drivers: bool,
}

/// How a node secures its peer links and client port (T1, T2).
#[derive(Clone, Debug, Default)]
pub enum Security {
    /// Nothing chosen yet: [`NodeBuilder::start`] refuses to start.
    #[default]
    Unset,
    /// mTLS with these files (from `cohort certs`).
    Tls(cohort_actors::TlsFiles),
    /// mTLS with certificates already loaded.
    Credentials(cohort_actors::Credentials),
    /// Plaintext, with a warning at start (`[tls] insecure = true`).
    Insecure,
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
            kinds: KindRegistrations::default(),
            admin: None,
            admin_options: crate::admin::AdminOptions::default(),
            client_port: None,
            session: crate::config::SessionConfig::default(),
            balance: crate::config::BalanceSection::default(),
            link_timing: cohort_actors::LinkTiming::default(),
            security: Security::Unset,
            client_limits: crate::client_port::ClientPortLimits::default(),
            record_drivers: false,
        }
    }

    /// Test hook: every shard records its driver's inputs and turns from its
    /// start ([`NodeHandle::take_driver_recording`]), for the test that
    /// replays a real node's shard through the simulator's driver. The
    /// recording grows without bound: tests only.
    #[doc(hidden)]
    pub fn record_drivers(mut self) -> Self {
        self.record_drivers = true;
        self
    }

    /// The client port's bounds (`[client]`; T5).
    pub fn client_limits(mut self, limits: crate::client_port::ClientPortLimits) -> Self {
        self.client_limits = limits;
        self
    }

    /// Secure peer links and the client port with mTLS (T1, T2): the
    /// cluster CA, this node's certificate and its key, as `cohort certs`
    /// writes them.
    pub fn tls(mut self, files: cohort_actors::TlsFiles) -> Self {
        self.security = Security::Tls(files);
        self
    }

    /// Like [`NodeBuilder::tls`], with the certificates already loaded.
    pub fn tls_credentials(mut self, credentials: cohort_actors::Credentials) -> Self {
        self.security = Security::Credentials(credentials);
        self
    }

    /// Run peer links and the client port in plaintext: anyone who can reach
    /// the ports can join or forge traffic. For a network you fully control
    /// only; the node logs a warning at start.
    pub fn insecure(mut self) -> Self {
        self.security = Security::Insecure;
        self
    }

    /// How peer links and the client port are secured (`[tls]`; T1, T2).
    pub fn security(mut self, security: Security) -> Self {
        self.security = security;
        self
    }

    /// How peer links notice a dead connection and redial (`[links]`; F1).
    pub fn link_timing(mut self, timing: cohort_actors::LinkTiming) -> Self {
        self.link_timing = timing;
        self
    }

    /// The node's session with the metadata group (`[session]`; S1, S3).
    pub fn session_config(mut self, session: crate::config::SessionConfig) -> Self {
        self.session = session;
        self
    }

    /// How the node, while it is metadata primary, spreads group primaries
    /// over the live nodes (`[balance]`; C5). On by default.
    pub fn balance(mut self, balance: crate::config::BalanceSection) -> Self {
        self.balance = balance;
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

    /// The token operator commands on the admin port must present as
    /// `Authorization: Bearer <token>` (T4). Without one the node refuses
    /// every operator command.
    pub fn admin_token(mut self, token: crate::admin::AdminToken) -> Self {
        self.admin_options.token = Some(token);
        self
    }

    /// Also serve `/metrics` and `/health`, and nothing else, on this
    /// address (read it back with [`Node::metrics_address`]).
    pub fn metrics_listen(mut self, address: SocketAddr) -> Self {
        self.admin_options.metrics_listen = Some(address);
        self
    }

    /// The admin port's timeouts and connection cap.
    pub fn admin_limits(mut self, limits: crate::admin::AdminLimits) -> Self {
        self.admin_options.limits = limits;
        self
    }

    /// Token, metrics listener and limits of the admin port at once (`[admin]`).
    pub fn admin_options(mut self, options: crate::admin::AdminOptions) -> Self {
        self.admin_options = options;
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
    pub(crate) fn kinds(mut self, kinds: KindRegistrations) -> Self {
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
    /// changes and the applied ops (see [`crate::custom::CustomGroupActor`] and
    /// `docs/embedding.md` for what it is guaranteed). Reach it with [`NodeHandle::group_actor`].
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
        A: cohort_actors::CustomGroupActor,
        F: Fn(&cohort_actors::GroupReplica) -> A + Send + Sync + 'static,
    {
        self.kinds.actors.push((kind.into(), cohort_actors::custom_actor_factory(make)));
        self
    }

    /// Start the node on a thread of its own, in an actix System cohort
    /// starts, for hosts that do not run actix (see [`DetachedNode`]).
    pub fn start_detached(self) -> Result<DetachedNode, NodeError> {
        detached::start(self)
    }
}
