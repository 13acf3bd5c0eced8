//! The simulated network: frames in flight with seeded loss, duplication,
//! delay (hence reordering), corruption, symmetric or one-way partitions,
//! and stalled links: a link whose frames are held back (as a TCP
//! connection's send queue holds them through a partition) and then
//! delivered in a burst, long after they were sent.
//!
//! Messages travel as encoded frames, so the wire codec, its checksums (R15)
//! and the per-entry validation of batches (R17) run in every simulation.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::rng::Rng;

/// Who sends or receives.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Endpoint {
    /// A node, by index.
    Node(usize),
    /// A client, by index.
    Client(usize),
    /// The metadata scenario's operator.
    Operator,
}

/// One frame in flight.
#[derive(Clone, Debug)]
pub struct Packet {
    /// Sender.
    pub from: Endpoint,
    /// Receiver.
    pub to: Endpoint,
    /// The encoded frame.
    pub bytes: Bytes,
}

/// Fault rates of the network, per mille.
#[derive(Clone, Debug, Default)]
pub struct NetworkFaults {
    /// Chance a frame is lost.
    pub loss_per_mille: u64,
    /// Chance a frame is delivered twice.
    pub duplicate_per_mille: u64,
    /// Chance a frame has one bit flipped.
    pub corrupt_per_mille: u64,
    /// Longest delay in ticks (0: next tick).
    pub delay_max_ticks: u64,
}

/// Counters.
#[derive(Clone, Debug, Default)]
pub struct NetworkStats {
    /// Frames sent.
    pub sent: u64,
    /// Frames lost (faults and partitions).
    pub lost: u64,
    /// Frames duplicated.
    pub duplicated: u64,
    /// Frames corrupted.
    pub corrupted: u64,
    /// Bytes sent.
    pub bytes: u64,
}

/// Frames in flight, ordered by delivery tick then sending order.
#[derive(Debug, Default)]
pub struct Network {
    in_flight: BTreeMap<(u64, u64), Packet>,
    sequence: u64,
    /// Directed node pairs that drop everything.
    pub blocked: BTreeSet<(usize, usize)>,
    /// Directed node pairs whose frames are held until a tick, then
    /// delivered in the order sent.
    pub stalled: BTreeMap<(usize, usize), u64>,
    /// Fault rates in force.
    pub faults: NetworkFaults,
    /// Counters.
    pub stats: NetworkStats,
}

impl Network {
    /// Send a frame at tick `now`.
    pub fn send(&mut self, now: u64, packet: Packet, rng: &mut Rng) {
        self.stats.sent += 1;
        self.stats.bytes += packet.bytes.len() as u64;
        if let (Endpoint::Node(a), Endpoint::Node(b)) = (packet.from, packet.to)
            && self.blocked.contains(&(a, b))
        {
            self.stats.lost += 1;
            return;
        }
        if rng.chance(self.faults.loss_per_mille) {
            self.stats.lost += 1;
            return;
        }
        let held_until = match (packet.from, packet.to) {
            (Endpoint::Node(a), Endpoint::Node(b)) => self.stalled.get(&(a, b)).copied().unwrap_or(0),
            _ => 0,
        };
        let copies = if rng.chance(self.faults.duplicate_per_mille) { 2 } else { 1 };
        self.stats.duplicated += copies - 1;
        for _ in 0..copies {
            let mut packet = packet.clone();
            if rng.chance(self.faults.corrupt_per_mille) && !packet.bytes.is_empty() {
                let mut bytes = packet.bytes.to_vec();
                let bit = rng.below(bytes.len() as u64 * 8);
                bytes[(bit / 8) as usize] ^= 1 << (bit % 8);
                packet.bytes = Bytes::from(bytes);
                self.stats.corrupted += 1;
            }
            let delay = 1 + rng.below(self.faults.delay_max_ticks + 1);
            self.sequence += 1;
            self.in_flight.insert(((now + delay).max(held_until), self.sequence), packet);
        }
    }

    /// True if a frame `from` sent is still in flight (held back, delayed
    /// or deferred to a paused node).
    pub fn any_from(&self, from: Endpoint) -> bool {
        self.in_flight.values().any(|packet| packet.from == from)
    }

    /// Take the next frame due at or before `now`.
    pub fn pop_due(&mut self, now: u64) -> Option<Packet> {
        let (&key, _) = self.in_flight.first_key_value()?;
        if key.0 > now {
            return None;
        }
        self.in_flight.remove(&key)
    }

    /// Put a frame back for a later tick (its receiver is paused).
    pub fn defer(&mut self, tick: u64, packet: Packet) {
        self.sequence += 1;
        self.in_flight.insert((tick, self.sequence), packet);
    }

    /// Drop every frame `from` sent that is still in flight: its machine
    /// went down with the connections' buffers (H1, H5: a disk replaced).
    /// Returns how many.
    pub fn drop_from(&mut self, from: Endpoint) -> usize {
        let before = self.in_flight.len();
        self.in_flight.retain(|_, packet| packet.from != from);
        before - self.in_flight.len()
    }

    /// Frames in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }
}
