//! cohort's deterministic simulator.
//!
//! It runs the production sans-IO core ([`cohort_core::Shard`]) on N
//! simulated nodes with [`cohort_core::storage::memory::MemoryStorage`]
//! disks and a seeded network, injects faults drawn from the seed, and checks
//! the protocol's invariants after every step. A seed reproduces a run
//! exactly. See docs/simulator.md.

#![warn(unreachable_pub)]

pub mod check;
pub mod cli;
pub mod client;
pub mod jepsen;
pub mod kv;
pub mod linearizability;
pub mod metadata;
pub mod network;
pub mod node;
pub mod rng;
pub mod sim;
pub mod traffic;

pub use sim::{Faults, Report, Scenario, Sim, SimConfig};

#[doc = include_str!("../../docs/simulator.md")]
pub mod guide {}
