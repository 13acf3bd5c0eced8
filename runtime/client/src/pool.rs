//! The client's nodes: one address each, at most one connection each, and
//! which node id is behind which address.
//!
//! Why one connection per node: pipelining makes one connection carry
//! everything a client sends a node, and a node caps connections
//! (`[client] connections_max`). Why the client learns node ids: routes and
//! redirects name nodes, not addresses; the node's Handshake says which node
//! an address is, so the client needs no more than the list of addresses.
//! An address that could not be reached is skipped for
//! `unreachable_backoff`, so a dead node costs each call at most one dial.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use cohort_messages::{ClusterId, NodeId};
use tokio::time::Instant;

use crate::config::ClientLimits;
use crate::connection::{Connection, DialError, dial};
use crate::tls::ClientTls;

/// One node's address and its connection.
struct Endpoint {
    address: String,
    /// The connection, if open; a caller that dials holds the lock, so
    /// concurrent callers wait for its dial instead of dialing too.
    connection: tokio::sync::Mutex<Option<Arc<Connection>>>,
    /// Not to be dialed before this.
    unreachable_until: Mutex<Option<Instant>>,
}

/// Every node the client was given.
pub(crate) struct Pool {
    endpoints: Vec<Endpoint>,
    /// Node id → endpoint index, from Handshakes.
    nodes: Mutex<HashMap<NodeId, usize>>,
    cluster: ClusterId,
    tls: Option<ClientTls>,
    limits: ClientLimits,
}

impl Pool {
    pub(crate) fn new(
        addresses: Vec<String>,
        cluster: ClusterId,
        tls: Option<ClientTls>,
        limits: ClientLimits,
    ) -> Pool {
        debug_assert!(!addresses.is_empty(), "the builder refuses an empty list");
        let endpoints = addresses
            .into_iter()
            .map(|address| Endpoint {
                address,
                connection: tokio::sync::Mutex::new(None),
                unreachable_until: Mutex::new(None),
            })
            .collect();
        Pool { endpoints, nodes: Mutex::new(HashMap::new()), cluster, tls, limits }
    }

    pub(crate) fn len(&self) -> usize {
        self.endpoints.len()
    }

    pub(crate) fn address(&self, index: usize) -> &str {
        &self.endpoints[index].address
    }

    pub(crate) fn addresses(&self) -> impl Iterator<Item = &str> {
        self.endpoints.iter().map(|endpoint| endpoint.address.as_str())
    }

    /// The endpoint known to be `node`, if a Handshake said so.
    pub(crate) fn endpoint_of(&self, node: NodeId) -> Option<usize> {
        self.nodes.lock().unwrap_or_else(PoisonError::into_inner).get(&node).copied()
    }

    /// Whether `index` failed lately and is not to be dialed yet.
    pub(crate) fn backing_off(&self, index: usize) -> bool {
        let until = *self.endpoints[index].unreachable_until.lock().unwrap_or_else(PoisonError::into_inner);
        until.is_some_and(|until| Instant::now() < until)
    }

    fn mark_unreachable(&self, index: usize) {
        let until = Instant::now() + self.limits.unreachable_backoff;
        *self.endpoints[index].unreachable_until.lock().unwrap_or_else(PoisonError::into_inner) = Some(until);
    }

    /// The open connection to endpoint `index`, dialing one if needed.
    pub(crate) async fn connection(&self, index: usize) -> Result<Arc<Connection>, DialError> {
        let endpoint = &self.endpoints[index];
        let mut slot = endpoint.connection.lock().await;
        if let Some(connection) = slot.as_ref().filter(|connection| connection.is_open()) {
            return Ok(Arc::clone(connection));
        }
        *slot = None;
        match dial(&endpoint.address, self.cluster, self.tls.as_ref(), &self.limits).await {
            Ok(connection) => {
                let connection = Arc::new(connection);
                self.learn_node(connection.node(), index);
                *endpoint.unreachable_until.lock().unwrap_or_else(PoisonError::into_inner) = None;
                *slot = Some(Arc::clone(&connection));
                Ok(connection)
            }
            Err(error) => {
                self.mark_unreachable(index);
                Err(error)
            }
        }
    }

    /// Close endpoint `index`'s connection if it is still `connection` (it
    /// stayed silent through a whole attempt), and back off from it.
    pub(crate) async fn discard(&self, index: usize, connection: &Arc<Connection>) {
        connection.close("no answer and no frame through a whole attempt");
        let mut slot = self.endpoints[index].connection.lock().await;
        if slot.as_ref().is_some_and(|open| Arc::ptr_eq(open, connection)) {
            *slot = None;
        }
        self.mark_unreachable(index);
    }

    /// Dial endpoints whose node is not known yet until `node` is found.
    pub(crate) async fn find(&self, node: NodeId) -> Option<usize> {
        if let Some(index) = self.endpoint_of(node) {
            return Some(index);
        }
        let unknown: Vec<usize> = {
            let nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
            (0..self.endpoints.len()).filter(|index| !nodes.values().any(|known| known == index)).collect()
        };
        for index in unknown {
            if self.backing_off(index) {
                continue;
            }
            if let Ok(connection) = self.connection(index).await
                && connection.node() == node
            {
                return Some(index);
            }
        }
        None
    }

    /// How many connections are open now.
    pub(crate) fn open_connections(&self) -> usize {
        self.endpoints
            .iter()
            .filter(|endpoint| {
                endpoint.connection.try_lock().is_ok_and(|slot| slot.as_ref().is_some_and(|open| open.is_open()))
            })
            .count()
    }

    fn learn_node(&self, node: NodeId, index: usize) {
        let mut nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        // A node that moved to another address: the newest Handshake wins.
        nodes.retain(|known, at| *known == node || *at != index);
        nodes.insert(node, index);
        debug_assert_eq!(nodes.get(&node), Some(&index));
    }
}
