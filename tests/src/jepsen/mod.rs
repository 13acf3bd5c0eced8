//! A Jepsen-style fault test of real `cohort node` processes.
//!
//! Three nodes run as processes, each in its own Linux network namespace,
//! joined to a bridge; a workload of logical clients reads and writes unique
//! values on several keys (one register per group) through the client ports,
//! while an operator deletes one group and creates it again (H3); a nemesis
//! with a seeded schedule partitions, kills, pauses, wipes a node's data
//! (H1) and heals; the history is checked per key for linearizability
//! (porcupine-rs), for reads of a re-created group that see an earlier life
//! and, after the final heal, for lost acknowledged writes. The run writes a JSON
//! summary and an SVG picture. [`run`] is the one entry point, used by the
//! `cohort-jepsen` binary and by `tests/tests/jepsen.rs`. See docs/faults.md.

pub mod admin;
pub mod checker;
pub mod config;
pub mod error;
pub mod history;
pub mod lifecycle;
pub mod nemesis;
pub mod net;
pub mod nodes;
pub mod plot;
pub mod port;
pub mod preflight;
pub mod report;
pub mod runner;
pub mod wipe;
pub mod workload;

pub use config::Config;
pub use error::Error;
pub use report::Report;

/// Run the harness: see [`runner::run`].
pub fn run(config: &Config) -> Result<Report, Error> {
    runner::run(config)
}
