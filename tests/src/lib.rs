//! cohort's deterministic simulator.
//!
//! It runs the production sans-IO core ([`cohort_core::Shard`]), several
//! shards per simulated node, each on the production write-ahead log
//! ([`cohort_wal::FileStorage`]) over a fault-injecting in-memory disk, and a
//! seeded network; it injects faults drawn from the seed, and checks the
//! protocol's invariants after every step. A seed reproduces a run exactly.
//! See docs/simulator.md.

#![warn(unreachable_pub)]

pub mod apply_worker;
pub mod browser;
pub mod check;
pub mod cli;
pub mod client;
pub mod disk;
pub mod disk_kv;
pub mod follow;
pub mod host_package;
pub mod jepsen;
pub mod kv;
pub mod linearizability;
pub mod metadata;
pub mod nested_cargo;
pub mod network;
pub mod node;
pub mod rng;
pub mod shared;
pub mod sim;
pub mod storage;
pub mod traffic;
pub mod worker;

pub use sim::{FaultProfile, Faults, ForgerMode, Report, Scenario, Sim, SimConfig};

#[doc = include_str!("../../docs/simulator.md")]
pub mod guide {}
