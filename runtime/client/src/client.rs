//! [`ClusterClient`]: writes and linearizable reads against a cluster over
//! its client ports, exactly once.
//!
//! # Exactly once
//!
//! The client registers its client id with each group before its first
//! write there (request 1, which carries no operation and applies nothing;
//! one extra round trip per id per group) and numbers its writes per group
//! after the op the registration committed at, under that id
//! ([`cohort_core::client::Sequence`], the rules every
//! cohort client shares), and sends one write per group at a time: a group's client
//! table admits a client's request numbers in order, so a second write
//! must not overtake the first. Writes to different groups, and reads, run
//! concurrently and share the connections. Every retry of a write (after a
//! redirect, a lost connection, a failover or a timeout) resends the same
//! id and number, through any node. After a write that failed (or whose
//! caller stopped waiting) the group's writes move to a fresh id, so the
//! next one never depends on whether the lost one arrived.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use cohort_core::client::{self, Sequence};
use cohort_messages::{ClusterId, GroupId, NodeId, ROUTE_QUERY_GROUPS_MAX, Request, RequestKind, RequestNumber, View};
use rustls_pki_types::CertificateDer;

use crate::call::{self, Committed, CommittedBatch};
use crate::config::{ClientLimits, Security, check_address};
use crate::error::ClientError;
use crate::id::fresh_client_id;
use crate::pool::Pool;
use crate::routes::{Route, RouteCache};
use crate::tls::ClientTls;

/// Builds a [`ClusterClient`]: the cluster id, the nodes' client-port
/// addresses, and TLS files or [`ClusterClientBuilder::insecure`].
#[derive(Clone, Debug)]
#[must_use]
pub struct ClusterClientBuilder {
    cluster: ClusterId,
    addresses: Vec<String>,
    security: Option<Security>,
    limits: ClientLimits,
}

impl ClusterClientBuilder {
    /// Speak mTLS with these files (the cluster's CA, a client certificate
    /// it signed and its key).
    pub fn tls(mut self, files: crate::TlsFiles) -> Self {
        self.security = Some(Security::Tls(files));
        self
    }

    /// Speak plaintext, to nodes that run `[tls] insecure = true`.
    pub fn insecure(mut self) -> Self {
        self.security = Some(Security::Insecure);
        self
    }

    /// TLS or plaintext, as a value.
    pub fn security(mut self, security: Security) -> Self {
        self.security = Some(security);
        self
    }

    /// Every bound (see [`ClientLimits`]).
    pub fn limits(mut self, limits: ClientLimits) -> Self {
        self.limits = limits;
        self
    }

    /// How long a call keeps trying ([`ClientLimits::call_timeout`]).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.limits.call_timeout = timeout;
        self
    }

    /// Check the settings and read the TLS files. Nothing is dialed yet: the
    /// first call connects.
    pub fn build(self) -> Result<ClusterClient, ClientError> {
        if self.addresses.is_empty() {
            return Err(ClientError::config("addresses", "give at least one node's client port, HOST:PORT"));
        }
        for address in &self.addresses {
            check_address(address)?;
        }
        self.limits.validate()?;
        let tls = match self.security {
            None => {
                return Err(ClientError::config(
                    "security",
                    "choose TLS files (`tls`) or plaintext (`insecure`) explicitly",
                ));
            }
            Some(Security::Insecure) => None,
            Some(Security::Tls(files)) => Some(ClientTls::load(&files)?),
        };
        // Fail here, not at the first write, if no id can be drawn.
        fresh_client_id()?;
        let certificate = tls.as_ref().map(|tls| tls.certificate.clone());
        let inner = Inner {
            pool: Pool::new(self.addresses, self.cluster, tls, self.limits),
            routes: Mutex::new(RouteCache::new(self.limits.route_cache_groups_max)),
            sessions: Mutex::new(HashMap::new()),
            limits: self.limits,
            cluster: self.cluster,
            certificate,
        };
        Ok(ClusterClient { inner: Arc::new(inner), timeout: self.limits.call_timeout })
    }
}

/// One group's writes through this client.
#[derive(Debug)]
struct Session {
    writes: Sequence,
    /// A write was sent and did not succeed (or its caller stopped
    /// waiting): it may still apply, so the next write takes a fresh id.
    in_doubt: bool,
}

/// What every clone of a client shares.
pub(crate) struct Inner {
    pub(crate) pool: Pool,
    routes: Mutex<RouteCache>,
    sessions: Mutex<HashMap<GroupId, Arc<tokio::sync::Mutex<Session>>>>,
    pub(crate) limits: ClientLimits,
    cluster: ClusterId,
    certificate: Option<CertificateDer<'static>>,
}

impl Inner {
    fn cache(&self) -> std::sync::MutexGuard<'_, RouteCache> {
        self.routes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn route(&self, group: GroupId) -> Option<Route> {
        self.cache().get(group)
    }

    pub(crate) fn learn(&self, group: GroupId, view: View, primary: Option<NodeId>) {
        self.cache().learn(group, view, primary);
    }

    pub(crate) fn served(&self, group: GroupId, node: NodeId, view: View) {
        self.cache().served(group, node, view);
    }

    pub(crate) fn forget(&self, group: GroupId, node: NodeId) {
        self.cache().forget(group, node);
    }
}

/// A client of a cluster's client ports (C1), for any tokio program. Cheap
/// to clone; clones share connections, routes, client ids and request
/// numbers. Calls must run inside a tokio runtime (the connections' reader
/// and writer are tokio tasks).
///
/// ```no_run
/// use cohort_client::{ClusterClient, GroupId, TlsFiles, read_cluster_id};
///
/// # async fn example() -> Result<(), cohort_client::ClientError> {
/// let cluster = read_cluster_id("certs/cluster-id")?;
/// let client = ClusterClient::builder(cluster, ["10.0.0.1:7400", "10.0.0.2:7400", "10.0.0.3:7400"])
///     .tls(TlsFiles::client_in("certs", "app"))
///     .build()?;
/// let written = client.write(GroupId(3), "hello").await?;
/// let read = client.read(GroupId(3), "").await?;
/// assert!(read.op >= written.op, "a linearizable read sees the acknowledged write");
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ClusterClient {
    inner: Arc<Inner>,
    timeout: Duration,
}

impl std::fmt::Debug for ClusterClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterClient")
            .field("cluster", &self.inner.cluster)
            .field("addresses", &self.inner.pool.addresses().collect::<Vec<_>>())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl ClusterClient {
    /// A client of cluster `cluster` through the nodes at `addresses`
    /// (`HOST:PORT` of their client ports; the more of the cluster's nodes,
    /// the better: routes name nodes, and only listed addresses are dialed).
    pub fn builder(cluster: ClusterId, addresses: impl IntoIterator<Item = impl Into<String>>) -> ClusterClientBuilder {
        ClusterClientBuilder {
            cluster,
            addresses: addresses.into_iter().map(Into::into).collect(),
            security: None,
            limits: ClientLimits::default(),
        }
    }

    /// Keep trying each call of this clone for up to `timeout`.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> ClusterClient {
        self.timeout = timeout;
        self
    }

    /// Write `operation` to `group` and wait for its result (for an `Async`
    /// group, Q4: for the primary's durable copy).
    pub async fn write(&self, group: GroupId, operation: impl Into<Bytes>) -> Result<Committed, ClientError> {
        self.write_kind(group, RequestKind::Write, operation.into()).await
    }

    /// K5: write many ops to `group` in one request, for a group whose
    /// state machine takes op batches: they enter its log as one entry at
    /// one op, all or none, are applied in order, and each gets its own
    /// result. Exactly once, like [`ClusterClient::write`] (a retried batch
    /// is answered with every result). A group whose state machine takes
    /// one op per write refuses the batch (`Rejected`), and applies none.
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

    /// [`ClusterClient::write`] of a write of `kind` (K5: plain or a batch).
    async fn write_kind(&self, group: GroupId, kind: RequestKind, operation: Bytes) -> Result<Committed, ClientError> {
        check_size(&operation)?;
        let session = self.session(group)?;
        let mut session = session.lock().await;
        if session.in_doubt {
            session.writes.restart(fresh_client_id()?);
        }
        let started = std::time::Instant::now();
        if let Some(registration) = session.writes.registration() {
            // H5: a fresh id registers first, within the write's timeout. A
            // registration whose outcome is unknown changes nothing but the
            // client table: the next write sends it again, under the same id.
            let registered = call::run(&self.inner, registration, self.timeout).await.map_err(unsent)?;
            session.writes.registered(registered.op);
        }
        let request = Request { kind, ..session.writes.write(operation) };
        // Cleared only on success, so a caller that stops waiting leaves it set.
        session.in_doubt = true;
        let left = self.timeout.saturating_sub(started.elapsed());
        let result = call::run(&self.inner, request, left).await;
        session.in_doubt = result.is_err();
        result
    }

    /// Resubmit a write whose outcome is unknown (the `request` of
    /// [`ClientError::Timeout`] or [`ClientError::Busy`]) with its own id
    /// and number: it applies at most once, and if it already did, the
    /// answer is its original result. Also for callers that number their
    /// own requests (a new id registers with request 1, which carries no
    /// operation, then numbers its writes after the op the registration
    /// committed at, per group; see
    /// [`cohort_core::client`]).
    /// It must go out under the same certificate as the first attempt: the
    /// nodes bind ids to it.
    pub async fn retry(&self, request: Request) -> Result<Committed, ClientError> {
        check_size(&request.operation)?;
        call::run(&self.inner, request, self.timeout).await
    }

    /// A linearizable read of `group` (V7): the state machine's answer to
    /// `query`, served by the primary while its quorum window holds, with
    /// the applied point it saw.
    pub async fn read(&self, group: GroupId, query: impl Into<Bytes>) -> Result<Committed, ClientError> {
        let query = query.into();
        check_size(&query)?;
        // Reads are not numbered; a fresh id keeps each apart from writes.
        let request = client::read(fresh_client_id()?, RequestNumber(1), group, query);
        call::run(&self.inner, request, self.timeout).await
    }

    /// Ask the nodes where `groups`' primaries are and cache the answers (a
    /// call does this by itself for a group it has no route for; this warms
    /// the cache for many groups in few round trips). Returns the routes the
    /// cache holds afterwards, `None` where no node named a primary.
    pub async fn refresh_routes(&self, groups: &[GroupId]) -> Result<Vec<(GroupId, Option<Route>)>, ClientError> {
        let mut last = None;
        for chunk in groups.chunks(ROUTE_QUERY_GROUPS_MAX) {
            let mut answered = false;
            for index in 0..self.inner.pool.len() {
                let connection = match self.inner.pool.connection(index).await {
                    Ok(connection) => connection,
                    Err(error) => {
                        last = Some((index, error));
                        continue;
                    }
                };
                if let Ok(routes) = connection.routes(chunk.to_vec(), self.inner.limits.attempt_timeout).await {
                    for route in routes.routes {
                        self.inner.learn(route.group, route.view, route.primary);
                    }
                    answered = true;
                    break;
                }
            }
            if !answered {
                return Err(match last.take() {
                    Some((index, error)) => error.into_client_error(self.inner.pool.address(index)),
                    None => ClientError::Io {
                        address: self.inner.pool.addresses().collect::<Vec<_>>().join(","),
                        kind: std::io::ErrorKind::TimedOut,
                        detail: "no node answered the route query".into(),
                    },
                });
            }
        }
        Ok(groups.iter().map(|group| (*group, self.inner.route(*group))).collect())
    }

    /// The cached primary of `group`, if any.
    pub fn route(&self, group: GroupId) -> Option<Route> {
        self.inner.route(group)
    }

    /// The cluster this client speaks to.
    pub fn cluster(&self) -> ClusterId {
        self.inner.cluster
    }

    /// The addresses it was given.
    pub fn addresses(&self) -> Vec<String> {
        self.inner.pool.addresses().map(str::to_string).collect()
    }

    /// Connections open now (at most one per address).
    pub fn connections_open(&self) -> usize {
        self.inner.pool.open_connections()
    }

    /// The client certificate it presents (`None` when insecure): the
    /// identity the nodes bind its client ids to (T2).
    pub fn certificate(&self) -> Option<&CertificateDer<'static>> {
        self.inner.certificate.as_ref()
    }

    /// Its bounds.
    pub fn limits(&self) -> ClientLimits {
        ClientLimits { call_timeout: self.timeout, ..self.inner.limits }
    }

    fn session(&self, group: GroupId) -> Result<Arc<tokio::sync::Mutex<Session>>, ClientError> {
        let mut sessions = self.inner.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(session) = sessions.get(&group) {
            return Ok(Arc::clone(session));
        }
        let session = Session { writes: Sequence::new(fresh_client_id()?, group), in_doubt: false };
        let session = Arc::new(tokio::sync::Mutex::new(session));
        sessions.insert(group, Arc::clone(&session));
        Ok(session)
    }
}

/// A registration's error as the write's: the write was not sent, so a
/// timeout carries no request to resubmit (its outcome is known: not applied).
fn unsent(error: ClientError) -> ClientError {
    match error {
        ClientError::Timeout { group, waited, attempts, last, .. } => ClientError::Timeout {
            group,
            waited,
            attempts,
            last: format!("registering the client: {last}"),
            request: None,
        },
        ClientError::Busy { group, waited, reason, .. } => {
            ClientError::Busy { group, waited, reason: format!("registering the client: {reason}"), request: None }
        }
        other => other,
    }
}

fn check_size(operation: &Bytes) -> Result<(), ClientError> {
    let max = cohort_messages::OPERATION_SIZE_MAX_BYTES;
    if operation.len() > max { Err(ClientError::TooLarge { size: operation.len(), max }) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c1_a_client_needs_addresses_and_an_explicit_security_choice() {
        let none = ClusterClient::builder(ClusterId(1), Vec::<String>::new()).insecure().build();
        assert!(matches!(none, Err(ClientError::Config { what, .. }) if what == "addresses"));
        let unchosen = ClusterClient::builder(ClusterId(1), ["127.0.0.1:1"]).build();
        assert!(matches!(unchosen, Err(ClientError::Config { what, .. }) if what == "security"));
        let bad = ClusterClient::builder(ClusterId(1), ["127.0.0.1"]).insecure().build();
        assert!(matches!(bad, Err(ClientError::Config { .. })));
        let missing = ClusterClient::builder(ClusterId(1), ["127.0.0.1:1"])
            .tls(crate::TlsFiles::client_in("/nonexistent", "app"))
            .build();
        assert!(matches!(missing, Err(ClientError::Config { what, .. }) if what.contains("ca.pem")));
        assert!(ClusterClient::builder(ClusterId(1), ["127.0.0.1:1"]).insecure().build().is_ok());
    }

    #[test]
    fn c1_an_operation_above_the_limit_is_refused_before_it_is_sent() {
        let too_large = Bytes::from(vec![0u8; cohort_messages::OPERATION_SIZE_MAX_BYTES + 1]);
        assert!(matches!(check_size(&too_large), Err(ClientError::TooLarge { .. })));
    }
}
