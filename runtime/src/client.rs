//! A client for host code: writes and linearizable reads that find the
//! group's primary among the nodes this process knows.
//!
//! [`crate::node::NodeHandle::submit`] asks one node once. A host wants more:
//! follow `NotPrimary` redirects (V5), wait out a view change, retry after a
//! lost answer without applying the write twice, and give up after a timeout
//! with an error that says what to do. [`Client`] does that.
//!
//! # Exactly once
//!
//! A client has an id, registers it with each group before its first write
//! there (request 1: a write with no operation, which the group records in
//! its client table and applies nothing for), and numbers its writes per
//! group after the op the registration committed at (the client table's
//! rules: a client it does not know may only start at request 1, numbers
//! increase, and a write numbered at or below its registration's op is
//! refused, so a late copy of a registration cannot reopen old writes). Every retry of a write
//! reuses its client id and request number, so the group applies it at most
//! once and answers a retry of an applied write from its client table; if
//! the group evicted the client meanwhile, the retry is refused
//! ([`ClientError::Refused`], `Superseded`) rather than applied again (H5).
//! The registration costs one extra round trip per client id per group: on
//! the first write, and on the first write after each change of id below. A client sends one write at a time
//! per group; concurrent writes to one group through one client wait for each
//! other (use more clients, they are cheap, for parallel writes to a group).
//!
//! When a write fails, its outcome is unknown unless the error is
//! [`ClientError::Refused`], [`ClientError::UnknownGroup`],
//! [`ClientError::TooLarge`] or [`ClientError::NoNodes`]: it may still
//! commit. A [`ClientError::Timeout`] carries the request; passing it to
//! [`Client::retry`] resubmits it with the same id and number, so it applies
//! at most once. After any failed write (or one whose caller stopped
//! waiting) the client moves that group to a fresh client id, so that its
//! next write never depends on whether the lost one arrived.
//!
//! # Reads
//!
//! [`Client::read`] is linearizable (V7): the primary answers only while its
//! quorum window holds and after it has applied every op it inherited. The
//! answer's `op` is the applied point the read saw.
//!
//! # Groups led by another process's node (C1)
//!
//! With only its own nodes' handles, a client whose group is led by a node
//! of another process fails with [`ClientError::PrimaryElsewhere`]. Given the
//! cluster's client-port addresses and a client certificate
//! ([`Client::client_ports`], or any [`cohort_client::ClusterClient`] with
//! [`Client::network`]), it sends such requests over the network instead,
//! and keeps sending a group's requests there while its primary is on a
//! node it has no handle for. Exactly-once holds across both paths: the
//! nodes bind a network client's ids to its certificate
//! ([`cohort_actors::bound_client_id`]), so this client submits
//! to its own nodes under the bound id, and a retry that changes path is the
//! same request to the group.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cohort_core::client::{self, Sequence};
use cohort_messages::{GroupId, NodeId, ReplyError, RequestKind, RequestNumber};

use cohort_client::fresh_client_id;

use crate::node::{Committed, NodeHandle, SubmitError};

pub use cohort_client::ClusterClient;
pub use cohort_messages::Request;

/// How long a call keeps trying, by default.
pub const CLIENT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// How long one attempt at one node waits, at most.
pub const ATTEMPT_TIMEOUT_MAX: Duration = Duration::from_secs(3);
/// The first pause before a retry; it doubles up to [`RETRY_PAUSE_MAX`].
pub const RETRY_PAUSE_MIN: Duration = Duration::from_millis(20);
/// The longest pause between retries.
pub const RETRY_PAUSE_MAX: Duration = Duration::from_millis(500);

/// Why a client call failed, and what to do.
///
/// ```no_run
/// use cohort_runtime::prelude::*;
///
/// # async fn example(client: Client) -> Result<(), ClientError> {
/// match client.write(GroupId(0), "debit 10").await {
///     Ok(written) => println!("committed at {}", written.op),
///     // Unknown outcome: resubmit the very same request, it applies at most once.
///     Err(ClientError::Timeout { request: Some(request), .. }) => {
///         client.retry(*request).await?;
///     }
///     Err(error) => return Err(error),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// No definite answer in time. For a write the outcome is unknown.
    #[error(
        "{group}: no answer within {waited:?} after {attempts} attempts (last: {last}); a write may still commit: pass `request` to `Client::retry` to resubmit it exactly once, or read to find out"
    )]
    Timeout {
        /// The group.
        group: GroupId,
        /// How long the call tried.
        waited: Duration,
        /// Attempts made.
        attempts: u32,
        /// What the last attempt got.
        last: String,
        /// For a write: the request, to resubmit with [`Client::retry`].
        /// `None` for a read, and for a write whose client's registration
        /// got no answer in time: the write itself was not sent, so it did
        /// not apply.
        request: Option<Box<Request>>,
    },
    /// Until the timeout, the nodes this client knows named as primary a node
    /// it has no handle for (during a failover that node may be dead).
    #[error(
        "{group}: the primary is {primary}, which this client does not know: give the client that node's handle, or send the request to that node's process"
    )]
    PrimaryElsewhere {
        /// The group.
        group: GroupId,
        /// The primary.
        primary: NodeId,
    },
    /// None of the client's nodes hosts the group.
    #[error("{group}: none of this client's nodes hosts it: check the group id and the placements")]
    UnknownGroup {
        /// The group.
        group: GroupId,
    },
    /// The group refused the request; retrying the same request will not help.
    #[error("{group}: refused ({code:?}): {detail}")]
    Refused {
        /// The group.
        group: GroupId,
        /// The code: `Superseded` (a newer request of this client was
        /// applied, or the client was evicted from the client table: start a
        /// new client) or `Rejected` (the state machine refused it).
        code: ReplyError,
        /// Why, from the group.
        detail: String,
    },
    /// The operation is larger than a request may carry.
    #[error("operation of {size} bytes exceeds {max} bytes: split it into smaller operations")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The limit (`OPERATION_SIZE_MAX_BYTES`).
        max: usize,
    },
    /// K5: the ops make no op batch (none, more than
    /// `op_batch::OP_BATCH_OPS_MAX`, or together more than a request
    /// carries), or the group answered a batch with something other than
    /// one result per op (its state machine does not take op batches).
    #[error("{group}: {detail}")]
    OpBatch {
        /// The group.
        group: GroupId,
        /// What is wrong, and what to do.
        detail: String,
    },
    /// Every node of this client is stopping.
    #[error("{group}: every node of this client is stopping")]
    Stopped {
        /// The group.
        group: GroupId,
    },
    /// The client has no nodes.
    #[error("the client has no nodes: build it with at least one NodeHandle, or give it the client ports")]
    NoNodes,
    /// A request sent over the client ports failed for a reason of the
    /// network client's own (no route, no node reachable, TLS, settings); see
    /// [`cohort_client::ClientError`] for each. Its timeouts and refusals are
    /// reported as [`ClientError::Timeout`] and [`ClientError::Refused`].
    #[error("over the client ports: {0}")]
    Network(cohort_client::ClientError),
    /// The operating system's random source failed, so no unguessable
    /// client id could be drawn (T2); nothing was sent.
    #[error("{0}")]
    NoRandomness(#[from] cohort_client::NoRandomness),
}

/// One client's writes to one group.
#[derive(Debug)]
struct Session {
    writes: Sequence,
    /// A write was sent and did not succeed (it failed, or its caller gave
    /// up waiting): it may still apply, so the next write takes a new id.
    in_doubt: bool,
}

impl Session {
    fn fresh(group: GroupId) -> Result<Session, ClientError> {
        Ok(Session { writes: Sequence::new(fresh_client_id()?, group), in_doubt: false })
    }
}

/// Writes and reads across the nodes this process knows. Cheap to clone;
/// clones share the client ids and request numbers.
///
/// ```no_run
/// use cohort_runtime::prelude::*;
///
/// # async fn example(nodes: Vec<NodeHandle>) -> Result<(), ClientError> {
/// let client = Client::new(nodes).timeout(std::time::Duration::from_secs(5));
/// let written = client.write(GroupId(0), "set x 1").await?;
/// let read = client.read(GroupId(0), "x").await?;
/// assert!(read.op >= written.op, "a linearizable read sees the acknowledged write");
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    timeout: Duration,
}

struct Inner {
    nodes: Vec<NodeHandle>,
    sessions: Mutex<HashMap<GroupId, Arc<tokio::sync::Mutex<Session>>>>,
    /// Where each group's primary last answered.
    primaries: Mutex<HashMap<GroupId, Hint>>,
    /// The other nodes, over their client ports.
    network: Option<Network>,
}

/// Where a group's primary last answered.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Hint {
    /// One of this client's nodes (an index into `nodes`).
    Local(usize),
    /// A node this client has no handle for: go over the network.
    Remote,
}

/// The network path: the client, and the identity the nodes bind its ids to.
struct Network {
    client: ClusterClient,
    identity: [u8; 32],
}

impl Network {
    fn new(client: ClusterClient) -> Network {
        let identity = match client.certificate() {
            Some(certificate) => cohort_actors::identity_of(certificate),
            None => crate::client_port::INSECURE_IDENTITY,
        };
        Network { client, identity }
    }
}

/// What one attempt at one node tells the retry loop.
enum Next {
    Done(Result<Committed, ClientError>),
    /// Try this node next, at once.
    Go(usize),
    /// Pause, then try the next node.
    Later,
    /// The primary is on a node this client has no handle for, or none of
    /// its nodes hosts the group: go over the network (if it has one).
    Remote,
}

impl Client {
    /// A client of `nodes` (usually every node of the cluster this process
    /// runs; at least the local one), with a fresh id.
    ///
    /// ```no_run
    /// # use cohort_runtime::prelude::*;
    /// # fn example(node: &Node) {
    /// let client = Client::new([node.handle()]).timeout(std::time::Duration::from_secs(3));
    /// assert_eq!(client.nodes().len(), 1);
    /// # }
    /// ```
    pub fn new(nodes: impl IntoIterator<Item = NodeHandle>) -> Client {
        Client::with(nodes.into_iter().collect(), None)
    }

    fn with(nodes: Vec<NodeHandle>, network: Option<Network>) -> Client {
        let inner =
            Inner { nodes, sessions: Mutex::new(HashMap::new()), primaries: Mutex::new(HashMap::new()), network };
        Client { inner: Arc::new(inner), timeout: CLIENT_TIMEOUT_DEFAULT }
    }

    /// Reach the groups whose primary is on a node this client has no
    /// handle for through the cluster's client ports at `addresses`
    /// (`HOST:PORT`; every node's, so any primary is reachable), with the
    /// cluster's CA and a client certificate it signed (`cohort certs
    /// client`). `PrimaryElsewhere` no longer happens. Call it while
    /// building the client: the client it returns starts with fresh ids
    /// (see [`Client::network`]).
    ///
    /// ```no_run
    /// use cohort_runtime::prelude::*;
    ///
    /// # async fn example(node: &Node, cluster: ClusterId) -> Result<(), ClientError> {
    /// // One node per process: this host embeds node 1; groups led by
    /// // nodes 2 and 3 are reached over their client ports.
    /// let files = TlsFiles {
    ///     ca: "certs/ca.pem".into(),
    ///     cert: "certs/client-app.pem".into(),
    ///     key: "certs/client-app.key".into(),
    /// };
    /// let client = Client::new([node.handle()])
    ///     .client_ports(cluster, ["10.0.0.1:7400", "10.0.0.2:7400", "10.0.0.3:7400"], &files)?;
    /// client.write(GroupId(7), "led by any node").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn client_ports(
        self,
        cluster: cohort_messages::ClusterId,
        addresses: impl IntoIterator<Item = impl Into<String>>,
        files: &crate::tls::TlsFiles,
    ) -> Result<Client, ClientError> {
        let files = cohort_client::TlsFiles { ca: files.ca.clone(), cert: files.cert.clone(), key: files.key.clone() };
        let network = ClusterClient::builder(cluster, addresses).tls(files).build().map_err(ClientError::Network)?;
        Ok(self.network(network))
    }

    /// Like [`Client::client_ports`], with a network client built as the
    /// host likes (insecure, other limits). The returned client has the same
    /// nodes and timeout, and sessions of its own: a write's id depends on
    /// whether the client has a network path (its local submissions use the
    /// id the nodes bind to the network client's certificate), so it must
    /// not continue another client's numbering.
    pub fn network(self, network: ClusterClient) -> Client {
        let timeout = self.timeout;
        let mut client = Client::with(self.inner.nodes.clone(), Some(Network::new(network)));
        client.timeout = timeout;
        client
    }

    /// The network client, if this client has one.
    pub fn network_client(&self) -> Option<&ClusterClient> {
        self.inner.network.as_ref().map(|network| &network.client)
    }

    /// Keep trying each call for up to `timeout` (default
    /// [`CLIENT_TIMEOUT_DEFAULT`]); the other clones keep theirs.
    pub fn timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    /// Write `operation` to `group` and wait for its result (for an `Async`
    /// group, Q4: for the primary's durable copy, with an empty result).
    pub async fn write(&self, group: GroupId, operation: impl Into<Bytes>) -> Result<Committed, ClientError> {
        self.write_kind(group, RequestKind::Write, operation.into()).await
    }

    /// [`Client::write`] of a write of `kind` (K5: a plain write or a batch).
    async fn write_kind(&self, group: GroupId, kind: RequestKind, operation: Bytes) -> Result<Committed, ClientError> {
        check_size(&operation)?;
        let session = self.session(group)?;
        let mut session = session.lock().await;
        if session.in_doubt {
            // The last write perhaps applied, perhaps not (or its id is no
            // longer usable): start a new client (see the module docs).
            session.writes.restart(fresh_client_id()?);
        }
        let started = Instant::now();
        let deadline = started + self.timeout;
        if let Some(registration) = session.writes.registration() {
            // H5: a fresh id registers first, within the write's timeout. A
            // registration whose outcome is unknown changes nothing but the
            // client table: the next write sends it again, under the same id.
            match self.run_by(registration, started, deadline).await {
                Ok(registered) => session.writes.registered(registered.op),
                Err(ClientError::Timeout { group, waited, attempts, last, .. }) => {
                    let last = format!("registering the client: {last}");
                    return Err(ClientError::Timeout { group, waited, attempts, last, request: None });
                }
                Err(error) => return Err(error),
            }
        }
        let request = Request { kind, ..session.writes.write(operation) };
        // Cleared only on success, so a caller that stops waiting leaves it set.
        session.in_doubt = true;
        let result = self.run_by(request, started, deadline).await;
        session.in_doubt = result.is_err();
        result
    }

    /// K5: write many ops to `group` in one request, for a group whose state
    /// machine takes op batches (`StateMachine::takes_op_batches`): they
    /// enter its log as one entry at one op, all or none, are applied in
    /// order, and each gets its own result. Exactly once, like
    /// [`Client::write`]: a retry (a [`ClientError::Timeout`]'s request to
    /// [`Client::retry`]) is answered from the client table with every
    /// result. An `Async` group (Q4) answers on the primary's durable copy,
    /// before the ops are applied: `results` is then empty.
    ///
    /// ```no_run
    /// use cohort_runtime::prelude::*;
    ///
    /// # async fn example(client: Client) -> Result<(), ClientError> {
    /// let written = client.write_batch(GroupId(3), ["append a", "append b", "append c"]).await?;
    /// assert_eq!(written.results.len(), 3, "one result per op, in order");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn write_batch<T: Into<Bytes>>(
        &self,
        group: GroupId,
        ops: impl IntoIterator<Item = T>,
    ) -> Result<CommittedBatch, ClientError> {
        let (operation, count) =
            CommittedBatch::operation(ops).map_err(|detail| ClientError::OpBatch { group, detail })?;
        let committed = self.write_kind(group, RequestKind::WriteBatch, operation).await?;
        CommittedBatch::read(committed.op, &committed.result, count)
            .map_err(|detail| ClientError::OpBatch { group, detail })
    }

    /// Resubmit a write whose outcome is unknown, with its own client id and
    /// request number: it applies at most once, and if it already did, the
    /// answer is its original result. Also for hosts that number their own
    /// requests (the client table's rules apply, see
    /// [`cohort_core::client`]: a new client id registers with request 1,
    /// which carries no operation, then numbers its writes after the op the
    /// registration committed at, one more per write, per group).
    ///
    /// ```no_run
    /// use cohort_runtime::prelude::*;
    ///
    /// # async fn example(client: Client) -> Result<(), ClientError> {
    /// let registration = cohort_messages::Request {
    ///     client: ClientId(0xfeed),
    ///     request: RequestNumber(1),
    ///     group: GroupId(0),
    ///     kind: RequestKind::Write,
    ///     operation: Bytes::new(),
    /// };
    /// let registered = client.retry(registration).await?;
    /// let request = cohort_messages::Request {
    ///     client: ClientId(0xfeed),
    ///     request: RequestNumber(registered.op.0 + 1),
    ///     group: GroupId(0),
    ///     kind: RequestKind::Write,
    ///     operation: Bytes::from_static(b"credit 5"),
    /// };
    /// let first = client.retry(request.clone()).await?;
    /// let again = client.retry(request).await?; // answered from the client table
    /// assert_eq!(first, again);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn retry(&self, request: Request) -> Result<Committed, ClientError> {
        self.run(request).await
    }

    /// A linearizable read of `group` (V7): the state machine's answer to
    /// `query`, with the applied point it saw.
    pub async fn read(&self, group: GroupId, query: impl Into<Bytes>) -> Result<Committed, ClientError> {
        let operation = query.into();
        check_size(&operation)?;
        // Reads are not numbered; a fresh id keeps each apart from writes.
        let request = client::read(fresh_client_id()?, RequestNumber(1), group, operation);
        let mut result = self.run(request).await;
        if let Err(ClientError::Timeout { request, .. }) = &mut result {
            *request = None;
        }
        result
    }

    /// Q1/Q2: wait until `quorum` members of `group` durably hold `op`, on
    /// whichever of this client's nodes leads the group (the one it last
    /// wrote through first), for at most `timeout`. A group led by a node
    /// this client has no handle for answers
    /// [`crate::node::WaitQuorumError::NotPrimary`] from the last node asked.
    pub async fn wait_quorum(
        &self,
        group: GroupId,
        op: cohort_messages::Op,
        quorum: usize,
        timeout: Duration,
    ) -> Result<(), crate::node::WaitQuorumError> {
        let nodes = &self.inner.nodes;
        let first = match self.primary_hint(group) {
            Some(Hint::Local(index)) if index < nodes.len() => index,
            _ => 0,
        };
        let mut last = crate::node::WaitQuorumError::Stopped { group };
        for offset in 0..nodes.len() {
            let node = &nodes[(first + offset) % nodes.len()];
            match node.wait_quorum(group, op, quorum, timeout).await {
                Err(error @ crate::node::WaitQuorumError::NotPrimary { .. }) => last = error,
                other => return other,
            }
        }
        Err(last)
    }

    /// The nodes this client knows.
    pub fn nodes(&self) -> &[NodeHandle] {
        &self.inner.nodes
    }

    fn session(&self, group: GroupId) -> Result<Arc<tokio::sync::Mutex<Session>>, ClientError> {
        let mut sessions = self.inner.sessions.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(session) = sessions.get(&group) {
            return Ok(Arc::clone(session));
        }
        let session = Arc::new(tokio::sync::Mutex::new(Session::fresh(group)?));
        sessions.insert(group, Arc::clone(&session));
        Ok(session)
    }

    /// Submit `request` until a definite answer or the timeout, following
    /// redirects; every attempt carries the same client id and number.
    async fn run(&self, request: Request) -> Result<Committed, ClientError> {
        let started = Instant::now();
        self.run_by(request, started, started + self.timeout).await
    }

    /// [`Client::run`] of a call that started at `started`, until `deadline`.
    async fn run_by(&self, request: Request, started: Instant, deadline: Instant) -> Result<Committed, ClientError> {
        let nodes = &self.inner.nodes;
        let group = request.group;
        let hint = self.primary_hint(group);
        if let Some(network) = &self.inner.network
            && (nodes.is_empty() || hint == Some(Hint::Remote))
        {
            return self.run_remote(network, request, started, deadline, 0).await;
        }
        if nodes.is_empty() {
            return Err(ClientError::NoNodes);
        }
        // With a network path, submit under the id the nodes bind the
        // network client's id to, so both paths are one client to the group.
        let local = match &self.inner.network {
            Some(network) => {
                Request { client: cohort_actors::bound_client_id(&network.identity, request.client), ..request.clone() }
            }
            None => request.clone(),
        };
        let mut target = match hint {
            Some(Hint::Local(index)) => index % nodes.len(),
            _ => 0,
        };
        let (mut attempts, mut pause) = (0u32, RETRY_PAUSE_MIN);
        let (mut unknown, mut stopped) = (vec![false; nodes.len()], vec![false; nodes.len()]);
        let mut last = String::from("no attempt");
        let mut elsewhere = None;
        while Instant::now() < deadline {
            let attempt = deadline.saturating_duration_since(Instant::now()).min(ATTEMPT_TIMEOUT_MAX);
            attempts += 1;
            let answer = nodes[target].submit_as(local.clone(), attempt).await;
            if let Err(error) = &answer {
                last = error.to_string();
            }
            elsewhere = match &answer {
                Err(SubmitError::NotPrimary { primary: Some(primary), .. })
                    if !nodes.iter().any(|node| node.node() == *primary) =>
                {
                    Some(*primary)
                }
                _ => None,
            };
            match self.judge(group, target, answer, &mut unknown, &mut stopped) {
                Next::Done(result) => return result,
                Next::Go(node) => target = node,
                Next::Remote => match &self.inner.network {
                    Some(network) => return self.run_remote(network, request, started, deadline, attempts).await,
                    // Only "no node of ours hosts it" leads here without one.
                    None => return Err(ClientError::UnknownGroup { group }),
                },
                Next::Later => {
                    self.pause(&mut pause, deadline).await;
                    target = (target + 1) % nodes.len();
                }
            }
        }
        if let Some(primary) = elsewhere {
            return Err(ClientError::PrimaryElsewhere { group, primary });
        }
        let request = request.kind.is_write().then(|| Box::new(request));
        Err(ClientError::Timeout { group, waited: started.elapsed(), attempts, last, request })
    }

    async fn pause(&self, pause: &mut Duration, deadline: Instant) {
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::sleep((*pause).min(left)).await;
        *pause = (*pause * 2).min(RETRY_PAUSE_MAX);
    }

    /// The rest of a call over the client ports, until `deadline`: the
    /// same request (the id as chosen; the nodes bind it).
    async fn run_remote(
        &self,
        network: &Network,
        request: Request,
        started: Instant,
        deadline: Instant,
        attempts: u32,
    ) -> Result<Committed, ClientError> {
        let group = request.group;
        let left = deadline.saturating_duration_since(Instant::now());
        let answer = network.client.clone().timeout(left).retry(request.clone()).await;
        match answer {
            Ok(committed) => {
                // Back to the local path once the primary is one of ours.
                let node = network.client.route(group).map(|route| route.node);
                let local = node.and_then(|node| self.inner.nodes.iter().position(|handle| handle.node() == node));
                self.set_primary_hint(group, local.map_or(Hint::Remote, Hint::Local));
                Ok(Committed { op: committed.op, result: committed.result })
            }
            Err(error) => {
                self.clear_primary_hint(group);
                Err(from_network(error, &request, started, attempts))
            }
        }
    }

    /// What to do after one attempt at node `target`.
    fn judge(
        &self,
        group: GroupId,
        target: usize,
        answer: Result<Committed, SubmitError>,
        unknown: &mut [bool],
        stopped: &mut [bool],
    ) -> Next {
        match answer {
            Ok(committed) => {
                self.set_primary_hint(group, Hint::Local(target));
                Next::Done(Ok(committed))
            }
            Err(SubmitError::NotPrimary { primary: Some(primary), .. }) => {
                match self.inner.nodes.iter().position(|node| node.node() == primary) {
                    Some(index) if index != target => Next::Go(index),
                    Some(_) => Next::Later,
                    // Over the network if the client has it. If not: perhaps
                    // alive, perhaps dead with a failover under way: keep
                    // trying; the timeout reports it.
                    None if self.inner.network.is_some() => Next::Remote,
                    None => Next::Later,
                }
            }
            Err(
                SubmitError::NotPrimary { primary: None, .. } | SubmitError::Timeout { .. } | SubmitError::Busy { .. },
            ) => Next::Later,
            Err(SubmitError::Stopped { .. }) => {
                stopped[target] = true;
                if stopped.iter().all(|s| *s) { Next::Done(Err(ClientError::Stopped { group })) } else { Next::Later }
            }
            Err(SubmitError::Refused { code: ReplyError::UnknownGroup, .. }) => {
                unknown[target] = true;
                // Perhaps hosted by other processes' nodes only.
                if unknown.iter().all(|u| *u) { Next::Remote } else { Next::Later }
            }
            Err(SubmitError::Reserved { .. }) => Next::Done(Err(ClientError::Refused {
                group,
                code: ReplyError::Forbidden,
                detail: format!("{group} is reserved for the cluster's metadata group"),
            })),
            Err(SubmitError::NoRandomness { source, .. }) => Next::Done(Err(ClientError::NoRandomness(source))),
            Err(SubmitError::Refused { code, .. }) if client::retryable(code) => Next::Later,
            Err(SubmitError::Refused { code, detail, .. }) => {
                Next::Done(Err(ClientError::Refused { group, code, detail }))
            }
        }
    }

    fn primary_hint(&self, group: GroupId) -> Option<Hint> {
        self.inner.primaries.lock().ok()?.get(&group).copied()
    }

    fn set_primary_hint(&self, group: GroupId, hint: Hint) {
        if let Ok(mut primaries) = self.inner.primaries.lock() {
            primaries.insert(group, hint);
        }
    }

    fn clear_primary_hint(&self, group: GroupId) {
        if let Ok(mut primaries) = self.inner.primaries.lock() {
            primaries.remove(&group);
        }
    }
}

/// The network client's error as this client's: its timeouts (a write's
/// outcome unknown) and refusals keep their meaning and carry `request`,
/// the rest is [`ClientError::Network`].
fn from_network(error: cohort_client::ClientError, request: &Request, started: Instant, before: u32) -> ClientError {
    use cohort_client::ClientError as Net;
    let group = request.group;
    let retry = || request.kind.is_write().then(|| Box::new(request.clone()));
    match error {
        Net::Timeout { attempts, last, .. } => ClientError::Timeout {
            group,
            waited: started.elapsed(),
            attempts: before + attempts,
            last,
            request: retry(),
        },
        Net::Busy { reason, .. } => ClientError::Timeout {
            group,
            waited: started.elapsed(),
            attempts: before + 1,
            last: format!("busy: {reason}"),
            request: retry(),
        },
        Net::Refused { code, reason, .. } => ClientError::Refused { group, code, detail: reason },
        Net::Forbidden { reason, .. } => ClientError::Refused { group, code: ReplyError::Forbidden, detail: reason },
        Net::TooLarge { size, max } => ClientError::TooLarge { size, max },
        other => ClientError::Network(other),
    }
}

pub use cohort_client::CommittedBatch;

fn check_size(operation: &Bytes) -> Result<(), ClientError> {
    let max = cohort_messages::OPERATION_SIZE_MAX_BYTES;
    if operation.len() > max { Err(ClientError::TooLarge { size: operation.len(), max }) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_say_what_to_do() {
        let timeout = ClientError::Timeout {
            group: GroupId(1),
            waited: Duration::from_secs(1),
            attempts: 3,
            last: "x".into(),
            request: None,
        };
        assert!(timeout.to_string().contains("Client::retry"));
        let elsewhere = ClientError::PrimaryElsewhere { group: GroupId(1), primary: NodeId(4) };
        assert!(elsewhere.to_string().contains("give the client that node's handle"));
    }
}
