//! A running node ([`Node`]) and the handle that submits to it ([`NodeHandle`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use actix::prelude::*;
use bytes::Bytes;
use cohort_actors::Directory;
use cohort_actors::Drops;
use cohort_actors::InboundStats;
use cohort_actors::InjectFault;
use cohort_actors::LinkState;
use cohort_actors::NodeMetrics;
use cohort_actors::SessionStop;
use cohort_actors::StatusBoard;
use cohort_actors::{ClientAnswer, Submit};
use cohort_core::routing::shard_of;
use cohort_messages::{GroupId, NodeId, Request, RequestKind, RequestNumber};
use tokio::sync::oneshot;
use tracing::Instrument as _;

use super::{Committed, SubmitError};

/// A running node.
pub struct Node {
    pub(super) handle: NodeHandle,
    pub(super) listen: SocketAddr,
    pub(super) admin: Option<SocketAddr>,
    pub(super) metrics: Option<SocketAddr>,
    pub(super) client: Option<SocketAddr>,
    pub(super) supervisor: Option<Arbiter>,
    pub(super) arbiters: Vec<Arbiter>,
    pub(super) io: Option<Arbiter>,
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

    /// The bound listener serving only `/metrics` and `/health`, if
    /// configured (`[admin] metrics_listen`, [`super::NodeBuilder::metrics_listen`]).
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.metrics
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
    pub(super) node: NodeId,
    /// The node's tick, to turn timeouts into the core's ticks.
    pub(super) tick: Duration,
    pub(super) shards: Arc<Directory>,
    pub(super) supervisor: Addr<cohort_actors::Supervisor>,
    pub(super) restarts: Arc<AtomicU64>,
    pub(super) links: Arc<HashMap<NodeId, Vec<Arc<LinkState>>>>,
    pub(super) drops: Arc<Drops>,
    pub(super) stats: Arc<InboundStats>,
    pub(super) fatal: Arc<std::sync::Mutex<Option<String>>>,
    pub(super) metrics: Arc<NodeMetrics>,
    pub(super) board: Arc<StatusBoard>,
    pub(super) session_stop: Arc<SessionStop>,
    pub(super) operator: crate::admin::operator::OperatorPort,
}

impl NodeHandle {
    /// The session this node holds with the metadata group now (S1).
    pub fn session(&self) -> Option<cohort_messages::SessionId> {
        self.board.agent().session
    }

    /// This node's copy of the applied cluster metadata (M1).
    pub fn metadata(&self) -> cohort_core::metadata::Metadata {
        self.board.metadata().snapshot()
    }

    /// What `/status` serves, in full: the session, the agent's counters,
    /// nodes and groups as the metadata has them (see `docs/embedding.md`).
    /// Its `Display` is the JSON document.
    pub fn status(&self) -> crate::admin::NodeStatus {
        crate::admin::status::node_status(&self.board, &self.links, crate::admin::Audience::Operator)
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
    /// A `WriteBatch` (K5) carries an op batch
    /// ([`cohort_messages::op_batch`]) and is answered with one
    /// (`crate::client::CommittedBatch::read` reads it).
    ///
    /// Each call is its own client, so concurrent calls never supersede each
    /// other. A write registers that client first (H5: request 1, no
    /// operation, nothing applied; one more round trip through the log) and
    /// is then sent numbered after the registration's op, both within
    /// `timeout`; an error of the
    /// registration is returned as is (the write was not sent). A host that
    /// retries its writes numbers them itself with [`NodeHandle::submit_as`]
    /// (or uses [`crate::client::Client`]).
    pub async fn submit(
        &self,
        group: GroupId,
        kind: RequestKind,
        operation: Bytes,
        timeout: Duration,
    ) -> Result<Committed, SubmitError> {
        // T2: unguessable, so no client elsewhere can answer for this one.
        let client = cohort_client::fresh_client_id().map_err(|source| SubmitError::NoRandomness { group, source })?;
        if kind == RequestKind::Read {
            return self
                .submit_as(Request { client, request: RequestNumber(1), group, kind, operation }, timeout)
                .await;
        }
        let started = Instant::now();
        let mut writes = cohort_core::client::Sequence::new(client, group);
        let registration = writes.registration().expect("a fresh id registers first");
        let registered = self.submit_as(registration, timeout).await?;
        writes.registered(registered.op);
        let left = timeout.saturating_sub(started.elapsed());
        self.submit_as(Request { kind, ..writes.write(operation) }, left).await
    }

    /// Submit a request with an explicit client and request number (retries).
    pub async fn submit_as(&self, request: Request, timeout: Duration) -> Result<Committed, SubmitError> {
        let group = request.group;
        if group == GroupId::METADATA {
            return Err(SubmitError::Reserved { group });
        }
        let Some(shard) = self.shards.shard(shard_of(group, self.shards.shard_count())) else {
            return Err(SubmitError::Stopped { group });
        };
        let (answer, answered) = oneshot::channel();
        let started = Instant::now();
        let span = cohort_actors::submit_span(self.node, &request);
        match shard.try_send(Submit { request, answer, span: span.clone() }) {
            Ok(()) => {}
            Err(SendError::Full(_)) => return Err(SubmitError::Busy { group }),
            Err(SendError::Closed(_)) => return Err(SubmitError::Stopped { group }),
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

    /// Test hook (with [`super::NodeBuilder::record_drivers`]): what shard
    /// `shard`'s driver recorded since the shard started, or the last take.
    #[doc(hidden)]
    pub async fn take_driver_recording(&self, shard: usize) -> Option<cohort_actors::DriverRecording> {
        self.shards.shard(shard)?.send(cohort_actors::TakeDriverRecording).await.ok()
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
        self.links.get(&peer).is_some_and(|links| links.iter().all(|link| link.connected.load(Ordering::Relaxed)))
    }

    /// Peers whose links are connected.
    pub fn connected_peers(&self) -> usize {
        self.links.values().filter(|links| links.iter().all(|link| link.connected.load(Ordering::Relaxed))).count()
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
    pub async fn report(&self) -> cohort_actors::ShardReport {
        let mut total = cohort_actors::ShardReport::default();
        for index in 0..self.shards.shard_count() {
            let Some(shard) = self.shards.shard(index) else { continue };
            if let Ok(report) = shard.send(cohort_actors::GetReport).await {
                total.metrics.add(&report.metrics);
                total.gauges.add(&report.gauges);
                total.primaries.extend(report.primaries);
                total.idle_backups.extend(report.idle_backups);
                total.recovering.extend(report.recovering);
            }
        }
        total
    }

    /// Subscribe to `group`'s role changes and commit points on this node (the
    /// current role comes first). `None` if the group is not hosted here.
    /// A subscriber that falls more than [`cohort_actors::SUBSCRIBER_EVENTS_MAX`]
    /// events behind misses events.
    pub async fn subscribe(&self, group: GroupId) -> Option<tokio::sync::mpsc::Receiver<cohort_actors::GroupEvent>> {
        let shard = self.shards.shard(shard_of(group, self.shards.shard_count()))?;
        let (events, receiver) = tokio::sync::mpsc::channel(cohort_actors::SUBSCRIBER_EVENTS_MAX);
        match shard.send(cohort_actors::SubscribeGroup { group, events }).await {
            Ok(true) => Some(receiver),
            _ => None,
        }
    }

    /// The custom actor of `group` on this node, if its kind has one of type
    /// `A` (see [`crate::node::NodeBuilder::group_actor`]). After a shard restart this is
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
    pub async fn group_actor<A: cohort_actors::CustomGroupActor>(&self, group: GroupId) -> Option<Addr<A>> {
        let shard = self.shards.shard(shard_of(group, self.shards.shard_count()))?;
        let actor = shard.send(cohort_actors::GetGroupActor(group)).await.ok()??;
        let erased = actor.send(cohort_actors::GetCustomActor).await.ok()??;
        erased.downcast_ref::<Addr<A>>().cloned()
    }

    /// Actors the supervisor re-created since start.
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// Make an actor of this node panic or stall, to test supervision and slow threads.
    #[doc(hidden)]
    pub fn inject_fault(&self, fault: InjectFault) {
        self.supervisor.do_send(fault);
    }

    /// The fatal error that stopped a shard, if any.
    pub fn fatal(&self) -> Option<String> {
        self.fatal.lock().ok().and_then(|fatal| fatal.clone())
    }
}
