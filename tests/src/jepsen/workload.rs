//! The workload: a few logical clients (Jepsen's processes), each a thread
//! that runs one operation at a time, reads and writes of unique values on
//! random keys, and records each in the history.
//!
//! Exactly-once is the core's client logic ([`cohort_core::client`]): every
//! write comes from a [`Sequence`] per (client id, group), whose id registers
//! with the group first (request 1, H5) and numbers its writes from 2; a
//! retry resends the very same request (same id and number) to the next node
//! or to the primary a Redirect names; [`verdict`] says whether an answer is
//! final. A write with no definite answer before the op timeout is `info`,
//! and its sequence restarts under a fresh random 128-bit id. A read
//! without an answer is `fail` (reads change nothing; Jepsen's convention).

use std::collections::HashMap;
use std::io::Read as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cohort_core::client::{Sequence, Verdict, read, verdict};
use cohort_messages::{ClientId, GroupId, Op, ReplyError, Request, RequestNumber};

use crate::jepsen::history::{Clock, Completion, History, OpKind, OpRecord};
use crate::jepsen::port::Endpoint;
use crate::jepsen::port::{Answer, Connection};
use crate::rng::Rng;

/// A register value that does not decode as one of ours; never written.
pub const GARBAGE: u64 = u64::MAX;
/// Pause after a retryable answer before the next attempt.
const RETRY_PAUSE: Duration = Duration::from_millis(50);
/// Pause after a failed connect.
const CONNECT_PAUSE: Duration = Duration::from_millis(20);
/// Redirects followed in a row before pausing (two nodes naming each other).
const REDIRECTS_IN_A_ROW_MAX: u32 = 3;

/// How long a client waits.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// For one operation, over all its attempts; then it is `info` (write) or `fail` (read).
    pub op: Duration,
    /// For one attempt on one node, before the next node is tried.
    pub attempt: Duration,
}

/// What the cluster answered one request, after retries.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Applied (or read) by node `node` (1-based).
    Done {
        /// The node.
        node: usize,
        /// The op it committed at (for a read, the applied point it saw).
        op: Op,
        /// The state machine's result.
        result: Bytes,
    },
    /// Refused for good.
    Refused {
        /// The code.
        code: ReplyError,
        /// Why.
        detail: String,
    },
    /// No definite answer before the op timeout.
    Unknown {
        /// The last thing that went wrong.
        reason: String,
    },
}

/// Sends requests to the nodes, following redirects, on one connection per node.
pub struct Router {
    addresses: Vec<Endpoint>,
    connections: Vec<Option<Connection>>,
    primaries: HashMap<GroupId, usize>,
}

impl Router {
    /// A router over the nodes' client ports.
    pub fn new(addresses: Vec<Endpoint>) -> Router {
        let connections = addresses.iter().map(|_| None).collect();
        Router { addresses, connections, primaries: HashMap::new() }
    }

    /// Send `request` (and its retries, unchanged) until a definite answer or the op timeout.
    pub fn execute(&mut self, request: &Request, timeouts: Timeouts) -> Outcome {
        let deadline = Instant::now() + timeouts.op;
        let n = self.addresses.len();
        let mut target = self.primaries.get(&request.group).copied().unwrap_or(request.group.0 as usize % n);
        let mut reason = String::from("no attempt");
        let mut redirects = 0u32;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Outcome::Unknown { reason };
            }
            let answer = match self.connection(target) {
                Ok(connection) => connection.call(request, left.min(timeouts.attempt)),
                Err(error) => {
                    reason = format!("node {}: connect: {error}", target + 1);
                    target = (target + 1) % n;
                    std::thread::sleep(CONNECT_PAUSE.min(left));
                    continue;
                }
            };
            match answer {
                Err(error) => {
                    self.connections[target] = None;
                    reason = format!("node {}: {error}", target + 1);
                    target = (target + 1) % n;
                }
                Ok(Answer::Reply(reply)) => match verdict(&reply) {
                    Verdict::Done { op, result } => {
                        self.primaries.insert(request.group, target);
                        return Outcome::Done { node: target + 1, op, result: result.clone() };
                    }
                    Verdict::Refused { code, detail } => {
                        return Outcome::Refused { code, detail: detail.to_string() };
                    }
                    Verdict::Retry { code, detail } => {
                        reason = format!("node {}: {code:?}: {detail}", target + 1);
                        target = (target + 1) % n;
                        std::thread::sleep(RETRY_PAUSE.min(left));
                    }
                },
                Ok(Answer::Redirect(redirect)) => {
                    let named = redirect
                        .primary
                        .and_then(|node| usize::try_from(node.0).ok())
                        .filter(|node| (1..=n).contains(node));
                    match named {
                        Some(node) if node - 1 != target => {
                            redirects += 1;
                            target = node - 1;
                            reason = format!("redirected to node {node}");
                            if redirects >= REDIRECTS_IN_A_ROW_MAX {
                                redirects = 0;
                                std::thread::sleep(RETRY_PAUSE.min(left));
                            }
                        }
                        _ => {
                            reason = format!("node {}: redirect naming no other primary", target + 1);
                            target = (target + 1) % n;
                            std::thread::sleep(RETRY_PAUSE.min(left));
                        }
                    }
                }
            }
        }
    }

    fn connection(&mut self, index: usize) -> std::io::Result<&mut Connection> {
        if self.connections[index].is_none() {
            self.connections[index] = Some(Connection::open(&self.addresses[index])?);
        }
        Ok(self.connections[index].as_mut().expect("just opened"))
    }
}

/// A fresh random 128-bit client id (never 0, which is reserved).
pub fn random_client_id() -> ClientId {
    let mut bytes = [0u8; 16];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut file| file.read_exact(&mut bytes));
    let mut id = u128::from_le_bytes(bytes);
    if read.is_err() {
        // No /dev/urandom: time and a counter still make ids unique per run.
        static COUNTER: AtomicU64 = AtomicU64::new(1);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        id = (now << 32) ^ u128::from(COUNTER.fetch_add(1, Ordering::Relaxed)) ^ (u128::from(std::process::id()) << 96);
    }
    ClientId(id.max(1))
}

/// A register's bytes as a value: empty is 0, else a decimal we wrote.
pub fn decode_value(bytes: &[u8]) -> u64 {
    if bytes.is_empty() {
        return 0;
    }
    std::str::from_utf8(bytes).ok().and_then(|text| text.parse().ok()).filter(|value| *value != 0).unwrap_or(GARBAGE)
}

/// One logical client.
pub struct Process {
    index: usize,
    router: Router,
    sequences: HashMap<u64, Sequence>,
    reader: ClientId,
    reads: u64,
}

impl Process {
    /// Logical client `index` over the nodes' client ports.
    pub fn new(index: usize, addresses: Vec<Endpoint>) -> Process {
        Process {
            index,
            router: Router::new(addresses),
            sequences: HashMap::new(),
            reader: random_client_id(),
            reads: 0,
        }
    }

    /// Write `value` to `key`.
    pub fn write(&mut self, key: u64, value: u64, clock: &Clock, timeouts: Timeouts) -> OpRecord {
        let sequence = self.sequences.entry(key).or_insert_with(|| Sequence::new(random_client_id(), GroupId(key)));
        let invoke_ns = clock.now_ns();
        if let Some(registration) = sequence.registration() {
            // H5: a fresh id registers before its first write. The write is
            // not sent unless the registration was answered, so it failed;
            // the registration itself is harmless either way and is simply
            // sent again before the next write.
            let reason = match self.router.execute(&registration, timeouts) {
                Outcome::Done { op, .. } => {
                    sequence.registered(op);
                    None
                }
                Outcome::Refused { code, detail } => Some(format!("registration {code:?}: {detail}")),
                Outcome::Unknown { reason } => Some(format!("registration: {reason}")),
            };
            if let Some(reason) = reason {
                let complete_ns = clock.now_ns().max(invoke_ns + 1);
                let completion = Completion::Fail { reason };
                return OpRecord {
                    process: self.index,
                    key,
                    kind: OpKind::Write { value },
                    invoke_ns,
                    complete_ns,
                    completion,
                    node: None,
                };
            }
        }
        let request = sequence.write(Bytes::from(value.to_string()));
        let outcome = self.router.execute(&request, timeouts);
        let complete_ns = clock.now_ns().max(invoke_ns + 1);
        let (completion, node) = match outcome {
            Outcome::Done { node, result, .. } => (Completion::Ok { value: decode_value(&result) }, Some(node)),
            Outcome::Refused { code: ReplyError::Rejected, detail } => {
                (Completion::Fail { reason: format!("Rejected: {detail}") }, None)
            }
            // Superseded: this id is done; whether this write applied is not said.
            Outcome::Refused { code, detail } => (Completion::Info { reason: format!("{code:?}: {detail}") }, None),
            Outcome::Unknown { reason } => (Completion::Info { reason }, None),
        };
        if !matches!(completion, Completion::Ok { .. }) {
            sequence_restart(self.sequences.get_mut(&key).expect("the sequence of this key"));
        }
        OpRecord { process: self.index, key, kind: OpKind::Write { value }, invoke_ns, complete_ns, completion, node }
    }

    /// Read `key`.
    pub fn read(&mut self, key: u64, clock: &Clock, timeouts: Timeouts) -> OpRecord {
        self.reads += 1;
        let request = read(self.reader, RequestNumber(self.reads), GroupId(key), Bytes::new());
        let invoke_ns = clock.now_ns();
        let outcome = self.router.execute(&request, timeouts);
        let complete_ns = clock.now_ns().max(invoke_ns + 1);
        let (completion, node) = match outcome {
            Outcome::Done { node, result, .. } => (Completion::Ok { value: decode_value(&result) }, Some(node)),
            Outcome::Refused { code, detail } => (Completion::Fail { reason: format!("{code:?}: {detail}") }, None),
            Outcome::Unknown { reason } => (Completion::Fail { reason: format!("no answer: {reason}") }, None),
        };
        OpRecord { process: self.index, key, kind: OpKind::Read, invoke_ns, complete_ns, completion, node }
    }
}

fn sequence_restart(sequence: &mut Sequence) {
    let mut fresh = random_client_id();
    while fresh == sequence.client() {
        fresh = random_client_id();
    }
    sequence.restart(fresh);
}

/// What the client threads share.
pub struct Shared {
    /// The run's clock.
    pub clock: Clock,
    /// Where every op goes.
    pub history: History,
    /// Set to stop the workload.
    pub stop: AtomicBool,
    /// The next unique value to write.
    pub next_value: AtomicU64,
}

/// The workload's shape: one set of clients over one set of keys.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The first client's process number (each set of clients its own range).
    pub first_process: usize,
    /// Logical clients.
    pub processes: usize,
    /// Keys (= group ids), each picked alike.
    pub keys: Vec<u64>,
    /// Target operations per second over all clients.
    pub rate_per_s: f64,
    /// Reads per thousand ops.
    pub reads_per_mille: u64,
    /// Client timeouts.
    pub timeouts: Timeouts,
}

/// Start the client threads; they run until `shared.stop`.
pub fn start(shared: &Arc<Shared>, addresses: &[Endpoint], settings: Settings, seed: u64) -> Vec<JoinHandle<()>> {
    assert!(!settings.keys.is_empty(), "a workload needs a key");
    let reads_per_mille = settings.reads_per_mille;
    let interval = Duration::from_secs_f64(settings.processes as f64 / settings.rate_per_s.max(0.1));
    (settings.first_process..settings.first_process + settings.processes)
        .map(|index| {
            let shared = Arc::clone(shared);
            let addresses = addresses.to_vec();
            let mut rng = Rng::new(seed ^ (0xC11E_0000 + index as u64));
            let keys = settings.keys.clone();
            let timeouts = settings.timeouts;
            std::thread::spawn(move || {
                let mut process = Process::new(index, addresses);
                let mut next = Instant::now();
                while !shared.stop.load(Ordering::Relaxed) {
                    let now = Instant::now();
                    if now < next {
                        std::thread::sleep(next - now);
                    }
                    next = Instant::now().max(next) + interval;
                    let key = keys[rng.below(keys.len() as u64) as usize];
                    let op = if rng.chance(reads_per_mille) {
                        process.read(key, &shared.clock, timeouts)
                    } else {
                        let value = shared.next_value.fetch_add(1, Ordering::Relaxed);
                        process.write(key, value, &shared.clock, timeouts)
                    };
                    shared.history.push(op);
                }
            })
        })
        .collect()
}
