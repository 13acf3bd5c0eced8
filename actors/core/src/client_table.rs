//! The client table: exactly-once per (client, request number).
//!
//! Updated only when an op is applied, so it is the same on every member. A
//! retry of the latest applied request is answered from the table; an older
//! request number is refused as superseded. The table is bounded: the least
//! recently active client is evicted, and a client the table does not know
//! may only start at request number 1, so that a retry from an evicted client
//! is refused instead of applied twice.
//!
//! Request 1 is therefore the one request the table cannot protect: a retry
//! of it after an eviction looks like a new client's first request. So
//! request 1 of a client is a *registration* ([`REGISTRATION`]): it goes
//! through the log and puts the client in the table, and applies nothing to
//! the state machine, so applying it twice is harmless. A retry from an
//! evicted client is refused as unknown (H5; the client's side is
//! [`crate::client`]).
//!
//! A late copy of a registration, though, arrives after the eviction and
//! registers the client again; the writes it made before would then look
//! new. So the table records the op each client registered at, and a client
//! numbers its writes after it (the first is that op + 1): a write numbered
//! at or below its client's registration op is refused as superseded. Every
//! write applied before an eviction was numbered at or below its own op,
//! which is below the op of any later registration, so none of them can be
//! applied again.

use bytes::Bytes;
use cohort_messages::{ClientId, Op, RequestNumber};

/// The request number of a client's registration: the only one at which the
/// table admits a client it does not know, and one that applies nothing.
pub const REGISTRATION: RequestNumber = RequestNumber(1);

/// True if a write numbered `request` is a registration: it records its
/// client in the table and is not applied to the state machine.
pub fn is_registration(request: RequestNumber) -> bool {
    request == REGISTRATION
}

/// What the table remembers of one client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientEntry {
    /// The op its registration was applied at (the latest one, if the
    /// client registered again after an eviction): its writes are numbered
    /// above it.
    pub registered: Op,
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
    /// A write numbered at or below the op its client registered at: the
    /// client was evicted and registered again (a late copy of its
    /// registration), and this write belongs to the earlier registration.
    BeforeRegistration {
        /// The op of the client's latest registration.
        registered: Op,
    },
    /// Unknown client past its registration (evicted, or forged).
    UnknownClient,
}

/// Per-group table.
#[derive(Clone, Debug, Default)]
pub struct ClientTable {
    /// Sorted by client id, with no id twice. A sorted `Vec` and not a map
    /// (Z1): most groups hear from few clients, and a map's smallest table
    /// holds room for four entries and its control bytes (about 280 bytes a
    /// replica for one client), where this grows one entry at a time.
    /// Lookups are a binary search; a new client shifts the entries after
    /// it, as eviction already walks them all.
    clients: Vec<(ClientId, ClientEntry)>,
    clients_max: usize,
    /// The mutant `EvictedClientAdmitted` (test builds only).
    #[cfg(any(test, feature = "mutants"))]
    unknown_admitted: bool,
}

impl ClientTable {
    /// An empty table of at most `clients_max` clients.
    pub fn new(clients_max: usize) -> ClientTable {
        assert!(clients_max > 0);
        ClientTable {
            clients: Vec::new(),
            clients_max,
            #[cfg(any(test, feature = "mutants"))]
            unknown_admitted: false,
        }
    }

    /// The table as `config`'s mutant has it: with `EvictedClientAdmitted`,
    /// a client it does not know is admitted at any request number (see
    /// [`crate::mutants`]). Outside test builds, the table as it is.
    pub(crate) fn with_mutant(self, config: &crate::CoreConfig) -> ClientTable {
        #[cfg(any(test, feature = "mutants"))]
        {
            let unknown_admitted = config.mutated(crate::mutants::Mutant::EvictedClientAdmitted);
            ClientTable { unknown_admitted, ..self }
        }
        #[cfg(not(any(test, feature = "mutants")))]
        {
            let _ = config;
            self
        }
    }

    #[cfg(any(test, feature = "mutants"))]
    fn unknown_admitted(&self) -> bool {
        self.unknown_admitted
    }

    #[cfg(not(any(test, feature = "mutants")))]
    fn unknown_admitted(&self) -> bool {
        false
    }

    fn find(&self, client: ClientId) -> Result<usize, usize> {
        self.clients.binary_search_by_key(&client, |(id, _)| *id)
    }

    /// Decide about a request.
    pub fn admit(&self, client: ClientId, request: RequestNumber) -> Admission {
        match self.get(client) {
            None if is_registration(request) || self.unknown_admitted() => Admission::New,
            None => Admission::UnknownClient,
            Some(entry) if request == entry.request => Admission::Duplicate(entry.clone()),
            Some(entry) if request < entry.request => Admission::Superseded,
            Some(entry) if !is_registration(request) && request.0 <= entry.registered.0 => {
                Admission::BeforeRegistration { registered: entry.registered }
            }
            Some(_) => Admission::New,
        }
    }

    /// Whether an entry of the log should be applied (not a duplicate).
    pub fn should_apply(&self, client: ClientId, request: RequestNumber) -> bool {
        matches!(self.admit(client, request), Admission::New)
    }

    /// Record an applied request: a registration records its op as the
    /// client's registration op; a write keeps the one it has.
    pub fn record(&mut self, client: ClientId, request: RequestNumber, op: Op, result: Bytes) {
        let known = self.find(client);
        let registered = match (is_registration(request), known) {
            (true, _) => op,
            (false, Ok(at)) => self.clients[at].1.registered,
            // Only the mutant `EvictedClientAdmitted` applies a write of a
            // client the table does not know.
            (false, Err(_)) => Op(0),
        };
        debug_assert!(
            is_registration(request) || request.0 > registered.0 || registered == Op(0),
            "{client:?}: write {request:?} numbered at or below its registration at {registered:?}"
        );
        let entry = ClientEntry { registered, request, op, result };
        let mut at = match known {
            Ok(at) => {
                self.clients[at].1 = entry;
                return;
            }
            Err(at) => at,
        };
        if self.clients.len() >= self.clients_max {
            // Evict the client whose latest op is oldest; deterministic because
            // ops are unique per group.
            let oldest = self.clients.iter().enumerate().min_by_key(|(_, (_, entry))| entry.op).map(|(index, _)| index);
            if let Some(oldest) = oldest {
                self.clients.remove(oldest);
                if oldest < at {
                    at -= 1;
                }
            }
        }
        if self.clients.len() == self.clients.capacity() {
            // Double, from one entry: a `Vec` would start at four.
            self.clients.reserve_exact(self.clients.len().max(1));
        }
        self.clients.insert(at, (client, entry));
        debug_assert!(self.clients.windows(2).all(|pair| pair[0].0 < pair[1].0), "sorted by client, each once");
    }

    /// The latest entry of a client.
    pub fn get(&self, client: ClientId) -> Option<&ClientEntry> {
        self.find(client).ok().map(|at| &self.clients[at].1)
    }

    /// Encode for a snapshot, in a stable order (by client id).
    pub fn encode(&self) -> Vec<(ClientId, ClientEntry)> {
        self.clients.clone()
    }

    /// Rebuild from a snapshot. A client listed twice keeps its later
    /// entry, as it would after two records.
    pub fn restore(&mut self, mut all: Vec<(ClientId, ClientEntry)>) {
        all.sort_by_key(|(id, _)| *id);
        all.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                std::mem::swap(later, kept);
            }
            same
        });
        all.shrink_to_fit();
        self.clients = all;
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
    fn h5_an_unknown_client_past_its_registration_is_refused() {
        let table = ClientTable::new(4);
        assert_eq!(table.admit(ClientId(3), REGISTRATION), Admission::New, "a registration is always admitted");
        for request in [0, 2, 3, 900] {
            assert_eq!(table.admit(ClientId(3), RequestNumber(request)), Admission::UnknownClient, "request {request}");
        }
    }

    #[test]
    fn h5_a_retried_write_after_eviction_is_refused_and_a_retried_registration_is_harmless() {
        let mut table = ClientTable::new(1);
        table.record(ClientId(1), REGISTRATION, Op(1), Bytes::new());
        table.record(ClientId(1), RequestNumber(2), Op(2), Bytes::from_static(b"first write"));
        table.record(ClientId(2), REGISTRATION, Op(3), Bytes::new());
        assert_eq!(table.get(ClientId(1)), None, "evicted");
        assert_eq!(
            table.admit(ClientId(1), RequestNumber(2)),
            Admission::UnknownClient,
            "the first write is protected"
        );
        // The registration itself may come again: it is admitted, and it
        // registers the client again, which changes nothing but the table.
        assert_eq!(table.admit(ClientId(1), REGISTRATION), Admission::New);
    }

    #[test]
    fn h5_writes_are_numbered_after_the_registration_op_so_a_late_registration_closes_old_ones() {
        let mut table = ClientTable::new(1);
        table.record(ClientId(1), REGISTRATION, Op(4), Bytes::new());
        assert_eq!(table.get(ClientId(1)).map(|entry| entry.registered), Some(Op(4)));
        for request in [2, 3, 4] {
            assert_eq!(
                table.admit(ClientId(1), RequestNumber(request)),
                Admission::BeforeRegistration { registered: Op(4) },
                "write {request} is at or below the registration at op 4"
            );
        }
        assert_eq!(table.admit(ClientId(1), RequestNumber(5)), Admission::New, "the first write is op + 1");
        table.record(ClientId(1), RequestNumber(5), Op(6), Bytes::from_static(b"w"));
        assert_eq!(table.get(ClientId(1)).map(|entry| entry.registered), Some(Op(4)), "a write keeps it");
        // Evicted, then a late copy of the registration registers it again
        // at a later op: the write it made before is refused, not reopened.
        table.record(ClientId(2), REGISTRATION, Op(7), Bytes::new());
        assert_eq!(table.admit(ClientId(1), RequestNumber(5)), Admission::UnknownClient);
        assert_eq!(table.admit(ClientId(1), REGISTRATION), Admission::New);
        table.record(ClientId(1), REGISTRATION, Op(8), Bytes::new());
        assert_eq!(
            table.admit(ClientId(1), RequestNumber(5)),
            Admission::BeforeRegistration { registered: Op(8) },
            "applied before the eviction"
        );
        assert_eq!(table.admit(ClientId(1), RequestNumber(9)), Admission::New);
        assert!(matches!(table.admit(ClientId(1), REGISTRATION), Admission::Duplicate(entry) if entry.op == Op(8)));
    }

    #[test]
    fn evicted_client_retry_is_refused_not_reapplied() {
        let mut table = ClientTable::new(1);
        table.record(ClientId(1), RequestNumber(5), Op(1), Bytes::new());
        table.record(ClientId(2), RequestNumber(1), Op(2), Bytes::new());
        assert_eq!(table.admit(ClientId(1), RequestNumber(5)), Admission::UnknownClient);
    }

    #[test]
    fn eviction_keeps_the_table_sorted_and_the_newest_clients() {
        let mut table = ClientTable::new(3);
        for (client, op) in [(5, 1), (1, 2), (9, 3), (3, 4), (7, 5)] {
            table.record(ClientId(client), RequestNumber(1), Op(op), Bytes::new());
        }
        let clients: Vec<_> = table.encode().into_iter().map(|(id, entry)| (id.0, entry.op.0)).collect();
        assert_eq!(clients, vec![(3, 4), (7, 5), (9, 3)], "the two oldest were evicted, the rest sorted by id");
        table.record(ClientId(9), RequestNumber(4), Op(6), Bytes::new());
        assert_eq!(table.get(ClientId(9)).map(|entry| entry.request), Some(RequestNumber(4)));
        assert_eq!(table.len(), 3);
    }

    #[test]
    fn a_snapshot_listing_a_client_twice_restores_its_later_entry() {
        let entry =
            |op| ClientEntry { registered: Op(0), request: RequestNumber(op), op: Op(op), result: Bytes::new() };
        let mut table = ClientTable::new(8);
        table.restore(vec![(ClientId(4), entry(1)), (ClientId(2), entry(2)), (ClientId(4), entry(3))]);
        assert_eq!(table.len(), 2);
        assert_eq!(table.get(ClientId(4)).map(|entry| entry.op), Some(Op(3)));
        assert_eq!(table.admit(ClientId(2), RequestNumber(2)), Admission::Duplicate(entry(2)));
    }
}
