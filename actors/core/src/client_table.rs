//! The client table: exactly-once per (client, request number).
//!
//! Updated only when an op is applied, so it is the same on every member. A
//! retry of the latest applied request is answered from the table; an older
//! request number is refused as superseded. The table is bounded: the least
//! recently active client is evicted, and a client the table does not know
//! may only start at request number 1, so that a retry from an evicted client
//! is refused instead of applied twice.

use std::collections::HashMap;

use bytes::Bytes;
use cohort_messages::{ClientId, Op, RequestNumber};

/// What the table remembers of one client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientEntry {
    /// The latest applied request.
    pub request: RequestNumber,
    /// Its op.
    pub op: Op,
    /// Its result.
    pub result: Bytes,
}

/// What to do with an incoming write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// New: put it in the log.
    New,
    /// Already applied: answer with this.
    Duplicate(ClientEntry),
    /// Older than the latest applied request.
    Superseded,
    /// Unknown client with a request number other than 1 (evicted or forged).
    UnknownClient,
}

/// Per-group table.
#[derive(Clone, Debug, Default)]
pub struct ClientTable {
    clients: HashMap<ClientId, ClientEntry>,
    clients_max: usize,
}

impl ClientTable {
    /// An empty table of at most `clients_max` clients.
    pub fn new(clients_max: usize) -> ClientTable {
        assert!(clients_max > 0);
        ClientTable { clients: HashMap::new(), clients_max }
    }

    /// Decide about a request.
    pub fn admit(&self, client: ClientId, request: RequestNumber) -> Admission {
        match self.clients.get(&client) {
            None if request.0 <= 1 => Admission::New,
            None => Admission::UnknownClient,
            Some(entry) if request == entry.request => Admission::Duplicate(entry.clone()),
            Some(entry) if request < entry.request => Admission::Superseded,
            Some(_) => Admission::New,
        }
    }

    /// Whether an entry of the log should be applied (not a duplicate).
    pub fn should_apply(&self, client: ClientId, request: RequestNumber) -> bool {
        matches!(self.admit(client, request), Admission::New)
    }

    /// Record an applied request.
    pub fn record(&mut self, client: ClientId, request: RequestNumber, op: Op, result: Bytes) {
        if !self.clients.contains_key(&client) && self.clients.len() >= self.clients_max {
            // Evict the client whose latest op is oldest; deterministic because
            // ops are unique per group.
            if let Some(oldest) = self.clients.iter().min_by_key(|(_, entry)| entry.op).map(|(id, _)| *id) {
                self.clients.remove(&oldest);
            }
        }
        self.clients.insert(client, ClientEntry { request, op, result });
    }

    /// The latest entry of a client.
    pub fn get(&self, client: ClientId) -> Option<&ClientEntry> {
        self.clients.get(&client)
    }

    /// Encode for a snapshot, in a stable order.
    pub fn encode(&self) -> Vec<(ClientId, ClientEntry)> {
        let mut all: Vec<_> = self.clients.iter().map(|(id, entry)| (*id, entry.clone())).collect();
        all.sort_by_key(|(id, _)| *id);
        all
    }

    /// Rebuild from a snapshot.
    pub fn restore(&mut self, all: Vec<(ClientId, ClientEntry)>) {
        self.clients = all.into_iter().collect();
    }

    /// Number of clients.
    pub fn len(&self) -> usize {
        self.clients.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_retry_of_applied_request_is_a_duplicate() {
        let mut table = ClientTable::new(2);
        let client = ClientId(7);
        assert_eq!(table.admit(client, RequestNumber(1)), Admission::New);
        table.record(client, RequestNumber(1), Op(1), Bytes::from_static(b"r1"));
        assert!(matches!(table.admit(client, RequestNumber(1)), Admission::Duplicate(_)));
        assert_eq!(table.admit(client, RequestNumber(0)), Admission::Superseded);
        assert_eq!(table.admit(client, RequestNumber(2)), Admission::New);
    }

    #[test]
    fn evicted_client_retry_is_refused_not_reapplied() {
        let mut table = ClientTable::new(1);
        table.record(ClientId(1), RequestNumber(5), Op(1), Bytes::new());
        table.record(ClientId(2), RequestNumber(1), Op(2), Bytes::new());
        assert_eq!(table.admit(ClientId(1), RequestNumber(5)), Admission::UnknownClient);
    }
}
